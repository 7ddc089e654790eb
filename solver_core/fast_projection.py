"""Initial guess by fast projection onto the cyclic constraint (paper Algorithm 2, poster form).

The paper projects the controls u onto the zero set of the linearized *scalar* mismatch G = |r|^2 / 2
(eq. 28-30): du = -G / |grad G|^2 grad G. In the linear model that step gives r+ = r - G/|J^T r|^2 J J^T r,
which removes at most half of r (G falls at most to G / 4) along a singular direction, and overshoots
the stiff directions by sigma_max^2 |r|^2 / (2 sum sigma_i^2 r_i^2) when r lies mostly in the hard-to-
control ones: the stall and the divergence at full stiffness. Here (the poster's form) the projection is
onto the linearized *vector* constraint r(u) + J du = 0 in the M^-1 norm of the control,

    du = -M J^T (J M J^T)^-1 r,

a minimum-norm Gauss–Newton step (Newton–Krylov shooting) solved by LSQR on J M^1/2, whose products
are one tangent-linear and one adjoint simulation (``forward.Linearization``), truncated after a few
dozen iterations (which also regularizes the directions the controls barely reach), Levenberg–Marquardt
damped when the linear model overpromises, and backtracked on G. r holds the position and the velocity
mismatch at the wrap, each in units of the forward clip's median per-step change (so they weigh as the
wrap's jump ratios do; the paper's G weighs the velocity mismatch by h only).
"""
import time

import numpy as np
import scipy.sparse.linalg as spla

from .forward import SimulationFailed, simulate
from .result import CANCELLED, CONVERGED, ITERATION_CAP, NO_PROGRESS, Result, halts


class FastProjectionDiverged(RuntimeError):
    """Fast projection failed (Remark 2): the control force it needs is too large."""


def _rms(x):
    """RMS over vertices of vectors x (..., k, 3)."""
    return np.sqrt(np.mean(np.sum(x * x, axis=-1), axis=-1))


class _Closure:
    """The closure residual r(q) = (q_L - r0, (q_{L+1} - q_L) - (r1 - r0)) / scales on the free vertices."""

    def __init__(self, prob, clip):
        self.prob = prob
        self.L = prob.n_steps
        free = np.ones(prob.n_vertices, dtype=bool)
        free[prob.pins] = False
        self.free = free
        step = np.diff(clip[:self.L + 1, free], axis=0)
        self.position_scale = max(float(np.median(_rms(step))), 1e-300)
        self.velocity_scale = max(float(np.median(_rms(np.diff(step, axis=0)))), 1e-300)

    def residual(self, q):
        """r (2, k, 3) of a trajectory q (L + 2 states)."""
        p = self.prob
        pos = q[self.L, self.free] - p.r0[self.free]
        vel = (q[self.L + 1, self.free] - q[self.L, self.free]) - (p.r1_step[self.free] - p.r0[self.free])
        return np.stack([pos / self.position_scale, vel / self.velocity_scale])

    def merit(self, r):
        """G = |r|^2 / 2 per free vertex: sqrt(2 G) is the RMS mismatch in units of the clip's median change."""
        return 0.5 * float(np.sum(r * r)) / r.shape[1]

    def jumps(self, q):
        """(RMS position mismatch in m, RMS velocity mismatch in m/s) at the wrap."""
        rms = _rms(self.residual(q))
        return float(rms[0] * self.position_scale), float(rms[1] * self.velocity_scale / self.prob.h)

    def tangent(self, dq):
        """J dq: the residual's variation (2, k, 3) for a state variation dq (L + 2, n, 3)."""
        dp, dn = dq[self.L, self.free], dq[self.L + 1, self.free]
        return np.stack([dp / self.position_scale, (dn - dp) / self.velocity_scale])

    def sensitivity(self, y, shape):
        """J^T y on the states: (L + 2, n, 3) zeros but at L and L + 1."""
        out = np.zeros(shape)
        out[self.L, self.free] = y[0] / self.position_scale - y[1] / self.velocity_scale
        out[self.L + 1, self.free] = y[1] / self.velocity_scale
        return out


def _projection_step(closure, lin, r, mass, iters, tol, damp):
    """du = -M J^T (J M J^T + damp^2)^-1 r by LSQR on J M^1/2 (so |du|_{M^-1} is the iterate's norm; the
    linear model's closure residual |r + J du| falls monotonically with the iterations; ``damp``: the
    Levenberg–Marquardt damping). Returns (du, LSQR iterations, |r + J du| / |r| in the linear model,
    LSQR's estimate of |J M^1/2|)."""
    shape = (closure.L + 2, mass.size, 3)
    root = np.sqrt(mass)[None, :, None]
    controls_shape = (closure.L + 1, mass.size, 3)

    def matvec(x):
        dc = root * x.reshape(controls_shape)
        dc[0] = 0.0                                   # row 0 is not an equation
        return closure.tangent(lin.tangent(dc)).ravel()

    def rmatvec(y):
        g = lin.adjoint(closure.sensitivity(y.reshape(r.shape), shape))
        g[0] = 0.0
        return (root * g).ravel()

    op = spla.LinearOperator((r.size, int(np.prod(controls_shape))), matvec=matvec, rmatvec=rmatvec)
    x, _, n_iter, r1norm, _, anorm = spla.lsqr(op, r.ravel(), damp=damp, atol=0.0, btol=tol, conlim=0.0,
                                               iter_lim=iters)[:6]
    return -root * x.reshape(controls_shape), int(n_iter), float(r1norm / np.linalg.norm(r)), float(anorm)


def fast_projection(prob, max_iters=30, rtol=1e-6, callback=None, accept=0.1, stop_fraction=0.0,
                    krylov_iters=40, krylov_tol=1e-3, max_halvings=6, stall_window=5, keep_iterates=False):
    """Control forces u that make the forward simulation close the loop, by fast projection.

    From u = 0, repeat the M^-1-norm projection onto the linearized closure constraint (module
    docstring), backtracking the step on G = |r|^2 / 2 (position and velocity mismatch at the wrap
    in units of the clip's median per-step change), until G <= ``rtol`` G(0), or G <= ``stop_fraction``
    G(0) (stop early: a loose closure can start Gauss–Newton better than a tight one), or G has not
    halved over ``stall_window`` iterations, or ``max_iters``. Returns a ``Result`` for the last (and
    best: steps only lower G) iterate: ``x`` the loop (n_steps, n, 3) simulated with its controls,
    status, success (G fell to ``rtol`` or ``stop_fraction`` of G(0)), nit, history (loss: G), and
    G (per iterate), seconds, controls, converged, cancelled, final_G, message,
    position_jump / velocity_jump (RMS mismatch at the wrap per iterate, m and m/s), control_norm
    (|u|_{M^-1} per iterate), krylov_iterations (LSQR), step (backtracking factor) and damping (after the
    step) per iteration, and with
    ``keep_iterates`` the trajectories of all iterates (``iterates``).

    Raises FastProjectionDiverged (Remark 2), saying why, when the forward simulation fails, or when it
    stops short of both rules (no step along the projection reduces G, a stall, or the iteration cap) with
    the loop still open: RMS mismatch sqrt(2 G) above ``accept`` of the clip's median per-step change.
    A ``callback(info)`` that ``halts`` cancels and returns the last iterate.
    """
    L = prob.n_steps
    mass = prob.model.mass
    controls = np.zeros((L + 1, prob.n_vertices, 3))
    t0 = time.perf_counter()
    try:
        q, lin = simulate(prob, L + 2, controls, keep_factors=True)
    except SimulationFailed as exc:
        raise FastProjectionDiverged(f"fast projection could not start: the forward simulation failed: {exc}") from exc
    closure = _Closure(prob, q)
    r = closure.residual(q)
    G = closure.merit(r)
    info = dict(G=[G], position_jump=[], velocity_jump=[], control_norm=[0.0], krylov_iterations=[], step=[],
                damping=[], iterates=[q[:L]] if keep_iterates else None, cancelled=False)

    def record(q):
        pj, vj = closure.jumps(q)
        info["position_jump"].append(pj)
        info["velocity_jump"].append(vj)

    record(q)
    g0, damp, it, message = G, 0.0, 0, ""
    while True:
        message = _stop_reason(info["G"], rtol, stop_fraction, max_iters, stall_window)
        if message:
            break
        it += 1
        while True:
            du, n_krylov, lin_res, anorm = _projection_step(closure, lin, r, mass, krylov_iters, krylov_tol, damp)
            predicted = G * (1 - lin_res ** 2)          # the linear model's decrease of G for the full step
            step, trial = _backtrack(prob, closure, controls, du, G, predicted, max_halvings)
            if trial is not None or damp >= anorm:
                break
            damp = max(10 * damp, 1e-3 * anorm)        # no decrease along this direction: damp it more
        if trial is None:
            message = (f"no step along the projection reduces G at iteration {it} (G {G / g0:.2e} of G(0), "
                       f"linear-model residual {lin_res:.1e} after {n_krylov} LSQR iterations, damping up to "
                       f"|J M^1/2|): the closure needs control forces the linearization does not predict (Remark 2)")
            break
        # Levenberg–Marquardt: less damping after a full step that did what the linear model predicted,
        # more after a step that had to be cut
        if step == 1.0 and G - trial[3] > 0.75 * predicted:
            damp = damp / 10 if damp > 1e-6 * anorm else 0.0
        elif step < 1.0:
            damp = max(4 * damp, 1e-3 * anorm)
        controls = controls + step * du
        q, lin, r, G = trial
        info["G"].append(G)
        info["krylov_iterations"].append(n_krylov)
        info["step"].append(step)
        info["damping"].append(damp)
        info["control_norm"].append(float(np.sqrt(np.sum(controls * controls / mass[None, :, None]))))
        record(q)
        if keep_iterates:
            info["iterates"].append(q[:L])
        if halts(callback, dict(phase="fast_projection", iteration=it, loss=G)):
            info["cancelled"] = True
            message = "cancelled"
            break
    stopped = info["cancelled"] or G <= max(rtol, stop_fraction) * g0
    if not stopped and np.sqrt(2 * G) > accept:
        raise FastProjectionDiverged(
            f"fast projection did not close the loop: the RMS mismatch at the wrap is still {np.sqrt(2 * G):.2g} "
            f"(from {np.sqrt(2 * g0):.3g}) of the clip's median per-step change ({message})")
    info.update(seconds=time.perf_counter() - t0, controls=controls,
                final_G=G, converged=G <= rtol * g0, message=message)
    status = (CANCELLED if info["cancelled"] else CONVERGED if stopped else
              ITERATION_CAP if it >= max_iters else NO_PROGRESS)
    return Result(x=q[:L], status=status, success=status == CONVERGED, nit=len(info["G"]) - 1,
                  history=[dict(phase="fast_projection", iteration=i, loss=g) for i, g in enumerate(info["G"])],
                  **info)


def _backtrack(prob, closure, controls, du, G, predicted, max_halvings):
    """(step, (q, linearization, r, G) of the trial) for the first of 1, 1/2, 1/4, ... that lowers G by at
    least 1e-4 of the linear model's prediction; (step, None) when none does."""
    L = prob.n_steps
    step = 1.0
    for _ in range(max_halvings + 1):
        try:
            q, lin = simulate(prob, L + 2, controls + step * du, keep_factors=True)
            r = closure.residual(q)
            G_new = closure.merit(r)
            if np.isfinite(G_new) and G_new <= G - 1e-4 * step * predicted and G_new < G:
                return step, (q, lin, r, G_new)
        except SimulationFailed:
            pass
        step *= 0.5
    return step, None


def _stop_reason(G, rtol, stop_fraction, max_iters, stall_window):
    """Why fast projection stops after the iterates' ``G`` ("" to go on)."""
    ratio, it = G[-1] / G[0], len(G) - 1
    if ratio <= rtol:
        return f"converged: G fell to {ratio:.1e} of G(0)"
    if ratio <= stop_fraction:
        return f"stopped early: G fell to {ratio:.1e} of G(0), below {stop_fraction:g}"
    if it >= max_iters:
        return f"stopped at the iteration cap ({max_iters}): G {ratio:.2e} of G(0)"
    if it >= stall_window and G[-1] > 0.5 * G[-1 - stall_window]:
        return f"stalled: G fell by less than half over the last {stall_window} iterations, to {ratio:.2e} of G(0)"
    return ""
