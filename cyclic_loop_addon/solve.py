"""Run the solver on a gathered problem and report on the result. No bpy: safe in a worker thread."""
import numpy as np

from .errors import LoopSolveError
from .solver import sc

DIVERGED_EXTENT = 10.0  # a loop reaching this many source sizes away from the source has diverged
INITS = ("fast_projection", "forward", "crossfade", "cache")


def _make_loop(gathered, init, settings, callback):
    init = sc.crossfade_loop(gathered.source) if init == "cache" else init
    return sc.make_loop(gathered.problem, init=init, max_iters=int(settings.iterations),
                        tol=float(settings.tolerance), callback=callback)


def solve(gathered, settings, callback=None):
    """``sc.make_loop`` with the settings' init, iterations and tolerance; raise LoopSolveError on divergence.

    ``settings.init``: one of INITS; "cache" starts from a crossfade of the Blender cache itself, and is
    also the fallback when the solver's own forward simulation blows up (the reason is kept in
    ``fallback_reason``). ``callback(info)`` (phase, iteration, loss) is passed through; returning
    True cancels, and the result then has ``cancelled`` set (write nothing).
    """
    if settings.init not in INITS:
        raise LoopSolveError(f"unknown init {settings.init!r}; choose one of {', '.join(INITS)}")
    init, reason = settings.init, ""
    try:
        try:
            result = _make_loop(gathered, init, settings, callback)
        except sc.SimulationFailed as exc:
            if init == "cache":
                raise
            init, reason = "cache", f"{exc} (started from the Blender cache instead)"
            result = _make_loop(gathered, init, settings, callback)
    except (sc.SimulationFailed, np.linalg.LinAlgError, ArithmeticError) as exc:
        raise LoopSolveError(f"the solver failed: {exc}") from exc
    if init == "cache":
        result.init_used, result.fallback_reason = "cache", reason
    if result.cancelled:
        return result
    if not np.all(np.isfinite(result.q)) or not np.isfinite(result.final_loss):
        raise LoopSolveError("the solver diverged (NaN positions); try the backward scheme, more substeps "
                             "or init='forward'")
    size = np.ptp(gathered.source.reshape(-1, 3), axis=0).max() or 1.0
    if np.abs(result.q - gathered.source).max() > DIVERGED_EXTENT * size:
        raise LoopSolveError(f"the solver diverged: the loop ends up more than {DIVERGED_EXTENT:g} times the "
                             "size of the simulation away from it; try the backward scheme or more substeps")
    return result


def report(gathered, result):
    """Seam jumps and residuals of the source cache (played as a loop) and of the loop, and the run's facts."""
    prob = gathered.problem
    return dict(
        source=sc.loop_metrics(prob, prob.steps_of(gathered.source)),
        loop=result.metrics["loop"],
        fast_projection_iterations=result.fast_projection_iterations,
        gauss_newton_iterations=result.gauss_newton_iterations,
        seconds=result.seconds, init_used=result.init_used, fallback_reason=result.fallback_reason,
        stop_reason=result.stop_reason, status=result.status, success=result.success, message=result.message,
        model=gathered.model_name, objects=list(gathered.object_names),
        frames=[gathered.frame_start, int(gathered.frames[-1])], n_frames=gathered.n_frames,
        substeps=prob.substeps, n_vertices=prob.n_vertices, notes=list(gathered.notes),
    )


def format_report(rep):
    """The report as text lines for a console or a panel."""
    rows = (("position jump", "position_jump"), ("velocity jump", "velocity_jump"),
            ("residual (mean)", "residual_rel_mean"), ("residual (max)", "residual_rel_max"))
    lines = [rep["message"]] if rep.get("message") else []
    lines.append(f"{'':16}{'source cache':>16}{'loop':>16}")
    lines += [f"{label:16}{rep['source'][key]:16.4g}{rep['loop'][key]:16.4g}" for label, key in rows]
    init = rep["init_used"] + (f" (fell back: {rep['fallback_reason']})" if rep["fallback_reason"] else "")
    lines.append(f"iterations: fast projection {rep['fast_projection_iterations']}, Gauss-Newton "
                 f"{rep['gauss_newton_iterations']} ({rep['stop_reason'] or 'done'}); {rep['seconds']:.1f} s")
    lines.append(f"init: {init}; model {rep['model']}, {rep['n_vertices']} vertices, {rep['n_frames']} frames "
                 f"({rep['frames'][0]}..{rep['frames'][1]}), {rep['substeps']} substeps")
    lines += [f"note: {note}" for note in rep["notes"]]
    return lines
