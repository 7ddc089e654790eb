"""The loop of a gathered problem and its report, the same wherever the solve runs. ``solve`` (the physical
solve, ``solver_core.loop_clip``) and ``crossfade`` (the baseline blend) give a LoopResult that carries the
source cache's metrics as ``metrics["source"]``, as the result file of the child's ``python -m solver_core
loop --clip`` does; ``report`` builds the one report of such a result, made in this process or reloaded from
the child's file (docs/design/child_solve.md). No bpy: safe in a worker thread."""
from dataclasses import replace

from ..errors import LoopSolveError
from ..core import sc


def check(settings):
    """LoopSolveError unless ``settings.init`` is one of solver_core.CLIP_INITS."""
    try:
        sc.check_init(settings.init)
    except ValueError as exc:
        raise LoopSolveError(str(exc)) from None


def motion_options(settings):
    """The solver's options for ``settings``' Allow Gusts and Keep Motion (``solver_core.MotionOptions``)."""
    motion = sc.DEFAULTS.motion
    return replace(sc.DEFAULTS, motion=replace(motion, drive=motion.drive if settings.gusts else "none",
                                               keep_speed=motion.keep_speed if settings.keep_motion else 0.0))


def motion_arguments(settings):
    """``python -m solver_core loop``'s arguments for ``motion_options(settings)``: the child's same options."""
    motion = motion_options(settings).motion
    return ["--drive", motion.drive, "--keep-speed", repr(float(motion.keep_speed))]


def solve(gathered, settings, callback=None, stage=None):
    """The physical loop of ``gathered`` with the settings' init, iterations and tolerances.

    Parameters
    ----------
    gathered : scene_reader.Gathered
        The problem and its source cache.
    settings : scene_reader.LoopSettings
        ``init``, ``iterations``, ``tolerance``, ``physics_tolerance``, ``gusts`` and ``keep_motion`` are used.
    callback : callable, optional
        The solver's progress callback (``sc.make_loop``); returning True cancels.
    stage : callable, optional
        Told of the work before the iterations (``sc.loop_clip``'s ``stage``).

    Returns
    -------
    LoopResult
        ``sc.loop_clip``'s result with ``metrics["source"]`` (``with_source``); a cancelled result has
        ``cancelled`` set (write nothing).

    Raises
    ------
    LoopSolveError
        When the init is unknown, or the solver fails or diverges.
    """
    check(settings)
    try:
        result = sc.loop_clip(gathered.problem, gathered.source, settings.init, max_iters=settings.iterations,
                              tol=settings.tolerance, physics_tol=settings.physics_tolerance, callback=callback,
                              options=motion_options(settings), stage=stage)
    except sc.LoopFailed as exc:
        raise LoopSolveError(str(exc)) from exc
    return with_source(gathered, result)


def crossfade(gathered):
    """The crossfade baseline of the source cache (no solve).

    Parameters
    ----------
    gathered : scene_reader.Gathered
        The problem and its source cache.

    Returns
    -------
    LoopResult
        ``sc.crossfade_clip``'s result with ``metrics["source"]`` (``with_source``).
    """
    return with_source(gathered, sc.crossfade_clip(gathered.problem, gathered.source))


def with_source(gathered, result):
    """``result`` with ``metrics["source"]``: the source cache played as a loop, the report's source column
    (a cancelled result's too: a solve stopped to keep its best loop gets a report)."""
    if result.metrics:
        result.metrics["source"] = sc.loop_metrics(gathered.problem, gathered.problem.steps_of(gathered.source))
    return result


def about(gathered, notes=()):
    """The scene's facts a report carries: model, objects, frames and notes (``notes`` added to the gathering's)."""
    return dict(model=gathered.model_name, objects=list(gathered.object_names),
                frames=[gathered.frame_start, int(gathered.frames[-1])], notes=[*gathered.notes, *notes])


def report(gathered, result, notes=()):
    """The report of a loop, in this process or in the parent of the child solve.

    Parameters
    ----------
    gathered : scene_reader.Gathered
        The problem the loop was made for.
    result : LoopResult
        From ``solve`` or ``crossfade``, or ``sc.load_result`` of the child's result file: its
        ``metrics["source"]`` is the source column, so no metrics are measured here.
    notes : sequence of str
        Notes added to the gathering's.

    Returns
    -------
    dict
        ``sc.loop_report`` of ``result`` with the source column and the scene's facts (``about``).
    """
    rep = sc.loop_report(gathered.problem, result)
    rep["source"] = result.metrics["source"]
    rep.update(about(gathered, notes))
    return rep
