"""The words and the picture the panel and bake.py show (no Blender needed but to write the picture's PNG):
progress phases, percentage and time left; verdict lines; the seam picture; the note when no separate
Python can solve."""
import io
import math

import numpy as np
import pytest

import solver_core as sc
from cyclic_loop_addon.report import verdict as words
from cyclic_loop_addon.report.advice import python_note
from cyclic_loop_addon.report.progress import (MAX_MOVE, SHRINK, SOLVED, STOP_DECREASE, TYPICAL_ITERATIONS,
                                               Plan, Progress, about, duration)
from cyclic_loop_addon.report.seam_picture import seam_picture
from cyclic_loop_addon.report.verdict import LINE_CHARS
from solver_core.options import DEFAULTS
from solver_core.result import CONVERGED, ITERATION_CAP

RACE_FROM, RACE_ITERATIONS = DEFAULTS.start.race_from, DEFAULTS.start.race_iterations


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_progress_never_jumps_when_fast_projection_gives_up_early():
    clock = Clock()
    p = Progress(max_iters=20, clock=clock)
    assert p.headline() == "Reading the simulation 0%" and p.time_text() == "0 s elapsed · time left: estimating"
    seen = [p.update("")]
    for it in range(1, 5):              # fast projection stops after 4 of its up to FP_ITERATIONS (30)
        clock.t += 1.0
        seen.append(p.update("fast_projection", it))
    assert p.headline().startswith("Initial guess ")
    for it in range(1, 5):
        clock.t += 3.0
        seen.append(p.update("gauss_newton", it))
        p.look()                        # the panel looks at the bar after each callback
    steps = np.diff(seen)
    assert np.all(steps >= 0) and steps.max() < 0.1, seen
    # after fast projection the budget includes make_loop's race: 20 + 10 iterations at 3 s each
    assert p.budget == 20 + min(RACE_ITERATIONS, 20)
    assert p.seconds_left == pytest.approx(3.0 * (p.budget - 4))
    assert p.time_text() == "16 s elapsed · about 1 min left"
    clock.t += 1.5                      # between callbacks the shown fraction moves at the iterations' pace
    assert seen[-1] < p.look() < seen[-1] + p.step
    assert p.seconds_left == pytest.approx(3.0 * (p.budget - 4) - 1.5)
    p.update("write")
    assert p.headline().startswith("Writing the loop ") and p.time_text().endswith("almost done")


def test_progress_catches_up_fast_iterations_at_their_pace_instead_of_jumping():
    """Two iterations reported between two refreshes of the bar (faster than the pace so far) move it by
    the pace, not by two steps at once; it catches up over the next refreshes."""
    clock = Clock()
    p = Progress(max_iters=20, init="forward", clock=clock)
    for it in range(1, 4):
        clock.t += 3.0
        p.update("gauss_newton", it)
    before = p.look()
    clock.t += 0.5
    p.update("gauss_newton", 4)
    p.update("gauss_newton", 5)
    clock.t += 0.5
    assert p.look() - before == pytest.approx(p.step * 1.0 / p.pace)
    for _ in range(20):
        clock.t += 1.0
        shown = p.look()
    assert shown >= p.fraction


def test_progress_moves_at_most_a_tenth_between_two_looks_until_writing():
    """A loaded machine looks at the bar seldom while a small budget's iterations are fast: four iterations
    between two looks move it by MAX_MOVE, the next looks catch up, writing completes it at once."""
    clock = Clock()
    p = Progress(max_iters=12, init="forward", clock=clock)
    seen = []
    for it in range(1, 4):
        clock.t += 0.3
        p.update("gauss_newton", it)
        seen.append(p.look())
    for it in range(4, 8):
        clock.t += 0.3
        p.update("gauss_newton", it)
    assert p.fraction - seen[-1] > 2 * MAX_MOVE
    for _ in range(10):
        clock.t += 0.3
        seen.append(p.look())
    assert max(np.diff(seen)) == pytest.approx(MAX_MOVE) and seen[-1] > p.fraction
    p.update("write")
    assert p.look() == pytest.approx(SOLVED)


def test_one_refresh_is_one_look_whatever_it_reads():
    """The panel's refresh reads the bar and the headline's percentage: one look, one move of at most
    MAX_MOVE, the same percentage in both, even when fast projection stops after 11 iterations and two of a
    6-iteration budget come in before a refresh (docs/design/report.md: MAX_MOVE)."""
    clock = Clock()
    p = Progress(max_iters=6, init="fast_projection", clock=clock)
    p.update("")
    for it in range(1, 12):
        clock.t += 0.4
        p.update("fast_projection", it)
        p.look()
    before = p.shown
    clock.t += 0.2
    p.update("gauss_newton", 1)
    clock.t += 0.2
    p.update("gauss_newton", 2)
    assert p.fraction - before > MAX_MOVE
    shown = p.look()
    for _ in range(3):
        assert p.headline() == f"Optimizing {shown:.0%}" and p.time_text() and p.shown == shown
    assert shown == pytest.approx(before + MAX_MOVE)


def test_progress_expects_the_solve_to_stop_where_the_residual_meets_the_physics_tolerance():
    """The time left counts the iterations the residual needs to reach the physics tolerance at its rate over
    the last RATE_WINDOW iterations (the solver stops there), not those to the iteration cap."""
    runs = {}
    for tol in (0.01, 0.0):
        clock = Clock()
        p = runs[tol] = Progress(max_iters=50, init="cache_or_forward", clock=clock, physics_tol=tol)
        for it, residual in enumerate([0.8, 0.4, 0.16, 0.08, 0.04], start=1):
            clock.t += 60.0
            p.update("gauss_newton", it, residual)
    assert runs[0.01].expected == 7 and runs[0.01].seconds_left == pytest.approx(2 * 60.0)   # 0.04 -> 0.01
    assert runs[0.01].time_text().endswith("about 2 min left")
    runs[0.01].clock.t += 60.0
    runs[0.01].update("gauss_newton", 6, 0.009)         # within it: the solver stops now, or after one more
    assert runs[0.01].expected == 7 and runs[0.01].seconds_left == pytest.approx(60.0)
    assert runs[0.0].expected == runs[0.0].budget == 100 and runs[0.0].seconds_left == pytest.approx(95 * 60.0)
    line = sc.progress_line(dict(phase="gauss_newton", iteration=5, loss=2.5, residual=0.04))
    assert sc.parse_progress(line) == dict(phase="gauss_newton", iteration=5, loss=2.5, residual=0.04)


def test_progress_expects_a_run_to_stop_where_its_loss_settles_and_the_race_to_drop_the_second_run():
    """With losses the time left counts TYPICAL_ITERATIONS per run until the loss's tail shows (an iteration
    lowers it by under TAIL), then the tail's own length; "cache_or_forward" adds RACE_FROM iterations for the
    second run, whose start (the loss rises) the bar recognizes; not the 2 x 50-iteration budget, which
    overstates the time left (docs/design/report.md: time left)."""
    clock = Clock()
    p = Progress(max_iters=50, init="cache_or_forward", clock=clock, physics_tol=0.01)
    loss = 1e6
    for it in range(1, 6):               # halving: the run's tail has not begun
        clock.t += 10.0
        loss /= 2
        p.update("gauss_newton", it, 0.5, loss)
    assert p.expected == TYPICAL_ITERATIONS + RACE_FROM and p.seconds_left == pytest.approx(10.0 * (p.expected - 5))
    clock.t += 10.0
    p.update("gauss_newton", 6, 0.5, loss * (1 - 0.01))   # 1% less: the tail, 1e-2 -> STOP_DECREASE at SHRINK
    left = math.ceil(math.log(STOP_DECREASE / (0.01 / 0.99)) / math.log(SHRINK))
    assert left == 2 and p.expected == 6 + left + RACE_FROM
    clock.t += 10.0
    p.update("gauss_newton", 7, 0.5, 1e6)               # the loss rose: the second run began after iteration 6
    assert p.expected == 6 + RACE_FROM and p.time_text().endswith("under a minute left")
    assert p.budget == 100


def test_a_residual_within_the_tolerance_of_a_run_that_goes_on_no_longer_sets_the_time_left():
    """The solver stops at the physics tolerance only when the wrap cannot be seen: a run whose residual
    stays within it for RATE_WINDOW iterations goes on, and its loss decides (docs/design/report.md: time
    left); the residual's rate is its slowest over the window (it levels off)."""
    clock = Clock()
    p = Progress(max_iters=50, init="cache", clock=clock, physics_tol=0.01)
    for it, (residual, loss) in enumerate([(0.04, 100.0), (0.03, 50.0), (0.02, 40.0), (0.01, 30.0)], start=1):
        clock.t += 10.0
        p.update("gauss_newton", it, residual, loss)
    assert p.expected == 5                                # within it now: at most one more
    for it, residual in enumerate([0.008, 0.007, 0.006, 0.005], start=5):
        clock.t += 10.0
        p.update("gauss_newton", it, residual, 30.0 * 0.5 ** (it - 4))
    assert p.expected == TYPICAL_ITERATIONS
    q = Progress(max_iters=50, init="cache", clock=clock, physics_tol=0.01)
    for it, residual in enumerate([0.16, 0.04, 0.032, 0.0256], start=1):   # rates 0.25, 0.8, 0.8
        q.update("gauss_newton", it, residual)
    assert q.expected == 4 + math.ceil(math.log(0.01 / 0.0256) / math.log(0.8))


def test_a_plan_gives_the_time_left_before_anything_runs_and_moves_the_bar_through_every_stage():
    """With a Plan (the problem's size) the time left is known at once; the stages before the first
    iteration (the child's start, the solver's own simulation by its steps, a race's start by its time) move
    the bar, a measured phase refines the estimate, and a race's second start keeps the bar moving."""
    clock = Clock()
    plan = Plan(70, 1728, 0, "structured", "cache_or_forward", 1)
    p = Progress(1, "cache_or_forward", clock=clock, plan=plan)
    assert p.seconds_left == pytest.approx(plan.seconds) and p.time_text().endswith(f"{about(plan.seconds)} left")
    p.update("")
    shown = [p.look()]
    clock.t += 1.0
    line = sc.progress_line(dict(phase="setup", stage=True, solver="structured", unknowns=362_000, steps=1728,
                                 vertices=70))
    p.take(sc.parse_progress(line))
    assert p.solver == "structured" and p.plan.unknowns == 362_000
    forward = dict(plan.pre)["forward"]
    for before, done in ((0, 100), (100, 800), (800, 1726)):
        clock.t += forward * 2 * (done - before) / 1726     # twice as slow as planned
        p.take(sc.parse_progress(sc.progress_line(dict(phase="forward", stage=True, done=done, of=1726))))
        shown.append(p.look())
    assert p.headline().startswith("Simulating ") and p.scale == pytest.approx(2.0, rel=0.1)
    p.take(dict(phase="start", stage=True, name="cache", index=1, starts=2, offset=0))
    assert p.headline().startswith("Starting from the cache (1 of 2) ")
    for _ in range(30):                          # a first iteration longer than planned: the bar creeps on
        clock.t += 10.0
        shown.append(p.look())
    assert np.all(np.diff(shown) > 0), shown
    assert p.seconds_left > 0 and p.time_text().endswith(" left")
    p.update("gauss_newton", 1, 0.9, 1e6)
    p.take(dict(phase="start", stage=True, name="forward", index=2, starts=2, offset=1))
    before = p.look()
    clock.t += 10.0
    assert p.look() > before and p.headline().startswith("Optimizing (2 of 2) ")


def test_durations_in_words():
    assert (duration(5.4), duration(65), duration(3720)) == ("5 s", "1 min 05 s", "1 h 02 min")
    assert (about(30), about(150), about(4000)) == ("under a minute", "about 2 min", "about 1 h 07 min")


def metrics(jump, residual):
    return dict(position_jump=0.01 * jump, velocity_jump=0.1 * jump, position_jump_ratio=jump,
                velocity_jump_ratio=jump, residual_rel_mean=residual, residual_rel_max=3 * residual, loss=1.0)


def test_verdict_lines_are_short_and_say_it_in_words():
    rep = dict(source=metrics(7.5, 0.9), loop=metrics(1.1, 0.03), status=CONVERGED, stop_reason="tol", gauss_newton_iterations=12,
               fast_projection_iterations=0, seconds=30.0, init_used="cache", fallback_reason="")
    assert words.verdict_lines(rep) == ["Seamless: yes — 6.8× smoother than cache",
                                     "Physics: closer than cache — residual 0.03 vs 0.9",
                                     "Converged — 12 iterations, < 1 min"]
    capped = dict(rep, loop=metrics(3.0, 2.0), status=ITERATION_CAP, stop_reason="max_iters", gauss_newton_iterations=50, seconds=600.0,
                  init_used="crossfade", fallback_reason="fast projection did not close the loop: ...")
    verdict = words.verdict(capped)
    assert [v["kind"] for v in verdict] == ["bad", "warn", "warn", "warn"]
    assert [v["headline"] for v in verdict] == ["Seamless: no", "Physics: worse than cache",
                                                "Not converged yet", "Fell back to a crossfade"]
    assert verdict[2]["detail"] == "+50 iterations: ~10 min"
    for v in words.verdict(rep) + verdict:
        assert len(v["headline"]) <= LINE_CHARS and len(v["detail"]) <= LINE_CHARS
    assert words.details(rep) == ["Seam: 1.1× an ordinary frame in position, 1.1× in speed (cache 7.5×, 7.5×)",
                                  "Physics: 3% of the force unexplained (cache 90%; 0% is pure physics)",
                                  "Run: 12 steps in 30 s, from the cache"]
    crossfade = dict(rep, status=3, stop_reason="", gauss_newton_iterations=0, init_used="crossfade")
    assert [v["headline"] for v in words.verdict(crossfade)] == ["Seamless: yes", "Physics: closer than cache"]


def test_a_loop_that_lost_most_of_the_caches_motion_says_so():
    rep = dict(source=dict(metrics(7.5, 0.9), speed=0.148), loop=dict(metrics(1.2, 0.02), speed=0.0462),
               status=CONVERGED, stop_reason="tol", gauss_newton_iterations=16, fast_projection_iterations=0,
               seconds=14.0, init_used="cache", fallback_reason="",
               motion=dict(family="none", speed_ratio=0.31))      # the README's flag in pure physics
    calmer = words.verdict(rep)[-1]
    assert (calmer["kind"], calmer["headline"], calmer["detail"]) == ("warn", "Motion: calmer than cache",
                                                                      "31% speed: Allow Gusts")
    assert len(calmer["headline"]) <= LINE_CHARS and len(calmer["detail"]) <= LINE_CHARS
    assert words.details(rep)[2:4] == ["Motion: 31% of the cache's speed (0.046 vs 0.15 m/s)",
                                       "Calmer: nothing drives it; Allow Gusts (--gusts) keeps it moving"]
    assert all(len(line) <= 3 * LINE_CHARS for line in words.details(rep))     # three sidebar rows at most
    kept = dict(rep, loop=dict(rep["loop"], speed=0.140))
    assert "Motion: calmer than cache" not in [v["headline"] for v in words.verdict(kept)]
    assert any(line.startswith("Motion: 95% of the cache's speed") for line in words.details(kept))
    assert not any("--gusts" in line for line in words.details(kept))


def test_a_loop_kept_moving_by_designed_gusts_says_what_it_needed():
    figures = dict(family="wind", speed_ratio=0.99, wind_peak_ratio=1.87, drive_peak_g=0.2,
                   resimulated=dict(periods=[0.5, 0.31, 0.30], last=0.30, repeats=0.17, speed_ratio=1.16))
    rep = dict(source=dict(metrics(7.5, 0.9), speed=0.148), loop=dict(metrics(1.2, 0.02), speed=0.147),
               status=CONVERGED, stop_reason="physics_tol", gauss_newton_iterations=13, fast_projection_iterations=0,
               seconds=14.0, init_used="cache", fallback_reason="", motion=figures)
    kept = words.verdict(rep)[-1]
    assert (kept["kind"], kept["headline"], kept["detail"]) == ("good", "Motion: kept", "gusts up to 1.9× wind")
    assert len(kept["detail"]) <= LINE_CHARS
    lines = words.details(rep)
    assert lines[2:5] == ["Motion: 99% of the cache's speed (0.15 vs 0.15 m/s)",
                          "Gusts: up to 1.9× the scene's wind; Write Wind adds them",
                          "Blender's re-run: 0.3 motions off the loop in period 3, 116% speed"]
    assert all(len(line) <= 3 * LINE_CHARS for line in lines)
    pushes = dict(rep, motion=dict(figures, family="modes", wind_peak_ratio=None, resimulated=None))
    assert words.verdict(pushes)[-1]["detail"] == "pushes up to 0.2 g"
    calm = dict(rep, loop=dict(rep["loop"], speed=0.1))
    assert words.verdict(calm)[-1] == dict(kind="warn", headline="Motion: calmer than cache",
                                           detail="68% of the cache's speed")
    weak = dict(calm, motion=dict(figures, force_needed=3.53, wind_bound=2.0))   # the 150-vertex benchmark flag
    assert words.verdict(weak)[-1] == dict(kind="warn", headline="Motion: calmer than cache",
                                           detail="68%: wind 3.5× too weak")
    assert words.details(weak)[3:5] == ["Gusts: up to 1.9× the scene's wind; Write Wind adds them",
                                        "Calmer: wind too weak: the cache needs 3.5× the force of gusts ≤ 2× wind"]
    assert all(len(line) <= 3 * LINE_CHARS for line in words.details(weak))
    assert not any("too weak" in line for line in words.details(calm) + words.details(rep))


def read_png(data):
    """(width, height, rgb) of an 8-bit RGB PNG file's bytes, decoded by Pillow (not by Blender, which wrote it)."""
    from PIL import Image

    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(io.BytesIO(data)) as image:
        assert image.mode == "RGB"
        return image.width, image.height, np.asarray(image)


def test_seam_picture_marks_the_wrap_and_reads_back_as_png(tmp_path):
    t = np.arange(24) / 24
    loop = np.zeros((24, 4, 3))
    loop[:, :, 2] = np.sin(2 * np.pi * t)[:, None] * np.array([1.0, 0.5, 0.2, 0.0])
    cache = loop + np.linspace(0, 0.5, 24)[:, None, None] * np.array([0, 0, 1.0])      # drifts: a jump at the wrap
    rgb = seam_picture(cache, loop, 1 / 24)
    from cyclic_loop_addon.outputs.images import write_picture    # Blender's image API (bpy)
    with open(write_picture(str(tmp_path / "seam.png"), rgb), "rb") as fh:
        w, h, back = read_png(fh.read())
    assert (w, h) == (360, rgb.shape[0]) and np.array_equal(back, rgb)
    red = np.all(np.abs(rgb.astype(int) - [214, 39, 40]) < 40, axis=-1)
    columns = np.flatnonzero(red.sum(axis=0) > 100)       # the wrap: red vertical lines amid each plot column
    assert {90, 269} <= set(columns) and all(abs(c - 90) <= 1 or abs(c - 269) <= 1 for c in columns), columns
    assert (rgb[:30] < 100).all(axis=-1).sum() > 100      # the column titles are written
    assert seam_picture(cache, loop, 1 / 24, scale=2).shape[1] == 720


def test_python_note_says_what_to_install_not_the_exception():
    reason = ("/usr/bin/python3.11 cannot run the solver (ModuleNotFoundError: No module named 'scipy'); "
              "no Python at '/opt/blender/python'")
    note = python_note(reason)
    assert "install scipy" in note and "/usr/bin" not in note and "ModuleNotFoundError" not in note
    assert "different" not in python_note("/x has {'numpy': '1'}, Blender has {'numpy': '2'}").split(":")[0]
