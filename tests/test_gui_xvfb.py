"""A real Blender window under Xvfb (Debian's `blender`, `xvfb`): open the Loop tab on an object that cannot
loop, select the flag sample, click Make Loop, cancel with Esc, run to the end while orbiting the view,
then a run that converges; tests/gui_driver.py does it inside Blender and the screenshots of the panel
are kept in out/ci_screenshots/ (CI output; the ones in docs/panel/ are copies of them).

    .venv/bin/python -m pytest -q -s tests/test_gui_xvfb.py     (-s shows the measured redraw gaps)
"""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHOTS = os.path.join(ROOT, "out", "ci_screenshots")
BLENDER, XVFB = shutil.which("blender"), shutil.which("xvfb-run")

pytestmark = pytest.mark.skipif(not (BLENDER and XVFB) and not os.environ.get("CI"),
                                reason="needs the blender and xvfb-run executables; under CI they must run")


@pytest.fixture(scope="module")
def gui_run(tmp_path_factory):
    """Build the legacy zip and the flag sample (with this Blender), run the driver, return its result."""
    tmp = tmp_path_factory.mktemp("gui")
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "build_extension.py"),
                    "--legacy-only", "--out", str(tmp)], check=True, capture_output=True)
    subprocess.run([BLENDER, "-b", "--factory-startup", "--python",
                    os.path.join(ROOT, "sample_scenes", "build_samples.py"), "--", "--out", str(tmp), "flag"],
                   check=True, capture_output=True, timeout=300)
    os.makedirs(SHOTS, exist_ok=True)
    # The folders must exist: Blender 3.4 falls back to ~/.config/blender for a missing one (and would
    # read and save the user's preferences there).
    (tmp / "scripts").mkdir()
    (tmp / "config").mkdir()
    env = dict(os.environ, BLENDER_USER_SCRIPTS=str(tmp / "scripts"), BLENDER_USER_CONFIG=str(tmp / "config"))
    result_json = tmp / "result.json"
    proc = subprocess.run(
        [XVFB, "-a", "-s", "-screen 0 1280x900x24", BLENDER, "--enable-event-simulate",
         "--window-geometry", "0", "0", "1280", "900", str(tmp / "flag.blend"),
         "--python", os.path.join(ROOT, "tests", "gui_driver.py"), "--",
         str(tmp / "cyclic_loop-0.1.0-legacy.zip"), SHOTS, str(result_json)],
        env=env, capture_output=True, text=True, timeout=600)
    assert result_json.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(result_json.read_text())
    assert result["errors"] == [], result["errors"]
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout[-3000:] + proc.stderr[-3000:]
    return result


def test_loop_tab_opens(gui_run):
    assert gui_run["loop_tab_open"]


def test_esc_cancels_and_leaves_scene_unchanged(gui_run):
    assert gui_run["run1_started"] and gui_run["run1_progress_at_esc"] > 0
    assert gui_run["run1_message"].startswith("Cancelled")
    assert gui_run["run1_scene_unchanged"]


def test_solve_runs_in_a_child_process_while_the_view_is_used(gui_run):
    """Make Loop hands the solve to a child Python (Debian's Blender runs on the system Python 3.11, so
    there is one): the solver's numpy / SciPy work then never holds the GIL that Blender's Python
    (timers, panel drawing, the modal operator) needs, and the operator's timer follows the child, so no
    Python thread runs beside Blender's drawing (Blender 3.4 crashed now and then with the one that
    waited for the child). The view is orbited every half second meanwhile.

    The measured waits (between timer ticks, between viewport redraws) are printed (-s) but not
    asserted: under Xvfb a viewport redraw is software OpenGL (0.3 s to 0.5 s on a loaded 2-core
    machine) and the driver's own screenshot holds the main thread, so they measure the machine more
    than the add-on."""
    assert gui_run["run1_solving_in"] == gui_run["run2_solving_in"] == "process"
    assert gui_run["run2_python_threads"] == ["MainThread"]
    assert gui_run["orbits"] and set(gui_run["orbits"]) == {"FINISHED"}
    print(f"\nrun 2: {gui_run['run2_seconds']:.1f} s solving in a child process; longest waits: "
          f"between timer ticks {gui_run['run2_longest_tick_gap']:.3f} s, "
          f"between viewport redraws {gui_run['run2_longest_draw_gap']:.3f} s")


def test_progress_advances_while_window_redraws(gui_run):
    run2 = [s for s in gui_run["samples"] if s["label"] == "run2" and s["running"]]
    progress = [s["progress"] for s in run2]
    assert progress == sorted(progress) and len(set(progress)) >= 4, progress
    assert len({s["iteration"] for s in run2}) >= 4
    first, last = run2[0], run2[-1]
    assert last["timer_redraws"] - first["timer_redraws"] >= 5
    assert last["panel_draws"] - first["panel_draws"] >= 5
    assert last["viewport_draws"] - first["viewport_draws"] >= 5
    assert gui_run["second_make_loop"] == ["CANCELLED"]


def test_invalid_selection_disables_make_loop_with_the_reason(gui_run):
    assert gui_run["invalid_can_make_loop"] is False
    assert gui_run["invalid_reason"].startswith("Post has no Cloth or Soft Body to loop")


def test_settings_are_read_from_physics_on_selection(gui_run):
    """Selecting the flag fills its settings from its cloth (no button pressed) and clears the old message."""
    on, cache = gui_run["on_select"], gui_run["cache"]
    assert on["initialized"] and on["frames"] == cache["loop_frames"]     # the sample's own loop range
    assert on["model"] == "blender_cloth" and on["substeps"] == 1 and on["init"] == "cache_or_forward"   # the frame grid
    assert not on["hard_initial"] and on["soft_weight"] == 1000
    assert on["message"] == "" and on["can_make_loop"]


def test_progress_names_phases_moves_smoothly_and_says_time_left(gui_run):
    run2 = [s for s in gui_run["samples"] if s["label"] == "run2" and s["running"]]
    phases = []
    for s in run2:
        if not phases or phases[-1] != s["phase"]:
            phases.append(s["phase"])
    assert phases == ["gather", "", "fast_projection", "gauss_newton", "write"], phases
    words = {s["status_text"].rsplit(" ", 1)[0] for s in run2}
    assert words == {"Reading the simulation", "Starting the solver", "Initial guess", "Optimizing",
                     "Writing the loop"}, words
    assert all(re.fullmatch(r"\d+%", s["status_text"].rsplit(" ", 1)[1]) for s in run2)
    assert all(" elapsed · " in s["time_text"] for s in run2)
    left = [s["time_text"] for s in run2 if s["phase"] == "gauss_newton" and s["time_text"].endswith(" left")]
    assert left and all(re.search(r"· (under a minute|about \d+ min) left$", t) for t in left), left
    # no jump while solving (when the solver converges before its iteration cap, the bar then completes)
    progress = [s["progress"] for s in run2 if s["phase"] != "write"]
    assert max(b - a for a, b in zip(progress, progress[1:])) < 0.15, progress
    assert {"panel_reading", "panel_starting", "panel_initial_guess", "panel_optimizing", "panel_writing",
            "window_optimizing"} <= set(gui_run["screenshots"])


def test_verdict_lines_fit_the_default_sidebar(gui_run):
    assert gui_run["run3_started"]
    capped, converged = gui_run["run2_verdict"], gui_run["run3_verdict"]
    for verdict in (capped, converged):
        assert verdict[0]["headline"].startswith("Seamless: ") and verdict[1]["headline"].startswith("Physics: ")
    assert any(v["headline"] == "Not converged yet" and re.search(r"^\+\d+ iterations: ", v["detail"])
               for v in capped), capped
    assert any(v["headline"] == "Converged" for v in converged), converged
    for fit in (gui_run["run2_verdict_fit"], gui_run["run3_verdict_fit"]):
        assert fit["widest"] <= fit["room"], fit
    assert gui_run["run3_seam_icon"] > 0          # the seam picture is in the panel


def test_scene_range_is_set_to_the_loop(gui_run):
    first, last = gui_run["run2_loop"]
    assert last - first + 1 == gui_run["n_loop_frames"] and gui_run["run2_range"] == [first, last]
    assert gui_run["range_before"] != [first, last]
    assert (gui_run["jump_last"], gui_run["jump_first"]) == (last, first)
    assert gui_run["looped_reason"].startswith("Flag loops already: Restore Simulation")
    assert gui_run["range_after_restore"] == gui_run["range_before"]      # Restore Simulation gives it back


def test_run_to_the_end_writes_loop_and_report(gui_run):
    assert gui_run["run2_started"] and gui_run["run2_message"].startswith("Loop written")
    rep = gui_run["report"]
    assert rep["has_report"] and rep["method"] == "physical" and rep["iterations"] > 0 and rep["seconds"] > 0
    assert gui_run["loop_keys_after"] == gui_run["n_loop_frames"]


def test_screenshots_saved(gui_run):
    for name in ("panel_invalid", "panel_before", "panel_cancelled", "panel_not_converged", "panel_verdict",
                 "panel_seam"):
        path = gui_run["screenshots"][name]
        assert os.path.getsize(path) > 10_000, path
