"""Gauss–Newton on the loop loss (paper Algorithm 1) with backtracking line search."""
import time
from functools import partial

import numpy as np
import scipy.sparse as sp

from .linsolve import NotPositiveDefinite, make_backend
from .residual import ResidualJacobian, inertia_metric, loss, penalty_terms, residual_steps
from .structured_solve import supports

_MAX_DAMPING_RAISES = 12  # trust-region shrinks (damping raises) per iteration before it gives up
# Levenberg–Marquardt damping, relative to the inertia metric: where it starts, its least value after a
# rejected step, and the value below which it is switched off (plain Gauss–Newton steps then converge
# quadratically on loops that can be exactly physical). Measured against starting undamped: a contact
# cloth (12 frames) converged in 149 vs 285 iterations, the flag (scale 0.25) reached 12.9 vs 13.4 in 60
# iterations, 3-body loops from fast projection took 10-11 vs 4 iterations.
_DAMPING0, _DAMPING_MIN, _DAMPING_OFF = 1e-3, 1e-4, 1e-6
_ACCEPT = 1e-4            # a step is taken when the loss falls by this fraction of the model's prediction
_FAILED_RAISES = 1        # an inexact direction whose first step was rejected counts as failed
# "auto" uses the structured solve from this many free unknowns on. Measured (time to CHOLMOD's loss after
# 4 steps, cloth from the forward simulation): 10k unknowns 3.3 s CHOLMOD vs 4.8 s structured, 18k 10.0
# vs 2.5 s, 23k 17.1 vs 9.7 s, 51k (the flag) 173 vs 15 s (measured before the sweep was stabilized).
AUTO_STRUCTURED_MIN_UNKNOWNS = 15_000
# ... and from this many for problems with velocity terms (Blender cloth): on the README's flag (17,766
# unknowns, crossfade start) CHOLMOD reached loss 2.9e4 in 3 steps, the structured solve stalled at 6.3e4
# after 12 (its 60-iteration PCG cap was reached at every step); at 108k unknowns CHOLMOD needs ~10 GB. At
# 60k CHOLMOD's estimated peak (solver_core.memory) is ~1.6 GB.
AUTO_STRUCTURED_MIN_UNKNOWNS_VELOCITY = 60_000


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
    """Minimizes ``loss(prob, q)`` over the free unknowns of ``prob`` by Levenberg–Marquardt.

    Each direction solves (J^T B J + lambda D) d = -g, with D the inertia part of the Gauss–Newton
    diagonal (6 m / h^3 per coordinate: an isotropic metric in the mass norm), and is taken when the
    loss falls by at least a fraction of the quadratic model's prediction. lambda follows the ratio
    rho of actual to predicted decrease (Nielsen's rule: shrunk after good steps, doubled with a growing
    factor after rejected ones), a trust region in the mass metric. Measured on the flag at scale 0.25
    from its forward simulation (exact solves, 100 iterations): loss 8.56 with this metric, 21.3 with
    Marquardt's diag(H) and 10.8 with the earlier line search and diag(H) damping.

    One instance keeps the residual-Jacobian pattern and the linear-solver backend (and so its
    symbolic factorization) for all its iterations. A problem-aware backend (one with ``bind``, such
    as "structured") computes gradient, direction and Gauss–Newton products itself: ``bind(prob)``, then
    per iteration ``g = linearize(q, u)``, ``direction(g, damping)`` and ``apply(d)``. When its inexact
    direction stalls, Gauss–Newton asks it to ``tighten()``; once it cannot, "auto" switches to the
    direct solve (``switched`` records the iteration). ``history`` lists per-iteration dicts with
    iteration, loss, damping, rho, step_norm, grad_norm, seconds and backend.
    """

    def __init__(self, prob, backend="auto"):
        self.prob = prob
        self.auto = backend == "auto"
        self._use(make_backend(choose_backend(prob, backend)))
        self._jac = None
        self.history = []
        self.switched = None
        self.metric = inertia_metric(prob)

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
        """Solve (H + damping D) d = -g, D the inertia metric; if singular, retry with a growing Levenberg shift."""
        if damping > 0:
            H = (H + sp.diags(damping * self.metric)).tocsc()
        shift = 0.0
        scale = float(H.diagonal().mean())
        for _ in range(8):
            try:
                self.backend.factorize(H, shift)
                return -self.backend.solve(g)
            except NotPositiveDefinite:
                shift = scale * (1e-10 if shift == 0.0 else shift / scale * 100)
        raise NotPositiveDefinite("the Gauss–Newton matrix stays singular even with a Levenberg shift")

    def _linearize(self, q):
        """(g, direction(g, damping), product d -> H d) at q."""
        if self.problem_aware:
            g = self.backend.linearize(q, residual_steps(self.prob, q))
            return g, self.backend.direction, self.backend.apply
        H, g = self.system(q)
        return g, partial(self.direction, H), H.__matmul__

    def _trial(self, q, d, free):
        trial = q.ravel().copy()
        trial[free] += d
        trial = trial.reshape(q.shape)
        return trial, (loss(self.prob, trial) if np.all(np.isfinite(trial)) else np.inf)

    def run(self, q0, max_iters=100, tol=1e-8, step_tol=1e-12, callback=None, phase="gauss_newton"):
        """Iterate from ``q0`` (n_steps, n, 3) until the relative loss decrease, or the decrease the
        undamped model still predicts, is below ``tol``; the step is below ``step_tol`` relative to |q|;
        or ``max_iters``. ``stop_reason`` says which ("tol", "step_tol", "max_iters", "no_progress",
        "cancelled"). Returns the best iterate (the last one: the loss never increases).
        ``callback(info)`` returning True stops after that iteration."""
        prob = self.prob
        q = prob.apply_constraints(prob.check_trajectory(q0, "initial guess"))
        free = np.flatnonzero(prob.free_mask())
        current = loss(prob, q)
        self.history = [dict(iteration=0, loss=current, damping=0.0, rho=0.0, step_norm=0.0,
                             seconds=0.0, phase=phase)]
        self.stop_reason = "max_iters"
        self.cancelled = False
        t0 = time.perf_counter()
        lam, grow = _DAMPING0, 2.0
        for it in range(1, max_iters + 1):
            g, solve, apply_h = self._linearize(q)
            accepted, raises, smallest_gain = None, 0, np.inf
            for raises in range(_MAX_DAMPING_RAISES):
                d = solve(g, lam)
                predicted = -(float(g @ d) + 0.5 * float(d @ apply_h(d)))
                trial, value = self._trial(q, d, free)
                smallest_gain = min(smallest_gain, predicted)
                rho = (current - value) / predicted if predicted > 0 else -np.inf
                if rho > _ACCEPT:
                    accepted = (trial, value)
                    lam, grow = lam * max(1 / 3, 1 - (2 * rho - 1) ** 3), 2.0
                    lam = 0.0 if lam < _DAMPING_OFF else lam
                    break
                if 0 <= predicted <= tol * current:   # the model itself has nothing left to gain
                    break
                lam, grow = max(lam * grow, _DAMPING_MIN), 2 * grow
            if accepted is None:
                if self._recover(it, switch=True):
                    lam, grow = _DAMPING0, 2.0
                    continue
                self.stop_reason = "tol" if 0 <= smallest_gain <= tol * current else "no_progress"
                break
            step_norm = float(np.linalg.norm(d))
            flat = q.ravel()
            previous, (q, current) = current, accepted
            self.history.append(dict(iteration=it, loss=current, damping=lam, rho=rho, step_norm=step_norm,
                                     grad_norm=float(np.linalg.norm(g)), seconds=time.perf_counter() - t0,
                                     phase=phase, backend=self.backend.name))
            if callback is not None and callback(dict(self.history[-1])):
                self.cancelled = True
                self.stop_reason = "cancelled"
                break
            failed = raises >= _FAILED_RAISES   # the trust region rejected the direction at first
            small = previous - current <= tol * previous
            if (failed or small) and self._recover(it, switch=failed):
                continue
            if small:
                self.stop_reason = "tol"
                break
            if step_norm <= step_tol * max(np.linalg.norm(flat), 1e-300):
                self.stop_reason = "step_tol"
                break
        return q
