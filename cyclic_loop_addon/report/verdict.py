"""A run's verdict in words an artist reads: is the wrap seamless, is the motion physical, did the solver
finish. Each verdict is a headline and a detail line, each at most LINE_CHARS characters (the width of
Blender's sidebar at its default size). Part of the add-on's report layer (with seam_picture, progress and
advice): words only, the figures come from solver_core. No bpy.
"""
from ..core import sc

CONVERGED, CONVERGED_WITH_SEAM, CANCELLED = sc.result.CONVERGED, sc.result.CONVERGED_WITH_SEAM, sc.result.CANCELLED
ITERATION_CAP, NO_PROGRESS = sc.result.ITERATION_CAP, sc.result.NO_PROGRESS

LINE_CHARS = 26     # the width, in characters, of Blender's sidebar at its default size
# A loop moving at less than this fraction of the cache's RMS speed is "calmer than cache": a pure-physics loop
# of a damped motion loses most of it; the designed gusts keep it (docs/design/motion.md).
CALMER = sc.KEPT_SPEED
FELL_BACK = {"cache": "Fell back to the cache", "crossfade": "Fell back to a crossfade",
             "forward": "Fell back to simulation"}


def _times(x):
    return f"{x:.0f}×" if x >= 10 else f"{x:.1f}×"


def _minutes(seconds):
    return "< 1 min" if seconds < 60 else f"~{int(round(seconds / 60))} min"


def verdict(report):
    """The verdicts of a loop's report.

    Parameters
    ----------
    report : dict
        ``solver_core.loop_report``'s dict: ``source`` and ``loop`` metrics, and ``status``,
        ``stop_reason``, ``gauss_newton_iterations``, ``fast_projection_iterations``, ``seconds``,
        ``init_used`` and ``fallback_reason`` when the solver ran.

    Returns
    -------
    list of dict
        One per verdict: ``kind`` ("good", "warn" or "bad"), ``headline`` and ``detail``, each at most
        LINE_CHARS characters.
    """
    src, loop = report["source"], report["loop"]
    out = []
    r, c = sc.metrics.wrap_ratio(loop), sc.metrics.wrap_ratio(src)
    if sc.metrics.unseen(loop):
        better = c / max(r, 1e-12)
        out.append(dict(kind="good", headline="Seamless: yes",
                        detail=f"{_times(better)} smoother than cache" if better >= 1.5
                        else "as smooth as the cache"))
    else:
        out.append(dict(kind="bad", headline="Seamless: no",
                        detail=f"wrap jumps {_times(r)} a frame"))
    lr, sr = loop["residual_rel_mean"], src["residual_rel_mean"]
    closer = lr <= sr
    out.append(dict(kind="good" if closer else "warn",
                    headline="Physics: closer than cache" if closer else "Physics: worse than cache",
                    detail=f"residual {lr:.3g} vs {sr:.3g}"))
    status = report.get("status") if report.get("stop_reason") else None     # None: no solve (crossfade)
    gn, fp = report.get("gauss_newton_iterations", 0), report.get("fast_projection_iterations", 0)
    seconds = report.get("seconds", 0.0)
    if status in (CONVERGED, CONVERGED_WITH_SEAM):
        out.append(dict(kind="good", headline="Converged",
                        detail=f"{gn} iterations, {_minutes(seconds)}"))
    elif status == ITERATION_CAP:
        per_iteration = seconds / max(gn + fp / 10, 1)      # a fast projection iteration costs about a tenth of one
        out.append(dict(kind="warn", headline="Not converged yet",
                        detail=f"+{gn} iterations: {_minutes(per_iteration * gn)}"))
    elif status == NO_PROGRESS:
        out.append(dict(kind="warn", headline="Not converged: stuck",
                        detail="try another frame range"))
    elif status == CANCELLED:
        out.append(dict(kind="warn", headline="Stopped: best so far", detail=f"after {gn} iterations"))
    kept = motion_kept(report)
    figures = report.get("motion") or {}
    driven = figures.get("family", "none") != "none"
    if kept is not None and kept < CALMER:
        out.append(dict(kind="warn", headline="Motion: calmer than cache",
                        detail=f"{kept:.0%} of the cache's speed" if driven else
                        f"{kept:.0%} speed: loop too big" if figures.get("too_large") else
                        f"{kept:.0%} speed: Allow Gusts"))
    elif kept is not None and driven:
        out.append(dict(kind="good", headline="Motion: kept", detail=needed(figures)))
    reason = report.get("fallback_reason")
    if reason:
        out.append(dict(kind="warn", headline=FELL_BACK.get(report.get("init_used"), "Fell back"),
                        detail="quick loop did not close" if "fast projection" in reason
                        else "own simulation unstable"))
    return out


def needed(figures):
    """What the loop needed to keep moving, in a sidebar line: "gusts up to 1.4× wind", "pushes up to 0.2 g".

    Parameters
    ----------
    figures : dict
        A report's ``motion`` figures (``solver_core.LoopResult.metrics["motion"]``).

    Returns
    -------
    str
        At most LINE_CHARS characters.
    """
    if figures["family"] == "wind":
        ratio = figures.get("wind_peak_ratio")
        return f"gusts up to {_times(ratio)} wind" if ratio is not None else "gusts in still air"
    return f"pushes up to {figures['drive_peak_g']:.2g} g"


def motion_kept(report):
    """The share of the cache's motion the loop keeps.

    Parameters
    ----------
    report : dict
        A loop's report (see ``verdict``).

    Returns
    -------
    float or None
        The loop's RMS speed over the cache's (``speed`` of the ``loop`` and ``source`` metrics); None when
        either is missing or the cache is still.
    """
    loop, src = report["loop"].get("speed"), report["source"].get("speed")
    return None if loop is None or not src else loop / src


def _needed_sentence(report, kept):
    """The motion line's end: what the loop needed to keep moving, or why it went calm."""
    figures = report.get("motion") or {}
    family = figures.get("family", "none")
    if family == "wind":
        ratio = figures.get("wind_peak_ratio")
        words = (f"; it needed gusts up to {ratio:.2g}× the scene's wind (Write Wind, bake.py --write-wind, adds "
                 "them to the scene)" if ratio is not None else "; it needed gusts in the scene's still air")
        again = figures.get("resimulated")
        if again:
            words += (f". Blender's cloth re-simulated in the written wind: its period {len(again['periods'])} lies "
                      f"{again['last']:.2g} motions from the loop (RMS, in units of the cache's motion), repeating to "
                      f"{again['repeats']:.2g}, at {again['speed_ratio']:.0%} of the cache's speed")
        return words
    if family == "modes":
        return (f"; it needed gentle pushes (smooth body forces) up to {figures['drive_peak_g']:.2g} g, the scene "
                "having no wind to gust")
    if kept < CALMER and figures.get("too_large"):
        return (". A damped cloth with nothing driving it can only loop by calming down, and this loop is too large "
                "for the designed gusts (they factor the whole loop at once): fewer frames or vertices keep them")
    if kept < CALMER:
        return (". A damped cloth with nothing driving it can only loop by calming down: Allow Gusts (bake.py "
                "--gusts) lets the loop design the wind that keeps it moving")
    return ""


def verdict_lines(report):
    """The verdicts as one line each.

    Parameters
    ----------
    report : dict
        A loop's report (see ``verdict``).

    Returns
    -------
    list of str
        "headline — detail" per verdict, e.g. "Seamless: yes — 5.0× smoother than cache".
    """
    return [f"{v['headline']} — {v['detail']}" for v in verdict(report)]


def details(report):
    """The full figures of a report as sentences (the panel wraps them to its width).

    Parameters
    ----------
    report : dict
        A loop's report (see ``verdict``); ``model``, ``n_vertices``, ``frames`` and ``substeps`` add the
        problem's line when given.

    Returns
    -------
    list of str
        The wrap's jumps, the residuals, the motion kept, the solver's message, the start, the iterations
        and the problem, one sentence each.
    """
    src, loop = report["source"], report["loop"]
    lines = [f"Position jump at the wrap: {src['position_jump']:.3g} m in the cache, {loop['position_jump']:.3g} m "
             f"in the loop ({src['position_jump_ratio']:.2g}× and {loop['position_jump_ratio']:.2g}× an ordinary "
             "frame)",
             f"Speed jump at the wrap: {src['velocity_jump']:.3g} m/s in the cache, {loop['velocity_jump']:.3g} m/s "
             f"in the loop ({src['velocity_jump_ratio']:.2g}× and {loop['velocity_jump_ratio']:.2g}× an ordinary "
             "frame)",
             f"Residual (force beyond physics over the physical forces; 0 is pure physics): mean "
             f"{src['residual_rel_mean']:.3g} in the cache, {loop['residual_rel_mean']:.3g} in the loop; largest "
             f"{src['residual_rel_max']:.3g} and {loop['residual_rel_max']:.3g}"]
    kept = motion_kept(report)
    if kept is not None:
        lines.append(f"Motion: the loop moves at {kept:.0%} of the cache's speed ({loop['speed']:.3g} against "
                     f"{src['speed']:.3g} m/s, RMS over vertices and frames)" + _needed_sentence(report, kept))
    if report.get("message"):
        lines.append(f"Solver: {report['message']}")
    lines.append(f"Started from: {report.get('init_used', '')}"
                 + (f" ({report['fallback_reason']})" if report.get("fallback_reason") else ""))
    lines.append(f"Iterations: {report.get('fast_projection_iterations', 0)} fast projection, "
                 f"{report.get('gauss_newton_iterations', 0)} Gauss-Newton; {report.get('seconds', 0.0):.1f} s")
    if "model" in report:
        lines.append(f"Model {report['model']}, {report['n_vertices']} vertices, {report['n_frames']} frames "
                     f"({report['frames'][0]}–{report['frames'][1]}), {report['substeps']} sub-steps per frame")
    return lines
