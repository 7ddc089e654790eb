"""A loop made from a simulated clip (a Blender cache, say): ``make_loop`` that can start from the clip
itself, falls back to it when the solver's own forward simulation fails, and refuses a diverged loop."""
import numpy as np

from .baselines import crossfade_loop
from .forward import SimulationFailed, simulate
from .loop import INITS, MAX_ITERS, SEAMLESS_RATIO, TOL, make_loop, shifted_callback
from .metrics import wrap_ratio

# "cache": start from a crossfade of the clip itself; "cache_or_forward": Gauss–Newton from it and from the
# solver's own simulation of the clip's first two frames, keeping the better loop (``better``). Measured on
# the flag samples (frame grid, soft first frames, 70 vertices, frames 49-72): in gusts that repeat every
# 24 frames, from the cache loss 40.5, residual 0.17, the flag moving 4.2 cm (a local minimum: two small
# bumps per gust), from the simulation 0.059, residual 0.0027, 19.6 cm, in step with the cache; in a steady
# wind, from the cache 3.97, wrap 1.19x, from the simulation 2.81 but a visible wrap (1.69x).
CLIP_INITS = (*INITS, "cache", "cache_or_forward")
DIVERGED_EXTENT = 10.0  # a loop reaching this many clip sizes away from the clip has diverged


class LoopFailed(RuntimeError):
    """The solver failed or diverged; the message says how and what to try."""


def check_init(init):
    """ValueError unless ``init`` is one of CLIP_INITS."""
    if init not in CLIP_INITS:
        raise ValueError(f"unknown init {init!r}; choose one of {', '.join(CLIP_INITS)}")


def runs(init):
    """How many Gauss–Newton runs ``loop_clip`` makes for ``init`` (each up to its ``max_iters``)."""
    return 2 if init == "cache_or_forward" else 1


def better(a, b):
    """The better of two loops: the seamless one, else (both or neither) the one of lower loss."""
    key = [(wrap_ratio(r.metrics["loop"]) > SEAMLESS_RATIO, r.final_loss) for r in (a, b)]
    return a if key[0] <= key[1] else b


def _make_loop(prob, clip, init, **options):
    if init != "cache_or_forward":
        return make_loop(prob, init=crossfade_loop(clip) if init == "cache" else init, **options)
    first = _make_loop(prob, clip, "cache", **options)
    first.init_used = "cache"
    if first.cancelled:
        return first
    try:
        guess = simulate(prob)
    except SimulationFailed:
        return first
    callback = shifted_callback(options.pop("callback"), first.gauss_newton_iterations)
    second = make_loop(prob, init=guess, callback=callback, **options)
    second.init_used = "forward"
    if second.cancelled:
        return second
    kept = better(first, second)
    other = second if kept is first else first
    kept.message += (f"; started from the cache and from the solver's own simulation, kept the "
                     f"{'cache' if kept is first else 'simulation'}'s loop (loss {kept.final_loss:.3g}, the other "
                     f"{other.final_loss:.3g}, wrap {wrap_ratio(other.metrics['loop']):.3g}x)")
    kept.seconds = first.seconds + second.seconds
    return kept


def loop_clip(prob, clip, init="fast_projection", max_iters=MAX_ITERS, tol=TOL, callback=None, backend="auto"):
    """``make_loop`` of ``prob`` taken from the simulated ``clip`` (n_frames, n, 3); LoopFailed when the
    solver fails or diverges.

    ``init``: one of CLIP_INITS; "cache" starts from a crossfade of the clip, and is also the fallback
    when the solver's own forward simulation blows up (the reason is kept in ``fallback_reason``);
    "cache_or_forward" runs from both, ``runs(init)`` times ``max_iters`` iterations at most, and keeps the
    ``better`` loop (``init_used`` says which; ``seconds`` counts both).
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
