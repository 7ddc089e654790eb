"""The loops artists make today, for comparison: the forward simulation looped as-is and a crossfade; and the
clip closed at its wrap, where a loop that keeps the clip's motion starts when the clip nearly repeats."""
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


def _wrap_gap(clip):
    """(position gap, velocity gap) at the clip's wrap: frame 0 against the frame after the last (extrapolated
    from the last two), and the first step against the last."""
    return clip[0] - (2.0 * clip[-1] - clip[-2]), (clip[1] - clip[0]) - (clip[-1] - clip[-2])


def closed_clip(clip):
    """The clip closed at its wrap: the clip plus a smooth correction of zero mean that spreads its position and
    velocity gaps at the wrap over the whole loop (a Bernoulli-polynomial ramp), so the loop follows the clip
    frame by frame when the clip nearly repeats.

    Parameters
    ----------
    clip : array_like, shape (L, n, 3)
        The simulated clip.

    Returns
    -------
    ndarray, shape (L, n, 3)
        A loop whose positions and velocities close at the wrap.
    """
    clip = np.asarray(clip, dtype=float)
    L = clip.shape[0]
    if L < 4:
        raise ValueError(f"closing a clip needs at least 4 frames, got {L}")
    dp, dv = _wrap_gap(clip)
    s = (np.arange(L) / L)[:, None, None]
    return clip + dp * (s - 0.5) + L * dv * (s * s - s + 1.0 / 6.0) / 2.0


def wrap_gap(clip):
    """The clip's position gap at its wrap (``closed_clip``) as a fraction of its motion (RMS distance from its
    mean shape): near 0 when the clip nearly repeats."""
    clip = np.asarray(clip, dtype=float)
    dp, _ = _wrap_gap(clip)
    motion = np.sqrt(np.mean(np.sum((clip - clip.mean(axis=0)) ** 2, axis=-1)))
    return float(np.sqrt(np.mean(np.sum(dp * dp, axis=-1))) / max(motion, 1e-300))
