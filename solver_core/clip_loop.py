"""A loop made from a simulated clip (a Blender cache, say): ``make_loop`` that can start from the clip
itself, falls back to it when the solver's own forward simulation fails, and refuses a diverged loop."""
import numpy as np

from .baselines import crossfade_loop
from .forward import SimulationFailed
from .loop import INITS, MAX_ITERS, TOL, make_loop

CLIP_INITS = (*INITS, "cache")   # "cache": start from a crossfade of the clip itself
DIVERGED_EXTENT = 10.0  # a loop reaching this many clip sizes away from the clip has diverged


class LoopFailed(RuntimeError):
    """The solver failed or diverged; the message says how and what to try."""


def check_init(init):
    """ValueError unless ``init`` is one of CLIP_INITS."""
    if init not in CLIP_INITS:
        raise ValueError(f"unknown init {init!r}; choose one of {', '.join(CLIP_INITS)}")


def _make_loop(prob, clip, init, **options):
    return make_loop(prob, init=crossfade_loop(clip) if init == "cache" else init, **options)


def loop_clip(prob, clip, init="fast_projection", max_iters=MAX_ITERS, tol=TOL, callback=None, backend="auto"):
    """``make_loop`` of ``prob`` taken from the simulated ``clip`` (n_frames, n, 3); LoopFailed when the
    solver fails or diverges.

    ``init``: one of CLIP_INITS; "cache" starts from a crossfade of the clip, and is also the fallback
    when the solver's own forward simulation blows up (the reason is kept in ``fallback_reason``).
    ``callback`` as in ``make_loop``; a cancelled result is returned as it is (write nothing).
    """
    check_init(init)
    options = dict(max_iters=int(max_iters), tol=float(tol), callback=callback, backend=backend)
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
