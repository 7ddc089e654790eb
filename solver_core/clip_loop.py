"""A loop made from a simulated clip (a Blender cache, say): ``loop_clip``, ``make_loop`` that can start
from the clip itself, races it against the solver's own simulation ("cache_or_forward", ``starts``), falls
back to it when the solver's own forward simulation fails, and refuses a diverged loop; and the crossfade
baseline of such a clip."""
import time

import numpy as np

from .baselines import crossfade_loop
from .physics.forward import SimulationFailed
from .optimize.gauss_newton import choose_backend, solver_route
from .optimize import driven
from .optimize.linsolve import make_backend
from .loop import LoopResult, make_loop
from .metrics import loop_metrics, rms_speed, unseen, wrap_ratio
from .motion import KEPT_SPEED, distance_figures, keep_motion
from .options import DEFAULTS, MAX_ITERS, PHYSICS_TOL, TOL
from .physics.driving import choose_drive
from .starts import INITS, clip_starts, race

# "cache": start from a crossfade of the clip itself; "cache_or_forward": Gauss–Newton from it and from the
# solver's own simulation of the clip's first two frames, keeping the better loop (docs/design/starts.md).
CLIP_INITS = (*INITS, "cache", "cache_or_forward")
# The default of ``StartOptions.race_from``, read by the panel's progress estimate (cyclic_loop_addon).
RACE_FROM = DEFAULTS.start.race_from
START_NAMES = dict(cache="cache", forward="simulation")   # the starts in the result's message


def crossfade_clip(prob, clip):
    """The crossfade baseline of ``clip`` (no solve), with its metrics under ``prob``.

    Parameters
    ----------
    prob : LoopProblem
        The loop problem the clip was simulated for.
    clip : ndarray
        The simulated clip (n_frames, n, 3).

    Returns
    -------
    LoopResult
        ``q`` the crossfaded loop, ``init_used`` "crossfade", ``metrics["loop"]`` its ``loop_metrics``.
    """
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
    "cache_or_forward" mostly drops its second run after ``StartOptions.race_from`` iterations)."""
    return 2 if init == "cache_or_forward" else 1


def _rank(result):
    """Sort key of the loops of a race: the seamless one first, then (both or neither) the lower loss."""
    return not unseen(result.metrics["loop"]), result.final_loss


def _make_loop(prob, clip, init, options, **kwargs):
    if init != "cache_or_forward":
        return make_loop(prob, init=crossfade_loop(clip) if init == "cache" else init, options=options, **kwargs)
    stage = kwargs.pop("stage")
    starts = clip_starts(prob, clip, stage)
    if len(starts) == 1:                   # the solver's own simulation failed
        return _started(make_loop(prob, init=starts["cache"], options=options, **kwargs), "cache")
    lead, trail = starts
    callback = kwargs.pop("callback")
    backend = choose_backend(prob, kwargs["backend"], options)
    if backend in ("auto", "cholmod", "scipy"):
        kwargs["backend"] = make_backend(backend)   # one direct solve for both runs: one symbolic analysis

    def run(name, report):
        result = _started(make_loop(prob, init=starts[name], callback=report, options=options, **kwargs), name)
        return result, result.gauss_newton_iterations

    start = options.start
    out = race(starts, run, _rank, callback, behind=start.behind, race_from=start.race_from,
               leads=lambda first: unseen(first.metrics["loop"]),
               settles=lambda first: first.stop_reason == "physics_tol", stage=stage)
    if out.cancelled:
        return out.runs[out.ranked[0]]
    if out.settled:   # seamless and physical: the other start cannot be seen to do better
        first = out.runs[lead]
        first.message += (f"; started from the {START_NAMES[lead]} (lower loss than the "
                          f"{START_NAMES[trail]}'s), which converged within the physics tolerance")
        return first
    kept = out.runs[out.ranked[0]]
    other = out.runs[trail if kept.init_used == lead else lead]
    dropped = out.dropped.get(trail)
    name = START_NAMES[kept.init_used]
    figures = f"loss {other.final_loss:.3g}, wrap {wrap_ratio(other.metrics['loop']):.3g}x"
    if dropped:
        figures = (f"dropped after {dropped['iteration']} iterations at {figures}, {dropped['ratio']:.3g} times "
                   f"the {name}'s loss at that iteration")
    kept.message += (f"; started from the cache and from the solver's own simulation, kept the {name}'s loop "
                     f"(loss {kept.final_loss:.3g}; the {START_NAMES[other.init_used]}'s {figures})")
    kept.seconds = out.runs[lead].seconds + out.runs[trail].seconds
    return kept


def _pure_physics_motion(prob, clip, result, too_large=0):
    """Add the speed kept to a pure-physics loop's metrics, and say so in its message when it went calm;
    ``too_large``: the unknowns of a loop that asked for a driving force but is beyond the driven solve's size."""
    ratio = rms_speed(result.q, prob.dt) / max(rms_speed(clip, prob.dt), 1e-300)
    result.metrics["motion"] = dict(family="none", speed_ratio=ratio, drive_peak_g=0.0, wind_peak_ratio=None,
                                    **distance_figures(result.q, clip), too_large=bool(too_large))
    if too_large and not result.cancelled:
        result.message += (f"; pure physics: the designed gusts factor the whole loop at once, beyond this size "
                           f"({too_large} unknowns): fewer frames or vertices keep them")
    if ratio < KEPT_SPEED and not result.cancelled:
        result.message += (f"; calmer than the clip ({ratio:.0%} of its speed): a damped loop with no driving force "
                           "loses its motion, allow a driving force to keep it")


def _started(result, start):
    """``result`` with ``init_used`` set to ``start``."""
    result.init_used = start
    return result


def loop_clip(prob, clip, init="fast_projection", max_iters=MAX_ITERS, tol=TOL, callback=None, backend="auto",
              physics_tol=PHYSICS_TOL, options=None, stage=None):
    """The loop of the simulated ``clip``; LoopFailed when the solver fails or diverges.

    With a driving family (``options.motion.drive``: "auto" takes the scene's wind, else the mesh's body modes)
    the loop and a periodic driving force are solved together at the clip's speed (``motion.keep_motion``);
    without one (``drive="none"``, or N bodies) it is ``make_loop``'s pure-physics loop, whose message says when
    it went calmer than the clip. ``metrics["motion"]`` holds the speed kept and the driving force's size.

    Parameters
    ----------
    prob : LoopProblem
        The loop problem the clip was simulated for.
    clip : ndarray
        The simulated clip (n_frames, n, 3).
    init : str
        One of CLIP_INITS. "cache" starts from a crossfade of the clip, and is also the fallback when the
        solver's own forward simulation blows up (the reason is kept in ``fallback_reason``);
        "cache_or_forward" runs from both (``starts.race``), the start of lower loss first, ``runs(init)``
        times ``max_iters`` iterations at most, and keeps the seamless loop, else the one of lower loss;
        when the first loop is seamless, the second run is dropped once clearly behind it
        (``StartOptions.race_from``, ``behind``), and when the first is within ``physics_tol`` the second
        does not run.
    max_iters, tol, callback, backend : optional
        As in ``make_loop``; a cancelled result is returned as it is (write nothing).
    physics_tol : float
        As in ``make_loop``, here PHYSICS_TOL unless given.
    options : Options, optional
        Tuning values (``options.py``); ``DEFAULTS`` when None.
    stage : callable, optional
        ``stage(info)`` hears of the work before the iterations, which the callback does not see: the
        forward simulation's steps (phase "forward", ``done`` of ``of``) and each start as it begins (phase
        "start": ``name``, ``index`` of ``starts``, ``offset``; also fast projection's fallback race), after
        a first "setup" dict: the linear ``solver`` (``solver_route``), ``unknowns``, ``steps`` and
        ``vertices``. A progress bar moves by them; they cannot cancel.

    Returns
    -------
    LoopResult
        ``init_used`` says which loop was kept; with "cache_or_forward" the message gives the other's
        figures (where it was dropped) and ``seconds`` counts both runs.

    Raises
    ------
    LoopFailed
        The solver failed, diverged (NaN positions), or the loop ends up more than
        ``StartOptions.diverged_extent`` clip sizes away from the clip.
    """
    check_init(init)
    options = options or DEFAULTS
    drive = choose_drive(prob, options.motion.drive, options.motion.modes)
    unknowns = int(prob.free_mask().sum())
    too_large = drive is not None and not driven.fits(unknowns, prob.n_steps, options)
    if too_large:
        drive = None
    if stage is not None:       # the linear solve and the problem's size, before any work
        route = driven.linear_solver(backend) if drive is not None else solver_route(prob, backend, options)
        stage(dict(phase="setup", stage=True, solver=route,
                   unknowns=int(prob.free_mask().sum()), steps=prob.n_steps, vertices=prob.model.n_vertices))
    kwargs = dict(max_iters=int(max_iters), tol=float(tol), callback=callback, backend=backend,
                  physics_tol=float(physics_tol), stage=stage)
    clip = np.asarray(clip, dtype=float)

    def solve(start):
        if drive is not None:
            return keep_motion(prob, clip, drive, start, options=options, **kwargs)
        return _make_loop(prob, clip, start, options, **kwargs)

    reason = ""
    try:
        try:
            result = solve(init)
        except SimulationFailed as exc:
            if init == "cache":
                raise
            init, reason = "cache", f"{exc} (started from the Blender cache instead)"
            result = solve(init)
    except (SimulationFailed, np.linalg.LinAlgError, ArithmeticError) as exc:
        raise LoopFailed(f"the solver failed: {exc}") from exc
    if init == "cache":
        result.init_used, result.fallback_reason = "cache", reason
    if drive is None:
        _pure_physics_motion(prob, clip, result, unknowns if too_large else 0)
    if result.cancelled:
        return result
    if not np.all(np.isfinite(result.q)) or not np.isfinite(result.final_loss):
        raise LoopFailed("the solver diverged (NaN positions); try the backward scheme, more substeps "
                         "or init='forward'")
    size = np.ptp(clip.reshape(-1, 3), axis=0).max() or 1.0
    extent = options.start.diverged_extent
    if np.abs(result.q - clip).max() > extent * size:
        raise LoopFailed(f"the solver diverged: the loop ends up more than {extent:g} times the "
                         "size of the simulation away from it; try the backward scheme or more substeps")
    return result
