"""Blender's own mass-spring cloth (the Cloth modifier) as a force model, "linear" or "angular" bending.

Follows Blender 4.x ``source/blender/blenkernel/intern/cloth.cc`` (``cloth_build_springs``) and
``source/blender/simulation/intern/SIM_mass_spring.cc`` / ``implicit_blender.cc``
(``cloth_calc_spring_force``, ``SIM_mass_spring_force_spring_linear``, ``..._spring_bending``,
``..._spring_angular``, ``..._force_drag``). Forces are in Blender's internal cloth units: its time unit is
one frame divided by the Speed Multiplier (``dt = time_scale / quality`` per sub-step) and it scales scene
gravity by 0.001.
"""
import numpy as np
from scipy import sparse

from .base import ForceTerm, Model, VelocityTerm
from .cloth import VertexScatter, block_pattern, check_positions, cross_matrix, outer

_FLT_EPSILON = 1.1920928955078125e-07  # Blender adds it to the average spring length
# Choi & Ko (2002) buckling curve used by Blender's compressed springs, in x = length / rest_length.
_FB = np.array([-11.541, 34.193, -39.083, 23.116, -9.713])
_FB_DERIV = np.array([-46.164, 102.579, -78.166, 23.116])
_FB_DERIV2 = np.array([-138.492, 205.158, -78.166])
# Weight of the hinges' Gauss–Newton stiffness in the structured preconditioner's sweep
# (docs/design/tuning_starts.md: models.blender_cloth.SWEEP_BENDING).
SWEEP_BENDING = 10.0


def _polygons(faces, n_vertices):
    """Faces grouped by corner count: a list of ``(face_ids (m,), corners (m, s))``, validated."""
    sizes = np.fromiter((len(f) for f in faces), dtype=np.int64)
    if sizes.size == 0:
        raise ValueError("faces is empty")
    if sizes.min() < 3:
        raise ValueError(f"face {int(np.argmin(sizes))} has {sizes.min()} vertices, needs at least 3")
    flat = np.concatenate([np.asarray(f).ravel() for f in faces])
    if not np.issubdtype(flat.dtype, np.integer):
        raise ValueError(f"faces must hold integer vertex indices, got dtype {flat.dtype}")
    flat = flat.astype(np.int64)
    if flat.min() < 0 or flat.max() >= n_vertices:
        raise ValueError(f"face vertex index out of range [0, {n_vertices}): min {flat.min()}, max {flat.max()}")
    starts = np.r_[0, np.cumsum(sizes)[:-1]]
    groups = []
    for size in np.unique(sizes):
        ids = np.flatnonzero(sizes == size)
        poly = flat[starts[ids][:, None] + np.arange(size)]
        ordered = np.sort(poly, axis=1)
        if np.any(ordered[:, 1:] == ordered[:, :-1]):
            raise ValueError("a face repeats a vertex index")
        groups.append((ids, poly))
    return groups


def _diagonals(size):
    """Corner pairs (j, k) of the non-adjacent corners of a polygon with ``size`` corners, j < k."""
    j, k = np.triu_indices(size, 2)
    keep = ~((j == 0) & (k == size - 1))
    return j[keep], k[keep]


def build_springs(faces, n_vertices):
    """Blender's cloth springs of a polygon mesh: ``(structural, shear, bending)`` index pairs ``(m, 2)``.

    Structural: the mesh edges. Shear: every pair of non-adjacent corners of each polygon with more than
    three corners (triangles get none). Linear bending: for each shear spring (a, b), a < b, a spring from a
    to the far end c != a of every shear spring at b, without duplicates — so a pure triangle mesh has no
    linear bending springs, exactly as in Blender.
    """
    groups = _polygons(faces, n_vertices)
    edges = np.concatenate([np.stack([p, np.roll(p, -1, axis=1)], -1).reshape(-1, 2) for _, p in groups])
    structural = np.unique(np.sort(edges, axis=1), axis=0)
    shear = [np.zeros((0, 2), np.int64)]
    for _, p in groups:
        j, k = _diagonals(p.shape[1])
        shear.append(np.sort(np.stack([p[:, j], p[:, k]], -1).reshape(-1, 2), axis=1))
    shear = np.concatenate(shear)
    first = sparse.coo_matrix((np.ones(len(shear)), (shear[:, 0], shear[:, 1])), shape=(n_vertices, n_vertices))
    first = first.tocsr()
    a, c = (first @ (first + first.T)).nonzero()
    keep = a != c
    bending = np.unique(np.sort(np.stack([a[keep], c[keep]], 1), axis=1), axis=0).reshape(-1, 2)
    return structural, shear, bending


def build_hinges(faces, n_vertices):
    """Blender's angular bending springs, grouped by the corner counts of their two polygons.

    One hinge per edge shared by exactly two faces and one per diagonal of each polygon with more than three
    corners (splitting it in two). Returns a list of ``(i, j, others_a (m, la - 2), others_b (m, lb - 2))``:
    the hinge vertices i < j and the remaining corners of each side.
    """
    groups = _polygons(faces, n_vertices)
    max_size = max(p.shape[1] for _, p in groups)
    n_faces = sum(len(ids) for ids, _ in groups)
    padded = np.full((n_faces, max_size), -1, np.int64)
    sizes = np.zeros(n_faces, np.int64)
    for ids, p in groups:
        padded[ids, :p.shape[1]] = p
        sizes[ids] = p.shape[1]
    # Edges shared by exactly two faces.
    corner = np.arange(max_size)
    valid = corner < sizes[:, None]
    nxt = np.where(corner + 1 < sizes[:, None], np.roll(padded, -1, axis=1), padded[:, :1])
    face_of = np.broadcast_to(np.arange(n_faces)[:, None], padded.shape)[valid]
    key = np.sort(np.stack([padded[valid], nxt[valid]], 1), axis=1)
    _, inverse, counts = np.unique(key, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.ravel()
    order = np.argsort(inverse, kind="stable")
    pair_start = np.r_[0, np.cumsum(counts)[:-1]][counts == 2]
    face_a, face_b = face_of[order[pair_start]], face_of[order[pair_start + 1]]
    hinge_ij = key[order[pair_start]]
    sides = []  # (i, j, corner rows of side a, corner rows of side b) before removing i and j
    for la in np.unique(sizes[face_a]):
        for lb in np.unique(sizes[face_b]):
            sel = (sizes[face_a] == la) & (sizes[face_b] == lb)
            if np.any(sel):
                sides.append((hinge_ij[sel, 0], hinge_ij[sel, 1], padded[face_a[sel], :la], padded[face_b[sel], :lb]))
    # Diagonals of polygons with more than three corners: side a = corners j..k, side b = the rest plus j, k.
    for _, p in groups:
        s = p.shape[1]
        for j, k in zip(*_diagonals(s)):
            ends = np.sort(p[:, [j, k]], axis=1)
            sides.append((ends[:, 0], ends[:, 1], p[:, j:k + 1], np.concatenate([p[:, k:], p[:, :j + 1]], axis=1)))
    hinges = {}
    for i, j, side_a, side_b in sides:
        others_a = side_a[(side_a != i[:, None]) & (side_a != j[:, None])].reshape(len(i), -1)
        others_b = side_b[(side_b != i[:, None]) & (side_b != j[:, None])].reshape(len(i), -1)
        shape = (others_a.shape[1], others_b.shape[1])
        hinges.setdefault(shape, []).append((i, j, others_a, others_b))
    return [tuple(np.concatenate(parts) for parts in zip(*group)) for group in hinges.values()]


def _spring_vectors(q, pairs):
    """(x_j - x_i (B, m, 3), length (B, m), length with zeros replaced by 1) of springs (i, j)."""
    q = np.asarray(q, dtype=float)
    d = q[:, pairs[:, 1]] - q[:, pairs[:, 0]]
    length = np.linalg.norm(d, axis=-1)
    return d, length, np.where(length > 0, length, 1.0)


def _spring_blocks(k):
    """Jacobian values (B, m * 36) on ``block_pattern(pairs)`` of pair forces f_i = -f_j whose derivative
    d f_i / d x_j is ``k`` (B, m, 3, 3): d f_i / d x_i = -k, d f_j / d x_i = k, d f_j / d x_j = -k."""
    blocks = np.einsum("ab,zsip->zsaibp", np.array([[-1.0, 1.0], [1.0, -1.0]]), k)
    return blocks.reshape(blocks.shape[0], -1)


def _unit_change(unit, norm, change):
    """Derivative of ``unit`` = n / |n| (B, m, 3) when n changes by ``change``: (I - unit unit^T) change / |n|."""
    return (change - np.sum(unit * change, -1)[..., None] * unit) / norm[..., None]


class BlenderSpringTerm(ForceTerm):
    """Springs ``f_i = phi(l) (x_j - x_i) / l`` (and ``-f_i`` on j) with Blender's piecewise laws.

    Stretched (``l >= L``): ``phi = k (l - L)``. Compressed (``l < L``): the Choi–Ko buckling response
    ``phi = max(kb fb(l/L), cb (l - L))``. Per-spring ``k``, ``kb``, ``cb``; zero switches a branch off. Exact
    Jacobian of this force (Blender's own solver drops the transverse term and the 1/L of fb').
    """

    smooth = False   # phi's slope jumps at l = L (k against cb, zero for shear springs) and where max switches
    # Not a ``mesh`` term: in the smoothing metric the springs give lower losses but a slower loop, or one whose
    # wrap is seen (docs/design/tuning_starts.md: BlenderSpringTerm is not a mesh term)

    def __init__(self, n_vertices, pairs, rest_length, k, kb, cb):
        self.n_vertices = n_vertices
        self.pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        self.rest_length = np.asarray(rest_length, dtype=float)
        self.k, self.kb, self.cb = (np.asarray(v, dtype=float) for v in (k, kb, cb))
        self._scatter = VertexScatter(self.pairs, n_vertices)
        self._pattern = block_pattern(self.pairs)

    def _laws(self, q, second=False):
        d, length, safe = _spring_vectors(q, self.pairs)
        rest = self.rest_length
        ratio = length / rest
        buckling = self.kb * np.polyval(_FB, ratio)
        linear = self.cb * (length - rest)
        use_linear = buckling < linear
        stretched = (length >= rest) & (length > 0)
        phi = np.where(stretched, self.k * (length - rest), np.where(use_linear, linear, buckling))
        dphi = np.where(stretched, self.k,
                        np.where(use_linear, self.cb, self.kb * np.polyval(_FB_DERIV, ratio) / rest))
        if not second:
            return d / safe[..., None], safe, phi, dphi
        ddphi = np.where(stretched | use_linear, 0.0, self.kb * np.polyval(_FB_DERIV2, ratio) / rest ** 2)
        return d / safe[..., None], safe, phi, dphi, ddphi

    def forces(self, q, t):
        unit, _, phi, _ = self._laws(q)
        f = phi[..., None] * unit
        return self._scatter(np.stack([f, -f], axis=2))

    def jacobian_pattern(self):
        return self._pattern

    def jacobian_values(self, q, t):
        unit, length, phi, dphi = self._laws(q)
        uu = outer(unit, unit)
        k = dphi[..., None, None] * uu + (phi / length)[..., None, None] * (np.eye(3) - uu)
        return _spring_blocks(k)

    def jacobian_dot(self, q, t, s):
        """``dF/dq s`` (B, n, 3) without the Jacobian: each spring's ``dphi (e.w) e + phi / l (w - (e.w) e)``,
        w = s_j - s_i."""
        return self.forces_and_jacobian_dot(q, t, s)[1]

    def forces_and_jacobian_dot(self, q, t, s):
        """``(forces, jacobian_dot)`` from one evaluation of the springs' laws."""
        unit, length, phi, dphi = self._laws(q)
        s = np.asarray(s, dtype=float)
        rel = s[:, self.pairs[:, 1]] - s[:, self.pairs[:, 0]]
        ratio = phi / length
        f = phi[..., None] * unit
        df = ((dphi - ratio) * np.sum(unit * rel, -1))[..., None] * unit + ratio[..., None] * rel
        return self._scatter(np.stack([f, -f], axis=2)), self._scatter(np.stack([df, -df], axis=2))

    def stable_jacobian_values(self, q, t):
        """``jacobian_values`` with the absolute values of each spring's stiffness along (dphi) and across
        (phi / l), so each spring's block is negative semi-definite (a compressed spring's negative phi / l
        would destabilize an implicit step); as the preconditioner's stiffness it beats dropping the
        negative parts (docs/design/tuning_starts.md: models.blender_cloth.SWEEP_BENDING)."""
        unit, length, phi, dphi = self._laws(q)
        uu = outer(unit, unit)
        k = np.abs(dphi)[..., None, None] * uu + np.abs(phi / length)[..., None, None] * (np.eye(3) - uu)
        return _spring_blocks(k)

    def jacobian_derivative(self, q, t, s):
        """Values (B, nnz) of the Jacobian's derivative along ``s`` (B, n, 3), on each spring's branch at q.

        Exact where the law is smooth; at l = L (and at the buckling / linear switch) it takes the branch
        Blender evaluates at q, where central differences would straddle the jump of dphi.
        """
        unit, length, phi, dphi, ddphi = self._laws(q, second=True)
        s = np.asarray(s, dtype=float)
        rel = s[:, self.pairs[:, 1]] - s[:, self.pairs[:, 0]]
        dl = np.sum(unit * rel, -1)
        w = (rel - dl[..., None] * unit) / length[..., None]    # derivative of the unit vector along s
        uu = outer(unit, unit)
        duu = outer(w, unit) + outer(unit, w)
        d_ratio = (dphi * dl) / length - phi * dl / length ** 2   # derivative of phi / l
        dk = ((ddphi * dl)[..., None, None] * uu + dphi[..., None, None] * duu
              + d_ratio[..., None, None] * (np.eye(3) - uu) - (phi / length)[..., None, None] * duu)
        return _spring_blocks(dk)


class BlenderSpringDampingTerm(VelocityTerm):
    """Blender's damping along springs: ``f_i = c ((v_j - v_i) . e) e`` (and ``-f_i`` on j), e = unit(x_j - x_i).

    ``c`` is ``c_stretch`` while the spring is at least its rest length, ``c_compress`` while shorter (as
    ``SIM_mass_spring_force_spring_linear``, whose compressed branch is active only for structural springs
    of the angular bending model).
    """

    smooth = False   # c jumps at the rest length

    def __init__(self, n_vertices, pairs, rest_length, c_stretch, c_compress):
        self.n_vertices = n_vertices
        self.pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        self.rest_length = np.asarray(rest_length, dtype=float)
        self.c_stretch, self.c_compress = (np.asarray(c, dtype=float) for c in (c_stretch, c_compress))
        self._scatter = VertexScatter(self.pairs, n_vertices)
        self._pattern = block_pattern(self.pairs)

    def _state(self, q, v):
        d, length, safe = _spring_vectors(q, self.pairs)
        v = np.asarray(v, dtype=float)
        unit = d / safe[..., None]
        rel = v[:, self.pairs[:, 1]] - v[:, self.pairs[:, 0]]
        c = np.where((length >= self.rest_length) & (length > 0), self.c_stretch, self.c_compress)
        return unit, safe, rel, c

    def forces(self, q, v, t):
        unit, _, rel, c = self._state(q, v)
        f = (c * np.sum(unit * rel, -1))[..., None] * unit
        return self._scatter(np.stack([f, -f], axis=2))

    def jacobian_pattern(self):
        return self._pattern

    def jacobian_values(self, q, v, t):
        unit, length, rel, c = self._state(q, v)
        uu = outer(unit, unit)
        speed = np.sum(unit * rel, -1)
        across = rel - speed[..., None] * unit   # (I - e e^T) w
        g_q = (c / length)[..., None, None] * (outer(unit, across) + speed[..., None, None] * (np.eye(3) - uu))
        g_v = c[..., None, None] * uu
        return _spring_blocks(g_q), _spring_blocks(g_v)


def _coefficients(rows, cols):
    """(P, slots * slots): the outer products of the per-slot coefficient vectors ``rows[p]`` and ``cols[p]``."""
    return np.stack([outer(r, c).ravel() for r, c in zip(rows, cols)])


def _cross_rows(g, x):
    """g [x]_x (B, m, 3, 3): rows g_i x x."""
    return np.cross(g, x[..., None, :])


class _HingeStencil:
    """Geometry of Blender's angular springs: stencil (i, j, others_a, others_b), side normals and angle."""

    def _setup_hinges(self, n_vertices, i, j, others_a, others_b):
        self.n_vertices = n_vertices
        self.stencil = np.concatenate([i[:, None], j[:, None], others_a, others_b], axis=1).astype(np.int64)
        la, lb = others_a.shape[1] + 2, others_b.shape[1] + 2
        slots = self.stencil.shape[1]
        is_a = np.r_[0.0, 0.0, np.ones(la - 2), np.zeros(lb - 2)]
        is_b = np.r_[0.0, 0.0, np.zeros(la - 2), np.ones(lb - 2)]
        unit = np.eye(slots)
        # Per-slot coefficients of x_slot in u_a = x_j - x_i, v_a = x_i - mid_a, u_b = -u_a, v_b = x_j - mid_b
        # and d = x_i - x_j, and of the side normals in each slot's force.
        self._cu_a = unit[1] - unit[0]
        self._cv_a = unit[0] - (unit[0] + unit[1] + is_a) / la
        self._cv_b = unit[1] - (unit[0] + unit[1] + is_b) / lb
        self._fa = is_a / la + (unit[0] + unit[1]) * (1.0 / la - 0.5)
        self._fb = is_b / lb + (unit[0] + unit[1]) * (1.0 / lb - 0.5)
        # Velocity of each side's centroid relative to the hinge's midpoint (Blender's spring_angle).
        self._wv_a = (unit[0] + unit[1] + is_a) / la - (unit[0] + unit[1]) / 2
        self._wv_b = (unit[0] + unit[1] + is_b) / lb - (unit[0] + unit[1]) / 2
        self._scatter = VertexScatter(self.stencil, n_vertices)
        # in (hinge, i, k, r, c) order, jac[r, i, c, k] = d force_{r, i} / d x_{c, k}: the order in which
        # ``_expand`` computes the values (the per-slot order of ``block_pattern`` cost a transposed copy)
        self._pattern = tuple(x.reshape(-1, slots, 3, slots, 3).transpose(0, 2, 4, 1, 3).ravel()
                              for x in block_pattern(self.stencil))
        # jac[r, i, c, k] = sum_p rows_p[r] cols_p[c] M_p[i, k] (``_expand``): the six (force side, edge) pairs
        # of dF/dq and the four (force side, velocity side) pairs of the damping's dG/dv
        self._position_coef = _coefficients([self._fa] * 3 + [self._fb] * 3, [self._cu_a, self._cv_a, self._cv_b] * 2)
        self._velocity_coef = _coefficients([self._fa, self._fa, self._fb, self._fb], [self._wv_a, self._wv_b] * 2)

    def _expand(self, factors, coef):
        """Values (B, nnz) of jac[r, i, c, k] = sum_p rows_p[r] cols_p[c] M_p[i, k] from the 3x3 blocks ``factors``
        (B, m, P, 3, 3) and ``coef`` (P, slots * slots) of ``_coefficients``."""
        batch, m, parts = factors.shape[:3]
        return (factors.reshape(batch, m, parts, 9).transpose(0, 1, 3, 2) @ coef).reshape(batch, -1)

    def jacobian_pattern(self):
        return self._pattern

    def _directions(self, a, b):
        """Per-slot force directions (B, m, slots, 3) for a unit hinge force: fa a + fb b."""
        return self._fa[:, None] * a[..., None, :] + self._fb[:, None] * b[..., None, :]

    def _edges(self, q):
        """(u_a, v_a, v_b) (B, m, 3) of the hinges at positions (or displacements) ``q``."""
        x = np.asarray(q, dtype=float)[:, self.stencil]  # (B, m, slots, 3)
        return tuple(np.einsum("s,bmsk->bmk", c, x) for c in (self._cu_a, self._cv_a, self._cv_b))

    def _geometry(self, q, derivs, along=None):
        """(angle, a, b) and, with ``derivs``, their derivatives (da, db (B, m, slots, 3, 3), d_angle (B, m, slots,
        3)) per slot coordinate; with ``along`` (B, n, 3) instead (da, db (B, m, 3), d_angle (B, m)) along it."""
        u_a, v_a, v_b = self._edges(q)
        n_a, n_b = np.cross(u_a, v_a), np.cross(-u_a, v_b)
        len_a, len_b = np.linalg.norm(n_a, axis=-1), np.linalg.norm(n_b, axis=-1)
        a, b = n_a / len_a[..., None], n_b / len_b[..., None]
        d = -u_a
        length = np.linalg.norm(d, axis=-1)
        e = d / length[..., None]
        cos, sin = np.sum(a * b, -1), np.sum(np.cross(a, b) * e, -1)
        angle = np.arctan2(sin, cos)
        if along is not None:
            du_a, dv_a, dv_b = self._edges(along)
            da = _unit_change(a, len_a, np.cross(du_a, v_a) + np.cross(u_a, dv_a))
            db = _unit_change(b, len_b, -np.cross(du_a, v_b) - np.cross(u_a, dv_b))
            de = _unit_change(e, length, -du_a)
            d_cos = np.sum(da * b + a * db, -1)
            d_sin = np.sum((np.cross(da, b) + np.cross(a, db)) * e + np.cross(a, b) * de, -1)
            return angle, a, b, da, db, (cos * d_sin - sin * d_cos) / (cos * cos + sin * sin)
        if not derivs:
            return angle, a, b
        eye = np.eye(3)
        # d n / d x_slot = -cu [v]_x + cv [u]_x, then d unit / d x = (I - unit unit^T) / |n| d n.
        dn_a = (-self._cu_a[:, None, None] * cross_matrix(v_a)[..., None, :, :]
                + self._cv_a[:, None, None] * cross_matrix(u_a)[..., None, :, :])
        dn_b = (self._cu_a[:, None, None] * cross_matrix(v_b)[..., None, :, :]
                - self._cv_b[:, None, None] * cross_matrix(u_a)[..., None, :, :])
        da = ((eye - outer(a, a)) / len_a[..., None, None])[..., None, :, :] @ dn_a
        db = ((eye - outer(b, b)) / len_b[..., None, None])[..., None, :, :] @ dn_b
        de = -self._cu_a[:, None, None] * ((eye - outer(e, e)) / length[..., None, None])[..., None, :, :]
        d_cos = np.einsum("bmk,bmskl->bmsl", b, da) + np.einsum("bmk,bmskl->bmsl", a, db)
        d_sin = (np.einsum("bmk,bmskl->bmsl", np.cross(b, e), da) + np.einsum("bmk,bmskl->bmsl", np.cross(e, a), db)
                 + np.einsum("bmk,bmskl->bmsl", np.cross(a, b), de))
        d_angle = ((cos[..., None, None] * d_sin - sin[..., None, None] * d_cos)
                   / (cos * cos + sin * sin)[..., None, None])
        return angle, a, b, da, db, d_angle


class BlenderAngularTerm(_HingeStencil, ForceTerm):
    """Blender's angular bending springs for hinges whose sides have ``la`` and ``lb`` corners.

    Stencil per hinge: (i, j, others_a, others_b). With ``a`` the unit normal of triangle (x_j, x_i, mid_a),
    ``b`` that of (x_i, x_j, mid_b) (mid = centroid of the side's polygon) and ``e`` along x_i - x_j, the angle
    is ``atan2((a x b).e, a.b)`` and ``force = k (angle - rest_angle)``; each corner of side a gets
    ``force a / la``, of side b ``force b / lb``, and i, j each get ``-force (a + b) / 2`` on top. Not a
    gradient field; the exact Jacobian of this force is supplied. Explicit in the linearized scheme on steps
    up to ``explicit_step`` seconds (Blender's sub-step), as Blender adds it
    (``SIM_mass_spring_force_spring_angular``: no Jacobian in its implicit step).
    """

    def __init__(self, n_vertices, i, j, others_a, others_b, stiffness, rest_positions, explicit_step=np.inf):
        self._setup_hinges(n_vertices, i, j, others_a, others_b)
        self.explicit_step = float(explicit_step)
        self.stiffness = np.asarray(stiffness, dtype=float)
        self.rest_angle = self._geometry(np.asarray(rest_positions, dtype=float)[None], False)[0][0]

    def forces(self, q, t):
        angle, a, b = self._geometry(q, False)
        force = self.stiffness * (angle - self.rest_angle)
        corner = force[..., None, None] * self._directions(a, b)
        return self._scatter(corner)

    def _factors(self, q, s=None):
        """Per-hinge 3x3 blocks M_p (B, m, 6, 3, 3) with jac[r, i, c, k] = sum_p rows_p[r] cols_p[c] M_p[i, k]
        (rows fa, fb; columns cu_a, cv_a, cv_b: the slot coefficients of u_a, v_a, v_b), and with ``s`` their
        derivatives along it instead."""
        u, v, w = self._edges(q)
        angle, a, b = self._geometry(q, False)
        len_a, len_b, length = (np.linalg.norm(n, axis=-1) for n in (np.cross(u, v), np.cross(u, w), u))
        e = -u / length[..., None]
        cos, sin = np.sum(a * b, -1), np.sum(np.cross(a, b) * e, -1)
        r = (cos * cos + sin * sin)[..., None]
        g_a, g_b, g_e = ((np.eye(3) - outer(x, x)) / n[..., None, None] for x, n in ((a, len_a), (b, len_b), (e, length)))
        k = self.stiffness[:, None]
        force = (self.stiffness * (angle - self.rest_angle))[..., None, None]

        def blocks(mats, coefs):
            """The angle's gradient per edge (gu, gv, gw): the coefficient vectors (alpha, beta, gamma) contracted
            with the partial matrices ``mats`` of the normals and the edge direction."""
            au, av, bu, bw, eu = mats
            alpha, beta, gamma = coefs
            gu = np.einsum("bmi,bmik->bmk", alpha, au) + np.einsum("bmi,bmik->bmk", beta, bu) \
                + np.einsum("bmi,bmik->bmk", gamma, eu)
            gv, gw = np.einsum("bmi,bmik->bmk", alpha, av), np.einsum("bmi,bmik->bmk", beta, bw)
            return gu, gv, gw

        mats = (-_cross_rows(g_a, v), _cross_rows(g_a, u), _cross_rows(g_b, w), -_cross_rows(g_b, u), -g_e)
        alpha = (cos[..., None] * np.cross(b, e) - sin[..., None] * b) / r
        beta = (cos[..., None] * np.cross(e, a) - sin[..., None] * a) / r
        gamma = cos[..., None] * np.cross(a, b) / r
        gu, gv, gw = blocks(mats, (alpha, beta, gamma))
        au, av, bu, bw, _ = mats
        if s is None:
            ka, kb = k * a, k * b
            return np.stack([outer(ka, gu) + force * au, outer(ka, gv) + force * av, outer(ka, gw),
                             outer(kb, gu) + force * bu, outer(kb, gv), outer(kb, gw) + force * bw], axis=2)
        du, dv, dw = self._edges(s)
        _, _, _, a_s, b_s, angle_s = self._geometry(q, False, along=s)
        e_s = _unit_change(e, length, -du)
        cos_s = np.sum(a_s * b + a * b_s, -1)
        sin_s = np.sum((np.cross(a_s, b) + np.cross(a, b_s)) * e + np.cross(a, b) * e_s, -1)
        r_s = 2 * (cos * cos_s + sin * sin_s)[..., None]

        def projector_change(x, n, x_s, n_s):
            """Derivative along s of (I - x x^T) / n."""
            return (-(outer(x_s, x) + outer(x, x_s)) - (np.eye(3) - outer(x, x)) * (n_s / n)[..., None, None]) \
                / n[..., None, None]

        g_a_s = projector_change(a, len_a, a_s, np.sum(a * (np.cross(du, v) + np.cross(u, dv)), -1))
        g_b_s = projector_change(b, len_b, b_s, np.sum(b * (np.cross(dw, u) + np.cross(w, du)), -1))
        g_e_s = projector_change(e, length, e_s, -np.sum(e * du, -1))
        mats_s = (-_cross_rows(g_a_s, v) - _cross_rows(g_a, dv), _cross_rows(g_a_s, u) + _cross_rows(g_a, du),
                  _cross_rows(g_b_s, w) + _cross_rows(g_b, dw), -_cross_rows(g_b_s, u) - _cross_rows(g_b, du), -g_e_s)
        c_s, s_s = cos_s[..., None], sin_s[..., None]
        alpha_s = (c_s * np.cross(b, e) + cos[..., None] * (np.cross(b_s, e) + np.cross(b, e_s))
                   - s_s * b - sin[..., None] * b_s - alpha * r_s) / r
        beta_s = (c_s * np.cross(e, a) + cos[..., None] * (np.cross(e_s, a) + np.cross(e, a_s))
                  - s_s * a - sin[..., None] * a_s - beta * r_s) / r
        gamma_s = (c_s * np.cross(a, b) + cos[..., None] * (np.cross(a_s, b) + np.cross(a, b_s)) - gamma * r_s) / r
        gu_s, gv_s, gw_s = (x + y for x, y in zip(blocks(mats, (alpha_s, beta_s, gamma_s)),
                                                  blocks(mats_s, (alpha, beta, gamma))))
        force_s = (self.stiffness * angle_s)[..., None, None]
        au_s, av_s, bu_s, bw_s, _ = mats_s
        ka, kb, ka_s, kb_s = k * a, k * b, k * a_s, k * b_s
        return np.stack([outer(ka_s, gu) + outer(ka, gu_s) + force_s * au + force * au_s,
                         outer(ka_s, gv) + outer(ka, gv_s) + force_s * av + force * av_s,
                         outer(ka_s, gw) + outer(ka, gw_s),
                         outer(kb_s, gu) + outer(kb, gu_s) + force_s * bu + force * bu_s,
                         outer(kb_s, gv) + outer(kb, gv_s),
                         outer(kb_s, gw) + outer(kb, gw_s) + force_s * bw + force * bw_s], axis=2)

    def jacobian_values(self, q, t):
        return self._expand(self._factors(q), self._position_coef)

    def jacobian_derivative(self, q, t, s):
        """Values (B, nnz) of the Jacobian's derivative along ``s`` (B, n, 3): that of each factor M_p."""
        return self._expand(self._factors(q, s), self._position_coef)

    def jacobian_dot(self, q, t, s):
        """``dF/dq s`` (B, n, 3) from the derivatives of the angle and the side normals along ``s``, without
        the Jacobian."""
        return self._scatter(self._corners(q, s)[1])

    def forces_and_jacobian_dot(self, q, t, s):
        """``(forces, jacobian_dot)`` from one evaluation of the hinges' geometry."""
        corner, corner_s = self._corners(q, s)
        return self._scatter(corner), self._scatter(corner_s)

    def _corners(self, q, s):
        """Per-slot forces (B, m, slots, 3) and their derivatives along ``s``."""
        angle, a, b, da, db, d_angle = self._geometry(q, False, along=s)
        force = (self.stiffness * (angle - self.rest_angle))[..., None, None]
        directions = self._directions(a, b)
        change = (self.stiffness * d_angle)[..., None, None] * directions + force * self._directions(da, db)
        return force * directions, change

    def stable_jacobian_values(self, q, t):
        """A negative semi-definite stand-in for ``jacobian_values``: -c stiffness grad(angle) grad(angle)^T,
        c = ``SWEEP_BENDING``, the Gauss–Newton part of a bending energy's Hessian (the exact Jacobian is
        neither symmetric nor definite, and an implicit step's tangent through it can grow without bound)."""
        d_angle = self._geometry(q, True)[5]
        jac = -np.einsum("bmri,bmck->bmikrc", SWEEP_BENDING * self.stiffness[:, None, None] * d_angle, d_angle)
        return jac.reshape(jac.shape[0], -1)


class BlenderAngularDampingTerm(_HingeStencil, VelocityTerm):
    """Blender's damping across hinges: the angular spring's force law with ``-damping (w_a . a + w_b . b)``
    in place of ``stiffness (angle - rest_angle)``, w_a and w_b the velocities of the sides' centroids
    relative to the hinge's midpoint (``SIM_mass_spring_force_spring_angular``). Explicit in the linearized
    scheme on steps up to ``explicit_step`` seconds, as the angular spring."""

    def __init__(self, n_vertices, i, j, others_a, others_b, damping, explicit_step=np.inf):
        self._setup_hinges(n_vertices, i, j, others_a, others_b)
        self.explicit_step = float(explicit_step)
        self.damping = np.asarray(damping, dtype=float)

    def _state(self, q, v):
        vs = np.asarray(v, dtype=float)[:, self.stencil]
        vel_a = np.einsum("s,bmsk->bmk", self._wv_a, vs)
        vel_b = np.einsum("s,bmsk->bmk", self._wv_b, vs)
        return vel_a, vel_b

    def forces(self, q, v, t):
        _, a, b = self._geometry(q, False)
        vel_a, vel_b = self._state(q, v)
        force = -self.damping * (np.sum(vel_a * a, -1) + np.sum(vel_b * b, -1))
        corner = force[..., None, None] * self._directions(a, b)
        return self._scatter(corner)

    def jacobian_values(self, q, v, t):
        """(dG/dq, dG/dv) from 3x3 blocks per hinge: with speed = w_a.a + w_b.b, force direction d_r = fa_r a +
        fb_r b and the normals' partials A_u, A_v, B_u, B_w along the edges u_a, v_a, v_b (``_edges``),
        dG_r/dx_c = -damping (d_r (cu_c gu + cv_a,c gv + cv_b,c gw)^T + speed (fa_r (cu_c A_u + cv_a,c A_v)
        + fb_r (cu_c B_u + cv_b,c B_w))), gu = A_u^T w_a + B_u^T w_b, gv = A_v^T w_a, gw = B_w^T w_b;
        dG_r/dv_c = -damping d_r (wv_a,c a + wv_b,c b)^T."""
        u, v_a, v_b = self._edges(q)
        n_a, n_b = np.cross(u, v_a), np.cross(-u, v_b)
        len_a, len_b = np.linalg.norm(n_a, axis=-1), np.linalg.norm(n_b, axis=-1)
        a, b = n_a / len_a[..., None], n_b / len_b[..., None]
        g_a = (np.eye(3) - outer(a, a)) / len_a[..., None, None]
        g_b = (np.eye(3) - outer(b, b)) / len_b[..., None, None]
        au, av, bu, bw = -_cross_rows(g_a, v_a), _cross_rows(g_a, u), _cross_rows(g_b, v_b), -_cross_rows(g_b, u)
        vel_a, vel_b = self._state(q, v)
        speed = (np.sum(vel_a * a, -1) + np.sum(vel_b * b, -1))[..., None, None]
        gu = np.einsum("bmi,bmik->bmk", vel_a, au) + np.einsum("bmi,bmik->bmk", vel_b, bu)
        gv, gw = np.einsum("bmi,bmik->bmk", vel_a, av), np.einsum("bmi,bmik->bmk", vel_b, bw)
        c = -self.damping[:, None, None]
        jac_q = np.stack([outer(a, gu) + speed * au, outer(a, gv) + speed * av, outer(a, gw),
                          outer(b, gu) + speed * bu, outer(b, gv), outer(b, gw) + speed * bw], axis=2)
        jac_v = np.stack([outer(a, a), outer(a, b), outer(b, a), outer(b, b)], axis=2)
        return (self._expand(c[:, None] * jac_q, self._position_coef),
                self._expand(c[:, None] * jac_v, self._velocity_coef))


class BlenderCloth(Model):
    """Blender's cloth springs with Blender's per-vertex mass and air drag.

    ``faces``: polygons (sequences of vertex indices) as in ``mesh.polygons``; ``vertex_mass``: Blender's
    "Vertex Mass", a scalar or one value per vertex. The stiffnesses are the Cloth settings, which Blender
    divides by the mean structural rest length ``avg``: ``k = tension / avg`` for structural and
    ``shear / avg`` for shear springs, which pull only when stretched.

    ``bending_model="linear"``: compressed structural springs are free; bending springs (see
    ``build_springs``) resist compression only, with Choi–Ko ``kb = bending / (20 avg)`` and linear branch
    slope ``cb = kb * bending_damping`` (Blender's "Bending Damping" setting, default 0.5, shapes this force).
    ``bending_model="angular"`` (Blender's default): compressed structural springs follow Choi–Ko with
    ``kb = cb = compression / avg``, and each hinge (see ``build_hinges``) is an angular spring of stiffness
    ``0.1 * bending * rest_length``.

    Air drag is ``-0.01 * air_damping * v`` per vertex, not scaled by mass (as in Blender). Damping of
    relative velocities (velocity terms, ``BlenderSpringDampingTerm``): ``tension_damping`` on stretched
    structural springs, ``shear_damping`` on stretched shear springs, ``compression_damping`` on compressed
    structural springs of the angular model; ``angular_damping`` across hinges (``BlenderAngularDampingTerm``).
    Blender's linear bending springs are not damped. Vertex-group stiffness scaling, shrinking, sewing,
    internal springs and pressure are ignored. ``explicit_step``: the longest step (seconds) on which the
    linearized scheme takes the hinges and their damping explicitly (Blender's sub-step; default: every step).

    Parameters
    ----------
    rest_positions : array_like, shape (n, 3)
        The rest shape.
    faces : sequence of sequences of int
        The polygons.
    vertex_mass : float or array_like, shape (n,)
        Blender's Vertex Mass (kg).
    tension_stiffness, compression_stiffness, shear_stiffness, bending_stiffness : float
        Blender's Cloth stiffness settings.
    air_damping : float
        Blender's Air Viscosity.
    bending_model : {"linear", "angular"}
        Blender's bending model.
    bending_damping, tension_damping, compression_damping, shear_damping, angular_damping : float
        Blender's damping settings.
    explicit_step : float
        The longest step (seconds) on which the linearized scheme takes the hinges explicitly.
    """

    def __init__(self, rest_positions, faces, vertex_mass, tension_stiffness, compression_stiffness,
                 shear_stiffness, bending_stiffness, air_damping=0.0, bending_model="linear", bending_damping=0.5,
                 tension_damping=0.0, compression_damping=0.0, shear_damping=0.0, angular_damping=0.0,
                 explicit_step=np.inf):
        if bending_model not in ("linear", "angular"):
            raise ValueError(f"bending_model must be 'linear' or 'angular', got {bending_model!r}")
        x = check_positions(rest_positions)
        n = x.shape[0]
        for name, value in (("tension_stiffness", tension_stiffness), ("compression_stiffness", compression_stiffness),
                            ("shear_stiffness", shear_stiffness), ("bending_stiffness", bending_stiffness),
                            ("air_damping", air_damping), ("bending_damping", bending_damping),
                            ("tension_damping", tension_damping), ("compression_damping", compression_damping),
                            ("shear_damping", shear_damping), ("angular_damping", angular_damping)):
            if not (np.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be finite and non-negative, got {value}")
        mass = np.broadcast_to(np.asarray(vertex_mass, dtype=float), (n,)).copy()
        structural, shear, bending = build_springs(faces, n)
        if bending_model == "angular":
            bending = bending[:0]
        pairs = np.concatenate([structural, shear, bending])
        rest = np.linalg.norm(x[pairs[:, 1]] - x[pairs[:, 0]], axis=1)
        if np.any(rest <= 0):
            raise ValueError("a spring has zero rest length (coincident vertices in the rest shape)")
        avg = rest[:len(structural)].mean() + _FLT_EPSILON
        n_struct, n_shear, n_bend = len(structural), len(shear), len(bending)
        k = np.r_[np.full(n_struct, tension_stiffness / avg), np.full(n_shear, shear_stiffness / avg), np.zeros(n_bend)]
        if bending_model == "linear":
            kb = np.r_[np.zeros(n_struct + n_shear), np.full(n_bend, bending_stiffness / (20.0 * avg))]
            cb = kb * bending_damping
        else:
            kb = cb = np.r_[np.full(n_struct, compression_stiffness / avg), np.zeros(n_shear)]
        self.springs = BlenderSpringTerm(n, pairs, rest, k, kb, cb)
        terms, velocity_terms = [self.springs], []
        c_stretch = np.r_[np.full(n_struct, tension_damping), np.full(n_shear, shear_damping), np.zeros(n_bend)]
        c_compress = np.r_[np.full(n_struct, compression_damping if bending_model == "angular" else 0.0),
                           np.zeros(n_shear + n_bend)]
        if np.any(c_stretch > 0) or np.any(c_compress > 0):
            velocity_terms.append(BlenderSpringDampingTerm(n, pairs, rest, c_stretch, c_compress))
        if bending_model == "angular":
            for i, j, others_a, others_b in build_hinges(faces, n):
                stiffness = 0.1 * bending_stiffness * np.linalg.norm(x[i] - x[j], axis=1)
                terms.append(BlenderAngularTerm(n, i, j, others_a, others_b, stiffness, x, explicit_step))
                if angular_damping > 0:
                    velocity_terms.append(BlenderAngularDampingTerm(n, i, j, others_a, others_b,
                                                                    np.full(len(i), float(angular_damping)),
                                                                    explicit_step))
        self.average_spring_length = avg - _FLT_EPSILON
        self.spring_counts = {"structural": n_struct, "shear": n_shear, "bending": n_bend,
                              "angular": sum(len(t.stencil) for t in terms[1:])}
        damping = None if air_damping == 0 else np.full(n, 0.01 * air_damping)
        super().__init__(mass, terms, damping, velocity_terms)
