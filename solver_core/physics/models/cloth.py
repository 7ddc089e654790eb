"""Thin-shell cloth: FEM membrane on triangles plus discrete-shells bending (Grinspun et al. 2003).

All terms are vectorized over elements and frames: ``q`` is ``(B, n, 3)``. Energies are exposed through
``energy(q)`` (shape ``(B,)``); forces are ``-grad energy`` and Jacobians are ``-Hessian`` (exact, not
projected to positive definite).
"""
import numpy as np
from scipy import sparse

from .base import ForceTerm, Model

# 100% cotton, measured isotropic fit used by Codimensional IPC (Li et al. 2021), the simulator the paper
# builds on (Section 5: "physical material parameters of 100% cotton"). Values from ipc-sim/Codim-IPC,
# Python/Drivers (cloth_density_iso, cloth_thickness_iso, cloth_Ebase_iso, cloth_nubase_iso, entry 0).
# Codim-IPC's example scripts additionally soften the cotton membrane by 0.1 (cloth_membEMult_iso); we keep
# the measured modulus and leave such softening to ``youngs_modulus=`` overrides.
COTTON_DENSITY = 472.641509  # kg/m^3 (0.150 kg/m^2 areal density at the thickness below)
COTTON_THICKNESS = 0.318e-3  # m
COTTON_YOUNGS_MODULUS = 0.821e6  # Pa
COTTON_POISSON_RATIO = 0.243
# Plate theory: a cylinder of radius R has bending energy D / (2 R^2) per area, D = E h^3 / (12 (1 - nu^2)).
# The discrete energy k (theta - theta_rest)^2 |e|^2 / A_e gives k / R^2 per area on a cylinder (exactly
# for a strip triangulation, within 3% for an equilateral one), hence k = D / 2 = E h^3 / (24 (1 - nu^2))
# ~ 1.17e-6 N m.
COTTON_BENDING_STIFFNESS = COTTON_YOUNGS_MODULUS * COTTON_THICKNESS**3 / (24.0 * (1.0 - COTTON_POISSON_RATIO**2))

_MIN_SHAPE_QUALITY = 1e-8  # 2 * area / longest_edge^2 below this counts as a degenerate triangle


def check_positions(positions, name="rest_positions"):
    """Validated float array ``(n, 3)`` of finite positions."""
    x = np.asarray(positions, dtype=float)
    if x.ndim != 2 or x.shape[1] != 3 or x.shape[0] == 0:
        raise ValueError(f"{name} must have shape (n, 3) with n > 0, got {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return x


def check_triangles(triangles, n_vertices):
    """Validated int64 array ``(T, 3)`` of vertex indices in range, three distinct per triangle."""
    tri = np.asarray(triangles)
    if tri.ndim != 2 or tri.shape[1] != 3 or tri.shape[0] == 0:
        raise ValueError(f"triangles must have shape (T, 3) with T > 0, got {tri.shape}")
    if not np.issubdtype(tri.dtype, np.integer):
        raise ValueError(f"triangles must hold integer vertex indices, got dtype {tri.dtype}")
    tri = tri.astype(np.int64)
    if tri.min() < 0 or tri.max() >= n_vertices:
        raise ValueError(f"triangle vertex index out of range [0, {n_vertices}): min {tri.min()}, max {tri.max()}")
    if np.any((tri[:, 0] == tri[:, 1]) | (tri[:, 1] == tri[:, 2]) | (tri[:, 0] == tri[:, 2])):
        raise ValueError("a triangle repeats a vertex index")
    return tri


def triangle_areas(x, tri):
    """Areas of triangles ``tri`` at positions ``x``; raises ValueError if any is (near) degenerate."""
    p0, p1, p2 = x[tri[:, 0]], x[tri[:, 1]], x[tri[:, 2]]
    double_area = np.linalg.norm(np.cross(p1 - p0, p2 - p0), axis=1)
    longest = np.max([np.sum((p1 - p0) ** 2, 1), np.sum((p2 - p1) ** 2, 1), np.sum((p0 - p2) ** 2, 1)], axis=0)
    bad = ~(double_area > _MIN_SHAPE_QUALITY * longest)
    if np.any(bad):
        raise ValueError(f"{np.count_nonzero(bad)} degenerate (zero or near-zero area) rest triangle(s), "
                         f"first is triangle {int(np.flatnonzero(bad)[0])}")
    return 0.5 * double_area


def block_pattern(elements):
    """Jacobian pattern of dense ``3k x 3k`` blocks for elements ``(m, k)``, in (element, a, i, b, p) order."""
    e = np.asarray(elements, dtype=np.int64)
    m, k = e.shape
    dof = (3 * e[:, :, None] + np.arange(3)).reshape(m, 3 * k)
    rows = np.broadcast_to(dof[:, :, None], (m, 3 * k, 3 * k))
    cols = np.broadcast_to(dof[:, None, :], (m, 3 * k, 3 * k))
    return rows.ravel().copy(), cols.ravel().copy()


class VertexScatter:
    """Sums per-element-corner vectors ``(B, m, k, 3)`` into per-vertex vectors ``(B, n, 3)``."""

    def __init__(self, elements, n_vertices):
        idx = np.asarray(elements, dtype=np.int64).ravel()
        self.n = n_vertices
        self.matrix = sparse.csr_matrix((np.ones(idx.size), (idx, np.arange(idx.size))), shape=(n_vertices, idx.size))

    def __call__(self, corner_values):
        b = corner_values.shape[0]
        flat = corner_values.reshape(b, -1, 3).transpose(1, 0, 2).reshape(-1, 3 * b)
        return (self.matrix @ flat).reshape(self.n, b, 3).transpose(1, 0, 2)


def cross_matrix(v):
    """``[v]_x`` with ``[v]_x u = v x u``, batched over leading axes."""
    z = np.zeros(v.shape[:-1])
    return np.stack([np.stack([z, -v[..., 2], v[..., 1]], -1),
                     np.stack([v[..., 2], z, -v[..., 0]], -1),
                     np.stack([-v[..., 1], v[..., 0], z], -1)], -2)


def _dot(u, v):
    return np.einsum("...i,...i->...", u, v)


def outer(u, v):
    """Batched outer product ``u v^T`` over leading axes."""
    return u[..., :, None] * v[..., None, :]


# ----------------------------------------------------------------------------------------------------------
# Membrane


def _neohookean(F, mu, lam, derivs):
    """Compressible neo-Hookean density of a 3x2 deformation gradient and its first/second F-derivatives.

    psi = mu/2 (tr C - 2) - mu ln J + lam/2 (ln J)^2 with C = F^T F, J = sqrt(det C).
    """
    C = np.einsum("...ki,...kj->...ij", F, F)
    det = C[..., 0, 0] * C[..., 1, 1] - C[..., 0, 1] * C[..., 1, 0]
    log_j = 0.5 * np.log(det)
    psi = 0.5 * mu * (C[..., 0, 0] + C[..., 1, 1] - 2.0) - mu * log_j + 0.5 * lam * log_j**2
    if derivs == 0:
        return psi
    c_inv = np.stack([np.stack([C[..., 1, 1], -C[..., 0, 1]], -1), np.stack([-C[..., 1, 0], C[..., 0, 0]], -1)], -2)
    c_inv /= det[..., None, None]
    Q = F @ c_inv  # dJ/dF / J, the pseudo-inverse transpose of F
    s = (lam * log_j - mu)[..., None, None]
    P = mu * F + s * Q
    if derivs == 1:
        return psi, P
    eye3 = np.eye(3)
    proj = Q @ np.swapaxes(F, -1, -2)  # projector onto the column space of F
    H = (mu * np.einsum("ip,jq->ijpq", eye3, np.eye(2))
         + lam * np.einsum("...ij,...pq->...ijpq", Q, Q)
         + s[..., None, None] * (np.einsum("...ip,...qj->...ijpq", eye3 - proj, c_inv)
                                 - np.einsum("...iq,...pj->...ijpq", Q, Q)))
    return psi, P, H


def _stvk(F, mu, lam, derivs):
    """St. Venant–Kirchhoff density psi = mu |E|^2 + lam/2 (tr E)^2, E = (F^T F - I)/2, and F-derivatives."""
    E = 0.5 * (np.einsum("...ki,...kj->...ij", F, F) - np.eye(2))
    tr = E[..., 0, 0] + E[..., 1, 1]
    psi = mu * np.einsum("...ij,...ij->...", E, E) + 0.5 * lam * tr**2
    if derivs == 0:
        return psi
    S = 2.0 * mu * E + lam * tr[..., None, None] * np.eye(2)
    P = F @ S
    if derivs == 1:
        return psi, P
    eye3 = np.eye(3)
    FFt = F @ np.swapaxes(F, -1, -2)
    H = (np.einsum("ip,...qj->...ijpq", eye3, S)
         + mu * np.einsum("...iq,...pj->...ijpq", F, F)
         + mu * np.einsum("...ip,qj->...ijpq", FFt, np.eye(2))
         + lam * np.einsum("...ij,...pq->...ijpq", F, F))
    return psi, P, H


_LAWS = {"neohookean": _neohookean, "stvk": _stvk}


class MembraneTerm(ForceTerm):
    """FEM membrane: ``thickness * area * psi(F)`` per triangle, F the 3x2 deformation gradient.

    Lamé parameters are the plane-stress ones, ``mu = E / (2 (1 + nu))``, ``lam = E nu / (1 - nu^2)``.
    ``law`` is ``"neohookean"`` or ``"stvk"``.
    """

    mesh = True

    def __init__(self, rest_positions, triangles, youngs_modulus, poisson_ratio, thickness, law="neohookean"):
        x = check_positions(rest_positions)
        tri = check_triangles(triangles, x.shape[0])
        if law not in _LAWS:
            raise ValueError(f"law must be one of {sorted(_LAWS)}, got {law!r}")
        if not youngs_modulus > 0 or not thickness > 0:
            raise ValueError("youngs_modulus and thickness must be positive")
        if not -1.0 < poisson_ratio < 1.0:
            raise ValueError(f"poisson_ratio must lie in (-1, 1) for a plane-stress membrane, got {poisson_ratio}")
        area = triangle_areas(x, tri)
        self.n_vertices = x.shape[0]
        self.triangles = tri
        self.law = _LAWS[law]
        self.mu = youngs_modulus / (2.0 * (1.0 + poisson_ratio))
        self.lam = youngs_modulus * poisson_ratio / (1.0 - poisson_ratio**2)
        self.weight = thickness * area
        # Rest edges in an orthonormal frame of each triangle's plane: Dm = [[e1.t1, e2.t1], [0, e2.t2]].
        e1 = x[tri[:, 1]] - x[tri[:, 0]]
        e2 = x[tri[:, 2]] - x[tri[:, 0]]
        t1 = e1 / np.linalg.norm(e1, axis=1, keepdims=True)
        t2 = e2 - _dot(e2, t1)[:, None] * t1
        t2 /= np.linalg.norm(t2, axis=1, keepdims=True)
        dm = np.zeros((tri.shape[0], 2, 2))
        dm[:, 0, 0] = _dot(e1, t1)
        dm[:, 0, 1] = _dot(e2, t1)
        dm[:, 1, 1] = _dot(e2, t2)
        # F = sum_a x_a G_a^T, G (T, 3 corners, 2).
        self.G = np.einsum("ak,tkj->taj", np.array([[-1.0, -1.0], [1.0, 0.0], [0.0, 1.0]]), np.linalg.inv(dm))
        # d F_ij / d x_ak = G_aj delta_ik as a (T, 6, 9) matrix from x (a, k) to vec F (i, j).
        self._dfdx = np.einsum("taj,ik->tijak", self.G, np.eye(3)).reshape(-1, 6, 9)
        self._scatter = VertexScatter(tri, self.n_vertices)
        self._pattern = block_pattern(tri)

    def _deformation_gradient(self, q):
        return np.einsum("btai,taj->btij", np.asarray(q, dtype=float)[:, self.triangles], self.G)

    def energy(self, q, t=None):
        """Membrane energy of each frame, ``(B,)``."""
        psi = self.law(self._deformation_gradient(q), self.mu, self.lam, 0)
        return psi @ self.weight

    def forces(self, q, t):
        _, P = self.law(self._deformation_gradient(q), self.mu, self.lam, 1)
        corner = -np.einsum("t,btij,taj->btai", self.weight, P, self.G)
        return self._scatter(corner)

    def jacobian_pattern(self):
        return self._pattern

    def jacobian_values(self, q, t):
        _, _, H = self.law(self._deformation_gradient(q), self.mu, self.lam, 2)
        b, m = H.shape[:2]
        H = -self.weight[:, None, None] * H.reshape(b, m, 6, 6)
        return (self._dfdx.transpose(0, 2, 1) @ H @ self._dfdx).reshape(b, -1)


# ----------------------------------------------------------------------------------------------------------
# Bending


def _congruence(h, lin):
    """``lin^T h lin`` for a batch of symmetric ``h`` (..., k, k) and a constant ``lin`` (k, l)."""
    k, l = lin.shape
    shape = h.shape[:-2]
    right = (h.reshape(-1, k) @ lin).reshape(-1, k, l)
    return (np.swapaxes(right, -1, -2).reshape(-1, k) @ lin).reshape(shape + (l, l))


# (e, a, b) = (x1 - x0, x2 - x0, x3 - x0) as a linear map of the stencil (x0, x1, x2, x3): 9 x 12.
_STENCIL_MAP = np.kron(np.array([[-1.0, 1.0, 0.0, 0.0], [-1.0, 0.0, 1.0, 0.0], [-1.0, 0.0, 0.0, 1.0]]), np.eye(3))


def dihedral_angle(e, a, b, derivs=0):
    """Signed dihedral angle at edge ``e`` between triangles (0, e, a) and (0, b, e), and its derivatives.

    Inputs are edge vectors from the shared vertex x0: ``e = x1 - x0`` (the hinge), ``a = x2 - x0``,
    ``b = x3 - x0`` with x2, x3 the opposite vertices. The normals are ``n1 = e x a`` and ``n2 = b x e``
    (parallel when flat), theta = atan2((n1 x n2).e/|e|, n1.n2) = atan2(-|e| [e, a, b], (e.a)(e.b) - |e|^2 a.b).
    Returns theta ``(...)`` and, on request, the gradient ``(..., 9)`` and Hessian ``(..., 9, 9)`` with respect
    to the stacked (e, a, b). Smooth everywhere except at theta = +-pi and degenerate triangles.
    """
    ee, ea, eb, ab = _dot(e, e), _dot(e, a), _dot(e, b), _dot(a, b)
    r = np.sqrt(ee)
    axb = np.cross(a, b)
    triple = _dot(e, axb)
    c = ea * eb - ee * ab
    s = -r * triple
    theta = np.arctan2(s, c)
    if derivs == 0:
        return theta
    w = c * c + s * s
    zero = np.zeros_like(e)
    gc = np.concatenate([a * eb[..., None] + b * ea[..., None] - 2.0 * e * ab[..., None],
                         e * eb[..., None] - b * ee[..., None],
                         e * ea[..., None] - a * ee[..., None]], -1)
    gt = np.concatenate([axb, np.cross(b, e), np.cross(e, a)], -1)
    gr = np.concatenate([e / r[..., None], zero, zero], -1)
    gs = -(triple[..., None] * gr + r[..., None] * gt)
    g = (c[..., None] * gs - s[..., None] * gc) / w[..., None]
    if derivs == 1:
        return theta, g
    # H = (c Hs - s Hc - g m^T - m g^T) / w with m = grad(w) / 2 = s gs + c gc; Hc, Hs filled blockwise.
    m = s[..., None] * gs + c[..., None] * gc
    h = -(outer(g, m) + outer(m, g))
    eye = np.eye(3)
    cw, sw = c[..., None, None], s[..., None, None]
    rw, tw = r[..., None, None], triple[..., None, None]
    unit = e / r[..., None]
    # c Hs = -c (triple Hr + gr gt^T + gt gr^T + r Ht); Hr lives in the (e, e) block, gr in the e rows.
    gr_gt = outer(unit, gt)
    h[..., :3, :] -= cw * gr_gt
    h[..., :, :3] -= cw * np.swapaxes(gr_gt, -1, -2)
    h[..., :3, :3] -= cw * tw / rw * (eye - outer(unit, unit))
    ht_ea, ht_eb, ht_ab = -cross_matrix(b), cross_matrix(a), -cross_matrix(e)
    hc_ee = outer(a, b) + outer(b, a) - 2.0 * ab[..., None, None] * eye
    hc_ea = eb[..., None, None] * eye + outer(b, e) - 2.0 * outer(e, b)
    hc_eb = ea[..., None, None] * eye + outer(a, e) - 2.0 * outer(e, a)
    hc_ab = outer(e, e) - ee[..., None, None] * eye
    h[..., :3, :3] -= sw * hc_ee
    for (u, v), blk_t, blk_c in (((0, 1), ht_ea, hc_ea), ((0, 2), ht_eb, hc_eb), ((1, 2), ht_ab, hc_ab)):
        blk = -cw * rw * blk_t - sw * blk_c
        h[..., 3 * u:3 * u + 3, 3 * v:3 * v + 3] += blk
        h[..., 3 * v:3 * v + 3, 3 * u:3 * u + 3] += np.swapaxes(blk, -1, -2)
    h /= w[..., None, None]
    return theta, g, h


def interior_edges(triangles):
    """Hinge stencils ``(E, 4)`` = (x0, x1, x2, x3) of edges shared by two triangles.

    (x0, x1) is the edge as directed in the first triangle, x2 and x3 the vertices opposite it in the first
    and second triangle. Raises ValueError for edges shared by more than two triangles.
    """
    tri = np.asarray(triangles, dtype=np.int64)
    start = tri.ravel()
    end = tri[:, [1, 2, 0]].ravel()
    opposite = tri[:, [2, 0, 1]].ravel()
    key = np.stack([np.minimum(start, end), np.maximum(start, end)], 1)
    _, inverse, counts = np.unique(key, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.ravel()
    if np.any(counts > 2):
        raise ValueError(f"{np.count_nonzero(counts > 2)} non-manifold edge(s) shared by more than two triangles")
    order = np.argsort(inverse, kind="stable")
    first = order[np.r_[0, np.cumsum(counts)[:-1]]]
    shared = counts == 2
    first = first[shared]
    second = order[np.cumsum(counts)[shared] - 1]
    return np.stack([start[first], end[first], opposite[first], opposite[second]], 1)


class BendingTerm(ForceTerm):
    """Discrete-shells bending: ``stiffness * (theta - theta_rest)^2 * |e|^2 / A_e`` per interior edge.

    ``|e|`` is the rest edge length and ``A_e`` the rest area of its two triangles (both fixed); theta is the
    signed dihedral angle and theta - theta_rest is wrapped to (-pi, pi]. Exact gradient and Hessian.
    """

    def __init__(self, rest_positions, triangles, stiffness):
        x = check_positions(rest_positions)
        tri = check_triangles(triangles, x.shape[0])
        if not stiffness >= 0:
            raise ValueError(f"bending stiffness must be non-negative, got {stiffness}")
        triangle_areas(x, tri)
        self.n_vertices = x.shape[0]
        self.hinges = h = interior_edges(tri)
        # A_e from the two triangles: |e x (x2 - x0)| / 2 + |(x3 - x0) x e| / 2.
        e = x[h[:, 1]] - x[h[:, 0]]
        a_e = 0.5 * (np.linalg.norm(np.cross(e, x[h[:, 2]] - x[h[:, 0]]), axis=1)
                     + np.linalg.norm(np.cross(x[h[:, 3]] - x[h[:, 0]], e), axis=1))
        self.weight = stiffness * _dot(e, e) / a_e
        self.rest_angle = self._angles(x[None], 0)[0]
        self._scatter = VertexScatter(h, self.n_vertices)
        self._pattern = block_pattern(h)

    def _angles(self, q, derivs):
        q = np.asarray(q, dtype=float)
        x0 = q[:, self.hinges[:, 0]]
        return dihedral_angle(q[:, self.hinges[:, 1]] - x0, q[:, self.hinges[:, 2]] - x0,
                              q[:, self.hinges[:, 3]] - x0, derivs)

    def _excess(self, theta):
        return (theta - self.rest_angle + np.pi) % (2.0 * np.pi) - np.pi

    def energy(self, q, t=None):
        """Bending energy of each frame, ``(B,)``."""
        return self._excess(self._angles(q, 0)) ** 2 @ self.weight

    def forces(self, q, t):
        theta, g = self._angles(q, 1)
        coef = -2.0 * self.weight * self._excess(theta)
        corner = (coef[..., None] * (g @ _STENCIL_MAP)).reshape(theta.shape + (4, 3))
        return self._scatter(corner)

    def jacobian_pattern(self):
        return self._pattern

    def jacobian_values(self, q, t):
        theta, g, h = self._angles(q, 2)
        hess = -2.0 * self.weight[:, None, None] * (outer(g, g) + self._excess(theta)[..., None, None] * h)
        return _congruence(hess, _STENCIL_MAP).reshape(hess.shape[0], -1)


# ----------------------------------------------------------------------------------------------------------
# Model


class Cloth(Model):
    """Cloth as a thin shell (the paper's Section 5.2): membrane + discrete-shells bending, lumped mass.

    ``density`` is volumetric (kg/m^3); each triangle gives ``density * thickness * area / 3`` to each corner.
    Defaults are 100% cotton (see ``Cloth.cotton``). ``damping`` is the optional per-vertex linear drag.

    Parameters
    ----------
    rest_positions : array_like, shape (n, 3)
        The rest shape (metres).
    triangles : array_like of int, shape (T, 3)
        The mesh's triangles.
    density, thickness : float
        Volumetric density (kg/m^3) and thickness (m): areal density ``density * thickness``.
    youngs_modulus, poisson_ratio : float
        The membrane's elasticity (Pa, dimensionless).
    bending_stiffness : float
        The discrete-shells hinge stiffness k (N m).
    law : {"neohookean", "stvk"}
        The membrane's energy density.
    damping : array_like, optional
        Per-vertex linear drag coefficients (kg/s); None for none.
    """

    def __init__(self, rest_positions, triangles, density=COTTON_DENSITY, thickness=COTTON_THICKNESS,
                 youngs_modulus=COTTON_YOUNGS_MODULUS, poisson_ratio=COTTON_POISSON_RATIO,
                 bending_stiffness=COTTON_BENDING_STIFFNESS, law="neohookean", damping=None):
        x = check_positions(rest_positions)
        tri = check_triangles(triangles, x.shape[0])
        if not density > 0:
            raise ValueError(f"density must be positive, got {density}")
        self.membrane = MembraneTerm(x, tri, youngs_modulus, poisson_ratio, thickness, law)
        self.bending = BendingTerm(x, tri, bending_stiffness)
        corner_mass = np.repeat(density * thickness * triangle_areas(x, tri) / 3.0, 3)
        mass = np.bincount(tri.ravel(), weights=corner_mass, minlength=x.shape[0])
        if np.any(mass <= 0):
            raise ValueError(f"{np.count_nonzero(mass <= 0)} vertex(es) belong to no triangle and would have zero mass")
        super().__init__(mass, [self.membrane, self.bending], damping)

    @classmethod
    def cotton(cls, rest_positions, triangles, **overrides):
        """Cloth with 100% cotton parameters (Codimensional IPC's isotropic fit); keywords override them."""
        params = dict(density=COTTON_DENSITY, thickness=COTTON_THICKNESS, youngs_modulus=COTTON_YOUNGS_MODULUS,
                      poisson_ratio=COTTON_POISSON_RATIO, bending_stiffness=COTTON_BENDING_STIFFNESS)
        params.update(overrides)
        return cls(rest_positions, triangles, **params)
