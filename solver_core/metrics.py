"""How seamless and how physical a looped trajectory is, measured the same way for any loop."""
import numpy as np

from .residual import force_steps, loss, residual_steps


def _rms(x):
    """RMS over vertices of vectors x (..., n, 3)."""
    return np.sqrt(np.mean(np.sum(x * x, axis=-1), axis=-1))


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


def loop_metrics(prob, q):
    """Metrics of a loop q on the solver grid (n_steps, n, 3):

    position_jump, velocity_jump (at the wrap, absolute) and *_ratio (wrap / median over all
    boundaries: ~1 for a seamless loop), measured on the frames the loop plays (``prob.frames_of``): with
    sub-steps, the boundaries inside a frame are never seen, and a clip interpolated to sub-steps has none; residual_rel_mean / residual_rel_max (per step |u_j| over the
    applied force |F(q_j)|, floored at 1e-3 of its maximum over the loop); loss (E[q], no penalties)."""
    q = prob.check_trajectory(q)
    pos, vel = seam_statistics(prob.frames_of(q), prob.dt)
    u = residual_steps(prob, q)
    free = prob.free_vertices()
    k, t = force_steps(prob)
    f = prob.model.forces(q[k], t)
    applied = np.linalg.norm(f[:, free].reshape(prob.n_steps, -1), axis=1)
    un = np.linalg.norm(u[:, free].reshape(prob.n_steps, -1), axis=1)
    rel = un / np.maximum(applied, 1e-3 * max(applied.max(), 1e-300))
    return dict(
        position_jump=float(pos[0]), velocity_jump=float(vel[0]),
        position_jump_ratio=float(pos[0] / max(np.median(pos), 1e-300)),
        velocity_jump_ratio=float(vel[0] / max(np.median(vel), 1e-300)),
        residual_rel_mean=float(rel.mean()), residual_rel_max=float(rel.max()),
        loss=loss(prob, q, with_penalty=False),
    )
