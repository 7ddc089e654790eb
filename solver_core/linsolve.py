"""Sparse symmetric positive definite solves behind one small interface.

``make_backend("auto" | "cholmod" | "scipy" | "structured")`` returns an object with
``factorize(A)`` and ``solve(b)``, or, for "structured" (see ``structured_solve``), a problem-aware
backend with ``bind(prob)``, ``linearize(q, u)`` and ``direction(g, damping)`` that never assembles
the matrix. The CHOLMOD backend computes the symbolic analysis on the first matrix and reuses it
for every later one (the Gauss–Newton matrix keeps its sparsity pattern); the SciPy backend (SuperLU)
is the fallback when scikit-sparse is not importable.
"""
import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from .structured_solve import StructuredBackend

try:
    from sksparse import cholmod
except ImportError:  # scikit-sparse is optional
    cholmod = None


class NotPositiveDefinite(ArithmeticError):
    """The matrix could not be factorized as symmetric positive definite."""


class CholmodBackend:
    """CHOLMOD supernodal Cholesky with the symbolic analysis reused across factorizations."""

    name = "cholmod"

    def __init__(self):
        if cholmod is None:
            raise ImportError("scikit-sparse (CHOLMOD) is not installed; use backend='scipy'")
        self._factor = None
        self.analyses = 0

    def factorize(self, A, shift=0.0):
        A = sp.csc_matrix(A)
        try:
            if self._factor is None:
                self._factor = cholmod.analyze(A, mode="supernodal", ordering_method="best")
                self.analyses += 1
            self._factor.cholesky_inplace(A, beta=shift)
        except cholmod.CholmodNotPositiveDefiniteError as exc:
            raise NotPositiveDefinite(str(exc)) from exc

    def solve(self, b):
        return self._factor(b)

    def factor_nnz(self):
        """Nonzeros of the current Cholesky factor."""
        return int(self._factor.L().nnz)


class ScipyBackend:
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
    """A fresh linear-solver backend: "cholmod", "scipy", "structured", or "auto" (the direct solve:
    CHOLMOD when available, else SciPy). ``GaussNewton`` resolves its own "auto" with
    ``gauss_newton.choose_backend``, which picks "structured" for large problems it applies to."""
    if name == "auto":
        name = "cholmod" if cholmod is not None else "scipy"
    if isinstance(name, str):
        if name not in BACKENDS:
            raise ValueError(f"unknown linear solver backend {name!r}; choose from {sorted(BACKENDS)} or 'auto'")
        return BACKENDS[name]()
    return name
