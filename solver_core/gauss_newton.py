"""Gauss–Newton on the loop loss (paper Algorithm 1) with backtracking line search."""
import time

import numpy as np
import scipy.sparse as sp

from .linsolve import NotPositiveDefinite, make_backend
from .residual import ResidualJacobian, loss, penalty_terms, residual_steps


def _penalty_gradient_and_diagonal(prob, q, free_flat):
    """Gradient and Hessian diagonal of the soft initial-condition penalties on the free unknowns."""
    grad = np.zeros(q.size)
    diag = np.zeros(q.size)
    dof = 3 * prob.n_vertices
    for w, j, target in penalty_terms(prob, q):
        w3 = np.repeat(w, 3)
        grad[j * dof:(j + 1) * dof] += w3 * (q[j] - target).ravel()
        diag[j * dof:(j + 1) * dof] += w3
    return grad[free_flat], diag[free_flat]


class GaussNewton:
    """Minimizes ``loss(prob, q)`` over the free unknowns of ``prob``.

    One instance keeps the residual-Jacobian pattern and the linear-solver backend (and so its
    symbolic factorization) for all its iterations. A problem-aware backend (one with ``bind``, such
    as "structured") computes gradient and direction itself: ``bind(prob)``, then ``step(q, u)``. ``history`` lists per-iteration dicts with
    iteration, loss, step (line-search factor), step_norm and seconds.
    """

    def __init__(self, prob, backend="auto"):
        self.prob = prob
        self.backend = make_backend(backend)
        self.problem_aware = hasattr(self.backend, "bind")
        if self.problem_aware:
            self.backend.bind(prob)
        self._jac = None
        self.history = []

    @property
    def jac(self):
        """The assembled residual Jacobian (built on first use)."""
        if self._jac is None:
            self._jac = ResidualJacobian(self.prob)
        return self._jac

    def system(self, q):
        """(H, g): Gauss–Newton matrix J^T B J + K^T C K and gradient J^T B u + K^T C g at q."""
        J = self.jac.assemble(q)
        u = self.jac.active_rows(residual_steps(self.prob, q))
        w = self.jac.row_weights
        g = J.T @ (w * u)
        WJ = sp.diags(np.sqrt(w)) @ J
        H = (WJ.T @ WJ).tocsc()
        pg, pdiag = _penalty_gradient_and_diagonal(self.prob, q, self.jac.free_flat)
        if np.any(pdiag):
            H = H + sp.diags(pdiag, format="csc")
        return H, g + pg

    def direction(self, H, g):
        """Solve H d = -g; if H is singular, retry with a growing Levenberg shift."""
        shift = 0.0
        scale = float(H.diagonal().mean())
        for _ in range(8):
            try:
                self.backend.factorize(H, shift)
                return -self.backend.solve(g)
            except NotPositiveDefinite:
                shift = scale * (1e-10 if shift == 0.0 else shift / scale * 100)
        raise NotPositiveDefinite("the Gauss–Newton matrix stays singular even with a Levenberg shift")

    def run(self, q0, max_iters=100, tol=1e-8, step_tol=1e-12, callback=None, phase="gauss_newton"):
        """Iterate from ``q0`` (n_steps, n, 3) until the relative loss decrease < ``tol``, the step is
        below ``step_tol`` relative to |q|, or ``max_iters``. Returns the best iterate (the last one:
        the loss never increases). ``callback(info)`` returning True stops after that iteration."""
        prob = self.prob
        q = prob.apply_constraints(prob.check_trajectory(q0, "initial guess"))
        free = np.flatnonzero(prob.free_mask())
        current = loss(prob, q)
        self.history = [dict(iteration=0, loss=current, step=0.0, step_norm=0.0, seconds=0.0, phase=phase)]
        self.stop_reason = "max_iters"
        self.cancelled = False
        t0 = time.perf_counter()
        for it in range(1, max_iters + 1):
            if self.problem_aware:
                d, g = self.backend.step(q, residual_steps(prob, q))
            else:
                H, g = self.system(q)
                d = self.direction(H, g)
            slope = float(g @ d)
            flat = q.ravel()
            s, accepted = 1.0, None
            for _ in range(40):
                trial = flat.copy()
                trial[free] += s * d
                trial = trial.reshape(q.shape)
                value = loss(prob, trial) if np.all(np.isfinite(trial)) else np.inf
                if value <= current + 1e-4 * s * slope:
                    accepted = (trial, value)
                    break
                s *= 0.5
            if accepted is None:
                self.stop_reason = "line_search"
                break
            step_norm = s * float(np.linalg.norm(d))
            previous, (q, current) = current, accepted
            self.history.append(dict(iteration=it, loss=current, step=s, step_norm=step_norm,
                                     seconds=time.perf_counter() - t0, phase=phase))
            if callback is not None and callback(dict(self.history[-1])):
                self.cancelled = True
                self.stop_reason = "cancelled"
                break
            if previous - current <= tol * previous:
                self.stop_reason = "tol"
                break
            if step_norm <= step_tol * max(np.linalg.norm(flat), 1e-300):
                self.stop_reason = "step_tol"
                break
        return q
