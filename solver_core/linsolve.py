"""Gauss–Newton's linear solves, direct and structured, behind one backend protocol.

``make_backend("auto" | "cholmod" | "scipy" | "structured")`` returns a backend that Gauss–Newton
drives the same way whatever it is: ``bind(prob)`` once; per iteration ``g = linearize(q, u)``,
``direction(g, damping)`` (the step solving (J^T B J + damping D) d = -g, D ``residual.damping_metric``) and
``apply(d)`` (the Gauss–Newton product); ``residual_gradient(u)`` (J^T B u for any residual array u, at the
last linearization); ``tighten()`` when an inexact direction stalled (False: it
cannot); ``inexact``; ``truncated`` (the last direction's solve stopped at its cap short of its tolerance);
``name``. The direct backends (``DirectBackend``) assemble the matrix and
factorize it: CHOLMOD computes the symbolic analysis on the first matrix and reuses it for every later
one (the Gauss–Newton matrix keeps its sparsity pattern), and the last factorization preconditions conjugate
gradients on later matrices before they are factorized; SciPy (SuperLU) is the fallback when
scikit-sparse is not importable. "structured" (see ``structured_solve``) never assembles the matrix.
"""
import weakref

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from .forward import recycled_heap
from .residual import ResidualJacobian, damping_metric, penalty_terms, residual_steps
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
    copy of its values (150-vertex flag, on the ``recycled_heap``: 9 ms against the sparse sum's 19-24 ms, for each
    of the 68 damped matrices of a bake)."""
    if positions is None:
        return (H + scale * D).tocsc()
    data = H.data.copy()
    data[positions] += scale * D.data      # distinct positions: D is canonical
    out = sp.csc_matrix((data, H.indices, H.indptr), shape=H.shape)
    out.has_sorted_indices = H.has_sorted_indices
    return out


# Factorization reuse (``DirectBackend.solve_system``): conjugate gradients on the current matrix preconditioned
# by the last factorization, to a relative residual at which the direction is that of the direct solve, at
# most REUSE_CG_ITERS iterations (each costs a pair of triangular solves and a product with the matrix, ~1/35
# of a factorization on the 150-vertex flag), given up from iteration REUSE_PACE on when slower than the pace
# that reaches REUSE_RTOL in time. Measured on that flag's first 24 frames (10,080 unknowns, 29 iterations
# from the cache): 68 -> 38 factorizations, the same losses to 6 digits; 30 directions by CG (3-11
# iterations); on the whole flag (20,160 unknowns, bake.py) 251 -> 187 s of CPU, the same loop. There the
# directions after a damping raise of 4-8x or at the next linearization of the last iterations need 13-29
# iterations to 1e-10, 11-24 to 1e-8: at 1e-10 and 12 iterations 41 factorizations in 68 directions (solves
# 97 s of CPU), at 1e-8 and 24 iterations 25 (70 s), the same 26 iterations, losses equal to 7 digits.
REUSE_RTOL, REUSE_CG_ITERS, REUSE_PACE = 1e-8, 24, 3
# ... not tried on the matrix of the factorization's own linearization when the damping differs from the
# factorization's by more than this factor (the preconditioned matrix's condition number is up to the ratio):
# there at 1e-8 and 24 iterations ratios of 8 took 10-21 iterations, of 16 22 and 24 (a third failed after 4),
# of 63-64 and 516 all six failed, after 4-20 iterations (65 in all)
REUSE_DAMPING_RATIO = 20.0


class DirectBackend:
    """The backend protocol by assembling H = J^T B J + K^T C K and factorizing it (subclasses supply
    ``factorize(A, shift)`` and ``solve(b)``)."""

    inexact = truncated = False
    reuse = True

    def bind(self, prob):
        """Solve for the LoopProblem ``prob`` from now on."""
        self.prob = prob
        self._factored = False
        self._factored_for = (lambda: None, 0.0, 0.0)   # (weak reference to the matrix without damping, damping,
        # Levenberg shift) of the last factorization
        self.factorizations, self.reused, self.reuse_cg_iterations = 0, 0, []
        self.metric = damping_metric(prob)
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
            self.metric = damping_metric(self.prob, q)
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

        With ``reuse`` and a factorization at hand (of an earlier iteration's matrix or damping), conjugate
        gradients preconditioned by it are tried first: to a relative residual of ``REUSE_RTOL`` within
        ``REUSE_CG_ITERS`` iterations, else the matrix is factorized. ``factorizations`` and ``reused``
        count both outcomes. Runs on the ``recycled_heap``."""
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
        if self.reuse and self._factored and not self._far(undamped, damping):
            d, iterations, converged = pcg(H.dot, -g, self.solve, REUSE_RTOL, REUSE_CG_ITERS, pace=REUSE_PACE)
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
        """True when the last factorization is of ``H`` itself at a damping more than REUSE_DAMPING_RATIO times
        larger or smaller than ``damping`` (both positive)."""
        matrix, factored, _ = self._factored_for
        low, high = sorted((damping, factored))
        return matrix() is H and low > 0 and high > REUSE_DAMPING_RATIO * low

    def linearize(self, q, u):
        """Gradient at q with residual u; assembles the matrix of the next ``direction`` solves."""
        self._H, g = self.system(q, u)
        self._positions = entry_positions(self._H, self.metric)
        return g

    def direction(self, g, damping=0.0):
        """The step d solving (H + damping D) d = -g at the last linearization."""
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


# CHOLMOD's "best" ordering (AMD, METIS and nested dissection tried) from this many unknowns on, AMD below:
# on 5 bodies x 200 frames (2,970 unknowns) "best" took 0.12-0.17 s to analyze against AMD's 4 ms, and
# both factors have 114k nonzeros and factorize in ~3 ms
BEST_ORDERING_MIN_UNKNOWNS = 5_000


class CholmodBackend(DirectBackend):
    """CHOLMOD supernodal Cholesky with the symbolic analysis reused across factorizations (of every problem
    the backend is bound to whose matrix has the same pattern: the runs of a race)."""

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
                order = "best" if A.shape[0] >= BEST_ORDERING_MIN_UNKNOWNS else "amd"
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
    """A fresh backend: "cholmod", "scipy", "structured", "auto" (the direct solve: CHOLMOD when available,
    else SciPy), or a backend object as it is. Which one a problem gets is ``gauss_newton.choose_backend``'s
    choice alone."""
    if name == "auto":
        name = "cholmod" if cholmod is not None else "scipy"
    if isinstance(name, str):
        if name not in BACKENDS:
            raise ValueError(f"unknown linear solver backend {name!r}; choose from {sorted(BACKENDS)} or 'auto'")
        return BACKENDS[name]()
    return name
