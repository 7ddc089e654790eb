"""Gauss–Newton's linear solves, direct and structured, behind one backend protocol.

``make_backend("auto" | "cholmod" | "scipy" | "structured")`` returns a backend that Gauss–Newton drives the
same way whatever it is: ``bind(prob, options)`` once (``options``: ``solver_core.options.Options``, None for
``DEFAULTS``); per iteration ``g = linearize(q, u)``, ``direction(g, damping)`` (the step solving
(J^T B J + damping D) d = -g, D ``residual.damping_metric``) and ``apply(d)`` (the Gauss–Newton product);
``residual_gradient(u)`` (J^T B u for any residual array u, at the last linearization); ``tighten()`` when an
inexact direction stalled (False: it cannot); ``inexact``; ``truncated`` (the last direction's solve stopped at
its cap short of its tolerance); ``name``. The direct backends (``DirectBackend``) assemble the matrix and
factorize it: CHOLMOD computes the symbolic analysis on the first matrix and reuses it for every later one (the
Gauss–Newton matrix keeps its sparsity pattern), and the last factorization preconditions conjugate gradients on
later matrices before they are factorized; SciPy (SuperLU) is the fallback when scikit-sparse is not importable.
"structured" (see ``structured_solve``) never assembles the matrix.
"""
import weakref

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from ..physics.forward import recycled_heap
from ..options import DEFAULTS
from ..physics.residual import ResidualJacobian, damping_metric, penalty_terms, residual_steps
from .structured_solve import StructuredBackend, cholmod, pcg   # cholmod: None without scikit-sparse


class NotPositiveDefinite(ArithmeticError):
    """The matrix could not be factorized as symmetric positive definite."""


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


def entry_positions(H, D):
    """The positions in the data of the CSC matrix ``H`` (sorted indices) of the entries of the CSC matrix ``D``
    (in D's data order), None unless H's pattern holds D's."""
    if H.format != "csc" or not H.has_sorted_indices:
        return None
    n = np.int64(H.shape[0])
    keys = np.repeat(np.arange(H.shape[1], dtype=np.int64), np.diff(H.indptr)) * n + H.indices
    wanted = np.repeat(np.arange(D.shape[1], dtype=np.int64), np.diff(D.indptr)) * n + D.indices
    where = np.minimum(np.searchsorted(keys, wanted), keys.size - 1)
    return where if np.array_equal(keys[where], wanted) else None


def plus_scaled(H, D, scale, positions):
    """CSC ``H + scale D`` (a new matrix, ``H`` kept): on H's own pattern at D's ``entry_positions`` when given, a
    copy of its values, about twice as fast as the sparse sum (docs/design/tuning.md: Implementation notes)."""
    if positions is None:
        return (H + scale * D).tocsc()
    data = H.data.copy()
    data[positions] += scale * D.data      # distinct positions: D is canonical
    out = sp.csc_matrix((data, H.indices, H.indptr), shape=H.shape)
    out.has_sorted_indices = H.has_sorted_indices
    return out


class DirectBackend:
    """The backend protocol by assembling H = J^T B J + K^T C K and factorizing it (subclasses supply
    ``factorize(A, shift)`` and ``solve(b)``)."""

    inexact = truncated = False

    def bind(self, prob, options=None):
        """Solve for the LoopProblem ``prob`` from now on, with the tuning values ``options`` (None: ``DEFAULTS``;
        this reads ``options.linear_solve`` and the damping metric's ``options.gauss_newton.smoothing``)."""
        self.prob = prob
        options = DEFAULTS if options is None else options
        self.linear = options.linear_solve
        self.smoothing = options.gauss_newton.smoothing
        self._factored = False
        self._factored_for = (lambda: None, 0.0, 0.0)   # (weak reference to the matrix without damping, damping,
        # Levenberg shift) of the last factorization
        self.factorizations, self.reused, self.reuse_cg_iterations = 0, 0, []
        self.metric = damping_metric(prob, smoothing=self.smoothing)
        self._jac = None
        self._H = self._J = None
        self._positions = None   # ``entry_positions`` of the metric in _H

    @property
    def jac(self):
        """The assembled residual Jacobian (built on first use)."""
        if self._jac is None:
            self._jac = ResidualJacobian(self.prob)
        return self._jac

    def system(self, q, u=None):
        """(H, g): Gauss–Newton matrix J^T B J + K^T C K and gradient J^T B u + K^T C g at q (u: the
        residual at q, computed when not given); with contact the damping metric becomes q's."""
        if self.prob.model.contact:
            self.metric = damping_metric(self.prob, q, self.smoothing)
        with recycled_heap():
            J = self._J = self.jac.assemble(q)
            g = self.residual_gradient(residual_steps(self.prob, q) if u is None else u)
            H = self.jac.normal_matrix(J)
            pg, pdiag = _penalty_gradient_and_diagonal(self.prob, q, self.jac.free_flat)
            if np.any(pdiag):
                penalty = sp.diags(pdiag, format="csc")
                H = plus_scaled(H, penalty, 1.0, entry_positions(H, penalty))
        return H, g + pg

    def solve_system(self, H, g, damping=0.0):
        """Solve (H + damping D) d = -g, D the damping metric; if singular, retry with a growing Levenberg shift.

        With ``options.linear_solve.reuse`` and a factorization at hand (of an earlier iteration's matrix or
        damping), conjugate gradients preconditioned by it are tried first: to a relative residual of
        ``reuse_rtol`` (at which the direction is that of the direct solve) within ``reuse_cg_iters`` iterations,
        given up from iteration ``reuse_pace`` on when slower than the pace that reaches it in time; else the
        matrix is factorized.
        ``factorizations`` and ``reused`` count both outcomes. Runs on the ``recycled_heap``.

        Parameters
        ----------
        H : scipy.sparse.csc_matrix
            The Gauss–Newton matrix without damping (``system``).
        g : ndarray
            The gradient on the free unknowns.
        damping : float, optional
            Levenberg–Marquardt's lambda.

        Returns
        -------
        ndarray
            The step d.
        """
        with recycled_heap():
            return self._solve_system(H, g, damping)

    def _solve_system(self, H, g, damping):
        matrix, factored, shift = self._factored_for
        if self._factored and matrix() is H and (factored, shift) == (damping, 0.0):
            return -self.solve(g)   # the factor of this very system (the geodesic acceleration's solve)
        undamped = H
        if damping > 0:
            positions = self._positions if H is self._H else entry_positions(H, self.metric)
            H = plus_scaled(H, self.metric, damping, positions)
        if self.linear.reuse and self._factored and not self._far(undamped, damping):
            linear = self.linear
            d, iterations, converged = pcg(H.dot, -g, self.solve, linear.reuse_rtol, linear.reuse_cg_iters,
                                           pace=linear.reuse_pace)
            self.reuse_cg_iterations.append(iterations)
            if converged:
                self.reused += 1
                return d
        self.factorizations += 1
        shift = 0.0
        scale = float(H.diagonal().mean())
        for _ in range(8):
            try:
                self._factored = False
                self.factorize(H, shift)
                self._factored, self._factored_for = True, (weakref.ref(undamped), damping, shift)
                return -self.solve(g)
            except NotPositiveDefinite:
                shift = scale * (1e-10 if shift == 0.0 else shift / scale * 100)
        raise NotPositiveDefinite("the Gauss–Newton matrix stays singular even with a Levenberg shift")

    def _far(self, H, damping):
        """True when the last factorization is of ``H`` itself at a damping more than ``reuse_damping_ratio``
        times larger or smaller than ``damping`` (both positive): the preconditioned matrix's condition number is
        up to that ratio, too large for CG to reach the direct solve's direction in time."""
        matrix, factored, _ = self._factored_for
        low, high = sorted((damping, factored))
        return matrix() is H and low > 0 and high > self.linear.reuse_damping_ratio * low

    def linearize(self, q, u):
        """Gradient at q with residual u; assembles the matrix of the next ``direction`` solves."""
        self._H, g = self.system(q, u)
        self._positions = entry_positions(self._H, self.metric)
        return g

    def direction(self, g, damping=0.0):
        """The step d solving (H + damping D) d = -g at the last linearization.

        Parameters
        ----------
        g : ndarray
            The gradient on the free unknowns (``linearize``).
        damping : float, optional
            Levenberg–Marquardt's lambda; D is the damping metric.

        Returns
        -------
        ndarray
            The step on the free unknowns.
        """
        return self.solve_system(self._H, g, damping)

    def apply(self, d):
        """The Gauss–Newton product H d at the last linearization."""
        return self._H @ d

    def diagonal(self):
        """diag(H) at the last linearization."""
        return self._H.diagonal()

    def residual_gradient(self, u):
        """J^T B u at the last linearization, for a residual array u (n_steps, n, 3)."""
        return self._J.T @ (self.jac.row_weights * self.jac.active_rows(u))

    def tighten(self):
        """A direct solve is exact: nothing to tighten."""
        return False


class CholmodBackend(DirectBackend):
    """CHOLMOD supernodal Cholesky with the symbolic analysis reused across factorizations (of every problem
    the backend is bound to whose matrix has the same pattern: the runs of a race). The analysis takes
    CHOLMOD's "best" ordering (AMD, METIS and nested dissection tried) from ``best_ordering_min_unknowns`` on,
    AMD below, where "best" costs more to analyze than it saves."""

    name = "cholmod"

    def __init__(self):
        if cholmod is None:
            raise ImportError("scikit-sparse (CHOLMOD) is not installed; use backend='scipy'")
        self._factor = None
        self._columns = None   # the column pointers of the analyzed pattern
        self.analyses = 0

    def factorize(self, A, shift=0.0):
        A = sp.csc_matrix(A)
        try:
            if self._factor is None or not np.array_equal(A.indptr, self._columns):
                order = "best" if A.shape[0] >= self.linear.best_ordering_min_unknowns else "amd"
                self._factor = cholmod.analyze(A, mode="supernodal", ordering_method=order)
                self._columns = A.indptr.copy()
                self.analyses += 1
            self._factor.cholesky_inplace(A, beta=shift)
        except cholmod.CholmodNotPositiveDefiniteError as exc:
            raise NotPositiveDefinite(str(exc)) from exc

    def solve(self, b):
        return self._factor(b)

    def factor_nnz(self):
        """Nonzeros of the current Cholesky factor."""
        return int(self._factor.L().nnz)


class ScipyBackend(DirectBackend):
    """SciPy SuperLU on the (shifted) matrix; checks positive pivots of symmetric input."""

    name = "scipy"

    def __init__(self):
        self._lu = None

    def factorize(self, A, shift=0.0):
        A = sp.csc_matrix(A)
        if shift:
            A = A + shift * sp.identity(A.shape[0], format="csc")
        try:
            self._lu = spla.splu(A, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0,
                                 options={"SymmetricMode": True})
        except RuntimeError as exc:  # exactly singular
            raise NotPositiveDefinite(str(exc)) from exc
        if np.any(self._lu.U.diagonal() <= 0):
            raise NotPositiveDefinite("matrix is not positive definite (non-positive pivot)")

    def solve(self, b):
        return self._lu.solve(b)

    def factor_nnz(self):
        return int(self._lu.L.nnz + self._lu.U.nnz)


BACKENDS = {"cholmod": CholmodBackend, "scipy": ScipyBackend, "structured": StructuredBackend}


def make_backend(name="auto"):
    """A fresh backend of the linear-solve protocol, to be bound with ``bind(prob, options)``.

    Which one a problem gets is ``gauss_newton.choose_backend``'s choice alone.

    Parameters
    ----------
    name : str or backend object, optional
        "cholmod", "scipy", "structured", "auto" (the direct solve: CHOLMOD when available, else SciPy), or a
        backend object, returned as it is.

    Returns
    -------
    DirectBackend or StructuredBackend
        The backend (not yet bound).
    """
    if name == "auto":
        name = "cholmod" if cholmod is not None else "scipy"
    if isinstance(name, str):
        if name not in BACKENDS:
            raise ValueError(f"unknown linear solver backend {name!r}; choose from {sorted(BACKENDS)} or 'auto'")
        return BACKENDS[name]()
    return name
