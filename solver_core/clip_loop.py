"""A loop made from a simulated clip (a Blender cache, say): ``make_loop`` that can start from the clip
itself, falls back to it when the solver's own forward simulation fails, and refuses a diverged loop; and
the crossfade baseline of such a clip."""
import time

import numpy as np

from .baselines import crossfade_loop
from .forward import SimulationFailed, simulate
from .gauss_newton import choose_backend
from .linsolve import make_backend
from .loop import INITS, MAX_ITERS, PHYSICS_TOL, TOL, LoopResult, make_loop, on_solver_grid, shifted_callback
from .metrics import loop_metrics, unseen, wrap_ratio
from .options import DEFAULTS
from .residual import loss
from .result import halts

# "cache": start from a crossfade of the clip itself; "cache_or_forward": Gauss–Newton from it and from the
# solver's own simulation of the clip's first two frames, keeping the better loop (``better``). Measured on
# the flag samples (frame grid, soft first frames, 70 vertices, frames 49-72): in gusts that repeat every
# 24 frames, from the cache loss 40.5, residual 0.17, the flag moving 4.2 cm (a local minimum: two small
# bumps per gust), from the simulation 0.059, residual 0.0027, 19.6 cm, in step with the cache; in a steady
# wind, from the cache 3.97, wrap 1.19x, from the simulation 2.81 but a visible wrap (1.69x).
CLIP_INITS = (*INITS, "cache", "cache_or_forward")
# The start of lower loss runs first, to its end; when its loop is seamless, the other start's run is
# dropped at the first iteration from RACE_FROM on at which its loss exceeds BEHIND times the first run's at
# the same iteration (a seamless first loop loses only to a seamless one of lower loss, ``better``).
# Initial losses, the winner's start against the loser's: gusts 3.9e4 / 4.0e5 (the simulation's), steady
# flag 8.3e4 / 6.5e5 (the cache's), ribbons 5.9e6 / 2.0e10 (the simulation's), 150-vertex flag 1.08e8 /
# 1.89e8 (the cache's).
# Measured (the loser's loss over the winner's after 1 / 2 / 3 / 4 / 5 / 6 / 7 iterations, both run to the
# end; the start of lower loss is the winner on all four): flag in gusts 14 / 57 / 42 / 38 / 16 / 16 / 61,
# steady flag 3.5 / 11 / 12 / 13 / 14 / 3.1 / 0.44 (the simulation's start then falls below the cache's
# and ends lower, 2.81 against 3.97, but with a visible wrap), ribbons 940 / 78 / 61 / 50 / 181 / 152 /
# 142, the 150-vertex flag of ``bench_blender_cloth.py`` 1.5 / 7.3 / 26 / 39 / 44 / 45 / 52.
# The steady flag's margin is the thinnest: 12-14 against BEHIND 10 at iterations 3-5; from the 6th on its
# simulation's run would no longer be dropped (and would run to its end, as before). A first loop within the
# physics tolerance (``make_loop``'s ``physics_tol``) is kept without the second run.
RACE_FROM = 3
BEHIND = 10.0
START_NAMES = dict(cache="cache", forward="simulation")   # the starts in the result's message
DIVERGED_EXTENT = 10.0  # a loop reaching this many clip sizes away from the clip has diverged


def crossfade_clip(prob, clip):
    """The LoopResult of the crossfade baseline of ``clip`` (no solve), with its metrics under ``prob``."""
    t0 = time.perf_counter()
    q = crossfade_loop(clip)
    steps = prob.steps_of(q)
    metrics = dict(loop=loop_metrics(prob, steps))
    return LoopResult(q=q, q_steps=steps, initial_guess=steps, init_used="crossfade", metrics=metrics,
                      seconds=time.perf_counter() - t0)


class LoopFailed(RuntimeError):
    """The solver failed or diverged; the message says how and what to try."""


def check_init(init):
    """ValueError unless ``init`` is one of CLIP_INITS."""
    if init not in CLIP_INITS:
        raise ValueError(f"unknown init {init!r}; choose one of {', '.join(CLIP_INITS)}")


def runs(init):
    """How many Gauss–Newton runs ``loop_clip`` makes for ``init`` at most (each up to its ``max_iters``;
    "cache_or_forward" mostly drops its second run after RACE_FROM iterations)."""
    return 2 if init == "cache_or_forward" else 1


def better(a, b):
    """The better of two loops: the seamless one, else (both or neither) the one of lower loss."""
    key = [(not unseen(r.metrics["loop"]), r.final_loss) for r in (a, b)]
    return a if key[0] <= key[1] else b


def _make_loop(prob, clip, init, **options):
    if init != "cache_or_forward":
        return make_loop(prob, init=crossfade_loop(clip) if init == "cache" else init, **options)
    starts = {"cache": crossfade_loop(clip)}
    try:
        starts["forward"] = simulate(prob)
    except SimulationFailed:
        return _started(make_loop(prob, init=starts["cache"], **options), "cache")
    losses = {name: loss(prob, prob.apply_constraints(on_solver_grid(prob, q))) for name, q in starts.items()}
    lead, trail = sorted(starts, key=losses.get)   # the start of lower loss is the likelier winner
    callback = options.pop("callback")
    tuning = DEFAULTS if options.get("options") is None else options["options"]
    backend = choose_backend(prob, options["backend"], tuning)
    if backend in ("auto", "cholmod", "scipy"):
        # one direct solve for both runs: one symbolic analysis (CHOLMOD's "best" ordering of the 150-vertex
        # flag, 20,160 unknowns: 2.5 s)
        options["backend"] = make_backend(backend)
    first = _started(make_loop(prob, init=starts[lead], callback=callback, **options), lead)
    if first.cancelled:
        return first
    if first.stop_reason == "physics_tol":   # seamless and physical: the other start cannot be seen to do better
        first.message += (f"; started from the {START_NAMES[lead]} (lower loss than the "
                          f"{START_NAMES[trail]}'s), which converged within the physics tolerance")
        return first
    ahead = [h["loss"] for h in first.history]
    race = unseen(first.metrics["loop"])
    user = shifted_callback(callback, first.gauss_newton_iterations)
    dropped = {}

    def judge(info):
        """The user's callback, then the race: stop the trailing run once it is clearly behind."""
        if halts(user, info):
            return True
        i, other = info["iteration"], ahead[min(info["iteration"], len(ahead) - 1)]
        behind = BEHIND if options.get("options") is None else tuning.start.behind
        if race and i >= RACE_FROM and info["loss"] > behind * other:
            dropped.update(iteration=i, ratio=info["loss"] / other)
            return True
        return False

    second = _started(make_loop(prob, init=starts[trail], callback=judge, **options), trail)
    if second.cancelled and not dropped:
        return second
    kept = first if dropped else better(first, second)
    other = second if kept is first else first
    name = START_NAMES[kept.init_used]
    figures = f"loss {other.final_loss:.3g}, wrap {wrap_ratio(other.metrics['loop']):.3g}x"
    if dropped:
        figures = (f"dropped after {dropped['iteration']} iterations at {figures}, {dropped['ratio']:.3g} times "
                   f"the {name}'s loss at that iteration")
    kept.message += (f"; started from the cache and from the solver's own simulation, kept the {name}'s loop "
                     f"(loss {kept.final_loss:.3g}; the {START_NAMES[other.init_used]}'s {figures})")
    kept.seconds = first.seconds + second.seconds
    return kept


def _started(result, start):
    """``result`` with ``init_used`` set to ``start``."""
    result.init_used = start
    return result


def loop_clip(prob, clip, init="fast_projection", max_iters=MAX_ITERS, tol=TOL, callback=None, backend="auto",
              physics_tol=PHYSICS_TOL, options=None):
    """``make_loop`` of ``prob`` taken from the simulated ``clip`` (n_frames, n, 3); LoopFailed when the
    solver fails or diverges.

    ``init``: one of CLIP_INITS; "cache" starts from a crossfade of the clip, and is also the fallback
    when the solver's own forward simulation blows up (the reason is kept in ``fallback_reason``);
    "cache_or_forward" runs from both, the start of lower loss first, ``runs(init)`` times ``max_iters``
    iterations at most, and keeps the ``better`` loop; when the first loop is seamless, the second run is
    dropped once clearly behind it (RACE_FROM, BEHIND). ``init_used`` says which loop was kept, the message
    gives the other's figures (where it was dropped), ``seconds`` counts both runs.
    ``callback``, ``tol`` and ``physics_tol`` (here PHYSICS_TOL unless given) as in ``make_loop``; a
    cancelled result is returned as it is (write nothing). ``options``: the tuning values
    (``solver_core.options.Options``; None: ``DEFAULTS``), passed to every Gauss–Newton.
    """
    check_init(init)
    options = dict(max_iters=int(max_iters), tol=float(tol), callback=callback, backend=backend,
                   physics_tol=float(physics_tol), options=options)
    reason = ""
    try:
        try:
            result = _make_loop(prob, clip, init, **options)
        except SimulationFailed as exc:
            if init == "cache":
                raise
            init, reason = "cache", f"{exc} (started from the Blender cache instead)"
            result = _make_loop(prob, clip, init, **options)
    except (SimulationFailed, np.linalg.LinAlgError, ArithmeticError) as exc:
        raise LoopFailed(f"the solver failed: {exc}") from exc
    if init == "cache":
        result.init_used, result.fallback_reason = "cache", reason
    if result.cancelled:
        return result
    if not np.all(np.isfinite(result.q)) or not np.isfinite(result.final_loss):
        raise LoopFailed("the solver diverged (NaN positions); try the backward scheme, more substeps "
                         "or init='forward'")
    size = np.ptp(clip.reshape(-1, 3), axis=0).max() or 1.0
    if np.abs(result.q - clip).max() > DIVERGED_EXTENT * size:
        raise LoopFailed(f"the solver diverged: the loop ends up more than {DIVERGED_EXTENT:g} times the "
                         "size of the simulation away from it; try the backward scheme or more substeps")
    return result
