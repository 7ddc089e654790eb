"""Forward simulation with control forces, and the adjoint gradient of the cyclic mismatch.

States q_0 = r0, q_1 = r1 (step 1); equation j (j >= 1), the scheme's step residual (``solver_core.scheme``)
plus a control, gives q_{j+1}:  u_j(q_{j-1}, q_j, q_{j+1}) = c_j.
  symplectic: explicit (du_j/dq_{j+1} = M/h^2);
  backward:   Newton with line search (on the incremental potential for conservative models);
  linearized: u_j is linear in q_{j+1}: one sparse solve.
Pinned vertices follow their prescription; the equations hold on the free vertices.
"""
import copy

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from . import scheme
from .models.base import Model, pattern_product


class SimulationFailed(ArithmeticError):
    """An implicit step did not converge or the state became non-finite."""


class _ImplicitStep:
    """Newton solver for one implicit step on the free (non-pinned) DOFs, fixed pattern."""

    def __init__(self, prob):
        model = prob.model
        self.potential = model.conservative and prob.scheme == "backward"
        self._conservative = None   # the step without the forces that have no potential (Picard fallback)
        if not self.potential and prob.scheme == "backward" and not model.velocity_terms:
            sub = copy.copy(prob)
            sub.model = Model(model.mass, [t for t in model.terms if hasattr(t, "energy")], model.damping)
            self._conservative = _ImplicitStep(sub)
            self._frozen = [t for t in model.terms if not hasattr(t, "energy")]
        n = model.n_vertices
        free = np.ones((n, 3), dtype=bool)
        free[prob.pins] = False
        self.free = np.flatnonzero(free.ravel())
        col_of = np.full(3 * n, -1, dtype=np.int64)
        col_of[self.free] = np.arange(self.free.size)
        pattern = scheme.derivative_pattern(prob)
        self._parts = [i for i, (o, _, _) in enumerate(pattern) if o == 1]
        diag = np.arange(3 * n)
        r = col_of[np.concatenate([diag] + [pattern[i][1] for i in self._parts])]
        c = col_of[np.concatenate([diag] + [pattern[i][2] for i in self._parts])]
        self._keep = (r >= 0) & (c >= 0)
        self._r, self._c = r[self._keep], c[self._keep]
        self.mdiag = scheme.diagonals(prob)[1]
        self.inertia = np.repeat(model.mass / prob.h ** 2, 3)
        self.model, self.prob = model, prob

    def matrix(self, q_prev, q_cur, y, j, shift=0.0):
        """S = du_j/dq_{j+1} at q_{j+1} = y on the free DOFs (CSC); ``shift`` adds shift * M/h^2."""
        values = scheme.derivative_values(self.prob, q_prev[None], q_cur[None], y[None], np.array([j]))
        vals = np.concatenate([self.mdiag + shift * self.inertia] + [values[i][0] for i in self._parts])
        m = self.free.size
        return sp.csc_matrix((vals[self._keep], (self._r, self._c)), shape=(m, m))

    def solve(self, q_prev, q_cur, control, x_pins, j, tol=1e-9, max_iters=100):
        """Solve step j for q_{j+1}; returns (q_next, LU of S at the solution).

        Newton (``_newton``). Where it fails for a model without a potential (Newton on |R| stalls
        where a stiff cloth buckles in the wind) the step is solved again: under backward Euler with
        forces that depend on positions only (wind) by Picard iterations that freeze those forces at
        the last iterate and minimize the incremental potential of the others; otherwise by Newton
        with Levenberg–Marquardt steps.
        """
        try:
            return self._newton(q_prev, q_cur, control, x_pins, j, tol, max_iters, False)
        except SimulationFailed:
            if self.potential:
                raise
            if self._conservative is not None:
                return self._picard(q_prev, q_cur, control, x_pins, j, tol, max_iters)
            return self._newton(q_prev, q_cur, control, x_pins, j, tol, max_iters, True)

    def _newton(self, q_prev, q_cur, control, x_pins, j, tol, max_iters, levenberg_marquardt, x0=None):
        """Newton iterations for step j from x0 (default the extrapolation 2 q_cur - q_prev).

        For a conservative model under backward Euler the step is the minimizer of the incremental
        potential Phi(y) = |y - 2 q_cur + q_prev|^2_M / 2h^2 + |y - q_cur|^2_D / 2h + U(y) - c . y, whose
        gradient is the step residual R: Newton directions from S + shift M/h^2, the shift raised until
        the matrix is positive definite (buckling cloth, inverted elements), with backtracking on Phi.
        Otherwise (wind, velocity terms, the linearized scheme) Newton with backtracking on |R|; when
        steps stall, the same shift, or with ``levenberg_marquardt`` the descent directions of
        |R|^2 / 2, -(S^T S + 1e-3 shift diag(S^T S))^-1 S^T R.
        """
        prob, model = self.prob, self.model
        h = prob.h
        m = model.mass[:, None]
        d = model.drag[:, None]
        x = self._start(q_prev, q_cur, x_pins, x0)
        tt = prob.step_times(np.array([j + 1]))
        potential = self.potential
        jj = np.array([j])

        def res(y):
            r = scheme.step_rows(prob, q_prev[None], q_cur[None], y[None], jj)[0] - control
            return r.ravel()[self.free]

        def merit(y, r, on_phi):
            if not on_phi:
                return float(np.linalg.norm(r))
            return float(np.sum(m * (y - 2 * q_cur + q_prev) ** 2) / (2 * h ** 2) + np.sum(d * (y - q_cur) ** 2) / (2 * h)
                         + model.energy(y[None], tt)[0] - np.sum(control * y))

        r = res(x)
        scale = max(self._scale(q_prev, q_cur, x, tt), np.abs(r).max())
        shift = 0.0
        for _ in range(max_iters):
            if np.abs(r).max() <= tol * scale:
                return x, spla.splu(self.matrix(q_prev, q_cur, x, j))
            # Phi's round-off swamps its decrease close to the solution: finish on |R| there.
            on_phi = potential and np.abs(r).max() > 1e3 * tol * scale
            if levenberg_marquardt and shift > 0 and not potential:
                dx = self._levenberg_marquardt(q_prev, q_cur, x, j, r, shift)
            else:
                dx, shift = self._direction(q_prev, q_cur, x, j, r, shift, on_phi)
            phi0 = merit(x, r, on_phi)
            slope = -float(r @ dx) if on_phi else 0.0
            s = 1.0
            while s >= 1e-4:
                y = x.copy()
                y.reshape(-1)[self.free] += s * dx
                ry = res(y)
                if np.all(np.isfinite(ry)):
                    phi = merit(y, ry, on_phi)
                    if (phi <= phi0 - 1e-4 * s * slope) if on_phi else (phi < (1 - 1e-4 * s) * phi0):
                        break
                s *= 0.5
            shift = (0.0 if shift < 1e-2 else shift / 10) if s >= 0.5 else max(1.0, 10 * shift)
            if s >= 1e-4:
                x, r = y, ry
            elif np.abs(r).max() <= 1e-4 * scale:    # no descent left: round-off of stiff internal forces
                return x, spla.splu(self.matrix(q_prev, q_cur, x, j))
        raise SimulationFailed(f"implicit step did not converge (residual {np.abs(r).max():.3e} N)")

    def _direction(self, q_prev, q_cur, x, j, r, shift, potential):
        """Newton direction -(S + shift M/h^2)^-1 R; for potentials the shift grows until S is positive definite."""
        while True:
            S = self.matrix(q_prev, q_cur, x, j, shift)
            if not potential:
                return spla.splu(S).solve(-r), shift
            try:   # symmetric pivoting only: positive pivots <=> positive definite
                lu = spla.splu(S, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0, options={"SymmetricMode": True})
                if np.all(lu.U.diagonal() > 0) and np.array_equal(lu.perm_r, lu.perm_c):
                    return lu.solve(-r), shift
            except RuntimeError:   # exactly singular
                pass
            shift = max(1e-3, 10 * shift)

    def _start(self, q_prev, q_cur, x_pins, x0=None):
        """Newton's starting point: x0 (default the extrapolation 2 q_cur - q_prev) with the pins set."""
        x = 2 * q_cur - q_prev if x0 is None else x0.copy()
        x[self.prob.pins] = x_pins
        return x

    def _scale(self, q_prev, q_cur, x, tt):
        """Round-off reference: the largest of the inertia and force terms that the step residual sums."""
        inertia = np.abs(self.model.mass[:, None] * (q_cur - q_prev)).max() / self.prob.h ** 2
        return max(inertia, np.abs(self.model.forces(x[None], tt)).max(), 1e-300)

    def _picard(self, q_prev, q_cur, control, x_pins, j, tol, max_iters):
        """Lagged non-conservative forces, the conservative step solved by ``self._conservative``."""
        jj = np.array([j])
        tt = self.prob.step_times(np.array([j + 1]))
        x = self._start(q_prev, q_cur, x_pins)
        scale = self._scale(q_prev, q_cur, x, tt)
        for _ in range(max_iters):
            frozen = control + sum(term.forces(x[None], tt)[0] for term in self._frozen)
            x, _ = self._conservative._newton(q_prev, q_cur, frozen, x_pins, j, tol, max_iters, False, x)
            r = (scheme.step_rows(self.prob, q_prev[None], q_cur[None], x[None], jj)[0] - control).ravel()[self.free]
            if np.abs(r).max() <= tol * scale:
                return x, spla.splu(self.matrix(q_prev, q_cur, x, j))
        raise SimulationFailed(f"implicit step did not converge with lagged forces (residual {np.abs(r).max():.3e} N)")

    def _levenberg_marquardt(self, q_prev, q_cur, x, j, r, factor):
        """-(S^T S + 1e-3 factor diag(S^T S))^-1 S^T R: a descent direction for |R|^2 / 2."""
        S = self.matrix(q_prev, q_cur, x, j)
        normal = (S.T @ S).tocsc()
        return spla.splu(normal + sp.diags(1e-3 * factor * normal.diagonal(), format="csc")).solve(-(S.T @ r))


def simulate(prob, n_states=None, controls=None, keep_factors=False):
    """Forward simulation on the solver grid: states q_0..q_{n_states-1} (default n_steps).

    ``controls`` (n_states - 1, n, 3): c_j added to the forces of equation j (row 0 unused).
    With ``keep_factors`` (implicit schemes) also returns the LU factors of each step's matrix, for
    the adjoint. Raises SimulationFailed when the state blows up or an implicit step fails.
    """
    model, h = prob.model, prob.h
    n_states = prob.n_steps if n_states is None else int(n_states)
    n = model.n_vertices
    q = np.empty((n_states, n, 3))
    q[0], q[1] = prob.r0, prob.r1_step
    pins = prob.pin_path(np.arange(n_states))
    q[0, prob.pins], q[1, prob.pins] = pins[0], pins[1]
    c = np.zeros((n_states, n, 3)) if controls is None else controls
    factors = [None, None]
    stepper = None if prob.scheme == "symplectic" else _ImplicitStep(prob)
    for j in range(1, n_states - 1):
        if stepper is None:   # u_j is M/h^2 q_{j+1} + (terms without q_{j+1})
            guess = 2 * q[j] - q[j - 1]
            rows = scheme.step_rows(prob, q[j - 1][None], q[j][None], guess[None], np.array([j]))[0]
            q[j + 1] = guess - h ** 2 * (rows - c[j]) / model.mass[:, None]
            q[j + 1, prob.pins] = pins[j + 1]
        else:
            q[j + 1], lu = stepper.solve(q[j - 1], q[j], c[j], pins[j + 1], j)
            if keep_factors:
                factors.append(lu)
        if not np.all(np.isfinite(q[j + 1])):
            raise SimulationFailed(f"the simulation blew up at step {j + 1}")
    return (q, factors) if keep_factors else q


def mismatch(prob, q):
    """G = |q_L - r0|^2 / 2 + |q_{L+1} - r1|^2 / 2 over free vertices, L = n_steps (eq. 26)."""
    L = prob.n_steps
    free = np.ones(prob.n_vertices, dtype=bool)
    free[prob.pins] = False
    return 0.5 * float(np.sum((q[L, free] - prob.r0[free]) ** 2) + np.sum((q[L + 1, free] - prob.r1_step[free]) ** 2))


def mismatch_gradient(prob, q, factors=None):
    """dG/dc_j (n_states - 1, n, 3) for the trajectory q (L + 2 states) by the adjoint method.

    Equation j is u_j(q_{j-1}, q_j, q_{j+1}) = c_j, so with S_j = du_j/dq_{j+1}: z_j = S_j^-T lambda_{j+1},
    dG/dc_j = z_j, and lambda_j, lambda_{j-1} take -(du_j/dq_j)^T z_j and -(du_j/dq_{j-1})^T z_j.
    """
    model, h = prob.model, prob.h
    L = prob.n_steps
    n = model.n_vertices
    dof = 3 * n
    free = np.ones((n, 3))
    free[prob.pins] = 0.0
    lam = np.zeros_like(q)
    lam[L] = (q[L] - prob.r0) * free
    lam[L + 1] = (q[L + 1] - prob.r1_step) * free
    grad = np.zeros_like(q[:-1])
    free_idx = np.flatnonzero(free.ravel())
    diag = scheme.diagonals(prob)
    pattern = scheme.derivative_pattern(prob)
    rows_j = np.arange(1, L + 1)
    values = scheme.derivative_values(prob, q[rows_j - 1], q[rows_j], q[rows_j + 1], rows_j)
    for k in range(L + 1, 1, -1):
        j = k - 1
        mu = (lam[k] * free).ravel()
        if prob.scheme == "symplectic":
            z = mu / diag[1]
        else:
            z = np.zeros(dof)
            z[free_idx] = factors[k].solve(mu[free_idx], trans="T")
        grad[j] = z.reshape(n, 3)
        for o in (0, -1):
            back = diag[o] * z
            for (po, prows, pcols), vals in zip(pattern, values):
                if po == o:   # (A^T z)[col] += A[row, col] z[row]
                    back += pattern_product(pcols, prows, vals[j - 1][None], z[None], dof)[0]
            lam[j + o] -= back.reshape(n, 3)
    return grad
