"""Gauss–Newton on the loop loss (paper Algorithm 1) with backtracking line search."""
import time
from functools import partial

import numpy as np
import scipy.sparse as sp

from .linsolve import NotPositiveDefinite, make_backend
from .residual import ResidualJacobian, loss, penalty_terms, residual_steps
from .structured_solve import supports

_MAX_DAMPING_RAISES = 4  # Marquardt damping raises per iteration before the line search gives up
# "auto" uses the structured solve from this many free unknowns on. Measured (time to CHOLMOD's loss after
# 4 steps, cloth from the forward simulation): 10k unknowns 3.3 s CHOLMOD vs 4.8 s structured, 18k 10.0
# vs 2.5 s, 23k 17.1 vs 9.7 s, 51k (the flag) 173 vs 15 s (measured before the sweep was stabilized).
AUTO_STRUCTURED_MIN_UNKNOWNS = 15_000
# ... and from this many for problems with velocity terms (Blender cloth): on the README's flag (17,766
# unknowns, crossfade start) CHOLMOD reached loss 2.9e4 in 3 steps, the structured solve stalled at 6.3e4
# after 12 (its 60-iteration PCG cap was reached at every step); at 108k unknowns CHOLMOD needs ~10 GB.
AUTO_STRUCTURED_MIN_UNKNOWNS_VELOCITY = 50_000
_FAILED_STEP = 1e-3  # line-search step below which an inexact direction counts as failed


def choose_backend(prob, name="auto"):
    """The backend "auto" means for ``prob``: "structured" where it applies and the problem is large,
    else the direct solve ("auto" of ``make_backend``). Other names pass through."""
    least = AUTO_STRUCTURED_MIN_UNKNOWNS_VELOCITY if prob.model.velocity_terms else AUTO_STRUCTURED_MIN_UNKNOWNS
    if name == "auto" and supports(prob) is None and int(prob.free_mask().sum()) >= least:
        return "structured"
    return name


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

    Each direction solves (J^T B J + damping diag(J^T B J)) d = -g, damping 0 (plain Gauss–Newton) until
    a step overshoots (Marquardt: raised when the line search cuts the step below 1/2 or fails, relaxed
    after full steps), then a backtracking line search on the loss.

    One instance keeps the residual-Jacobian pattern and the linear-solver backend (and so its
    symbolic factorization) for all its iterations. A problem-aware backend (one with ``bind``, such
    as "structured") computes gradient and direction itself: ``bind(prob)``, then per iteration
    ``g = linearize(q, u)`` and ``direction(g, damping)``. When its inexact direction stalls,
    Gauss–Newton asks it to ``tighten()``; once it cannot, "auto" switches to the direct solve
    (``switched`` records the iteration). ``history`` lists per-iteration dicts with iteration, loss,
    step (line-search factor), step_norm, seconds and backend.
    """

    def __init__(self, prob, backend="auto"):
        self.prob = prob
        self.auto = backend == "auto"
        self._use(make_backend(choose_backend(prob, backend)))
        self._jac = None
        self.history = []
        self.switched = None

    def _use(self, backend):
        self.backend = backend
        self.problem_aware = hasattr(backend, "bind")
        if self.problem_aware:
            backend.bind(self.prob)

    def _recover(self, iteration, switch):
        """After an inexact direction converged or failed: True if the inexact solve was tightened
        or, with ``switch`` (the direction failed), "auto" switched to the direct solve."""
        if not (self.problem_aware and self.backend.inexact):
            return False
        if self.backend.tighten():
            return True
        if switch and self.auto:
            self._use(make_backend("auto"))
            self.switched = iteration
            return True
        return False

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

    def direction(self, H, g, damping=0.0):
        """Solve (H + damping diag(H)) d = -g; if singular, retry with a growing Levenberg shift."""
        if damping > 0:
            H = (H + sp.diags(damping * H.diagonal())).tocsc()
        shift = 0.0
        scale = float(H.diagonal().mean())
        for _ in range(8):
            try:
                self.backend.factorize(H, shift)
                return -self.backend.solve(g)
            except NotPositiveDefinite:
                shift = scale * (1e-10 if shift == 0.0 else shift / scale * 100)
        raise NotPositiveDefinite("the Gauss–Newton matrix stays singular even with a Levenberg shift")

    def _line_search(self, q, current, d, g, free):
        """Backtracking (Armijo) along d: ``((trial, loss) or None, step factor)``."""
        slope = float(g @ d)
        s = 1.0
        for _ in range(40):
            trial = q.ravel().copy()
            trial[free] += s * d
            trial = trial.reshape(q.shape)
            value = loss(self.prob, trial) if np.all(np.isfinite(trial)) else np.inf
            if value <= current + 1e-4 * s * slope:
                return (trial, value), s
            s *= 0.5
        return None, 0.0

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
        damping = 0.0
        for it in range(1, max_iters + 1):
            if self.problem_aware:
                g = self.backend.linearize(q, residual_steps(prob, q))
                solve = self.backend.direction
            else:
                H, g = self.system(q)
                solve = partial(self.direction, H)
            for _ in range(_MAX_DAMPING_RAISES):
                d = solve(g, damping)
                accepted, s = self._line_search(q, current, d, g, free)
                # Marquardt damping: relax it after full steps, raise it when the model overshoots.
                damping = (0.0 if damping < 1e-8 else damping / 4) if s >= 0.5 else max(4 * damping, 1e-4)
                if accepted is not None:
                    break
                damping = max(100 * damping, 1e-3)
            if accepted is None:
                if self._recover(it, switch=True):
                    damping = 0.0
                    continue
                self.stop_reason = "line_search"
                break
            flat = q.ravel()
            step_norm = s * float(np.linalg.norm(d))
            previous, (q, current) = current, accepted
            self.history.append(dict(iteration=it, loss=current, step=s, step_norm=step_norm,
                                     seconds=time.perf_counter() - t0, phase=phase, backend=self.backend.name))
            if callback is not None and callback(dict(self.history[-1])):
                self.cancelled = True
                self.stop_reason = "cancelled"
                break
            failed = s < _FAILED_STEP   # the line search all but rejected the direction
            if (failed or previous - current <= tol * previous) and self._recover(it, switch=failed):
                continue
            if previous - current <= tol * previous:
                self.stop_reason = "tol"
                break
            if step_norm <= step_tol * max(np.linalg.norm(flat), 1e-300):
                self.stop_reason = "step_tol"
                break
        return q
