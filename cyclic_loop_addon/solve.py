"""The physical solve of a gathered problem and its report: ``solver_core.loop_clip`` and
``solver_core.loop_report`` with the add-on's errors and the scene's facts. No bpy: safe in a worker thread."""
from .errors import LoopSolveError
from .solver import sc


def check(settings):
    """LoopSolveError unless ``settings.init`` is one of solver_core.CLIP_INITS."""
    try:
        sc.check_init(settings.init)
    except ValueError as exc:
        raise LoopSolveError(str(exc)) from None


def solve(gathered, settings, callback=None):
    """``sc.loop_clip`` of ``gathered`` with the settings' init, iterations and tolerance (a cancelled
    result has ``cancelled`` set: write nothing); LoopSolveError when the solver fails or diverges."""
    check(settings)
    try:
        return sc.loop_clip(gathered.problem, gathered.source, settings.init, max_iters=settings.iterations,
                            tol=settings.tolerance, physics_tol=settings.physics_tolerance, callback=callback)
    except sc.LoopFailed as exc:
        raise LoopSolveError(str(exc)) from exc


def about(gathered, notes=()):
    """The scene's facts a report carries: model, objects, frames and notes (``notes`` added to the gathering's)."""
    return dict(model=gathered.model_name, objects=list(gathered.object_names),
                frames=[gathered.frame_start, int(gathered.frames[-1])], notes=[*gathered.notes, *notes])


def report(gathered, result, notes=()):
    """``sc.loop_report`` of ``result`` with the source cache and the scene's facts (``about``)."""
    return sc.loop_report(gathered.problem, result, gathered.source, **about(gathered, notes))
