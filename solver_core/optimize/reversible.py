"""The initial guess of time-reversible dynamics: the loop's two ends simulated from the wrap, both ways.

A loop passes through its initial conditions (r0, r1) at the wrap, so both ends of it are known
physically: the forward simulation from (r0, r1) gives its first steps, and the simulation backward in
time from the same state, placed at the end of the loop, gives its last. Under the symplectic scheme
without drag or velocity terms the step is reversible (u_j is linear in q_{j-1} with coefficient M/h^2,
as in q_{j+1}), so the backward simulation is as exact and as cheap as the forward one. Each half covers
half the period: on an unstable motion (N bodies near a ring) a deviation grows over half the time
instead of the whole, and Gauss–Newton starts near the loop that the forward clip's far end had lost.
"""
import numpy as np

from ..physics import scheme
from ..physics.forward import SimulationFailed, simulate
from ..options import DEFAULTS


def reversible(prob):
    """True when the scheme's step can be run backward in time exactly: symplectic, no drag, no velocity terms."""
    model = prob.model
    return prob.scheme == "symplectic" and not model.velocity_terms and not np.any(model.drag)


def simulate_backward(prob, first):
    """States q_first..q_{n+1} (n = n_steps) of the backward simulation from q_n = r0, q_{n+1} = r1 (the wrap
    as the loop's end), pins on their paths; raises SimulationFailed when the state blows up."""
    n, h, mass = prob.n_steps, prob.h, prob.model.mass[:, None]
    q = np.empty((n + 2 - first, prob.n_vertices, 3))      # q[k] is step first + k
    q[-2], q[-1] = prob.r0, prob.r1_step
    pins = prob.pin_path(np.arange(first, n + 2))
    q[-2:, prob.pins] = pins[-2:]
    for k in range(q.shape[0] - 2, 0, -1):               # step j = first + k gives step j - 1
        j = first + k
        guess = 2 * q[k] - q[k + 1]
        rows = scheme.step_rows(prob, guess[None], q[k][None], q[k + 1][None], np.array([j]))[0]
        q[k - 1] = guess - h ** 2 * rows / mass
        q[k - 1, prob.pins] = pins[k - 1]
        if not np.all(np.isfinite(q[k - 1])):
            raise SimulationFailed(f"the backward simulation blew up at step {j - 1}")
    return q


def two_sided_guess(prob, blend=DEFAULTS.start.blend):
    """The loop's first half simulated forward from (r0, r1), its second backward from the wrap, blended.

    Parameters
    ----------
    prob : LoopProblem
        A problem of reversible dynamics (``reversible(prob)``).
    blend : float
        Half-width of the smooth step between the halves around the loop's middle, a fraction of the
        loop's steps (``StartOptions.blend``; docs/design/tuning_starts.md: blend).

    Returns
    -------
    ndarray
        The guess (n_steps, n, 3), constraints applied.

    Raises
    ------
    ValueError
        When the dynamics are not reversible.
    SimulationFailed
        When a half blows up.
    """
    if not reversible(prob):
        raise ValueError("the two-sided guess needs reversible dynamics (symplectic, no drag or velocity terms)")
    n = prob.n_steps
    half, width = n // 2, max(1, int(round(blend * n)))
    lo, hi = max(half - width, 1), min(half + width, n - 1)
    forward = simulate(prob, hi + 1)                      # steps 0..hi
    backward = simulate_backward(prob, lo)[:n - lo]       # steps lo..n-1
    j = np.arange(lo, hi + 1)
    t = (j - lo) / (hi - lo)
    s = (t * t * (3 - 2 * t))[:, None, None]
    q = np.concatenate([forward[:lo], (1 - s) * forward[lo:] + s * backward[:hi + 1 - lo], backward[hi + 1 - lo:]])
    return prob.apply_constraints(q)
