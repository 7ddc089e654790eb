"""Forward simulation with control forces, and the adjoint gradient of the cyclic mismatch.

States q_0 = r0, q_1 = r1 (step 1); equation j (j >= 1) gives q_{j+1}:
  symplectic: M (q_{j+1} - 2 q_j + q_{j-1}) / h^2 = F(q_j) - D (q_j - q_{j-1}) / h + u_j       (explicit)
  backward:   M (q_{j+1} - 2 q_j + q_{j-1}) / h^2 = F(q_{j+1}) - D (q_{j+1} - q_j) / h + u_j   (Newton)
Pinned vertices follow their prescription; the equations hold on the free vertices.
"""
import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla


class SimulationFailed(ArithmeticError):
    """An implicit step did not converge or the state became non-finite."""


def _drag(model):
    return np.zeros(model.n_vertices) if model.damping is None else model.damping


class _ImplicitStep:
    """Newton solver for one backward-Euler step on the free (non-pinned) DOFs, fixed pattern."""

    def __init__(self, prob):
        model = prob.model
        n = model.n_vertices
        free = np.ones((n, 3), dtype=bool)
        free[prob.pins] = False
        self.free = np.flatnonzero(free.ravel())
        col_of = np.full(3 * n, -1, dtype=np.int64)
        col_of[self.free] = np.arange(self.free.size)
        rows, cols = model.jacobian_pattern()
        diag = np.arange(3 * n)
        r = col_of[np.concatenate([diag, rows])]
        c = col_of[np.concatenate([diag, cols])]
        self._keep = (r >= 0) & (c >= 0)
        self._r, self._c = r[self._keep], c[self._keep]
        h = prob.h
        self.mdiag = np.repeat(model.mass / h ** 2 + _drag(model) / h, 3)
        self.inertia = np.repeat(model.mass / h ** 2, 3)
        self.model, self.prob = model, prob

    def matrix(self, x, t, shift=0.0):
        """S = M/h^2 + D/h - dF/dq at x (1, n, 3) on the free DOFs (CSC); ``shift`` adds shift * M/h^2."""
        diag = self.mdiag + shift * self.inertia
        vals = np.concatenate([diag, -self.model.jacobian_values(x, t)[0]])[self._keep]
        m = self.free.size
        return sp.csc_matrix((vals, (self._r, self._c)), shape=(m, m))

    def solve(self, q_prev, q_cur, rhs_extra, x_pins, t, tol=1e-9, max_iters=100):
        """Solve the step for q_next; returns (q_next, LU of S at the solution).

        For a conservative model the step is the minimizer of the incremental potential
        Phi(y) = |y - 2 q_cur + q_prev|^2_M / 2h^2 + |y - q_cur|^2_D / 2h + U(y) - u . y, whose gradient
        is the step residual R: Newton directions from S + shift M/h^2, the shift raised until the
        matrix is positive definite (buckling cloth, inverted elements), with backtracking on Phi.
        Otherwise (wind, non-potential forces) Newton with backtracking on |R|, the same shift
        taken when steps stall.
        """
        prob, model = self.prob, self.model
        h = prob.h
        m = model.mass[:, None]
        d = _drag(model)[:, None]
        x = 2 * q_cur - q_prev
        x[prob.pins] = x_pins
        tt = np.array([t])
        potential = model.conservative

        def res(y):
            r = m * (y - 2 * q_cur + q_prev) / h ** 2 + d * (y - q_cur) / h - model.forces(y[None], tt)[0] - rhs_extra
            return r.ravel()[self.free]

        def merit(y, r, on_phi):
            if not on_phi:
                return float(np.linalg.norm(r))
            return float(np.sum(m * (y - 2 * q_cur + q_prev) ** 2) / (2 * h ** 2) + np.sum(d * (y - q_cur) ** 2) / (2 * h)
                         + model.energy(y[None], tt)[0] - np.sum(rhs_extra * y))

        r = res(x)
        # Round-off reference: the largest of inertia, residual and force terms that R sums.
        scale = max(np.abs(m * (q_cur - q_prev)).max() / h ** 2, np.abs(r).max(),
                    np.abs(model.forces(x[None], tt)).max(), 1e-300)
        shift = 0.0
        for _ in range(max_iters):
            if np.abs(r).max() <= tol * scale:
                return x, spla.splu(self.matrix(x[None], tt))
            # Phi's round-off swamps its decrease close to the solution: finish on |R| there.
            on_phi = potential and np.abs(r).max() > 1e3 * tol * scale
            dx, shift = self._direction(x, tt, r, shift, on_phi)
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
                return x, spla.splu(self.matrix(x[None], tt))
        raise SimulationFailed(f"implicit step did not converge (residual {np.abs(r).max():.3e} N)")

    def _direction(self, x, tt, r, shift, potential):
        """Newton direction -(S + shift M/h^2)^-1 R; for potentials the shift grows until S is positive definite."""
        while True:
            S = self.matrix(x[None], tt, shift)
            if not potential:
                return spla.splu(S).solve(-r), shift
            try:   # symmetric pivoting only: positive pivots <=> positive definite
                lu = spla.splu(S, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0, options={"SymmetricMode": True})
                if np.all(lu.U.diagonal() > 0) and np.array_equal(lu.perm_r, lu.perm_c):
                    return lu.solve(-r), shift
            except RuntimeError:   # exactly singular
                pass
            shift = max(1e-3, 10 * shift)


def simulate(prob, n_states=None, controls=None, keep_factors=False):
    """Forward simulation on the solver grid: states q_0..q_{n_states-1} (default n_steps).

    ``controls`` (n_states - 1, n, 3): u_j added to the forces of equation j (row 0 unused).
    With ``keep_factors`` (backward scheme) also returns the LU factors of each step's matrix, for
    the adjoint. Raises SimulationFailed when the state blows up or an implicit step fails.
    """
    model, h = prob.model, prob.h
    n_states = prob.n_steps if n_states is None else int(n_states)
    n = model.n_vertices
    q = np.empty((n_states, n, 3))
    q[0], q[1] = prob.r0, prob.r1_step
    pins = prob.pin_path(np.arange(n_states))
    q[0, prob.pins], q[1, prob.pins] = pins[0], pins[1]
    u = np.zeros((n_states, n, 3)) if controls is None else controls
    m = model.mass[:, None]
    d = _drag(model)[:, None]
    factors = [None, None]
    stepper = _ImplicitStep(prob) if prob.scheme == "backward" else None
    for j in range(1, n_states - 1):
        t = prob.step_times(j) if stepper is None else prob.step_times(j + 1)
        if stepper is None:
            f = model.forces(q[j][None], np.array([t]))[0] - d * (q[j] - q[j - 1]) / h + u[j]
            q[j + 1] = 2 * q[j] - q[j - 1] + h ** 2 * f / m
            q[j + 1, prob.pins] = pins[j + 1]
        else:
            q[j + 1], lu = stepper.solve(q[j - 1], q[j], u[j], pins[j + 1], t)
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
    """dG/du_j (n_states - 1, n, 3) for the trajectory q (L + 2 states) by the adjoint method."""
    model, h = prob.model, prob.h
    L = prob.n_steps
    n = model.n_vertices
    free = np.ones((n, 3))
    free[prob.pins] = 0.0
    lam = np.zeros_like(q)
    lam[L] = (q[L] - prob.r0) * free
    lam[L + 1] = (q[L + 1] - prob.r1_step) * free
    m = model.mass[:, None]
    d = _drag(model)[:, None]
    grad = np.zeros_like(q[:-1])
    rows, cols = model.jacobian_pattern()
    free_idx = np.flatnonzero(free.ravel())
    if prob.scheme == "symplectic":
        steps = np.arange(1, L + 1)
        jvals = model.jacobian_values(q[steps], prob.step_times(steps))
    for k in range(L + 1, 1, -1):
        mu = lam[k] * free
        if prob.scheme == "symplectic":
            w = h ** 2 * mu / m                    # dG/du_{k-1}
            # (dF/dq)^T w: entry (row, col) of dF/dq contributes val * w[row] to column col
            jtw = np.bincount(cols, weights=jvals[k - 2] * w.ravel()[rows], minlength=3 * n)
            grad[k - 1] = w
            lam[k - 1] += 2 * mu + jtw.reshape(n, 3) - d * w / h
            lam[k - 2] += -mu + d * w / h
        else:
            z = np.zeros(3 * n)
            z[free_idx] = factors[k].solve(mu.ravel()[free_idx], trans="T")
            z = z.reshape(n, 3)
            grad[k - 1] = z
            lam[k - 1] += (2 * m / h ** 2 + d / h) * z
            lam[k - 2] += -m / h ** 2 * z
    return grad
