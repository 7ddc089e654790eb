"""How seamless and how physical a looped trajectory is, measured the same way for any loop."""
import numpy as np

from .options import SEAMLESS_RATIO   # noqa: F401 (re-exported: its callers read it here)
from .physics.residual import force_steps, loss, residual_steps


def _rms(x):
    """RMS over vertices of vectors x (..., n, 3)."""
    return np.sqrt(np.mean(np.sum(x * x, axis=-1), axis=-1))


def rms_speed(q, dt):
    """The RMS speed (m/s) over the vertices and the steps between the frames q (L, n, 3), the wrap left out
    (a cache played as a loop jumps there): how much they move."""
    return float(np.sqrt(np.mean(np.sum(np.diff(np.asarray(q, dtype=float), axis=0) ** 2, axis=-1)))) / dt


def seam_statistics(q, dt):
    """Per-boundary position and velocity jumps of a loop q (L, n, 3) played cyclically.

    At the boundary entering frame k: position jump = RMS |(q_k - q_{k-1}) - mean of the neighbouring
    steps| (how far the step departs from its neighbours), velocity jump = RMS |v_{k} - v_{k-2}| with
    v_j = (q_{j+1} - q_j) / dt (the velocity change across the step). Index 0 is the wrap.
    """
    q = np.asarray(q, dtype=float)
    step = q - np.roll(q, 1, axis=0)                        # step[k] = q_k - q_{k-1}
    neighbours = 0.5 * (np.roll(step, 1, axis=0) + np.roll(step, -1, axis=0))
    position = _rms(step - neighbours)
    velocity = _rms(np.roll(step, -1, axis=0) - np.roll(step, 1, axis=0)) / dt
    return position, velocity


def forces_at_play(model, q, t):
    """Per row and vertex (B, n), the sum of the magnitudes of the model's force laws at positions q (B, n, 3).

    Unlike the net force, it does not vanish where the laws balance (a cloth hanging at rest: springs
    against gravity); a model without separate laws counts its total force."""
    terms = getattr(model, "terms", None) or [model]
    return sum(np.linalg.norm(term.forces(q, t), axis=-1) for term in terms)


def relative_residual(prob, q, u=None):
    """How far each step of a loop is from physics, relative to the forces acting.

    Per solver step, |u_j| over the forces at play (``forces_at_play`` at the positions row j's forces see) on
    the free vertices, the denominator floored at 1e-3 of its maximum over the loop.

    Parameters
    ----------
    prob : LoopProblem
        The problem.
    q : ndarray, shape (n_steps, n, 3)
        A loop on the solver grid.
    u : ndarray, optional
        q's residual (``residual_steps``) when already computed.

    Returns
    -------
    ndarray, shape (n_steps,)
        The force beyond physics as a fraction of the forces acting (0 is pure physics).
    """
    q = prob.check_trajectory(q)
    free = prob.free_vertices()
    u = residual_steps(prob, q) if u is None else u
    k, t = force_steps(prob)
    at_play = np.linalg.norm(forces_at_play(prob.model, q[k], t)[:, free], axis=1)
    un = np.linalg.norm(u[:, free].reshape(prob.n_steps, -1), axis=1)
    return un / np.maximum(at_play, 1e-3 * max(at_play.max(), 1e-300))


def _ratio(jumps):
    """The wrap's jump (the first boundary's) over the median boundary's."""
    return float(jumps[0] / max(np.median(jumps), 1e-300))


def jump_ratios(frames, dt):
    """(position, velocity) jump at the wrap of ``frames`` over the median frame boundary's: about 1 when the
    wrap cannot be seen."""
    return tuple(_ratio(jumps) for jumps in seam_statistics(frames, dt))


def wrap_ratio(metrics):
    """The larger of a ``loop_metrics``' position and velocity jump ratios: how much the wrap stands out."""
    return max(metrics["velocity_jump_ratio"], metrics["position_jump_ratio"])


def unseen(metrics):
    """True when the wrap of a ``loop_metrics`` cannot be seen: its jump ratios at most SEAMLESS_RATIO."""
    return wrap_ratio(metrics) <= SEAMLESS_RATIO


def seamless(prob, q):
    """True when the loop q (solver grid) cannot be seen to wrap: its jump ratios at most SEAMLESS_RATIO."""
    return max(jump_ratios(prob.frames_of(q), prob.dt)) <= SEAMLESS_RATIO


def within_tolerance(prob, q, tol, u=None, residual=None):
    """True when the loop q (solver grid) is ``seamless`` and its mean relative residual (``residual`` if
    known, else ``relative_residual``'s mean, ``u`` its residual if known) is at most tol."""
    if residual is None:
        residual = float(relative_residual(prob, q, u).mean())
    return residual <= tol and seamless(prob, q)


def loop_metrics(prob, q, drive=None):
    """How seamless and how physical a loop is, measured the same way for any loop.

    The jumps are measured on the frames the loop plays (``prob.frames_of``): with sub-steps, the boundaries
    inside a frame are never seen, and a clip interpolated to sub-steps has none. The residual is evaluated
    once for the relative residuals and the loss.

    Parameters
    ----------
    prob : LoopProblem
        The problem.
    q : ndarray, shape (n_steps, n, 3)
        A loop on the solver grid.
    drive : ndarray, shape (n_steps, n, 3), optional
        The driving force the loop was solved with (``motion.keep_motion``): the residuals and the loss are
        then of what it leaves unexplained.

    Returns
    -------
    dict
        position_jump, velocity_jump (at the wrap, absolute); position_jump_ratio, velocity_jump_ratio (wrap
        over the median of all boundaries: ~1 for a seamless loop, at most ``SEAMLESS_RATIO`` unseen);
        residual_rel_mean, residual_rel_max (``relative_residual``); loss (E[q], without penalties); speed
        (``rms_speed`` of the frames played, m/s).
    """
    q = prob.check_trajectory(q)
    frames = prob.frames_of(q)
    pos, vel = seam_statistics(frames, prob.dt)
    u = residual_steps(prob, q)
    if drive is not None:
        u = u - drive
    rel = relative_residual(prob, q, u)
    return dict(
        position_jump=float(pos[0]), velocity_jump=float(vel[0]),
        position_jump_ratio=_ratio(pos), velocity_jump_ratio=_ratio(vel),
        residual_rel_mean=float(rel.mean()), residual_rel_max=float(rel.max()),
        loss=loss(prob, q, with_penalty=False, u=u), speed=rms_speed(frames, prob.dt),
    )


def tracked_vertices(q, count=3):
    """Indices of the ``count`` vertices that move the most over a trajectory.

    Parameters
    ----------
    q : array_like, shape (L, n, 3)
        Positions per frame.
    count : int
        How many vertices to return.

    Returns
    -------
    numpy.ndarray of int
        Vertex indices, the largest spread (per-vertex standard deviation over the frames) first.
    """
    spread = np.linalg.norm(np.asarray(q).std(axis=0), axis=1)
    return np.argsort(spread)[::-1][:count]
