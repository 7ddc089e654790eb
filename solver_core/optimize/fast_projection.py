"""Initial guess by fast projection onto the cyclic constraint (paper Algorithm 2, poster form).

The paper projects the controls u onto the zero set of the linearized *scalar* mismatch G = |r|^2 / 2
(eq. 28-30): du = -G / |grad G|^2 grad G. In the linear model that step gives r+ = r - G/|J^T r|^2 J J^T r,
which removes at most half of r (G falls at most to G / 4) along a singular direction, and overshoots
the stiff directions by sigma_max^2 |r|^2 / (2 sum sigma_i^2 r_i^2) when r lies mostly in the hard-to-
control ones: the stall and the divergence at full stiffness. Here (the poster's form) the projection is
onto the linearized *vector* constraint r(u) + J du = 0 in the M^-1 norm of the control,

    du = -M J^T (J M J^T)^-1 r,

a minimum-norm Gauss–Newton step (Newton shooting). Up to ``FastProjectionOptions.gram_max_rows`` closure
rows it is exact: the Gram matrix J M J^T comes from one block adjoint sweep
(``forward.Linearization.gram``) and its eigendecomposition gives the step for every Levenberg–Marquardt
shift, chosen to fit a trust region in the M^-1 norm; beyond, LSQR on J M^1/2 (tangent-linear and adjoint
sweeps), truncated and shortened to the trust region. r holds the position mismatch at the wrap and the
mismatch of the per-step change (the velocity times h, as in the paper's G), both in units of the forward
clip's median per-step change: weighing the velocity mismatch by its own median change makes G strongly
nonlinear in the controls. Where a control perturbation grows strongly over the clip (the swinging cloth
and the flag at scale 1) the linear model holds only for short steps and the trust region admits only
small decreases of G; the measurements, and what does not get past it, are in docs/design/tuning_starts.md
(gram_max_rows, stall_window) and docs/design/starts.md.
"""
import time

import numpy as np
import scipy.sparse.linalg as spla

from ..physics.forward import SimulationFailed, keep_factor_workspace_off_recycled_memory, simulate
from ..options import DEFAULTS
from ..result import CANCELLED, CONVERGED, ITERATION_CAP, NO_PROGRESS, Result, halts


class FastProjectionDiverged(RuntimeError):
    """Fast projection failed (Remark 2): the control force it needs is too large. ``best``: its lowest-G
    iterate (n_steps, n, 3), None when no step lowered G; ``nit``: its iterations."""

    def __init__(self, message, best=None, nit=0):
        super().__init__(message)
        self.best, self.nit = best, nit


def _rms(x):
    """RMS over vertices of vectors x (..., k, 3)."""
    return np.sqrt(np.mean(np.sum(x * x, axis=-1), axis=-1))


class _Closure:
    """The closure residual r(q) = (q_L - r0, (q_{L+1} - q_L) - (r1 - r0)) / scale on the free vertices, scale
    the clip's median per-step change."""

    def __init__(self, prob, clip):
        self.prob = prob
        self.L = prob.n_steps
        free = self.free = prob.free_vertices()
        step = np.diff(clip[:self.L + 1, free], axis=0)
        self.scale = max(float(np.median(_rms(step))), 1e-300)

    def residual(self, q):
        """r (2, k, 3) of a trajectory q (L + 2 states)."""
        p = self.prob
        pos = q[self.L, self.free] - p.r0[self.free]
        vel = (q[self.L + 1, self.free] - q[self.L, self.free]) - (p.r1_step[self.free] - p.r0[self.free])
        return np.stack([pos, vel]) / self.scale

    def merit(self, r):
        """G = |r|^2 / 2 per free vertex: sqrt(2 G) is the RMS mismatch in units of the clip's median per-step change."""
        return 0.5 * float(np.sum(r * r)) / r.shape[1]

    def jumps(self, q):
        """(RMS position mismatch in m, RMS velocity mismatch in m/s) at the wrap."""
        rms = _rms(self.residual(q))
        return float(rms[0] * self.scale), float(rms[1] * self.scale / self.prob.h)

    def tangent(self, dq):
        """J dq: the residual's variation (2, k, 3) for a state variation dq (L + 2, n, 3)."""
        dp, dn = dq[self.L, self.free], dq[self.L + 1, self.free]
        return np.stack([dp, dn - dp]) / self.scale

    def sensitivity(self, y, shape):
        """J^T y on the states: (L + 2, n, 3) zeros but at L and L + 1."""
        out = np.zeros(shape)
        out[self.L, self.free] = (y[0] - y[1]) / self.scale
        out[self.L + 1, self.free] = y[1] / self.scale
        return out


class _GramStep:
    """Projection steps from the eigendecomposition of the Gram matrix J M J^T: for a trust radius, the
    Levenberg–Marquardt shift that makes |du|_{M^-1} equal to it (exact at every shift)."""

    def __init__(self, closure, lin, r, mass, mu0=DEFAULTS.fast_projection.mu0):
        k = r.shape[1]
        m = r.size
        eye = np.eye(m).reshape(2, k, 3, m)
        last = np.zeros((2, mass.size, 3, m))
        last[0, closure.free] = (eye[0] - eye[1]) / closure.scale
        last[1, closure.free] = eye[1] / closure.scale
        lam, self.V = np.linalg.eigh(lin.gram(last, mass))
        self.lam = np.maximum(lam, 0.0)
        self.scale = max(float(self.lam[-1]), 1e-300)
        self.c = self.V.T @ r.ravel()
        self.closure, self.lin, self.r, self.mass, self.mu0 = closure, lin, r, mass, mu0

    def _norm(self, shift):
        return float(np.sqrt(np.sum(self.lam * (self.c / (self.lam + shift)) ** 2)))

    def __call__(self, radius):
        """(du, |r + J du| / |r| in the linear model, Krylov iterations (0), |du|_{M^-1}) for the trust
        radius ``radius`` (None: damped by ``mu0`` of the largest eigenvalue)."""
        lo, hi = 1e-12 * self.scale, 1e6 * self.scale
        if radius is None:
            shift = self.mu0 * self.scale
        elif self._norm(lo) <= radius:
            shift = lo
        else:                                              # |du| falls as the shift grows: bisect on log(shift)
            for _ in range(60):
                shift = np.sqrt(lo * hi)
                lo, hi = (shift, hi) if self._norm(shift) > radius else (lo, shift)
            shift = hi
        y = self.V @ (self.c / (self.lam + shift))
        shape = (self.closure.L + 2, self.mass.size, 3)
        g = self.lin.adjoint(self.closure.sensitivity(y.reshape(self.r.shape), shape))
        g[0] = 0.0
        left = shift * self.c / (self.lam + shift)
        return (-self.mass[None, :, None] * g, float(np.linalg.norm(left) / np.linalg.norm(self.c)), 0,
                self._norm(shift))


class _LsqrStep:
    """Projection steps by LSQR on J M^1/2 (tangent-linear and adjoint sweeps), truncated after ``iters``,
    shortened to the trust radius."""

    def __init__(self, closure, lin, r, mass, iters, tol):
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
        x, _, self.iterations = spla.lsqr(op, r.ravel(), atol=0.0, btol=tol, conlim=0.0, iter_lim=iters)[:3]
        self.du = -root * x.reshape(controls_shape)
        self.norm = float(np.linalg.norm(x))
        self.r, self.Jdu = r.ravel(), -matvec(x)

    def __call__(self, radius):
        t = 1.0 if radius is None or self.norm <= radius else radius / self.norm
        res = np.linalg.norm(self.r + t * self.Jdu) / np.linalg.norm(self.r)
        return t * self.du, float(res), int(self.iterations), t * self.norm


def fast_projection(prob, callback=None, options=None, max_iters=None, keep_iterates=False):
    """Control forces u that make the forward simulation close the loop, by fast projection.

    From u = 0, repeat the M^-1-norm projection onto the linearized closure constraint (module
    docstring) in a trust region (in the M^-1 norm: shrunk until the step lowers G = |r|^2 / 2, the
    mismatch at the wrap in units of the clip's median per-step change, by ``decrease`` of the linear
    model's prediction, grown after steps that did what it predicted), until G <= ``rtol`` G(0), or G <=
    ``stop_fraction`` G(0), or G has not halved over ``stall_window`` iterations while the trust region did
    not grow (``_stop_reason``), or the iteration cap. Up to ``gram_max_rows`` closure rows the step is
    exact (``_GramStep``), beyond it is ``krylov_iters`` LSQR iterations to ``krylov_tol``. The names in
    quotes are fields of ``options.fast_projection``.

    Parameters
    ----------
    prob : LoopProblem
        The loop problem; its forward simulation from (r0, r1) is the first iterate.
    callback : callable, optional
        ``callback(info)`` after every iteration (phase "fast_projection", iteration, loss: G); when it
        ``halts`` the last iterate is returned, cancelled.
    options : Options, optional
        Tuning values (``options.fast_projection``, a ``FastProjectionOptions``); ``DEFAULTS`` when None.
    max_iters : int, optional
        Iteration cap; ``options.fast_projection.max_iters`` when None.
    keep_iterates : bool
        Keep the trajectories of all iterates in ``iterates`` (benchmarks start Gauss–Newton from them).

    Returns
    -------
    Result
        For the last (and best: steps only lower G) iterate: ``x`` the loop (n_steps, n, 3) simulated
        with its controls, status, success (G fell to ``rtol`` or ``stop_fraction`` of G(0)), nit, history
        (loss: G), and G (per iterate), seconds, controls, converged, cancelled, final_G, message,
        position_jump / velocity_jump (RMS mismatch at the wrap per iterate, m and m/s), control_norm
        (|u|_{M^-1} per iterate), krylov_iterations (LSQR; 0 for exact steps), trials (simulations) and
        trust_radius (after the step) per iteration, and ``iterates`` (None unless ``keep_iterates``).

    Raises
    ------
    FastProjectionDiverged
        (Remark 2), saying why, when the forward simulation fails, or when it stops short of both rules
        (no damping makes a step reduce G, a stall, or the iteration cap) with the loop still open: RMS
        mismatch sqrt(2 G) above ``accept`` of the clip's median per-step change; the exception keeps the
        last (lowest-G) iterate.
    """
    opts = (options or DEFAULTS).fast_projection
    max_iters = opts.max_iters if max_iters is None else max_iters
    rtol, stop_fraction, stall_window = opts.rtol, opts.stop_fraction, opts.stall_window
    L = prob.n_steps
    mass = prob.model.mass
    controls = np.zeros((L + 1, prob.n_vertices, 3))
    keep_factor_workspace_off_recycled_memory()
    t0 = time.perf_counter()
    try:
        q, lin = simulate(prob, L + 2, controls, keep_factors=True)
    except SimulationFailed as exc:
        raise FastProjectionDiverged(f"fast projection could not start: the forward simulation failed: {exc}") from exc
    closure = _Closure(prob, q)
    r = closure.residual(q)
    G = closure.merit(r)
    info = dict(G=[G], position_jump=[], velocity_jump=[], control_norm=[0.0], krylov_iterations=[], trials=[],
                trust_radius=[], iterates=[q[:L]] if keep_iterates else None, cancelled=False)

    def record(q):
        pj, vj = closure.jumps(q)
        info["position_jump"].append(pj)
        info["velocity_jump"].append(vj)

    record(q)
    g0, radius, it, message = G, None, 0, ""
    while True:
        message = _stop_reason(info["G"], info["trust_radius"], rtol, stop_fraction, max_iters, stall_window)
        if message:
            break
        it += 1
        step = (_GramStep(closure, lin, r, mass, opts.mu0) if r.size <= opts.gram_max_rows
                else _LsqrStep(closure, lin, r, mass, opts.krylov_iters, opts.krylov_tol))
        for tries in range(1, opts.max_rejections + 1):
            du, lin_res, n_krylov, norm = step(radius)
            predicted = G * (1 - lin_res ** 2)          # the linear model's decrease of G
            trial = _trial(prob, closure, controls + du)
            if trial is not None and G - trial[3] > opts.decrease * predicted:
                rho = (G - trial[3]) / predicted
                radius = 0.5 * norm if rho < 0.25 else max(radius or 0.0, 3 * norm) if rho > 0.75 else norm
                break
            radius = 0.25 * norm
        else:
            message = (f"no step within the trust region reduces G at iteration {it} (G {G / g0:.2e} of G(0), "
                       f"linear-model residual {lin_res:.1e}): the closure needs control forces the linearization "
                       "does not predict (Remark 2)")
            break
        controls = controls + du
        q, lin, r, G = trial
        info["G"].append(G)
        info["krylov_iterations"].append(n_krylov)
        info["trials"].append(tries)
        info["trust_radius"].append(radius)
        info["control_norm"].append(float(np.sqrt(np.sum(controls * controls / mass[None, :, None]))))
        record(q)
        if keep_iterates:
            info["iterates"].append(q[:L])
        if halts(callback, dict(phase="fast_projection", iteration=it, loss=G)):
            info["cancelled"] = True
            message = "cancelled"
            break
    stopped = info["cancelled"] or G <= max(rtol, stop_fraction) * g0
    it_done = len(info["G"]) - 1
    if not stopped and np.sqrt(2 * G) > opts.accept:
        raise FastProjectionDiverged(
            f"fast projection did not close the loop: the RMS mismatch at the wrap is still {np.sqrt(2 * G):.2g} "
            f"(from {np.sqrt(2 * g0):.3g}) of the clip's median per-step change ({message})",
            best=q[:L] if it_done else None, nit=it_done)
    info.update(seconds=time.perf_counter() - t0, controls=controls,
                final_G=G, converged=G <= rtol * g0, message=message)
    status = (CANCELLED if info["cancelled"] else CONVERGED if stopped else
              ITERATION_CAP if it >= max_iters else NO_PROGRESS)
    return Result(x=q[:L], status=status, success=status == CONVERGED, nit=it_done,
                  history=[dict(phase="fast_projection", iteration=i, loss=g) for i, g in enumerate(info["G"])],
                  **info)


def _trial(prob, closure, controls):
    """(q, linearization, r, G) simulated with ``controls``; None when the simulation fails or G is not finite."""
    try:
        q, lin = simulate(prob, prob.n_steps + 2, controls, keep_factors=True)
    except SimulationFailed:
        return None
    r = closure.residual(q)
    G = closure.merit(r)
    return (q, lin, r, G) if np.isfinite(G) else None


def _stop_reason(G, radii, rtol, stop_fraction, max_iters, stall_window):
    """Why fast projection stops after the iterates' ``G`` and the trust radii after its steps ("" to go on).
    A stall needs both: G has not halved over ``stall_window`` iterations, and the trust radius has not
    grown over them: while it grows the steps do what the linear model predicts and G falls faster and
    faster (docs/design/tuning_starts.md: stall_window)."""
    ratio, it = G[-1] / G[0], len(G) - 1
    if ratio <= rtol:
        return f"converged: G fell to {ratio:.1e} of G(0)"
    if ratio <= stop_fraction:
        return f"stopped early: G fell to {ratio:.1e} of G(0), below {stop_fraction:g}"
    if it >= max_iters:
        return f"stopped at the iteration cap ({max_iters}): G {ratio:.2e} of G(0)"
    if it >= stall_window and G[-1] > 0.5 * G[-1 - stall_window] and radii[-1] <= radii[-stall_window]:
        return (f"stalled: G fell by less than half over the last {stall_window} iterations, to {ratio:.2e} of "
                "G(0), and the trust region did not grow")
    return ""
