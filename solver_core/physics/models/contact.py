"""Penalty contact with scripted colliders (floor, moving sphere, triangle mesh), after Macklin et al. 2020.

Each contact vertex i with signed distance d (positive outside the collider) to the collider has the
energy k_i * psi(s), s = thickness - d (how deep it is inside the contact layer), with

    psi(s) = 0                                           s <= 0
    psi(s) = s^3 / (6 thickness)                         0 < s <= thickness
    psi(s) = (s - thickness/2)^2 / 2 + thickness^2 / 24  s > thickness

psi is C^2, so the force k psi'(s) grad d and its Jacobian are continuous everywhere, in particular
where contact starts (d = thickness) and where the cubic ramp meets the quadratic (d = 0). Beyond the
layer the spring constant is k; at d = 0 the force is k * thickness / 2.

Stiffness: ``stiffness`` is k in N/m, a scalar or one value per body vertex. By default it is
derived from ``mass`` (kg, a scalar or one value per body vertex) as k_i = 100 * g * m_i / thickness
(g = 9.81 m/s^2): at d = 0 a vertex is pushed out with 50 times its own weight, and a vertex resting
under its own weight sits at about 0.86 thickness above the collider (a resting body, whose weight
rests on its lowest vertices, a little lower). Contact is stiff compared to gravity, yet smooth
enough for Newton-type solvers at time steps of ~10 ms. Default thickness 0.01 m (SI units).

The Jacobian is exact: -k (psi''(s) n n^T - psi'(s) Hess d), with n = grad d and, for meshes, the
Hessian of the distance to the closest feature (face, edge or vertex) held fixed.
"""
import numpy as np
import scipy.sparse as sp

from .base import ForceTerm, sample_periodic
from ..tetmesh import (EDGE_AB, EDGE_BC, EDGE_CA, FACE, check_closed_manifold, closest_points_on_triangles,
                       enclosed_volume, validate_surface)

GRAVITY = 9.81
LOAD_FACTOR = 100.0
DEFAULT_THICKNESS = 0.01
_PAIRS_PER_CHUNK = 200_000


def penalty(s, thickness):
    """psi(s), psi'(s), psi''(s) of the C^2 penalty above (unit stiffness), elementwise."""
    s = np.asarray(s, dtype=float)
    ramp = (s > 0) & (s <= thickness)
    deep = s > thickness
    psi = np.where(ramp, s ** 3 / (6.0 * thickness), 0.0)
    psi = np.where(deep, 0.5 * (s - 0.5 * thickness) ** 2 + thickness ** 2 / 24.0, psi)
    dpsi = np.where(ramp, s ** 2 / (2.0 * thickness), np.where(deep, s - 0.5 * thickness, 0.0))
    ddpsi = np.where(ramp, s / thickness, np.where(deep, 1.0, 0.0))
    return psi, dpsi, ddpsi


class PenaltyContact(ForceTerm):
    """Common part of the contact terms; subclasses supply ``_signed_distance``.

    ``vertices`` lists the body vertices tested for contact (default: all, e.g. pass the surface only).
    """

    def __init__(self, n_vertices, stiffness, thickness, mass, vertices):
        self.n_vertices = int(n_vertices)
        self.vertices = (np.arange(self.n_vertices) if vertices is None
                         else np.unique(np.asarray(vertices, dtype=np.int64)))
        if self.vertices.size and (self.vertices.min() < 0 or self.vertices.max() >= self.n_vertices):
            raise ValueError(f"contact vertex indices out of range [0, {self.n_vertices})")
        self.thickness = float(thickness)
        if not (np.isfinite(self.thickness) and self.thickness > 0):
            raise ValueError(f"thickness must be finite and positive, got {thickness}")
        if stiffness is None:
            if mass is None:
                raise ValueError("give either stiffness (N/m) or the per-vertex mass (kg) to derive it from")
            stiffness = LOAD_FACTOR * GRAVITY * np.asarray(mass, dtype=float) / self.thickness
        self.stiffness = np.broadcast_to(np.asarray(stiffness, dtype=float), (self.n_vertices,))[self.vertices].copy()
        if not np.all(np.isfinite(self.stiffness)) or np.any(self.stiffness < 0):
            raise ValueError("stiffness must be finite and non-negative")
        dof = 3 * self.vertices[:, None] + np.arange(3)
        self._rows = np.repeat(dof, 3, axis=1).ravel()
        self._cols = np.tile(dof, (1, 3)).ravel()

    def _signed_distance(self, x, t):
        """Signed distance d (B, k), gradient (B, k, 3), Hessian (B, k, 3, 3) for contact points x (B, k, 3)."""
        raise NotImplementedError

    def _distance(self, q, t):
        x = np.asarray(q, dtype=float)[:, self.vertices]
        return self._signed_distance(x, np.broadcast_to(np.asarray(t, dtype=float), (x.shape[0],)))

    def _contact(self, q, t):
        d, grad, hess = self._distance(q, t)
        psi, dpsi, ddpsi = penalty(self.thickness - d, self.thickness)
        return psi, dpsi, ddpsi, grad, hess

    def signed_distance(self, q, t):
        """Signed distances (B, k) of the contact vertices to the collider (negative inside)."""
        return self._distance(q, t)[0]

    def touching(self, q, t):
        """Boolean (B, n): the vertices within the contact layer (pushed by the collider) at positions ``q``."""
        out = np.zeros(np.shape(q)[:2], dtype=bool)
        out[:, self.vertices] = self.signed_distance(q, t) < self.thickness
        return out

    def energy(self, q, t):
        """Contact energy (B,)."""
        psi = self._contact(q, t)[0]
        return psi @ self.stiffness

    def forces(self, q, t):
        _, dpsi, _, grad, _ = self._contact(q, t)
        out = np.zeros(np.shape(q))
        out[:, self.vertices] = (self.stiffness * dpsi)[..., None] * grad
        return out

    def jacobian_pattern(self):
        return self._rows, self._cols

    def jacobian_values(self, q, t):
        _, dpsi, ddpsi, grad, hess = self._contact(q, t)
        block = (dpsi[..., None, None] * hess - ddpsi[..., None, None] * np.einsum("bki,bkj->bkij", grad, grad))
        block *= self.stiffness[:, None, None]
        return block.reshape(block.shape[0], -1)


class FloorContact(PenaltyContact):
    """Half-space {x : normal . x >= height} as collider (normal normalized for you).

    Parameters
    ----------
    n_vertices : int
        The body's vertex count.
    height : float
        The floor's offset along ``normal``.
    normal : array_like, shape (3,)
        The floor's normal (normalized here).
    stiffness : float or array_like, optional
        Penalty stiffness per vertex (N/m); None derives it from ``mass`` (a load of many vertex weights at
        the collider's surface).
    thickness : float
        The contact layer's thickness (m): the penalty acts within it.
    mass : float or array_like, optional
        The vertices' masses, for the stiffness when it is not given.
    vertices : array_like of int, optional
        The vertices tested for contact (default: all).
    """

    def __init__(self, n_vertices, height=0.0, normal=(0.0, 0.0, 1.0), stiffness=None,
                 thickness=DEFAULT_THICKNESS, mass=None, vertices=None):
        super().__init__(n_vertices, stiffness, thickness, mass, vertices)
        normal = np.asarray(normal, dtype=float)
        length = np.linalg.norm(normal)
        if normal.shape != (3,) or not (np.isfinite(length) and length > 0):
            raise ValueError(f"normal must be a non-zero 3-vector, got {normal}")
        self.normal = normal / length
        self.height = float(height)

    def _signed_distance(self, x, t):
        d = x @ self.normal - self.height
        grad = np.broadcast_to(self.normal, x.shape)
        return d, grad, np.zeros(x.shape + (3,))


class SphereContact(PenaltyContact):
    """Solid ball of ``radius`` at ``centers``: (3,) fixed or (P, 3) per frame, sampled periodically at t.

    Parameters
    ----------
    n_vertices : int
        The body's vertex count.
    centers : array_like, shape (3,) or (P, 3)
        The ball's centre, fixed or per frame.
    radius : float
        The ball's radius.
    stiffness : float or array_like, optional
        Penalty stiffness per vertex (N/m); None derives it from ``mass`` (a load of many vertex weights at
        the collider's surface).
    thickness : float
        The contact layer's thickness (m): the penalty acts within it.
    mass : float or array_like, optional
        The vertices' masses, for the stiffness when it is not given.
    vertices : array_like of int, optional
        The vertices tested for contact (default: all).
    """

    def __init__(self, n_vertices, centers, radius, stiffness=None, thickness=DEFAULT_THICKNESS,
                 mass=None, vertices=None):
        super().__init__(n_vertices, stiffness, thickness, mass, vertices)
        centers = np.asarray(centers, dtype=float)
        if centers.shape != (3,) and (centers.ndim != 2 or centers.shape[1] != 3 or len(centers) == 0):
            raise ValueError(f"centers must have shape (3,) or (P, 3), got {centers.shape}")
        if not np.all(np.isfinite(centers)):
            raise ValueError("centers contain NaN or infinite values")
        self.centers = centers
        self.radius = float(radius)
        if not (np.isfinite(self.radius) and self.radius > 0):
            raise ValueError(f"radius must be finite and positive, got {radius}")

    def _signed_distance(self, x, t):
        c = self.centers[None] if self.centers.ndim == 1 else sample_periodic(self.centers, t)
        diff = x - c[:, None, :]
        r = np.maximum(np.linalg.norm(diff, axis=-1), 1e-12 * self.radius)
        u = diff / r[..., None]
        hess = (np.eye(3) - np.einsum("bki,bkj->bkij", u, u)) / r[..., None, None]
        return r - self.radius, u, hess


class MeshContact(PenaltyContact):
    """Triangle-mesh collider: ``collider_vertices`` (nv, 3) fixed or (P, nv, 3) per frame (sampled at t).

    Triangles should face out of the collider; a closed collider with inward-facing triangles is
    flipped. The sign of the distance comes from the angle-weighted pseudo-normal of the closest
    feature (Baerentzen and Aanaes 2005), exact for closed manifold colliders; for an open one it is
    the side the nearby triangles face. The closest feature is found by brute force over all
    triangles in chunks, O(B * vertices * triangles): meant for small colliders.

    Parameters
    ----------
    n_vertices : int
        The body's vertex count.
    collider_vertices : array_like, shape (nv, 3) or (P, nv, 3)
        The collider's vertices, fixed or per frame.
    triangles : array_like of int, shape (T, 3)
        The collider's triangles.
    stiffness : float or array_like, optional
        Penalty stiffness per vertex (N/m); None derives it from ``mass`` (a load of many vertex weights at
        the collider's surface).
    thickness : float
        The contact layer's thickness (m): the penalty acts within it.
    mass : float or array_like, optional
        The vertices' masses, for the stiffness when it is not given.
    vertices : array_like of int, optional
        The vertices tested for contact (default: all).
    """

    def __init__(self, n_vertices, collider_vertices, triangles, stiffness=None, thickness=DEFAULT_THICKNESS,
                 mass=None, vertices=None):
        super().__init__(n_vertices, stiffness, thickness, mass, vertices)
        frames = np.asarray(collider_vertices, dtype=float)
        self.per_frame = frames.ndim == 3
        frames = frames if self.per_frame else frames[None]
        if frames.ndim != 3 or frames.shape[0] == 0:
            raise ValueError("collider_vertices must have shape (nv, 3) or (P, nv, 3), "
                             f"got {np.shape(collider_vertices)}")
        _, triangles = validate_surface(frames[0], triangles)
        if not np.all(np.isfinite(frames)):
            raise ValueError("collider_vertices contain NaN or infinite values")
        try:  # a closed collider is turned outward; an open one keeps the side its triangles face
            check_closed_manifold(frames[0], triangles)
            if enclosed_volume(frames[0], triangles) < 0:
                triangles = triangles[:, ::-1].copy()
        except ValueError:
            pass
        self.collider_vertices = frames
        self.triangles = triangles
        n_tri, n_cv = len(triangles), frames.shape[1]
        slots = np.stack([triangles, np.roll(triangles, -1, axis=1)], axis=-1)  # edges ab, bc, ca
        edges, self._tri_edges = np.unique(np.sort(slots, axis=-1).reshape(-1, 2), axis=0, return_inverse=True)
        self._tri_edges = self._tri_edges.reshape(n_tri, 3)
        ones = np.ones(3 * n_tri)
        self._vertex_sum = sp.csr_matrix((ones, (triangles.ravel(), np.arange(3 * n_tri))), shape=(n_cv, 3 * n_tri))
        self._edge_sum = sp.csr_matrix((ones, (self._tri_edges.ravel(), np.arange(3 * n_tri))),
                                       shape=(len(edges), 3 * n_tri))
        self._cache = None

    def _pseudo_normals(self, y):
        """Unit face normals (F, T, 3) and vertex (F, nv, 3) / edge (F, ne, 3) pseudo-normals of frames y."""
        tri = y[:, self.triangles]  # (F, T, 3 corners, 3)
        nf = np.cross(tri[:, :, 1] - tri[:, :, 0], tri[:, :, 2] - tri[:, :, 0])
        nf /= np.maximum(np.linalg.norm(nf, axis=-1, keepdims=True), 1e-300)
        e_out = np.roll(tri, -1, axis=2) - tri  # corner c -> c+1
        e_in = np.roll(tri, 1, axis=2) - tri  # corner c -> c-1
        cos = np.einsum("ftci,ftci->ftc", e_out, e_in) / np.maximum(
            np.linalg.norm(e_out, axis=-1) * np.linalg.norm(e_in, axis=-1), 1e-300)
        angle = np.arccos(np.clip(cos, -1.0, 1.0))
        f = y.shape[0]

        def gather(matrix, weights):  # sum weights (F, T, 3 slots, 3) into rows of matrix, all frames at once
            flat = weights.transpose(1, 2, 0, 3).reshape(-1, 3 * f)
            return (matrix @ flat).reshape(matrix.shape[0], f, 3).transpose(1, 0, 2)

        vn = gather(self._vertex_sum, angle[..., None] * nf[:, :, None, :])
        en = gather(self._edge_sum, np.broadcast_to(nf[:, :, None, :], nf.shape[:2] + (3, 3)))
        return nf, vn, en

    def _signed_distance(self, x, t):
        if self._cache is not None and np.array_equal(self._cache[0], x) and np.array_equal(self._cache[1], t):
            return self._cache[2]
        b, k = x.shape[:2]
        y = sample_periodic(self.collider_vertices, t) if self.per_frame else self.collider_vertices
        nf, vn, en = self._pseudo_normals(y)
        tri = y[:, self.triangles]  # (F, T, 3, 3)
        points = x.reshape(-1, 3)
        frame = np.repeat(np.arange(b), k) if self.per_frame else np.zeros(b * k, dtype=np.int64)
        closest = np.empty_like(points)
        feature = np.empty(len(points), dtype=np.int64)
        best = np.empty(len(points), dtype=np.int64)
        step = max(1, _PAIRS_PER_CHUNK // len(self.triangles))
        for s in range(0, len(points), step):
            p, tr = points[s:s + step, None, :], tri[frame[s:s + step]]
            cp, feat = closest_points_on_triangles(p, tr[:, :, 0], tr[:, :, 1], tr[:, :, 2])
            j = np.argmin(np.sum((cp - p) ** 2, axis=-1), axis=1)
            rows = np.arange(len(j))
            closest[s:s + step], feature[s:s + step], best[s:s + step] = cp[rows, j], feat[rows, j], j
        corners = self.triangles[best]
        slot = np.clip(feature, 0, 2)
        normal = np.where((feature == FACE)[:, None], nf[frame, best],
                          np.where((feature < 3)[:, None], vn[frame, corners[np.arange(len(best)), slot]],
                                   en[frame, self._tri_edges[best, np.clip(feature - 3, 0, 2)]]))
        diff = points - closest
        dist = np.linalg.norm(diff, axis=-1)
        sign = np.where(np.einsum("pi,pi->p", diff, normal) < 0, -1.0, 1.0)
        on_surface = dist <= 1e-12 * (1.0 + np.abs(points).max())
        face = (feature == FACE) | on_surface
        u = np.where(face[:, None], normal / np.maximum(np.linalg.norm(normal, axis=-1, keepdims=True), 1e-300),
                     diff / np.where(face, 1.0, dist)[:, None])
        grad = np.where(face[:, None], u, sign[:, None] * u)
        d = np.where(face, np.einsum("pi,pi->p", diff, u), sign * dist)
        # Hessian of the distance to the fixed feature: (I - u u^T - e e^T) / dist, e the edge direction
        t_c = tri[frame, best]  # (N, 3, 3)
        start = np.where(feature == EDGE_AB, 0, np.where(feature == EDGE_BC, 1, 2))
        rows = np.arange(len(best))
        e = t_c[rows, (start + 1) % 3] - t_c[rows, start]
        e /= np.maximum(np.linalg.norm(e, axis=-1, keepdims=True), 1e-300)
        e *= np.isin(feature, (EDGE_AB, EDGE_BC, EDGE_CA))[:, None]
        hess = (np.eye(3) - np.einsum("pi,pj->pij", u, u) - np.einsum("pi,pj->pij", e, e))
        hess *= np.where(face, 0.0, sign / np.where(face, 1.0, dist))[:, None, None]
        result = d.reshape(b, k), grad.reshape(b, k, 3), hess.reshape(b, k, 3, 3)
        self._cache = (x.copy(), np.array(t, copy=True), result)
        return result
