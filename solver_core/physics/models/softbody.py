"""Linear-tetrahedron FEM soft bodies: hyperelastic energy, forces and the exact (unprojected) Jacobian.

Laws (F the deformation gradient, J = det F, I_C = |F|^2, mu/lam the Lame parameters from Young's
modulus and Poisson's ratio):

- ``"stable_neohookean"`` (Smith, de Goes, Kim 2018, eq. 14 with the log term):
  Psi = mu'/2 (I_C - 3) + lam'/2 (J - alpha)^2 - mu'/2 log(I_C + 1), alpha = 1 + 3 mu' / (4 lam'),
  with the reparametrisation mu' = 4/3 mu, lam' = lam + 5/6 mu so its linearization at rest is
  linear elasticity with (mu, lam); shifted by a constant so that Psi(I) = 0. Rest stable, defined
  and smooth for inverted elements.
- ``"corotated"`` (fixed corotated, Stomakhin et al. 2012): Psi = mu |F - R|^2 + lam/2 (J - 1)^2 with
  R the rotation of the polar decomposition F = R S (sign-corrected SVD, so R is proper). Its
  Hessian needs (tr(S) I - S)^-1, singular only when two signed singular values sum to zero (a tet
  crushed flat and inverted), where the law itself is not differentiable.

Forces are -dE/dq with E = sum_tets rest_volume * Psi; the Jacobian is -d^2E/dq^2 (not projected).
"""
import numpy as np
import scipy.sparse as sp

from .base import ForceTerm, Model

LAWS = ("stable_neohookean", "corotated")

_LEVI_CIVITA = np.zeros((3, 3, 3))
_LEVI_CIVITA[[0, 1, 2], [1, 2, 0], [2, 0, 1]] = 1.0
_LEVI_CIVITA[[0, 2, 1], [2, 1, 0], [1, 0, 2]] = -1.0
# d^2 J / dF_ij dF_kl = eps_ikp eps_jlq F_pq, as a linear map from F (9,) to the (9, 9) Hessian
_DET_HESSIAN_BASIS = np.einsum("ikp,jlq->pqijkl", _LEVI_CIVITA, _LEVI_CIVITA).reshape(9, 81)


def lame_parameters(youngs_modulus, poisson_ratio):
    """Lame parameters (mu, lam) from Young's modulus E > 0 and Poisson's ratio -1 < nu < 1/2."""
    e, nu = float(youngs_modulus), float(poisson_ratio)
    if not (np.isfinite(e) and e > 0):
        raise ValueError(f"youngs_modulus must be finite and positive, got {youngs_modulus}")
    if not (-1.0 < nu < 0.5):
        raise ValueError(f"poisson_ratio must lie in (-1, 0.5), got {poisson_ratio}")
    return e / (2.0 * (1.0 + nu)), e * nu / ((1.0 + nu) * (1.0 - 2.0 * nu))


def _cofactor(f):
    """Cofactor matrix dJ/dF (..., 3, 3): its columns are cross products of F's columns."""
    c0, c1, c2 = f[..., :, 0], f[..., :, 1], f[..., :, 2]
    return np.stack([np.cross(c1, c2), np.cross(c2, c0), np.cross(c0, c1)], axis=-1)


def _det_hessian(f):
    """d^2 J / dF^2 as (..., 9, 9) matrices over row-major flattened F."""
    return (f.reshape(-1, 9) @ _DET_HESSIAN_BASIS).reshape(f.shape[:-2] + (9, 9))


def _outer(a, b):
    """(..., 9, 9) outer products of row-major flattened 3x3 matrices."""
    a, b = a.reshape(a.shape[:-2] + (9,)), b.reshape(b.shape[:-2] + (9,))
    return a[..., :, None] * b[..., None, :]


def _polar(f):
    """Proper rotation R and symmetric S with F = R S, via an SVD with reflection moved into S."""
    u, sigma, vt = np.linalg.svd(f)
    reflect = np.linalg.det(u) * np.linalg.det(vt) < 0
    u[reflect, :, 2] *= -1.0
    sigma[reflect, 2] *= -1.0
    r = u @ vt
    s = np.einsum("...ki,...k,...kj->...ij", vt, sigma, vt)
    return r, s


def _stable_neohookean(f, mu, lam, with_hessian):
    mu, lam = 4.0 / 3.0 * mu, lam + 5.0 / 6.0 * mu
    alpha = 1.0 + 0.75 * mu / lam
    ic = np.einsum("...ij,...ij->...", f, f)
    j = np.linalg.det(f)
    cof = _cofactor(f)
    rest = 0.5 * lam * (1.0 - alpha) ** 2 - 0.5 * mu * np.log(4.0)
    psi = 0.5 * mu * (ic - 3.0) + 0.5 * lam * (j - alpha) ** 2 - 0.5 * mu * np.log1p(ic) - rest
    a = mu * (1.0 - 1.0 / (ic + 1.0))
    p = a[..., None, None] * f + (lam * (j - alpha))[..., None, None] * cof
    if not with_hessian:
        return psi, p, None
    dp = _det_hessian(f)
    dp *= (lam * (j - alpha))[..., None, None]
    dp += _outer(lam * cof, cof)
    dp += _outer((2.0 * mu / (ic + 1.0) ** 2)[..., None, None] * f, f)
    dp[..., np.arange(9), np.arange(9)] += a[..., None]
    return psi, p, dp


def _corotated(f, mu, lam, with_hessian):
    r, s = _polar(f)
    j = np.linalg.det(f)
    cof = _cofactor(f)
    psi = mu * np.einsum("...ij,...ij->...", f - r, f - r) + 0.5 * lam * (j - 1.0) ** 2
    p = 2.0 * mu * (f - r) + (lam * (j - 1.0))[..., None, None] * cof
    if not with_hessian:
        return psi, p, None
    # dR = R [w]x with w = (tr(S) I - S)^-1 axial(R^T dF - dF^T R), which gives
    # dR_ij / dF_kl = M_(ij)d C_dc M_(kl)c with M_(ij)d = R_ie eps_ejd and C = (tr(S) I - S)^-1
    c = np.linalg.inv(np.trace(s, axis1=-2, axis2=-1)[..., None, None] * np.eye(3) - s)
    m = (r @ _LEVI_CIVITA.reshape(3, 9)).reshape(f.shape[:-2] + (9, 3))
    dp = _det_hessian(f)
    dp *= (lam * (j - 1.0))[..., None, None]
    dp += _outer(lam * cof, cof)
    dp -= (2.0 * mu) * (m @ c @ np.swapaxes(m, -1, -2))
    dp[..., np.arange(9), np.arange(9)] += 2.0 * mu
    return psi, p, dp


_ENERGY_DENSITIES = {"stable_neohookean": _stable_neohookean, "corotated": _corotated}


def _validate_mesh(rest_positions, tets):
    rest = np.asarray(rest_positions, dtype=float)
    tets = np.asarray(tets)
    if rest.ndim != 2 or rest.shape[1] != 3 or len(rest) == 0:
        raise ValueError(f"rest_positions must have shape (n, 3), got {rest.shape}")
    if not np.all(np.isfinite(rest)):
        raise ValueError("rest_positions contain NaN or infinite coordinates")
    if tets.ndim != 2 or tets.shape[1] != 4 or len(tets) == 0:
        raise ValueError(f"tets must have shape (m, 4) with m > 0, got {tets.shape}")
    if not np.issubdtype(tets.dtype, np.integer):
        raise ValueError("tets must hold integer vertex indices")
    if tets.min() < 0 or tets.max() >= len(rest):
        raise ValueError(f"tet vertex indices out of range [0, {len(rest)})")
    tets = tets.astype(np.int64)
    x = rest[tets]
    dm = np.stack([x[:, k] - x[:, 0] for k in (1, 2, 3)], axis=-1)
    vol = np.linalg.det(dm) / 6.0
    diameter = np.max(np.linalg.norm(x[:, :, None] - x[:, None, :], axis=-1), axis=(1, 2))
    degenerate = vol <= 1e-10 * diameter ** 3
    if np.any(degenerate):
        k = int(np.flatnonzero(degenerate)[0])
        kind = "inverted" if vol[k] < 0 else "degenerate (zero volume)"
        raise ValueError(f"{np.sum(degenerate)} rest tets are inverted or degenerate; e.g. tet {k} "
                         f"{tets[k].tolist()} is {kind}, signed volume {vol[k]:.3g}")
    return rest, tets, dm, vol


class ElasticTetTerm(ForceTerm):
    """Hyperelastic forces of linear tets (m, 4) over rest positions (n, 3); ``law`` in LAWS."""

    mesh = True

    def __init__(self, rest_positions, tets, youngs_modulus, poisson_ratio, law="stable_neohookean"):
        if law not in LAWS:
            raise ValueError(f"unknown law {law!r}; choose one of {LAWS}")
        rest, self.tets, dm, self.rest_volumes = _validate_mesh(rest_positions, tets)
        self.rest_positions = rest
        self.n_vertices = len(rest)
        self.law = law
        self.mu, self.lam = lame_parameters(youngs_modulus, poisson_ratio)
        g = np.linalg.inv(dm)  # F = sum_a x_a outer grad_a, grad_a = row a-1 of Dm^-1, grad_0 = -sum
        self._grads = np.concatenate([-g.sum(axis=1, keepdims=True), g], axis=1)  # (m, 4, 3)
        # dF/dx as (m, 12, 9) matrices: d F_kj / d x_ai = grad_aj delta_ik
        self._dfdx = np.einsum("maj,ik->maikj", self._grads, np.eye(3)).reshape(-1, 12, 9)
        dof = 3 * self.tets[:, :, None] + np.arange(3)  # (m, 4, 3)
        self._scatter = sp.csr_matrix((np.ones(dof.size), (np.arange(dof.size), dof.ravel())),
                                      shape=(dof.size, 3 * self.n_vertices))
        shape = (len(self.tets), 4, 3, 4, 3)
        self._rows = np.broadcast_to(dof[:, :, :, None, None], shape).ravel()
        self._cols = np.broadcast_to(dof[:, None, None, :, :], shape).ravel()

    def _evaluate(self, q, with_hessian):
        x = np.asarray(q, dtype=float)[:, self.tets]  # (B, m, 4, 3)
        f = np.einsum("bmai,maj->bmij", x, self._grads)
        return _ENERGY_DENSITIES[self.law](f, self.mu, self.lam, with_hessian)

    def energy(self, q, t=None):
        """Elastic energy (B,) of configurations q (B, n, 3)."""
        psi, _, _ = self._evaluate(q, False)
        return psi @ self.rest_volumes

    def forces(self, q, t=None):
        _, p, _ = self._evaluate(q, False)
        local = -np.einsum("m,bmij,maj->bmai", self.rest_volumes, p, self._grads)
        b = local.shape[0]
        return (self._scatter.T @ local.reshape(b, -1).T).T.reshape(b, self.n_vertices, 3)

    def jacobian_pattern(self):
        return self._rows, self._cols

    def jacobian_values(self, q, t=None):
        _, _, dp = self._evaluate(q, True)
        k = self._dfdx @ dp @ np.swapaxes(self._dfdx, -1, -2)
        k *= -self.rest_volumes[:, None, None]
        return k.reshape(k.shape[0], -1)


class SoftBody(Model):
    """Tet-mesh soft body: lumped mass density * volume / 4 per tet corner and an ElasticTetTerm.

    Add gravity, contact, ... with ``model.add(term, ...)``.

    Parameters
    ----------
    rest_positions : array_like, shape (n, 3)
        The rest shape.
    tets : array_like of int, shape (m, 4)
        The tetrahedra.
    density : float
        Mass density (kg/m^3).
    youngs_modulus, poisson_ratio : float
        The elasticity (Pa, dimensionless).
    law : {"stable_neohookean", "corotated"}
        The energy density.
    damping : array_like, optional
        Per-vertex linear drag coefficients (kg/s); None for none.
    """

    def __init__(self, rest_positions, tets, density, youngs_modulus, poisson_ratio,
                 law="stable_neohookean", damping=None):
        density = float(density)
        if not (np.isfinite(density) and density > 0):
            raise ValueError(f"density must be finite and positive, got {density}")
        self.elastic = ElasticTetTerm(rest_positions, tets, youngs_modulus, poisson_ratio, law)
        mass = np.bincount(self.elastic.tets.ravel(), np.repeat(density * self.elastic.rest_volumes / 4.0, 4),
                           minlength=self.elastic.n_vertices)
        if np.any(mass == 0):
            raise ValueError(f"{np.sum(mass == 0)} vertices belong to no tet (e.g. vertex "
                             f"{int(np.flatnonzero(mass == 0)[0])}); remove unused vertices")
        super().__init__(mass, [self.elastic], damping)
