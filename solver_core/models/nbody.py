"""Point masses under mutual Newtonian gravity with Plummer softening."""
import numpy as np

from .base import ForceTerm, Model


class NBodyGravity(ForceTerm):
    """F_i = sum_k G m_i m_k (q_k - q_i) / (|q_k - q_i|^2 + softening^2)^(3/2)."""

    def __init__(self, masses, G=1.0, softening=0.0):
        self.masses = np.asarray(masses, dtype=float)
        self.G = float(G)
        self.softening = float(softening)
        if self.G < 0 or self.softening < 0:
            raise ValueError("G and softening must be non-negative")
        n = self.n_vertices = self.masses.size
        # Dense 3x3 blocks for every ordered pair (i, k), diagonal blocks included.
        i, k, a, b = np.meshgrid(np.arange(n), np.arange(n), np.arange(3), np.arange(3), indexing="ij")
        self._rows = (3 * i + a).ravel()
        self._cols = (3 * k + b).ravel()

    def _pair_terms(self, q):
        d = q[:, None, :, :] - q[:, :, None, :]              # d[b, i, k] = q_k - q_i
        r2 = np.einsum("bikx,bikx->bik", d, d) + self.softening ** 2
        n = self.n_vertices
        r2 = np.where(np.eye(n, dtype=bool), 1.0, r2)       # no self-interaction
        gmm = self.G * self.masses[:, None] * self.masses[None, :] * (1.0 - np.eye(n))
        return d, r2, gmm

    def forces(self, q, t=None):
        d, r2, gmm = self._pair_terms(q)
        coef = gmm / r2 ** 1.5
        return np.einsum("bik,bikx->bix", coef, d)

    def jacobian_pattern(self):
        return self._rows, self._cols

    def jacobian_values(self, q, t=None):
        d, r2, gmm = self._pair_terms(q)
        eye = np.eye(3)
        # A_ik = dF_i/dq_k = G m_i m_k (I / r^3 - 3 d d^T / r^5) for k != i.
        blocks = (gmm / r2 ** 1.5)[..., None, None] * eye - 3.0 * (gmm / r2 ** 2.5)[..., None, None] * (
            d[..., :, None] * d[..., None, :])
        n = self.n_vertices
        diag = -blocks.sum(axis=2)                             # dF_i/dq_i = -sum_k A_ik
        idx = np.arange(n)
        blocks[:, idx, idx] = diag
        return blocks.reshape(q.shape[0], -1)


class NBody(Model):
    """N bodies of ``masses`` under mutual gravity (constant ``G``, Plummer ``softening``)."""

    def __init__(self, masses, G=1.0, softening=0.0):
        super().__init__(masses, [NBodyGravity(masses, G, softening)])
