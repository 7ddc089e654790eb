"""Levenberg–Marquardt on a loop and its driving force together, keeping the clip's motion.

The unknowns are the free positions q and the driving family's per-step parameters theta
(``solver_core.physics.driving``). The loss is 1/2 |r|^2 of these residual blocks:

- physics: sqrt(h) M^-1/2 (u_j(q) - f_j(q, theta_j)) on every free row, u the residual forces
  (``physics.residual``): what the scene's forces plus the driving force leave unexplained;
- the problem's soft initial conditions, as ``residual.penalty_terms``;
- size and roughness: sqrt(a h) s theta_j and sqrt(b h) s (theta_{j+1} - 2 theta_j + theta_{j-1}), s the force
  of a unit parameter (so a and b weigh the driving force as a residual force of the same size);
- the wind's bound (wind family): sqrt(c) max(0, |W_j| / B - 1), W_j the wind row j feels and B the bound;
- the speed row: sqrt(g) (K - K_c) / K_c, K the loop's kinetic energy over its steps and K_c the clip's.

The speed row is dense: it enters the normal equations as a rank-one (Sherman–Morrison) update, so the matrix
keeps the sparsity of the physics rows with p columns more per step. Every block's Jacobian is tested against
finite differences (tests/test_driven.py).
"""
import time

import numpy as np
import scipy.sparse as sp

from ..metrics import relative_residual, rms_speed, seamless
from ..physics.residual import ResidualJacobian, inertia_metric, penalty_terms, residual_steps
from ..result import CANCELLED, Result, halts
from ..options import DEFAULTS
from .gauss_newton import factor_nonzeros
from .linsolve import NotPositiveDefinite, cholmod, make_backend


def periodic_second_difference(n):
    """(n x n) CSR D2 with (D2 x)_j = x_{j+1} - 2 x_j + x_{j-1}, indices mod n."""
    i = np.arange(n)
    return sp.csr_matrix((np.r_[np.ones(n), -2.0 * np.ones(n), np.ones(n)],
                          (np.r_[i, i, i], np.r_[(i + 1) % n, i, (i - 1) % n])), shape=(n, n))


def kinetic_energy(prob, q, wrap=True):
    """Sum over the steps of 1/2 sum_i m_i |q_{j+1} - q_j|^2 / h^2 (with the wrap's step when ``wrap``)."""
    step = np.diff(q, axis=0, append=q[:1]) if wrap else np.diff(q, axis=0)
    return 0.5 * float(np.sum(prob.model.mass[None, :, None] * step ** 2)) / prob.h ** 2


class DrivenLoss:
    """The residual blocks of a loop with a driving force, and their Jacobians, on x = (free q, theta).

    Parameters
    ----------
    prob : LoopProblem
        The loop problem (its pins and hard initial conditions fix those unknowns).
    drive : WindDrive or ModesDrive or None
        The driving family; None solves q alone.
    start : ndarray, shape (n_steps, n, 3)
        Where q starts; fixes the pinned and hard coordinates.
    clip_steps : ndarray, shape (n_steps, n, 3)
        The clip on the solver grid: its kinetic energy is the speed row's target.
    motion : MotionOptions
        The weights (``keep_speed``, ``size``, ``roughness``, ``wind_bound``, ``bound_weight``).
    """

    def __init__(self, prob, drive, start, clip_steps, motion):
        self.prob, self.drive, self.motion = prob, drive, motion
        self.rj = rj = ResidualJacobian(prob)
        n_steps, dof = prob.n_steps, 3 * prob.n_vertices
        self.dof = dof
        self.start = prob.apply_constraints(start)
        self.n_q = rj.free_flat.size
        self.per_step = drive.per_step if drive is not None else 0
        self.n_theta = self.per_step * n_steps
        self.roots = np.sqrt(rj.row_weights)
        self._row_of = np.full(n_steps * dof, -1, dtype=np.int64)
        self._row_of[rj.row_flat] = np.arange(rj.row_flat.size)
        self._col_of = np.full(n_steps * dof, -1, dtype=np.int64)
        self._col_of[rj.free_flat] = np.arange(self.n_q)
        self.penalties = penalty_terms(prob, self.start)
        self.scale = 1.0
        if drive is not None:
            self._theta_index()
            self._position_index()
            unit = drive.per_parameter(self.start)
            self.scale = float(np.sqrt(np.mean(np.sum(unit ** 2 / prob.model.mass[None, :, None, None], axis=(1, 2)))
                                       ) or 1.0)
            D2 = periodic_second_difference(n_steps)
            eye = sp.identity(self.per_step, format="csr")
            self._size = sp.kron(sp.identity(n_steps), eye, format="csr") * (np.sqrt(motion.size * prob.h) * self.scale)
            self._rough = sp.kron(D2, eye, format="csr") * (np.sqrt(motion.roughness * prob.h) * self.scale)
        self.bound = None
        if getattr(drive, "name", "") == "wind" and motion.wind_bound > 0:
            peak = float(np.linalg.norm(drive.scene, axis=1).max())
            if peak > 0:
                self.bound = motion.wind_bound * peak
        self.kinetic_clip = kinetic_energy(prob, clip_steps, wrap=False) * n_steps / (n_steps - 1)

    # -- unknowns ----------------------------------------------------------------------------------------------
    def split(self, x):
        """(q (n_steps, n, 3), theta (n_steps, per_step)) of x."""
        q = self.start.copy()
        q.reshape(-1)[self.rj.free_flat] = x[:self.n_q]
        return q, x[self.n_q:].reshape(self.prob.n_steps, self.per_step)

    def pack(self, q, theta):
        """x of q and theta."""
        return np.concatenate([np.asarray(q).reshape(-1)[self.rj.free_flat], np.asarray(theta).reshape(-1)])

    def _theta_index(self):
        n_steps, dof, p = self.prob.n_steps, self.dof, self.per_step
        rows = (np.arange(n_steps)[:, None, None] * dof + np.arange(dof)[None, :, None]).repeat(p, axis=2)
        cols = np.broadcast_to(np.arange(n_steps)[:, None, None] * p + np.arange(p)[None, None, :], rows.shape)
        r = self._row_of[rows.ravel()]
        self._theta_keep = r >= 0
        self._theta_rows, self._theta_cols = r[self._theta_keep], cols.ravel()[self._theta_keep]

    def _position_index(self):
        if self.drive.pattern is None:
            self._pos_keep = None
            return
        pr, pc = self.drive.pattern
        j = np.arange(self.prob.n_steps)[:, None]
        r = self._row_of[(j * self.dof + pr[None, :]).ravel()]
        c = self._col_of[(self.drive.rows[:, None] * self.dof + pc[None, :]).ravel()]
        self._pos_keep = (r >= 0) & (c >= 0)
        self._pos_rows, self._pos_cols = r[self._pos_keep], c[self._pos_keep]

    # -- the blocks --------------------------------------------------------------------------------------------
    def driving_force(self, q, theta):
        """The driving force (n_steps, n, 3) of the rows (zeros without a family)."""
        return np.zeros(q.shape) if self.drive is None else self.drive.forces(q, theta)

    def kinetic(self, q):
        return kinetic_energy(self.prob, q)

    def blocks(self, x, jacobian=True):
        """{name: (r, J or None)} of the loss 1/2 sum |r|^2 at x; J is CSR except the speed row's (dense 1-D)."""
        prob, rj = self.prob, self.rj
        q, theta = self.split(x)
        n_x = self.n_q + self.n_theta
        u = residual_steps(prob, q) - self.driving_force(q, theta)
        out = {}
        J = None
        if jacobian:
            Jq = rj.assemble(q)
            if self.drive is not None:
                if self._pos_keep is not None:
                    values = self.drive.position_values(q, theta).ravel()[self._pos_keep]
                    Jq = Jq - sp.csr_matrix((values, (self._pos_rows, self._pos_cols)), shape=Jq.shape)
                unit = self.drive.per_parameter(q).ravel()[self._theta_keep]
                Jt = sp.csr_matrix((-unit, (self._theta_rows, self._theta_cols)), shape=(rj.shape[0], self.n_theta))
                Jq = sp.hstack([Jq, Jt], format="csr")
            J = sp.diags(self.roots) @ Jq
        out["physics"] = (self.roots * rj.active_rows(u), J)
        for w, j, target in self.penalties:
            cols = self._columns_of_step(j)
            flat = self.rj.free_flat[cols] % self.dof
            weights = np.sqrt(np.repeat(w, 3))[flat]
            r = weights * (q[j].reshape(-1)[flat] - target.reshape(-1)[flat])
            J = sp.csr_matrix((weights, (np.arange(cols.size), cols)), shape=(cols.size, n_x)) if jacobian else None
            out[f"initial {j}"] = (r, J)
        if self.drive is not None:
            t = theta.reshape(-1)
            for name, op in (("size", self._size), ("roughness", self._rough)):
                J = sp.hstack([sp.csr_matrix((op.shape[0], self.n_q)), op], format="csr") if jacobian else None
                out[name] = (op @ t, J)
        if self.bound is not None:
            wind = self.drive.total_wind(theta)
            norm = np.linalg.norm(wind, axis=1)
            over = norm / self.bound - 1.0
            active = over > 0
            c = np.sqrt(self.motion.bound_weight)
            J = None
            if jacobian:   # every step's entries, zero where the bound is not active: one pattern throughout
                steps = np.arange(prob.n_steps)
                grad = c * active[:, None] * wind / (np.maximum(norm, 1e-300)[:, None] * self.bound)
                cols = (self.n_q + 3 * steps[:, None] + np.arange(3)).ravel()
                J = sp.csr_matrix((grad.ravel(), (np.repeat(steps, 3), cols)), shape=(prob.n_steps, n_x))
            out["wind bound"] = (c * np.where(active, over, 0.0), J)
        if self.motion.keep_speed > 0:
            g = np.sqrt(self.motion.keep_speed)
            K = self.kinetic(q)
            row = None
            if jacobian:
                step = np.diff(q, axis=0, append=q[:1])
                grad = prob.model.mass[None, :, None] * (np.roll(step, 1, axis=0) - step) / prob.h ** 2
                row = np.zeros(n_x)
                row[:self.n_q] = g * grad.reshape(-1)[rj.free_flat] / self.kinetic_clip
            out["speed"] = (np.array([g * (K - self.kinetic_clip) / self.kinetic_clip]), row)
        return out

    def _columns_of_step(self, j):
        lo, hi = np.searchsorted(self.rj.free_flat, [j * self.dof, (j + 1) * self.dof])
        return np.arange(lo, hi)

    def value(self, parts):
        """The loss 1/2 |r|^2 of ``blocks``' output."""
        return 0.5 * sum(float(r @ r) for r, _ in parts.values())

    def metric(self):
        """Levenberg–Marquardt's diagonal: the inertia metric on q, h s^2 on theta."""
        return np.r_[inertia_metric(self.prob), np.full(self.n_theta, self.prob.h * self.scale ** 2)]


def fits(n_unknowns, n_steps, options=None):
    """Whether the driven solve takes a loop of this size: its direct factor, estimated as
    ``gauss_newton.factor_nonzeros``, within ``LinearSolveOptions.auto_direct_max_factor_nonzeros`` (the size
    up to which "auto" factors directly). Larger loops are pure physics (``loop_clip``), on the structured
    solve where it applies."""
    options = options or DEFAULTS
    return factor_nonzeros(n_unknowns, n_steps, options) <= options.linear_solve.auto_direct_max_factor_nonzeros


def linear_solver(backend="auto"):
    """The direct solve the driven solve factors with for ``backend``: "cholmod" when CHOLMOD is installed and
    asked for ("auto" and "structured" included: the driven solve has no structured route), else "scipy"."""
    if backend in ("auto", "structured"):
        return "cholmod" if cholmod is not None else "scipy"
    return backend if isinstance(backend, str) else getattr(backend, "name", type(backend).__name__)


def _system(parts):
    """(H = J^T J of the sparse blocks, gradient, the dense speed row or None, its residual)."""
    sparse = [(r, J) for name, (r, J) in parts.items() if name != "speed"]
    J = sp.vstack([J for _, J in sparse], format="csr")
    r = np.concatenate([r for r, _ in sparse])
    g = J.T @ r
    row, r_speed = None, 0.0
    if "speed" in parts:
        r_speed, row = float(parts["speed"][0][0]), parts["speed"][1]
        g = g + row * r_speed
    return (J.T @ J).tocsc(), g, row


def solve(loss, x0, clip_speed, max_iters, tol, physics_tol, callback=None, backend="auto"):
    """Levenberg–Marquardt on ``loss`` (a DrivenLoss) from x0.

    It stops when the loop is seamless, its mean relative residual outside the driving force is at most
    ``physics_tol``, its speed within ``speed_band`` of ``clip_speed`` and the wind within ``bound_slack`` of its
    bound ("physics_tol"); when the loss falls by less than ``tol`` or ``settle`` relative in an iteration ("tol",
    the options of ``loss.motion``); when no
    step lowers it ("no_progress"); at ``max_iters``; or when ``callback`` halts ("cancelled", the best iterate
    kept).

    Returns
    -------
    Result
        x, nit, stop_reason, status (CANCELLED when cancelled), history (phase, iteration, loss, seconds,
        damping, residual, speed), seconds, backend (the linear solver's name).
    """
    prob, motion = loss.prob, loss.motion
    solver = make_backend(linear_solver(backend) if isinstance(backend, str) else backend)
    solver.bind(prob)
    t0 = time.perf_counter()
    x = np.asarray(x0, dtype=float).copy()
    parts = loss.blocks(x)
    f = loss.value(parts)
    diag = loss.metric()
    lam = motion.damping0
    state = _state(loss, x, clip_speed)
    history = [dict(phase="gauss_newton", iteration=0, loss=f, seconds=0.0, damping=lam, **state)]
    out = Result(x=x, nit=0, stop_reason="max_iters", status=None, history=history, backend=solver.name)
    for it in range(1, max_iters + 1):
        H, g, row = _system(parts)
        while True:
            try:
                solver.factorize(H + lam * sp.diags(diag, format="csc"))
            except NotPositiveDefinite:
                lam *= 4.0
                continue
            step = solver.solve(-g)
            if row is not None:
                a_row = solver.solve(row)
                step -= a_row * (row @ step) / (1.0 + row @ a_row)
            trial = loss.blocks(x + step, jacobian=False)
            f_new = loss.value(trial)
            if np.isfinite(f_new) and f_new < f:
                lam = max(lam / 3.0, 1e-9)
                break
            lam *= 4.0
            if lam > 1e12:
                out.update(stop_reason="no_progress")
                return _finish(out, x, it - 1, t0)
        x = x + step
        decrease = (f - f_new) / max(f, 1e-300)
        f = f_new
        parts = loss.blocks(x)
        state = _state(loss, x, clip_speed)
        history.append(dict(phase="gauss_newton", iteration=it, loss=f, seconds=time.perf_counter() - t0,
                            damping=lam, **state))
        if halts(callback, dict(history[-1])):
            out.update(stop_reason="cancelled", status=CANCELLED)
            return _finish(out, x, it, t0)
        if (state["seamless"] and state["residual"] <= physics_tol
                and abs(state["speed"] - 1.0) <= motion.speed_band
                and state["wind_excess"] <= motion.bound_slack):
            out.update(stop_reason="physics_tol")
            return _finish(out, x, it, t0)
        if decrease < max(tol, motion.settle):
            out.update(stop_reason="tol")
            return _finish(out, x, it, t0)
    return _finish(out, x, max_iters, t0)


def _finish(out, x, nit, t0):
    out.update(x=x, nit=nit, seconds=time.perf_counter() - t0)
    return out


def _state(loss, x, clip_speed):
    """The figures the stopping rule reads at x: seamless, residual outside the driving force, speed over the
    clip's, the wind's excess over its bound (a fraction; 0 within it)."""
    prob = loss.prob
    q, theta = loss.split(x)
    u = residual_steps(prob, q) - loss.driving_force(q, theta)
    excess = 0.0
    if loss.bound is not None:
        excess = max(0.0, float(np.linalg.norm(loss.drive.total_wind(theta), axis=1).max()) / loss.bound - 1.0)
    return dict(seamless=bool(seamless(prob, q)), residual=float(relative_residual(prob, q, u).mean()),
                speed=rms_speed(prob.frames_of(q), prob.dt) / clip_speed, wind_excess=excess)
