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
        self._self = np.eye(n, dtype=bool)
        self._gmm = self.G * self.masses[:, None] * self.masses[None, :] * (1.0 - np.eye(n))
        # Dense 3x3 blocks for every ordered pair (i, k), diagonal blocks included.
        i, k, a, b = np.meshgrid(np.arange(n), np.arange(n), np.arange(3), np.arange(3), indexing="ij")
        self._rows = (3 * i + a).ravel()
        self._cols = (3 * k + b).ravel()

    def _pair_terms(self, q):
        d = q[:, None, :, :] - q[:, :, None, :]              # d[b, i, k] = q_k - q_i
        r2 = np.einsum("bikx,bikx->bik", d, d) + self.softening ** 2
        r2[:, self._self] = 1.0                              # no self-interaction
        return d, r2, self._gmm

    def forces(self, q, t=None):
        d, r2, gmm = self._pair_terms(q)
        coef = gmm / (r2 * np.sqrt(r2))
        return np.einsum("bik,bikx->bix", coef, d)

    def jacobian_pattern(self):
        return self._rows, self._cols

    def jacobian_values(self, q, t=None):
        d, r2, gmm = self._pair_terms(q)
        # A_ik = dF_i/dq_k = G m_i m_k (I / r^3 - 3 d d^T / r^5) for k != i.
        c1 = gmm / (r2 * np.sqrt(r2))
        blocks = (-3.0 * c1 / r2)[..., None, None] * d[..., :, None] * d[..., None, :]
        blocks[..., np.arange(3), np.arange(3)] += c1[..., None]
        n = self.n_vertices
        idx = np.arange(n)
        blocks[:, idx, idx] = -blocks.sum(axis=2)              # dF_i/dq_i = -sum_k A_ik (A_ii is zero here)
        return blocks.reshape(q.shape[0], -1)


class NBody(Model):
    """N bodies of ``masses`` under mutual gravity (constant ``G``, Plummer ``softening``).

    Parameters
    ----------
    masses : array_like, shape (n,)
        The bodies' masses.
    G : float
        The gravitational constant.
    softening : float
        Plummer softening length: the pair force uses ``r^2 + softening^2`` (0: exact Newtonian gravity).
    """

    def __init__(self, masses, G=1.0, softening=0.0):
        super().__init__(masses, [NBodyGravity(masses, G, softening)])
