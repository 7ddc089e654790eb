"""The numbers of a loop's report: the report of one loop (one dict, built here alone, for the panel,
bake.py and the command line) and its text, the progress line of an iteration, the versions a solve
depends on, and the side-by-side metrics of a loop and its baselines printed by the demos and benchmarks.
The words an artist reads (verdicts, the seam picture) are the add-on's, built from this dict."""
import re
import sys

import numpy as np
import scipy

from .baselines import crossfade_loop
from .physics.forward import simulate
from .metrics import loop_metrics

_PROGRESS = re.compile(r"^\[(\w+)\] iteration +(-?\d+)  loss (\S+)(?:  residual (\S+))?$")
_STAGE = re.compile(r"^\[(\w+)\] stage((?:  \w+ \S+)*)$")


def loop_report(prob, res, clip=None, **about):
    """The report of a loop: its figures, the run's facts and where the problem came from.

    Parameters
    ----------
    prob : LoopProblem
        The problem ``res`` solved.
    res : LoopResult
        The solve's result.
    clip : array_like, optional
        The simulated clip (frames) the loop was made from; its figures, played as a loop, are ``source``.
    **about
        Where the problem came from (model, objects, frames, notes, ...), stored as given.

    Returns
    -------
    dict
        ``loop`` (and ``source``) metrics (``loop_metrics``: seam jumps, residuals, speed), the iterations,
        ``seconds``, ``init_used``, ``fallback_reason``, ``stop_reason``, ``status``, ``success``,
        ``message``, the initial and final loss, ``n_frames``, ``substeps``, ``n_vertices``, ``motion`` (the
        speed kept and the driving force's size, ``metrics["motion"]``; None for a crossfade), and ``about``.
    """
    rep = dict(loop=res.metrics["loop"],
               fast_projection_iterations=res.fast_projection_iterations,
               gauss_newton_iterations=res.gauss_newton_iterations,
               seconds=res.seconds, init_used=res.init_used, fallback_reason=res.fallback_reason,
               stop_reason=res.stop_reason, status=res.status, success=res.success, message=res.message,
               initial_loss=res.initial_loss, final_loss=res.final_loss,
               n_frames=prob.n_frames, substeps=prob.substeps, n_vertices=prob.n_vertices,
               motion=res.metrics.get("motion"))
    if clip is not None:
        rep["source"] = loop_metrics(prob, prob.steps_of(clip))
    rep.update(about)
    return rep


def format_report(rep):
    """The report as text lines for a console.

    Parameters
    ----------
    rep : dict
        A ``loop_report`` with ``source``, ``model``, ``frames`` and ``notes``.

    Returns
    -------
    list of str
        The solver's message, a table of the cache's and the loop's figures, the iterations, the start and
        the problem, and one line per note.
    """
    rows = (("position jump", "position_jump"), ("velocity jump", "velocity_jump"),
            ("residual (mean)", "residual_rel_mean"), ("residual (max)", "residual_rel_max"), ("speed (RMS)", "speed"))
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


def progress_line(info):
    """The line the command line prints after an iteration, or at a stage before the iterations.

    Parameters
    ----------
    info : dict
        A solver callback's ``phase``, ``iteration``, ``loss`` and, where Gauss–Newton computes it,
        ``residual`` (the mean relative residual); or a stage's dict (``stage`` True, see ``loop_clip``):
        ``phase`` and its fields (numbers or words without spaces).

    Returns
    -------
    str
        "[phase] iteration N  loss L[  residual R]", the floats exact (``repr``); a stage:
        "[phase] stage  key value  key value".
    """
    if info.get("stage"):
        fields = "".join(f"  {k} {v!r}" if isinstance(v, float) else f"  {k} {v}"
                         for k, v in info.items() if k not in ("phase", "stage"))
        return f"[{info['phase']}] stage{fields}"
    line = f"[{info['phase']}] iteration {int(info['iteration']):4d}  loss {float(info['loss'])!r}"
    return line + (f"  residual {float(info['residual'])!r}" if "residual" in info else "")


def _field(text):
    """A stage field's value: an int, a float or a word."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_progress(line):
    """Read a ``progress_line`` back.

    Parameters
    ----------
    line : str
        A line of a solve's output.

    Returns
    -------
    dict or None
        ``phase``, ``iteration``, ``loss`` and ``residual`` when given; a stage's dict (``stage`` True and
        its fields); None for another line.
    """
    line = line.rstrip("\n")
    found = _PROGRESS.match(line)
    if found is None:
        found = _STAGE.match(line)
        if found is None:
            return None
        words = found[2].split()
        return dict(phase=found[1], stage=True, **{k: _field(v) for k, v in zip(words[::2], words[1::2])})
    info = dict(phase=found[1], iteration=int(found[2]), loss=float(found[3]))
    return info if found[4] is None else dict(info, residual=float(found[4]))

COLUMNS = ("loss", "position_jump", "velocity_jump", "velocity_jump_ratio", "residual_rel_mean", "residual_rel_max")


def compare(prob, res):
    """{name: metrics} for the forward simulation, the crossfade, the initial guess and the loop."""
    clip = simulate(prob)
    rows = {"forward": loop_metrics(prob, clip), "crossfade": loop_metrics(prob, crossfade_loop(clip))}
    rows[f"init ({res.init_used})"] = loop_metrics(prob, res.initial_guess)
    rows["loop"] = loop_metrics(prob, res.q_steps)
    return rows


def format_table(rows, columns=COLUMNS):
    """A plain-text table of metrics rows."""
    width = max(len(name) for name in rows) + 2
    lines = ["".ljust(width) + "".join(c.rjust(20) for c in columns)]
    for name, m in rows.items():
        lines.append(name.ljust(width) + "".join(f"{m[c]:20.4g}" for c in columns))
    return "\n".join(lines)


def versions():
    """What a solve in another Python must share with this one.

    Returns
    -------
    dict
        ``python`` ([major, minor]), ``numpy`` and ``scipy`` version strings.
    """
    return dict(python=list(sys.version_info[:2]), numpy=np.__version__, scipy=scipy.__version__)
