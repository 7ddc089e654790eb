"""Closed triangle surfaces: validation, point queries, and volume (tetrahedral) meshing.

``tetrahedralize`` keeps the surface vertices as the first tet-mesh vertices, adds a body-centred
cubic lattice inside the surface (thinned near it), runs a Delaunay triangulation and keeps the
tets whose centroid is inside (generalized winding number), peeling slivers off the boundary and
breaking inner ones up by inserting points, so that no inner crack is left. ``fill_interior``
places the interior vertices for deformed surfaces by a harmonic (P1 FEM Laplacian) extension of
the surface displacement, which reproduces the rest mesh and any affine motion exactly.
"""
import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from scipy.spatial import Delaunay

_PAIRS_PER_CHUNK = 200_000  # point x triangle pairs evaluated at once (bounds temporary memory)

# Feature codes returned by closest_points_on_triangles.
VERTEX_A, VERTEX_B, VERTEX_C, EDGE_AB, EDGE_BC, EDGE_CA, FACE = range(7)


def validate_surface(vertices, triangles):
    """Check shapes, finiteness and index range; return (vertices float (n, 3), triangles int64 (m, 3))."""
    vertices = np.asarray(vertices, dtype=float)
    triangles = np.asarray(triangles)
    if vertices.ndim != 2 or vertices.shape[1] != 3:
        raise ValueError(f"vertices must have shape (n, 3), got {vertices.shape}")
    if triangles.ndim != 2 or triangles.shape[1] != 3 or triangles.shape[0] == 0:
        raise ValueError(f"triangles must have shape (m, 3) with m > 0, got {triangles.shape}")
    if not np.issubdtype(triangles.dtype, np.integer):
        raise ValueError("triangles must hold integer vertex indices")
    if not np.all(np.isfinite(vertices)):
        raise ValueError("vertices contain NaN or infinite coordinates")
    if triangles.min() < 0 or triangles.max() >= len(vertices):
        raise ValueError(f"triangle indices out of range [0, {len(vertices)})")
    return vertices, triangles.astype(np.int64)


def check_closed_manifold(vertices, triangles):
    """Raise ValueError unless the triangles form a closed, edge-manifold, consistently oriented surface."""
    vertices, triangles = validate_surface(vertices, triangles)
    if np.any((triangles[:, 0] == triangles[:, 1]) | (triangles[:, 1] == triangles[:, 2])
              | (triangles[:, 2] == triangles[:, 0])):
        raise ValueError("surface has degenerate triangles (a repeated vertex index)")
    directed = np.concatenate([triangles[:, [0, 1]], triangles[:, [1, 2]], triangles[:, [2, 0]]])
    undirected, counts = np.unique(np.sort(directed, axis=1), axis=0, return_counts=True)
    if np.any(counts == 1):
        a, b = undirected[counts == 1][0]
        raise ValueError(f"surface is not closed: {np.sum(counts == 1)} boundary edges "
                         f"(e.g. between vertices {a} and {b}); close the holes first")
    if np.any(counts > 2):
        a, b = undirected[counts > 2][0]
        raise ValueError(f"surface is non-manifold: {np.sum(counts > 2)} edges shared by more than two "
                         f"triangles (e.g. between vertices {a} and {b})")
    if len(np.unique(directed, axis=0)) != len(directed):
        raise ValueError("surface orientation is inconsistent: some edge is traversed twice in the same "
                         "direction (recalculate normals)")


def enclosed_volume(vertices, triangles):
    """Signed volume enclosed by a closed triangle surface (positive for outward-facing triangles)."""
    v = np.asarray(vertices, dtype=float)[np.asarray(triangles)]
    return np.einsum("ti,ti->", v[:, 0], np.cross(v[:, 1], v[:, 2])) / 6.0


def winding_numbers(vertices, triangles, points):
    """Generalized winding number (m,) of a triangle surface at ``points`` (m, 3); ~1 inside, ~0 outside."""
    corners = np.asarray(vertices, dtype=float)[np.asarray(triangles)].transpose(1, 2, 0)  # (3 corners, xyz, T)
    points = np.asarray(points, dtype=float)
    out = np.empty(len(points))
    step = max(1, _PAIRS_PER_CHUNK // corners.shape[-1])
    for s in range(0, len(points), step):
        p = points[s:s + step, :, None]
        (ax, ay, az), (bx, by, bz), (cx, cy, cz) = vectors = [[k[i] - p[:, i] for i in range(3)] for k in corners]
        la, lb, lc = (np.sqrt(x * x + y * y + z * z) for x, y, z in vectors)
        num = ax * (by * cz - bz * cy) + ay * (bz * cx - bx * cz) + az * (bx * cy - by * cx)
        den = (la * lb * lc + (ax * bx + ay * by + az * bz) * lc + (bx * cx + by * cy + bz * cz) * la
               + (cx * ax + cy * ay + cz * az) * lb)
        out[s:s + step] = np.arctan2(num, den).sum(axis=1) / (2.0 * np.pi)
    return out


def closest_points_on_triangles(p, a, b, c):
    """Closest points of triangles (a, b, c) to points ``p`` (all broadcast to (..., 3)).

    Returns ``(closest, feature)``: the closest points (..., 3) and the feature holding them, one of
    VERTEX_A, VERTEX_B, VERTEX_C, EDGE_AB, EDGE_BC, EDGE_CA, FACE (Ericson's region tests).
    """
    p, a, b, c = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (p, a, b, c)))
    ab, ac, bc = b - a, c - a, c - b
    ap, bp, cp = p - a, p - b, p - c

    def dot(x, y):
        return np.einsum("...i,...i->...", x, y)

    d1, d2, d3, d4, d5, d6 = dot(ab, ap), dot(ac, ap), dot(ab, bp), dot(ac, bp), dot(ab, cp), dot(ac, cp)
    vc, vb, va = d1 * d4 - d3 * d2, d5 * d2 - d1 * d6, d3 * d6 - d5 * d4
    in_a = (d1 <= 0) & (d2 <= 0)
    in_b = (d3 >= 0) & (d4 <= d3)
    in_ab = (vc <= 0) & (d1 >= 0) & (d3 <= 0)
    in_c = (d6 >= 0) & (d5 <= d6)
    in_ca = (vb <= 0) & (d2 >= 0) & (d6 <= 0)
    in_bc = (va <= 0) & (d4 >= d3) & (d5 >= d6)
    feature = np.select([in_a, in_b, in_ab, in_c, in_ca, in_bc],
                        [VERTEX_A, VERTEX_B, EDGE_AB, VERTEX_C, EDGE_CA, EDGE_BC], FACE)

    def safe_ratio(num, den):
        return num / np.where(den == 0, 1.0, den)

    t_ab = safe_ratio(d1, d1 - d3)
    t_ca = safe_ratio(d2, d2 - d6)
    t_bc = safe_ratio(d4 - d3, (d4 - d3) + (d5 - d6))
    den = va + vb + vc
    v_face, w_face = safe_ratio(vb, den), safe_ratio(vc, den)
    # barycentric weights of b and c for each region (a's weight is 1 - v - w)
    v = np.select([feature == VERTEX_B, feature == EDGE_AB, feature == EDGE_BC, feature == FACE],
                  [1.0, t_ab, 1.0 - t_bc, v_face], 0.0)
    w = np.select([feature == VERTEX_C, feature == EDGE_CA, feature == EDGE_BC, feature == FACE],
                  [1.0, t_ca, t_bc, w_face], 0.0)
    closest = a + v[..., None] * ab + w[..., None] * ac
    return closest, feature


def surface_distance(vertices, triangles, points):
    """Unsigned distance (m,) from ``points`` (m, 3) to the triangle surface."""
    tri = np.asarray(vertices, dtype=float)[np.asarray(triangles)]
    points = np.asarray(points, dtype=float)
    out = np.empty(len(points))
    step = max(1, _PAIRS_PER_CHUNK // len(tri))
    for s in range(0, len(points), step):
        p = points[s:s + step, None, :]
        closest, _ = closest_points_on_triangles(p, tri[None, :, 0], tri[None, :, 1], tri[None, :, 2])
        out[s:s + step] = np.sqrt(np.min(np.sum((closest - p) ** 2, axis=-1), axis=1))
    return out


def tet_signed_volumes(positions, tets):
    """Signed volumes (..., m) of tets (m, 4) for positions (..., n, 3)."""
    x = np.asarray(positions, dtype=float)[..., np.asarray(tets), :]
    e1, e2, e3 = (x[..., k, :] - x[..., 0, :] for k in (1, 2, 3))
    return np.einsum("...i,...i->...", e1, np.cross(e2, e3)) / 6.0


def _bcc_lattice(lo, hi, h):
    """Body-centred cubic lattice covering [lo, hi], jittered by up to 0.1 h (fixed seed).

    The jitter breaks the cospherical point sets of a regular lattice (cut off at the surface) and of
    lattice planes meeting symmetric surfaces, which would give Delaunay zero-volume tets.
    """
    axes = [np.arange(lo[k] - h, hi[k] + h, h) for k in range(3)]
    corners = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 3)
    points = np.concatenate([corners, corners + 0.5 * h])
    return points + np.random.default_rng(0).uniform(-0.1 * h, 0.1 * h, points.shape)


def _peel(tets, bad):
    """Remove bad tets only from the boundary inwards (removing an inner one would open a crack)."""
    faces = np.sort(np.concatenate([tets[:, [1, 2, 3]], tets[:, [0, 2, 3]], tets[:, [0, 1, 3]], tets[:, [0, 1, 2]]]),
                    axis=1)
    _, face_id = np.unique(faces, axis=0, return_inverse=True)
    face_id = face_id.reshape(4, -1).T  # (m, 4) shared ids of each tet's faces
    keep = np.ones(len(tets), dtype=bool)
    while True:
        uses = np.bincount(face_id[keep].ravel(), minlength=face_id.max() + 1)
        peel = keep & bad & (uses[face_id] == 1).any(axis=1)
        if not peel.any():
            return tets[keep]
        keep &= ~peel


def tet_quality(positions, tets):
    """Normalized signed quality 6*sqrt(2)*V / l_rms^3 (m,) of tets: 1 for a regular tet, 0 when flat."""
    x = np.asarray(positions, dtype=float)[np.asarray(tets)]
    pairs = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    l_rms = np.sqrt(np.mean([np.sum((x[:, i] - x[:, j]) ** 2, axis=1) for i, j in pairs], axis=0))
    return 6.0 * np.sqrt(2.0) * tet_signed_volumes(positions, tets) / l_rms ** 3


def _inside_delaunay(points, vertices, triangles):
    """Positively oriented Delaunay tets of ``points`` whose centroids lie inside the surface."""
    tets = Delaunay(points).simplices.astype(np.int64)
    tets = tets[winding_numbers(vertices, triangles, points[tets].mean(axis=1)) > 0.5]
    flip = tet_signed_volumes(points, tets) < 0
    tets[flip] = tets[flip][:, [0, 2, 1, 3]]
    return tets


def tetrahedralize(vertices, triangles, spacing=None, min_quality=0.05, max_rounds=8):
    """Tet mesh ``(tet_vertices, tets)`` of the solid bounded by a closed triangle surface.

    The first ``len(vertices)`` tet vertices are exactly the surface vertices; interior points are a
    body-centred cubic lattice of cube edge ``spacing`` (default: 1.5 x mean surface edge length)
    kept at least 0.6 * spacing away from the surface. Tets are positively oriented. Tets with
    ``tet_quality`` below ``min_quality`` are peeled off the boundary (flat slivers between surface
    vertices); inner ones (e.g. flat tets in the plane of a ring of cocircular surface vertices, which
    Delaunay cannot avoid) get their centroid inserted as an extra point and the triangulation is
    redone, up to ``max_rounds`` times. The tets fill the surface without inner cracks; their
    boundary faces lie on the surface triangles (a nearly planar pair of surface triangles may be
    split along its other diagonal).
    """
    vertices, triangles = validate_surface(vertices, triangles)
    check_closed_manifold(vertices, triangles)
    if enclosed_volume(vertices, triangles) < 0:
        triangles = triangles[:, ::-1]
    edges = vertices[triangles] - vertices[np.roll(triangles, -1, axis=1)]
    h = 1.5 * np.linalg.norm(edges, axis=-1).mean() if spacing is None else float(spacing)
    if not h > 0:
        raise ValueError(f"spacing must be positive, got {spacing}")
    lattice = _bcc_lattice(vertices.min(axis=0), vertices.max(axis=0), h)
    lattice = lattice[winding_numbers(vertices, triangles, lattice) > 0.5]
    lattice = lattice[surface_distance(vertices, triangles, lattice) > 0.6 * h]
    points = np.concatenate([vertices, lattice])
    for _ in range(max_rounds):
        tets = _inside_delaunay(points, vertices, triangles)
        tets = _peel(tets, tet_quality(points, tets) < min_quality)
        bad = tet_quality(points, tets) < min_quality
        if not bad.any():
            break
        points = np.concatenate([points, points[tets[bad]].mean(axis=1)])
    else:
        raise ValueError(f"{np.sum(bad)} inner tets stay below quality {min_quality} after {max_rounds} "
                         "rounds; try another spacing or a smaller min_quality")

    n_surface = len(vertices)
    used = np.zeros(len(points), dtype=bool)
    used[tets.ravel()] = True
    if not used[:n_surface].all():
        raise ValueError(f"{np.sum(~used[:n_surface])} surface vertices ended up in no tetrahedron; "
                         "try a smaller min_quality or a more uniform surface")
    keep = np.concatenate([np.arange(n_surface), n_surface + np.flatnonzero(used[n_surface:])])
    renumber = np.full(len(points), -1, dtype=np.int64)
    renumber[keep] = np.arange(len(keep))
    return points[keep], renumber[tets]


def _laplacian(rest, tets):
    """P1 FEM Laplacian (stiffness matrix) of a tet mesh, sparse (n, n)."""
    x = rest[tets]
    dm = np.stack([x[:, k] - x[:, 0] for k in (1, 2, 3)], axis=-1)
    vol = np.linalg.det(dm) / 6.0
    g = np.linalg.inv(dm)  # rows: gradients of the barycentric coordinates of corners 1..3
    grads = np.concatenate([-g.sum(axis=1, keepdims=True), g], axis=1)
    local = vol[:, None, None] * np.einsum("mai,mbi->mab", grads, grads)
    rows = np.repeat(tets, 4, axis=1).ravel()
    cols = np.tile(tets, (1, 4)).ravel()
    n = len(rest)
    return sp.csc_matrix((local.ravel(), (rows, cols)), shape=(n, n))


def fill_interior(tet_vertices_rest, tets, n_surface, surface_positions):
    """Tet-mesh positions (B, n, 3) (or (n, 3)) for deformed surfaces (B, n_surface, 3) (or (n_surface, 3)).

    The interior displacement is the harmonic extension (P1 FEM Laplacian, surface as Dirichlet
    boundary) of the surface displacement, solved once for all frames and axes.
    """
    rest = np.asarray(tet_vertices_rest, dtype=float)
    tets = np.asarray(tets, dtype=np.int64)
    surface = np.asarray(surface_positions, dtype=float)
    single = surface.ndim == 2
    surface = surface[None] if single else surface
    if surface.shape[1:] != (n_surface, 3):
        raise ValueError(f"surface_positions must have shape (B, {n_surface}, 3), got {surface.shape}")
    b, n = surface.shape[0], len(rest)
    out = np.empty((b, n, 3))
    out[:, :n_surface] = surface
    if n > n_surface:
        lap = _laplacian(rest, tets)
        u_surface = (surface - rest[:n_surface]).transpose(1, 0, 2).reshape(n_surface, 3 * b)
        rhs = -(lap[n_surface:, :n_surface] @ u_surface)
        u_inner = spla.splu(lap[n_surface:, n_surface:].tocsc()).solve(rhs)
        out[:, n_surface:] = rest[n_surface:] + u_inner.reshape(n - n_surface, b, 3).transpose(1, 0, 2)
    return out[0] if single else out
