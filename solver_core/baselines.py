"""The loops artists make today, for comparison: the forward simulation looped as-is, and a crossfade."""
import numpy as np

from .physics.forward import simulate


def forward_loop(prob):
    """The forward simulation from r0, r1 over one period, played as a loop (it jumps at the wrap)."""
    return simulate(prob)


def crossfade_loop(clip):
    """Crossfade loop of a clip (L, n, 3): the clip and a copy offset by half its length, blended with
    weight w_j = sin^2(pi j / L) on the clip, which is zero at the clip's seam and one at the copy's
    (the method of Houdini's Labs Make Loop)."""
    clip = np.asarray(clip, dtype=float)
    L = clip.shape[0]
    if L < 4:
        raise ValueError(f"a crossfade needs at least 4 frames, got {L}")
    w = np.sin(np.pi * np.arange(L) / L)[:, None, None] ** 2
    return w * clip + (1.0 - w) * np.roll(clip, -(L // 2), axis=0)
