"""Soft-body FEM, tet meshing of closed surfaces, and penalty contact."""
import numpy as np
import pytest

from derivatives import assert_jacobian_matches
from solver_core.physics import tetmesh
from solver_core.physics.models.contact import FloorContact, MeshContact, SphereContact, penalty
from solver_core.physics.models.softbody import LAWS, ElasticTetTerm, SoftBody, lame_parameters
from solver_core.scenes import meshes

# Three positively oriented tets sharing faces.
TET_REST = np.array([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1], [1.2, -0.3, 0.9]])
TETS = np.array([[0, 1, 2, 3], [1, 2, 3, 4], [1, 4, 3, 5]])

BOX_V = np.array([[x, y, z] for x in (-0.5, 0.5) for y in (-0.5, 0.5) for z in (-0.5, 0.5)])
BOX_F = np.array([[0, 1, 3], [0, 3, 2], [4, 6, 7], [4, 7, 5], [0, 4, 5], [0, 5, 1],
                  [2, 3, 7], [2, 7, 6], [0, 2, 6], [0, 6, 4], [1, 5, 7], [1, 7, 3]])


def torus(nu=20, nv=14, major=1.0, minor=0.4):
    """Closed torus surface with nu * nv vertices and outward-facing triangles."""
    return meshes.torus(major, minor, nu, nv)


def box_bar(nx=6, ny=2, nz=2, size=(3.0, 1.0, 1.0)):
    """Closed surface of an axis-aligned box subdivided into a grid, outward-facing triangles."""
    verts, tris, index = [], [], {}

    def vid(p):
        key = tuple(np.round(p, 9))
        if key not in index:
            index[key] = len(verts)
            verts.append(p)
        return index[key]

    counts, size = np.array([nx, ny, nz]), np.array(size)
    for axis in range(3):
        u_ax, v_ax = (axis + 1) % 3, (axis + 2) % 3
        for side in (0.0, 1.0):
            for i in range(counts[u_ax]):
                for j in range(counts[v_ax]):
                    corners = []
                    for du, dv in ((0, 0), (1, 0), (1, 1), (0, 1)):
                        p = np.zeros(3)
                        p[axis] = side * size[axis]
                        p[u_ax] = (i + du) / counts[u_ax] * size[u_ax]
                        p[v_ax] = (j + dv) / counts[v_ax] * size[v_ax]
                        corners.append(vid(p))
                    quad = corners if side == 1.0 else corners[::-1]
                    tris += [[quad[0], quad[1], quad[2]], [quad[0], quad[2], quad[3]]]
    return np.array(verts), np.array(tris)


def box_sdf(p):
    d = np.abs(p) - 0.5
    return np.linalg.norm(np.maximum(d, 0.0), axis=-1) + np.minimum(d.max(axis=-1), 0.0)


# ---------------------------------------------------------------- elasticity

@pytest.mark.parametrize("law", LAWS)
def test_elastic_jacobian_and_forces_match_finite_differences(law):
    rng = np.random.default_rng(1)
    term = ElasticTetTerm(TET_REST, TETS, youngs_modulus=1e5, poisson_ratio=0.35, law=law)
    q = TET_REST[None] + 0.15 * rng.standard_normal((3, len(TET_REST), 3))
    t = np.array([0.0, 1.5, 2.25])
    assert_jacobian_matches(term, q, t)
    eps, grad = 1e-6, np.zeros_like(q)
    for dof in range(q[0].size):
        dq = np.zeros_like(q)
        dq[:, dof // 3, dof % 3] = eps
        grad[:, dof // 3, dof % 3] = (term.energy(q + dq) - term.energy(q - dq)) / (2 * eps)
    forces = term.forces(q, t)
    assert np.abs(forces + grad).max() < 1e-6 * np.abs(forces).max()


def test_stable_neohookean_jacobian_for_an_inverted_tet():
    term = ElasticTetTerm(TET_REST[:4], TETS[:1], 1e4, 0.3, "stable_neohookean")
    q = TET_REST[None, :4].copy()
    q[0, 3, 2] = -0.5  # tet turned inside out
    assert term.energy(q)[0] > 0 and np.isfinite(term.energy(q)[0])
    assert_jacobian_matches(term, q, np.zeros(1))


@pytest.mark.parametrize("law", LAWS)
def test_elastic_forces_vanish_at_rest_and_conserve_momentum(law):
    term = ElasticTetTerm(TET_REST, TETS, 1e5, 0.3, law)
    angle = 0.7
    rot = np.array([[np.cos(angle), -np.sin(angle), 0], [np.sin(angle), np.cos(angle), 0], [0, 0, 1]])
    rigid = np.stack([TET_REST, TET_REST @ rot.T + [3.0, -1.0, 2.0]])
    assert np.abs(term.forces(rigid, np.zeros(2))).max() < 1e-9 * 1e5
    assert np.abs(term.energy(rigid)).max() < 1e-9 * 1e5
    q = TET_REST[None] + 0.2 * np.random.default_rng(2).standard_normal((4, len(TET_REST), 3))
    f = term.forces(q, np.zeros(4))
    scale = np.abs(f).max()
    assert np.abs(f.sum(axis=1)).max() < 1e-10 * scale
    assert np.abs(np.cross(q, f).sum(axis=1)).max() < 1e-10 * scale


def test_laws_share_the_linear_elastic_limit():
    """At rest both laws linearize to linear elasticity with the same Lame parameters."""
    q = TET_REST[None]
    snh = ElasticTetTerm(TET_REST, TETS, 2e5, 0.45, "stable_neohookean").jacobian_values(q, np.zeros(1))
    cor = ElasticTetTerm(TET_REST, TETS, 2e5, 0.45, "corotated").jacobian_values(q, np.zeros(1))
    np.testing.assert_allclose(snh, cor, atol=1e-9 * np.abs(cor).max())
    mu, lam = lame_parameters(2e5, 0.45)
    assert mu == pytest.approx(2e5 / 2.9) and lam == pytest.approx(2e5 * 0.45 / (1.45 * 0.1))


def test_softbody_lumped_mass_and_validation():
    body = SoftBody(TET_REST, TETS, density=1000.0, youngs_modulus=1e5, poisson_ratio=0.3)
    volume = tetmesh.tet_signed_volumes(TET_REST, TETS).sum()
    assert body.mass.sum() == pytest.approx(1000.0 * volume)
    assert body.n_vertices == len(TET_REST) and body.jacobian_values(TET_REST[None], np.zeros(1)).shape[1] == 144 * 3
    with pytest.raises(ValueError, match="inverted"):
        SoftBody(TET_REST, TETS[:, [1, 0, 2, 3]], 1000.0, 1e5, 0.3)
    flat = TET_REST.copy()
    flat[3] = [0.3, 0.3, 0.0]
    with pytest.raises(ValueError, match="degenerate"):
        ElasticTetTerm(flat, TETS[:1], 1e5, 0.3)
    nan = TET_REST.copy()
    nan[2, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        ElasticTetTerm(nan, TETS, 1e5, 0.3)
    with pytest.raises(ValueError, match="out of range"):
        ElasticTetTerm(TET_REST, TETS + 3, 1e5, 0.3)
    with pytest.raises(ValueError, match="poisson_ratio"):
        ElasticTetTerm(TET_REST, TETS, 1e5, 0.5)
    with pytest.raises(ValueError, match="unknown law"):
        ElasticTetTerm(TET_REST, TETS, 1e5, 0.3, law="linear")
    with pytest.raises(ValueError, match="no tet"):
        SoftBody(np.vstack([TET_REST, [5.0, 5, 5]]), TETS, 1000.0, 1e5, 0.3)


# ---------------------------------------------------------------- contact

def test_penalty_is_c2_at_both_junctions():
    delta = 0.01
    for s0 in (0.0, delta):
        below, above = penalty(s0 - 1e-12, delta), penalty(s0 + 1e-12, delta)
        for lo, hi in zip(below, above):
            assert abs(hi - lo) < 1e-9
    s = np.linspace(-0.02, 0.05, 701)
    psi, dpsi, ddpsi = penalty(s, delta)
    np.testing.assert_allclose(np.gradient(psi, s)[1:-1], dpsi[1:-1], atol=1e-4 * dpsi.max())
    assert np.all(np.diff(dpsi) >= 0) and np.all(ddpsi >= 0)


def test_floor_jacobian_inside_outside_and_across_the_threshold():
    delta = 0.01
    floor = FloorContact(5, height=0.2, normal=(0.0, 0.3, 1.0), stiffness=2e3, thickness=delta)
    n = floor.normal
    # signed distances: deep inside, just inside the layer, just outside, at and around both junctions
    d = np.array([[-0.03, 0.004, 0.0101, delta + 5e-9, delta - 5e-9],
                  [delta, 0.0, 1e-3, 0.5, -5e-9]])
    q = 0.2 * n + d[..., None] * n + np.cross(n, [1.0, 0, 0]) * np.arange(5)[None, :, None]
    t = np.array([0.0, 0.5])
    # the force is C^1, not C^2, at the junctions: a step of 1e-8 across them keeps the O(step) error small
    assert_jacobian_matches(floor, q, t, eps=1e-8)
    forces = floor.forces(q, t)
    assert np.all(forces[0, 2:] @ n < 1e-6) and np.all(forces[0, :2] @ n > 0)
    assert np.abs(forces[1, 0]).max() < 1e-12  # at the threshold: no force
    # force continuous across d = thickness and d = 0
    for d0 in (delta, 0.0):
        pair = 0.2 * n + np.array([d0 - 1e-10, d0 + 1e-10])[:, None] * n
        f = floor.forces(np.repeat(pair[:, None], 5, axis=1), np.zeros(2))
        jac = floor.jacobian_values(np.repeat(pair[:, None], 5, axis=1), np.zeros(2))
        assert np.abs(f[0] - f[1]).max() < 1e-6 and np.abs(jac[0] - jac[1]).max() < 1e-4


def test_default_stiffness_scales_with_vertex_mass():
    mass = np.array([0.01, 0.02, 0.04])
    floor = FloorContact(3, mass=mass, thickness=0.005, vertices=[0, 2])
    np.testing.assert_allclose(floor.stiffness, 100 * 9.81 * mass[[0, 2]] / 0.005)
    q = np.zeros((1, 3, 3))  # at the surface: 50 times the weight
    np.testing.assert_allclose(floor.forces(q, np.zeros(1))[0, :, 2], [50 * 9.81 * 0.01, 0, 50 * 9.81 * 0.04])
    with pytest.raises(ValueError, match="stiffness"):
        FloorContact(3)


def test_moving_sphere_reads_centers_at_fractional_frames():
    centers = np.array([[0.0, 0, 0], [0.2, 0, 0], [0.2, 0.4, 0], [0.0, 0.2, 0.1]])
    sphere = SphereContact(4, centers, radius=0.5, stiffness=1e3, thickness=0.02)
    rng = np.random.default_rng(3)
    t = np.array([0.25, 1.5, 2.75, 3.5])  # 3.5 interpolates between the last and the first sample
    expected = np.array([[0.05, 0, 0], [0.2, 0.2, 0], [0.05, 0.25, 0.075], [0.0, 0.1, 0.05]])
    dirs = rng.standard_normal((4, 4, 3))
    dirs /= np.linalg.norm(dirs, axis=-1, keepdims=True)
    dist = np.array([0.45, 0.49, 0.5 + 0.02 + 5e-9, 0.6])  # deep, in the layer, at the threshold, outside
    q = expected[:, None] + dist[None, :, None] * dirs
    assert_jacobian_matches(sphere, q, t, eps=1e-8)
    f = sphere.forces(q, t)
    mag = np.einsum("bki,bki->bk", f, dirs)
    assert np.all(mag[:, :2] > 0) and np.all(np.abs(mag[:, 3]) == 0)
    np.testing.assert_allclose(mag[:, 0], 1e3 * penalty(0.02 + 0.05, 0.02)[1])


def test_mesh_contact_on_a_box_matches_its_signed_distance():
    rng = np.random.default_rng(4)
    q = rng.uniform(-0.7, 0.7, (3, 30, 3))
    t = np.array([0.0, 1.0, 2.0])
    for triangles in (BOX_F, BOX_F[:, ::-1]):  # inward-facing triangles are flipped
        contact = MeshContact(30, BOX_V, triangles, stiffness=1e3, thickness=0.05)
        d = contact.signed_distance(q, t)
        np.testing.assert_allclose(d, box_sdf(q), atol=1e-12)
    assert_jacobian_matches(contact, q, t, eps=1e-7)


def test_moving_mesh_collider_jacobian_and_interpolation():
    shift = np.array([[0.0, 0, 0], [0.1, 0, 0], [0.1, 0.1, 0.05]])
    contact = MeshContact(12, BOX_V[None] + shift[:, None], BOX_F, stiffness=5e2, thickness=0.05)
    rng = np.random.default_rng(5)
    # points near faces, edges and corners, inside and outside the contact layer
    q = np.clip(rng.uniform(-0.6, 0.6, (4, 12, 3)), -0.53, 0.53)
    t = np.array([0.5, 1.25, 2.5, 0.0])
    assert_jacobian_matches(contact, q, t, eps=1e-7)
    centres = np.array([[0.05, 0, 0], [0.1, 0.025, 0.0125], [0.05, 0.05, 0.025], [0.0, 0, 0]])
    d = contact.signed_distance(q, t)
    np.testing.assert_allclose(d, box_sdf(q - centres[:, None]), atol=1e-12)


# ---------------------------------------------------------------- surfaces and tet meshes

def test_closed_manifold_check_rejects_open_non_manifold_and_misoriented():
    tetmesh.check_closed_manifold(BOX_V, BOX_F)
    with pytest.raises(ValueError, match="not closed.*boundary edges"):
        tetmesh.check_closed_manifold(BOX_V, BOX_F[1:])
    extra = np.vstack([BOX_V, [[0.0, 0.0, 2.0]]])
    with pytest.raises(ValueError, match="non-manifold"):
        tetmesh.check_closed_manifold(extra, np.vstack([BOX_F, [[0, 1, 8], [1, 0, 8]]]))
    flipped = BOX_F.copy()
    flipped[0] = flipped[0, ::-1]
    with pytest.raises(ValueError, match="orientation"):
        tetmesh.check_closed_manifold(BOX_V, flipped)
    with pytest.raises(ValueError, match="out of range"):
        tetmesh.check_closed_manifold(BOX_V, BOX_F + 1)
    with pytest.raises(ValueError, match="not closed"):
        tetmesh.tetrahedralize(BOX_V, BOX_F[:-1])


@pytest.mark.parametrize("surface", [torus(), box_bar()], ids=["torus", "box_bar"])
def test_tetrahedralize_keeps_the_surface_and_fills_its_volume(surface):
    vertices, triangles = surface
    tet_vertices, tets = tetmesh.tetrahedralize(vertices, triangles)
    assert np.array_equal(tet_vertices[:len(vertices)], vertices)
    assert len(tet_vertices) > len(vertices)  # some interior points
    volumes = tetmesh.tet_signed_volumes(tet_vertices, tets)
    assert volumes.min() > 1e-3 * volumes.mean()
    assert np.array_equal(np.unique(tets), np.arange(len(tet_vertices)))
    assert tetmesh.tet_quality(tet_vertices, tets).min() >= 0.05
    # no inner cracks: the faces used by one tet only lie on the surface and cover its area (planar
    # quads may be split along the other diagonal)
    faces = np.sort(np.concatenate([tets[:, [1, 2, 3]], tets[:, [0, 2, 3]], tets[:, [0, 1, 3]], tets[:, [0, 1, 2]]]),
                    axis=1)
    unique, counts = np.unique(faces, axis=0, return_counts=True)
    assert counts.max() == 2
    boundary = tet_vertices[unique[counts == 1]]
    assert tetmesh.surface_distance(vertices, triangles, boundary.mean(axis=1)).max() < 1e-9

    def area(tri):
        return 0.5 * np.linalg.norm(np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]), axis=1).sum()

    assert area(boundary) == pytest.approx(area(vertices[triangles]), rel=1e-9)
    assert volumes.sum() == pytest.approx(tetmesh.enclosed_volume(vertices, triangles), rel=0.03)
    body = SoftBody(tet_vertices, tets, density=100.0, youngs_modulus=1e4, poisson_ratio=0.3)
    assert np.abs(body.forces(tet_vertices[None], np.zeros(1))).max() < 1e-8


def test_fill_interior_reproduces_rest_and_affine_motions():
    vertices, triangles = torus()
    rest, tets = tetmesh.tetrahedralize(vertices, triangles, spacing=0.2)
    n_s = len(vertices)
    affine = np.array([[0.9, -0.5, 0.1], [0.5, 1.1, 0.0], [0.0, 0.2, 1.0]])
    frames = np.stack([vertices, vertices @ affine.T + [1.0, 2.0, 3.0]])
    full = tetmesh.fill_interior(rest, tets, n_s, frames)
    assert full.shape == (2, len(rest), 3)
    np.testing.assert_allclose(full[0], rest, atol=1e-12)
    np.testing.assert_allclose(full[1], rest @ affine.T + [1.0, 2.0, 3.0], atol=1e-10)
    bent = vertices + 0.1 * np.sin(vertices[:, :1]) * [0, 0, 1]
    single = tetmesh.fill_interior(rest, tets, n_s, bent)
    assert single.shape == rest.shape and np.all(tetmesh.tet_signed_volumes(single, tets) > 0)
