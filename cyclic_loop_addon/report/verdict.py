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
STARTS = {"cache": "the cache", "crossfade": "a crossfade", "forward": "a simulation",
          "closed_forward": "a closed simulation", "fast_projection": "a fast projection",
          "reversible": "a two-sided simulation", "given": "the given frames"}
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
        short = figures.get("force_needed") or 0.0      # the clip's force over the bounded gusts'
        if driven:
            detail = f"{kept:.0%}: wind {_times(short)} too weak" if short > 1 else f"{kept:.0%} of the cache's speed"
        else:
            detail = f"{kept:.0%} speed: loop too big" if figures.get("too_large") else f"{kept:.0%} speed: Allow Gusts"
        out.append(dict(kind="warn", headline="Motion: calmer than cache", detail=detail))
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


def _motion_lines(report, kept):
    """What the loop needed to keep moving, or why it went calm: a line or two after the motion's."""
    figures = report.get("motion") or {}
    family = figures.get("family", "none")
    if family == "wind":
        ratio = figures.get("wind_peak_ratio")
        lines = [f"Gusts: up to {ratio:.2g}× the scene's wind; Write Wind adds them" if ratio is not None
                 else "Gusts: designed in the scene's still air"]
        short = figures.get("force_needed") or 0.0
        if kept < CALMER and short > 1:
            lines.append(f"Calmer: wind too weak: the cache needs {_times(short)} the force of gusts "
                         f"≤ {figures['wind_bound']:.2g}× wind")
        again = figures.get("resimulated")
        if again:
            lines.append(f"Blender's re-run: {again['last']:.2g} motions off the loop in period "
                         f"{len(again['periods'])}, {again['speed_ratio']:.0%} speed")
        return lines
    if family == "modes":
        return [f"Pushes: gentle body forces up to {figures['drive_peak_g']:.2g} g (the scene has no wind)"]
    if kept < CALMER and figures.get("too_large"):
        return ["Calmer: too large for gusts; fewer frames or vertices keep them"]
    if kept < CALMER:
        return ["Calmer: nothing drives it; Allow Gusts (--gusts) keeps it moving"]
    return []


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
    """The figures of a report in short plain lines (the panel wraps them to its width).

    Parameters
    ----------
    report : dict
        A loop's report (see ``verdict``); ``model``, ``n_vertices``, ``frames`` and ``substeps`` add the
        problem's line when given.

    Returns
    -------
    list of str
        The seam, the physics, the motion kept and what it needed, the solver's message when the loop is
        not a converged one, the run and the mesh, one short line each.
    """
    src, loop = report["source"], report["loop"]
    lines = [f"Seam: {_times(loop['position_jump_ratio'])} an ordinary frame in position, "
             f"{_times(loop['velocity_jump_ratio'])} in speed (cache {_times(src['position_jump_ratio'])}, "
             f"{_times(src['velocity_jump_ratio'])})",
             f"Physics: {loop['residual_rel_mean']:.0%} of the force unexplained (cache "
             f"{src['residual_rel_mean']:.0%}; 0% is pure physics)"]
    kept = motion_kept(report)
    if kept is not None:
        lines.append(f"Motion: {kept:.0%} of the cache's speed ({loop['speed']:.2g} vs {src['speed']:.2g} m/s)")
        lines += _motion_lines(report, kept)
    if report.get("message") and report.get("status") not in (CONVERGED, CONVERGED_WITH_SEAM):
        lines.append(f"Solver: {report['message']}")
    start = report.get("init_used", "")
    steps = report.get("gauss_newton_iterations", 0) + report.get("fast_projection_iterations", 0)
    lines.append(f"Run: {steps} steps in {report.get('seconds', 0.0):.0f} s"
                 + (f", from {STARTS.get(start, start)}" if start else "")
                 + (f" ({report['fallback_reason']})" if report.get("fallback_reason") else ""))
    if "model" in report:
        lines.append(f"Mesh: {report['n_vertices']} vertices, frames {report['frames'][0]}–{report['frames'][1]}, "
                     f"{report['substeps']} sub-steps ({report['model']})")
    return lines
