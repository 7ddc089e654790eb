"""Simple meshes for the scenes: a cloth grid, a tet box, a torus surface."""
import numpy as np


def grid(nu, nv, width, height):
    """Rectangular grid in the xy-plane, ``nu`` x ``nv`` vertices: (vertices (nu*nv, 3), triangles).

    Vertex (i, j) is at index ``j * nu + i``, position (width * i / (nu-1), height * j / (nv-1), 0);
    cells are split along alternating diagonals."""
    i, j = np.meshgrid(np.arange(nu), np.arange(nv))
    verts = np.stack([width * i.ravel() / (nu - 1), height * j.ravel() / (nv - 1), np.zeros(nu * nv)], axis=1)
    ci, cj = np.meshgrid(np.arange(nu - 1), np.arange(nv - 1))
    ci, cj = ci.ravel(), cj.ravel()
    a, b = cj * nu + ci, cj * nu + ci + 1
    c, d = a + nu, b + nu
    flip = (ci + cj) % 2 == 1
    t1 = np.where(flip[:, None], np.stack([a, b, c], 1), np.stack([a, b, d], 1))
    t2 = np.where(flip[:, None], np.stack([b, d, c], 1), np.stack([a, d, c], 1))
    return verts, np.concatenate([t1, t2]).astype(np.int64)


def box_tets(nx, ny, nz, size):
    """Tet mesh of a box with ``nx`` x ``ny`` x ``nz`` vertices and extent ``size`` (3,), six
    positively oriented tets per cell (Kuhn subdivision). Vertex (i, j, k) is ``(k * ny + j) * nx + i``."""
    size = np.asarray(size, dtype=float)
    k, j, i = np.meshgrid(np.arange(nz), np.arange(ny), np.arange(nx), indexing="ij")
    verts = np.stack([i.ravel() / (nx - 1), j.ravel() / (ny - 1), k.ravel() / (nz - 1)], axis=1) * size
    ck, cj, ci = [a.ravel() for a in np.meshgrid(np.arange(nz - 1), np.arange(ny - 1), np.arange(nx - 1), indexing="ij")]
    corner = lambda di, dj, dk: ((ck + dk) * ny + cj + dj) * nx + ci + di
    v000, v111 = corner(0, 0, 0), corner(1, 1, 1)
    paths = [((1, 0, 0), (1, 1, 0)), ((1, 0, 0), (1, 0, 1)), ((0, 1, 0), (1, 1, 0)),
             ((0, 1, 0), (0, 1, 1)), ((0, 0, 1), (1, 0, 1)), ((0, 0, 1), (0, 1, 1))]
    tets = np.concatenate([np.stack([v000, corner(*p), corner(*q), v111], 1) for p, q in paths])
    x = verts[tets]
    vol = np.einsum("ti,ti->t", np.cross(x[:, 1] - x[:, 0], x[:, 2] - x[:, 0]), x[:, 3] - x[:, 0])
    tets[vol < 0] = tets[vol < 0][:, [0, 2, 1, 3]]
    return verts, tets.astype(np.int64)


def torus(major, minor, n_major, n_minor):
    """Closed torus surface around the z axis: (vertices, outward-facing triangles)."""
    u, v = np.meshgrid(2 * np.pi * np.arange(n_major) / n_major, 2 * np.pi * np.arange(n_minor) / n_minor, indexing="ij")
    r = major + minor * np.cos(v)
    verts = np.stack([r * np.cos(u), r * np.sin(u), minor * np.sin(v)], axis=-1).reshape(-1, 3)
    a, b = np.meshgrid(np.arange(n_major), np.arange(n_minor), indexing="ij")
    idx = lambda i, j: (i % n_major) * n_minor + j % n_minor
    p, q, s, t = idx(a, b), idx(a + 1, b), idx(a + 1, b + 1), idx(a, b + 1)
    tris = np.concatenate([np.stack([p, q, s], -1).reshape(-1, 3), np.stack([p, s, t], -1).reshape(-1, 3)])
    return verts, tris.astype(np.int64)
