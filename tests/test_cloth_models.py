"""Cloth force models: exact Jacobians vs finite differences, energy consistency, invariances, input checks."""
import numpy as np
import pytest

from derivatives import assert_jacobian_matches, assert_velocity_jacobian_matches
from solver_core import BendingTerm, BlenderCloth, Cloth, Gravity, MembraneTerm, Wind, WindFlow
from solver_core.physics.models.blender_cloth import build_hinges, build_springs
from solver_core.physics.models.cloth import (COTTON_BENDING_STIFFNESS, COTTON_DENSITY, COTTON_THICKNESS,
                                              dihedral_angle, triangle_areas)

N_SIDE = 4


def grid(n=N_SIDE, size=0.3, seed=0):
    """Randomly perturbed flat n x n grid: positions (n*n, 3), triangles, quads."""
    rng = np.random.default_rng(seed)
    u, v = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    h = size / (n - 1)
    x = np.stack([u.ravel() * h, v.ravel() * h, np.zeros(n * n)], 1)
    x[:, :2] += 0.15 * h * rng.uniform(-1, 1, (n * n, 2))
    v0 = (np.arange(n - 1)[:, None] * n + np.arange(n - 1)).ravel()
    quads = np.stack([v0, v0 + n, v0 + n + 1, v0 + 1], 1)
    tris = np.concatenate([quads[:, [0, 1, 2]], quads[:, [0, 2, 3]]])
    return x, tris, quads


def rotation(axis, angle):
    axis = np.asarray(axis, float) / np.linalg.norm(axis)
    k = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    return np.eye(3) + np.sin(angle) * k + (1 - np.cos(angle)) * k @ k


def deformed_frames(x, scale=0.02, frames=3, seed=1):
    """Several frames with different stretches, rotations and random perturbations of x."""
    rng = np.random.default_rng(seed)
    out = []
    for f in range(frames):
        stretch = np.diag(1.0 + 0.1 * rng.uniform(-1, 1, 3))
        r = rotation(rng.standard_normal(3), rng.uniform(0, np.pi))
        out.append(x @ (r @ stretch).T + rng.standard_normal(3) + scale * rng.standard_normal(x.shape))
    return np.array(out)


def fold(x, angle, column):
    """Fold the grid by ``angle`` about the line y = x[column, 1]: points beyond it rotate about the x axis."""
    y0 = x[column, 1]
    out = x.copy()
    beyond = x[:, 1] > y0 + 1e-9
    rel = x[beyond] - [0.0, y0, 0.0]
    out[beyond] = rel @ rotation([1.0, 0.0, 0.0], angle).T + [0.0, y0, 0.0]
    return out


def energy_gradient_fd(term, q, eps=1e-6):
    grad = np.zeros(q.shape)
    for i in range(q.shape[1]):
        for k in range(3):
            dq = np.zeros_like(q)
            dq[:, i, k] = eps
            grad[:, i, k] = (term.energy(q + dq) - term.energy(q - dq)) / (2 * eps)
    return grad


def times(q):
    return np.arange(q.shape[0], dtype=float)


# ---------------------------------------------------------------------------------------------------------- membrane


@pytest.mark.parametrize("law", ["neohookean", "stvk"])
def test_membrane_jacobian_matches_finite_differences(law):
    x, tris, _ = grid()
    term = MembraneTerm(x, tris, 1e4, 0.3, 1e-3, law)
    q = deformed_frames(x)
    assert_jacobian_matches(term, q, times(q))


@pytest.mark.parametrize("law", ["neohookean", "stvk"])
def test_membrane_forces_are_minus_energy_gradient(law):
    x, tris, _ = grid()
    term = MembraneTerm(x, tris, 1e4, 0.3, 1e-3, law)
    q = deformed_frames(x)
    f = term.forces(q, times(q))
    np.testing.assert_allclose(f, -energy_gradient_fd(term, q), atol=1e-6 * np.abs(f).max())


@pytest.mark.parametrize("law", ["neohookean", "stvk"])
def test_membrane_rest_and_rigid_motion_are_force_free(law):
    x, tris, _ = grid()
    term = MembraneTerm(x, tris, 1e4, 0.3, 1e-3, law)
    moved = x @ rotation([1.0, 2.0, 3.0], 0.7).T + [0.3, -1.0, 2.0]
    q = np.stack([x, moved])
    f = term.forces(q, times(q))
    assert np.abs(f).max() < 1e-10
    np.testing.assert_allclose(term.energy(q), 0.0, atol=1e-14)


@pytest.mark.parametrize("law", ["neohookean", "stvk"])
def test_membrane_forces_have_zero_net_force_and_torque(law):
    x, tris, _ = grid()
    term = MembraneTerm(x, tris, 1e4, 0.3, 1e-3, law)
    q = deformed_frames(x)
    f = term.forces(q, times(q))
    scale = np.abs(f).max()
    assert scale > 1e-3
    np.testing.assert_allclose(f.sum(axis=1), 0.0, atol=1e-10 * scale)
    np.testing.assert_allclose(np.cross(q, f).sum(axis=1), 0.0, atol=1e-9 * scale)


def test_membrane_uniaxial_stretch_matches_stvk_closed_form():
    # Square patch stretched by s along x with y, z held: StVK energy = area h (mu + lam/2) ((s^2 - 1)/2)^2.
    x, tris, _ = grid(seed=3)
    e, nu, h, s = 1e4, 0.3, 1e-3, 1.2
    term = MembraneTerm(x, tris, e, nu, h, "stvk")
    mu, lam = e / (2 * (1 + nu)), e * nu / (1 - nu**2)
    area = triangle_areas(x, tris).sum()
    expected = area * h * (mu + lam / 2) * ((s * s - 1) / 2) ** 2
    np.testing.assert_allclose(term.energy((x * [s, 1.0, 1.0])[None]), expected, rtol=1e-12)


# ---------------------------------------------------------------------------------------------------------- bending


def test_dihedral_angle_of_a_known_fold_and_its_sign():
    # theta is the right-handed rotation about e that takes the flat second wing to its position.
    e = np.array([2.0, 0.0, 0.0])
    a = np.array([0.3, 1.0, 0.0])  # first wing in the xy plane
    for angle in (-2.5, -0.4, 0.0, 1e-7, 0.9, 3.0):
        b = rotation(e, angle) @ [0.6, -1.0, 0.0]
        assert np.isclose(dihedral_angle(e, a, b), angle, atol=1e-12)
        assert np.isclose(dihedral_angle(e, rotation(e, -angle) @ a, [0.6, -1.0, 0.0]), angle, atol=1e-12)


@pytest.mark.parametrize("name, make", [
    ("random", lambda x: deformed_frames(x, scale=0.03)),
    ("near_flat", lambda x: x[None] + 1e-5 * np.random.default_rng(5).standard_normal((3,) + x.shape)),
    ("exactly_flat_moved", lambda x: deformed_frames(x, scale=0.0)),
    ("folded", lambda x: np.stack([fold(x, a, 6) for a in (2.4, -2.6, 1.2)])
     + 1e-3 * np.random.default_rng(6).standard_normal((3,) + x.shape)),
])
def test_bending_jacobian_matches_finite_differences(name, make):
    x, tris, _ = grid()
    term = BendingTerm(x, tris, 0.7)
    q = make(x)
    if name == "exactly_flat_moved":
        # Flat configurations: zero force, Jacobian = -2 k grad(theta) grad(theta)^T, still exact.
        assert np.abs(term.forces(q, times(q))).max() < 1e-12
    assert_jacobian_matches(term, q, times(q), eps=1e-7)


@pytest.mark.parametrize("rest_fold", [0.0, 0.8])
def test_bending_forces_are_minus_energy_gradient(rest_fold):
    x, tris, _ = grid()
    rest = fold(x, rest_fold, 6)
    term = BendingTerm(rest, tris, 0.7)
    q = np.concatenate([deformed_frames(rest, scale=0.03, frames=2), fold(x, 2.5, 9)[None]])
    f = term.forces(q, times(q))
    np.testing.assert_allclose(f, -energy_gradient_fd(term, q), atol=1e-6 * np.abs(f).max())


def test_bending_rest_shape_is_force_free_and_invariant():
    x, tris, _ = grid()
    rest = fold(x, 1.1, 5)
    term = BendingTerm(rest, tris, 0.7)
    moved = rest @ rotation([0.2, -1.0, 0.5], 2.0).T + [1.0, 2.0, 3.0]
    q = np.stack([rest, moved])
    assert np.abs(term.forces(q, times(q))).max() < 1e-12
    q = deformed_frames(rest, scale=0.03)
    f = term.forces(q, times(q))
    scale = np.abs(f).max()
    np.testing.assert_allclose(f.sum(axis=1), 0.0, atol=1e-10 * scale)
    np.testing.assert_allclose(np.cross(q, f).sum(axis=1), 0.0, atol=1e-9 * scale)


def test_bending_energy_of_a_single_hinge():
    # Two unit right triangles folded by angle: energy = k angle^2 |e|^2 / (A1 + A2) = k angle^2 * 1 / 1.
    x = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, -1.0, 0.0]])
    term = BendingTerm(x, [[0, 1, 2], [1, 0, 3]], 2.0)
    folded = fold(x, 0.5, 0)
    np.testing.assert_allclose(term.energy(folded[None]), 2.0 * 0.5**2, rtol=1e-12)


# ---------------------------------------------------------------------------------------------------------- cloth


def test_cloth_mass_sums_to_density_thickness_area():
    x, tris, _ = grid()
    cloth = Cloth(x, tris, density=300.0, thickness=5e-4)
    np.testing.assert_allclose(cloth.mass.sum(), 300.0 * 5e-4 * triangle_areas(x, tris).sum(), rtol=1e-12)
    assert len(cloth.terms) == 2


def test_cloth_cotton_defaults_and_overrides():
    x, tris, _ = grid()
    cotton = Cloth.cotton(x, tris)
    np.testing.assert_allclose(cotton.mass.sum(), COTTON_DENSITY * COTTON_THICKNESS * triangle_areas(x, tris).sum())
    assert cotton.bending.weight.max() > 0
    stiff = Cloth.cotton(x, tris, bending_stiffness=10 * COTTON_BENDING_STIFFNESS, law="stvk")
    np.testing.assert_allclose(stiff.bending.weight, 10 * cotton.bending.weight)
    assert 1e-7 < COTTON_BENDING_STIFFNESS < 1e-5


def test_cloth_model_jacobian_and_damping():
    x, tris, _ = grid()
    cloth = Cloth(x, tris, youngs_modulus=1e3, bending_stiffness=1e-1, damping=0.5)
    q = deformed_frames(x)
    assert_jacobian_matches(cloth, q, times(q))
    np.testing.assert_allclose(cloth.damping, 0.5)


@pytest.mark.parametrize("mutate, message", [
    (lambda x, t: (np.where(np.arange(x.size).reshape(x.shape) == 4, np.nan, x), t), "NaN"),
    (lambda x, t: (x, np.vstack([t, [0, 1, 99]])), "out of range"),
    (lambda x, t: (x, np.vstack([t, [-1, 1, 2]])), "out of range"),
    (lambda x, t: (x, np.vstack([t, [0, 0, 1]])), "repeats"),
    (lambda x, t: (x, np.vstack([t, [0, 1, 2]])), "degenerate"),  # collinear grid points
    (lambda x, t: (np.vstack([x, [[5.0, 5.0, 5.0]]]), t), "zero mass"),
    (lambda x, t: (x, t.astype(float)), "integer"),
    (lambda x, t: (x[:, :2], t), "shape"),
])
def test_cloth_rejects_bad_input(mutate, message):
    x, tris, _ = grid(seed=9)
    x = x.copy()
    x[:, :2] = np.round(x[:, :2] / 0.1) * 0.1  # undo the jitter so vertices 0, 1, 2 are collinear
    bad_x, bad_tris = mutate(x, tris)
    with pytest.raises(ValueError, match=message):
        Cloth(bad_x, bad_tris)


@pytest.mark.parametrize("params, message", [
    (dict(thickness=0.0), "positive"), (dict(youngs_modulus=-1.0), "positive"), (dict(density=0.0), "density"),
    (dict(poisson_ratio=1.0), "poisson"), (dict(bending_stiffness=-1.0), "bending"), (dict(law="hooke"), "law"),
])
def test_cloth_rejects_bad_parameters(params, message):
    x, tris, _ = grid()
    with pytest.raises(ValueError, match=message):
        Cloth.cotton(x, tris, **params)


def test_near_degenerate_triangle_and_non_manifold_edge_are_rejected():
    x = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.5, 1e-10, 0.0], [0.5, 1.0, 0.0], [0.5, -1.0, 0.0],
                  [0.5, 0.0, 1.0]])
    with pytest.raises(ValueError, match="degenerate"):
        MembraneTerm(x, [[0, 1, 2]], 1.0, 0.3, 1e-3)
    with pytest.raises(ValueError, match="non-manifold"):
        BendingTerm(x, [[0, 1, 3], [1, 0, 4], [0, 1, 5]], 1.0)


# ---------------------------------------------------------------------------------------------------------- external


def test_gravity_is_mass_times_g_with_empty_jacobian():
    mass = np.array([1.0, 2.0, 3.0])
    term = Gravity(mass, g=(0.0, -1.0, -9.81))
    q = np.zeros((4, 3, 3))
    np.testing.assert_allclose(term.forces(q, times(q))[2, 1], [0.0, -2.0, -19.62])
    assert term.jacobian_pattern()[0].size == 0 and term.jacobian_values(q, times(q)).shape == (4, 0)


@pytest.mark.parametrize("per_frame", [False, True])
def test_wind_jacobian_matches_finite_differences(per_frame):
    x, tris, _ = grid()
    rng = np.random.default_rng(2)
    wind = rng.standard_normal((7, 3)) if per_frame else np.array([0.5, -2.0, 3.0])
    term = Wind(len(x), tris, wind, coefficient=1.7)
    q = deformed_frames(x, scale=0.03)
    assert_jacobian_matches(term, q, np.array([0.4, 3.5, 6.8]))


@pytest.mark.parametrize("per_frame", [False, True])
def test_wind_product_matches_its_jacobian_and_differences(per_frame):
    """Wind's matrix-free dF/dq s (the linearized scheme's residual takes it every step) equals its assembled
    Jacobian times s to roundoff and central differences of its forces along s."""
    from solver_core.physics.models.base import pattern_product
    x, tris, _ = grid()
    rng = np.random.default_rng(3)
    wind = rng.standard_normal((7, 3)) if per_frame else np.array([0.5, -2.0, 3.0])
    term = Wind(len(x), tris, wind, coefficient=1.7)
    q, t = deformed_frames(x, scale=0.03), np.array([0.4, 3.5, 6.8])
    s = rng.standard_normal(q.shape)
    product = term.jacobian_dot(q, t, s)
    rows, cols = term.jacobian_pattern()
    assembled = pattern_product(rows, cols, term.jacobian_values(q, t), s, 3 * len(x)).reshape(q.shape)
    np.testing.assert_allclose(product, assembled, rtol=0, atol=1e-12 * np.abs(assembled).max())
    eps = 1e-6
    difference = (term.forces(q + eps * s, t) - term.forces(q - eps * s, t)) / (2 * eps)
    assert np.abs(product - difference).max() < 1e-6 * np.abs(product).max()


def test_wind_on_a_flat_sheet_is_area_times_normal_pressure():
    x, tris, _ = grid()
    flipped = tris[:, [0, 2, 1]]  # the orientation of the triangles does not matter
    wind = np.array([[0.0, 0.0, 2.0], [0.0, 0.0, 4.0], [1.0, 0.0, 0.0]])
    term = Wind(len(x), np.concatenate([tris[:5], flipped[5:]]), wind, coefficient=0.5)
    f = term.forces(np.stack([x, x]), np.array([0.0, 0.5]))
    area = triangle_areas(x, tris).sum()
    np.testing.assert_allclose(f.sum(axis=1), [[0, 0, 0.5 * area * 2.0], [0, 0, 0.5 * area * 3.0]], rtol=1e-12)
    side = term.forces(x[None], np.array([2.0]))
    assert np.abs(side).max() < 1e-15


def test_wind_flow_jacobians_match_finite_differences():
    x, tris, _ = grid()
    term = WindFlow(len(x), tris, coefficient=1.3)
    q = deformed_frames(x, scale=0.03)
    v = np.random.default_rng(3).standard_normal(q.shape)
    assert_velocity_jacobian_matches(term, q, v, np.zeros(len(q)))


def test_a_sheet_moving_with_the_wind_feels_none_of_it():
    x, tris, _ = grid()
    q = deformed_frames(x, scale=0.03)
    wind = np.array([0.3, -1.0, 2.0])
    pushed = Wind(len(x), tris, wind, coefficient=0.7).forces(q, np.zeros(len(q)))
    assert np.abs(pushed).max() > 0.01
    drag = WindFlow(len(x), tris, coefficient=0.7).forces(q, np.broadcast_to(wind, q.shape), np.zeros(len(q)))
    np.testing.assert_allclose(pushed + drag, 0.0, atol=1e-12)


# ---------------------------------------------------------------------------------------------------------- Blender


def blender_linear_bending_reference(shear):
    """Blender's linked-list loop (cloth_build_springs, linear model) written out literally."""
    edgelist = {}
    for s in shear:
        edgelist.setdefault(s[0], []).append(s)
        edgelist.setdefault(s[1], []).append(s)
    found = set()
    for ij, kl in reversed(shear):  # cloth->springs is prepend-ordered
        for other in edgelist[kl]:
            index2 = other[1] if other[0] == kl else other[0]
            if index2 != ij and (min(ij, index2), max(ij, index2)) not in found:
                found.add((min(ij, index2), max(ij, index2)))
    return found


def test_blender_springs_on_quads_and_triangles():
    _, tris, quads = grid()
    structural, shear, bending = build_springs(quads, N_SIDE**2)
    assert len(structural) == 2 * N_SIDE * (N_SIDE - 1)
    assert len(shear) == 2 * (N_SIDE - 1) ** 2
    assert set(map(tuple, bending.tolist())) == blender_linear_bending_reference([tuple(s) for s in shear.tolist()])
    # Grid vertex 0 gets bending springs two steps along each axis and along the diagonal.
    assert {(0, 2), (0, 2 * N_SIDE), (0, 2 * N_SIDE + 2)} <= set(map(tuple, bending.tolist()))
    _, shear_t, bending_t = build_springs(tris, N_SIDE**2)
    assert len(shear_t) == 0 and len(bending_t) == 0
    _, shear_p, _ = build_springs([[0, 1, 2, 3, 4]], 5)
    assert sorted(map(tuple, shear_p.tolist())) == [(0, 2), (0, 3), (1, 3), (1, 4), (2, 4)]


def test_blender_cloth_jacobian_rest_and_damping():
    x, _, quads = grid()
    faces = [list(f) for f in quads]
    cloth = BlenderCloth(x, faces, 0.3, 15.0, 15.0, 5.0, 0.5, air_damping=1.0)
    rng = np.random.default_rng(4)
    # Mixed stretch and compression so that tension, shear and Choi–Ko bending branches are all active.
    q = np.stack([x * [1.08, 0.93, 1.0], x * [0.9, 0.95, 1.0], x]) + 0.01 * rng.standard_normal((3,) + x.shape)
    assert_jacobian_matches(cloth, q, times(q))
    assert np.abs(cloth.forces(x[None], np.zeros(1))).max() == 0.0
    np.testing.assert_allclose(cloth.damping, 0.01)
    np.testing.assert_allclose(cloth.mass, 0.3)
    assert BlenderCloth(x, faces, 0.3, 15.0, 15.0, 5.0, 0.5).damping is None


def test_blender_structural_spring_law():
    # One quad: an edge stretched by d pulls with (tension / avg) d, a compressed edge is free (Linear model).
    x = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    cloth = BlenderCloth(x, [[0, 1, 2, 3]], 1.0, 10.0, 99.0, 0.0, 0.0)
    stretched = x.copy()
    stretched[1, 0] = 1.1
    f = cloth.forces(stretched[None], np.zeros(1))[0]
    np.testing.assert_allclose(f[0], [10.0 / 1.0 * 0.1, 0.0, 0.0], rtol=1e-6)
    squeezed = x * [0.9, 1.0, 1.0]  # compresses two edges and both shear diagonals, keeps the others
    assert np.abs(cloth.forces(squeezed[None], np.zeros(1))).max() == 0.0


def blender_angular_reference(x, i, j, poly_a, poly_b, stiffness, rest_angle):
    """SIM_mass_spring_force_spring_angular (spring_angle, poly_norm, bend_angle) written out literally."""
    def normal_tri(v1, v2, v3):
        n = np.cross(v1 - v2, v2 - v3)
        return n / np.linalg.norm(n)

    f = np.zeros_like(x)
    dir_a = normal_tri(x[j], x[i], x[poly_a].mean(0))
    dir_b = normal_tri(x[i], x[j], x[poly_b].mean(0))
    dir_e = (x[i] - x[j]) / np.linalg.norm(x[i] - x[j])
    angle = np.arctan2(np.dot(np.cross(dir_a, dir_b), dir_e), np.dot(dir_a, dir_b))
    force = stiffness * (angle - rest_angle)
    for v in poly_a:
        f[v] += dir_a * force / len(poly_a)
    for v in poly_b:
        f[v] += dir_b * force / len(poly_b)
    f[i] -= (dir_a + dir_b) * force * 0.5
    f[j] -= (dir_a + dir_b) * force * 0.5
    return f, angle


@pytest.mark.parametrize("mesh", ["quads", "triangles", "mixed"])
def test_blender_angular_model_jacobian_and_reference(mesh):
    x, tris, quads = grid()
    faces = {"quads": quads.tolist(), "triangles": tris.tolist(),
             "mixed": quads[:4].tolist() + np.concatenate([quads[4:, [0, 1, 2]], quads[4:, [0, 2, 3]]]).tolist()}[mesh]
    rest = fold(x, 0.4, 6)
    cloth = BlenderCloth(rest, faces, 0.3, 15.0, 10.0, 5.0, 0.5, bending_model="angular")
    rng = np.random.default_rng(7)
    q = np.stack([x * [1.08, 0.93, 1.0], x * [0.9, 0.95, 1.0], fold(x, 1.5, 9)])
    q += 0.01 * rng.standard_normal(q.shape)
    assert_jacobian_matches(cloth, q, times(q))
    assert np.abs(cloth.forces(rest[None], np.zeros(1))).max() < 1e-12
    # Every angular term agrees with the literal port of Blender's force on the last frame.
    expected = np.zeros_like(x)
    for i, j, others_a, others_b in build_hinges(faces, len(x)):
        for h in range(len(i)):
            poly_a, poly_b = [i[h], j[h], *others_a[h]], [i[h], j[h], *others_b[h]]
            _, rest_angle = blender_angular_reference(rest, i[h], j[h], poly_a, poly_b, 0.0, 0.0)
            stiffness = 0.1 * 0.5 * np.linalg.norm(rest[i[h]] - rest[j[h]])
            expected += blender_angular_reference(q[-1], i[h], j[h], poly_a, poly_b, stiffness, rest_angle)[0]
    angular = sum(term.forces(q[-1:], np.zeros(1))[0] for term in cloth.terms[1:])
    np.testing.assert_allclose(angular, expected, atol=1e-12)


def blender_spring_damping_reference(x, v, i, j, rest, c_stretch, c_compress):
    """Literal port of the damping part of SIM_mass_spring_force_spring_linear for one spring: force on i."""
    extent, vel = x[j] - x[i], v[j] - v[i]
    length = np.linalg.norm(extent)
    direction = extent / length
    damping = c_stretch if length >= rest else c_compress
    return direction * damping * (vel @ direction)


def blender_angular_damping_reference(x, v, i, j, poly_a, poly_b, damping):
    """Literal port of the damping part of SIM_mass_spring_force_spring_angular: forces (n, 3)."""
    def normal(p, q, poly):
        mid = x[poly].mean(axis=0)
        nrm = np.cross(x[q] - x[p], mid - x[p])   # normal_tri_v3(p, q, mid)
        return nrm / np.linalg.norm(nrm)
    dir_a, dir_b = normal(j, i, poly_a), normal(i, j, poly_b)
    vel_e = (v[i] + v[j]) / 2
    vel_a, vel_b = v[poly_a].mean(axis=0) - vel_e, v[poly_b].mean(axis=0) - vel_e
    force = -damping * (vel_a @ dir_a + vel_b @ dir_b)
    f = np.zeros_like(x)
    for k in poly_a:
        f[k] += dir_a * force / len(poly_a)
    for k in poly_b:
        f[k] += dir_b * force / len(poly_b)
    f[i] -= (dir_a + dir_b) * force * 0.5
    f[j] -= (dir_a + dir_b) * force * 0.5
    return f


@pytest.mark.parametrize("bending_model", ["angular", "linear"])
def test_blender_velocity_damping_jacobians_and_reference(bending_model):
    x, tris, quads = grid()
    faces = quads[:4].tolist() + np.concatenate([quads[4:, [0, 1, 2]], quads[4:, [0, 2, 3]]]).tolist()
    cloth = BlenderCloth(x, faces, 0.3, 15.0, 10.0, 5.0, 0.5, bending_model=bending_model,
                         tension_damping=5.0, compression_damping=3.0, shear_damping=2.0, angular_damping=0.7)
    rng = np.random.default_rng(8)
    q = np.stack([x * [1.08, 0.93, 1.0], x * [0.9, 0.95, 1.0], fold(x, 1.5, 9)]) + 0.01 * rng.standard_normal((3,) + x.shape)
    v = rng.standard_normal(q.shape)
    kinds = [type(term).__name__ for term in cloth.velocity_terms]
    assert kinds.count("BlenderSpringDampingTerm") == 1
    assert ("BlenderAngularDampingTerm" in kinds) == (bending_model == "angular")
    for term in cloth.velocity_terms:
        assert_velocity_jacobian_matches(term, q, v, times(q))
    # Linear in the velocities, and every spring and hinge agrees with the literal port of Blender's force.
    np.testing.assert_allclose(cloth.velocity_forces(q, 2 * v, times(q)), 2 * cloth.velocity_forces(q, v, times(q)))
    structural, shear, bending = build_springs(faces, len(x))
    expected = np.zeros_like(x)
    for kind, pairs in (("structural", structural), ("shear", shear)):
        for a, b in pairs:
            rest = np.linalg.norm(x[b] - x[a])
            compress = 3.0 if (kind == "structural" and bending_model == "angular") else 0.0
            f = blender_spring_damping_reference(q[-1], v[-1], a, b, rest, 5.0 if kind == "structural" else 2.0, compress)
            expected[a] += f
            expected[b] -= f
    if bending_model == "angular":
        for i, j, others_a, others_b in build_hinges(faces, len(x)):
            for h in range(len(i)):
                expected += blender_angular_damping_reference(q[-1], v[-1], i[h], j[h], [i[h], j[h], *others_a[h]],
                                                              [i[h], j[h], *others_b[h]], 0.7)
    np.testing.assert_allclose(cloth.velocity_forces(q[-1:], v[-1:], np.zeros(1))[0], expected, atol=1e-12)


@pytest.mark.parametrize("mesh", ["quads", "triangles", "mixed"])
def test_blender_angular_damping_jacobians_match_differences(mesh):
    """The hinges' damping (its Jacobians assembled from 3x3 blocks per hinge) against central differences of its
    forces, in positions and velocities, on every kind of hinge (quad-quad, triangle-triangle, a quad's diagonal)."""
    x, tris, quads = grid()
    faces = {"quads": quads.tolist(), "triangles": tris.tolist(),
             "mixed": quads[:4].tolist() + np.concatenate([quads[4:, [0, 1, 2]], quads[4:, [0, 2, 3]]]).tolist()}[mesh]
    cloth = BlenderCloth(fold(x, 0.4, 6), faces, 0.3, 15.0, 10.0, 5.0, 0.5, bending_model="angular", angular_damping=0.7)
    rng = np.random.default_rng(12)
    q = np.stack([x * [1.08, 0.93, 1.0], fold(x, 1.5, 9)]) + 0.01 * rng.standard_normal((2,) + x.shape)
    v = rng.standard_normal(q.shape)
    hinges = [term for term in cloth.velocity_terms if type(term).__name__ == "BlenderAngularDampingTerm"]
    assert hinges
    for term in hinges:
        assert all(np.abs(values).max() > 0 for values in term.jacobian_values(q, v, times(q)))
        assert_velocity_jacobian_matches(term, q, v, times(q))


@pytest.mark.parametrize("bending_model", ["angular", "linear"])
def test_blender_spring_jacobian_derivative_matches_differences(bending_model):
    """The springs' analytic Jacobian derivative along s (linearized scheme) against central differences."""
    from solver_core.physics.models.base import jacobian_difference
    x, _, quads = grid()
    cloth = BlenderCloth(x, quads.tolist(), 0.3, 15.0, 10.0, 5.0, 0.5, bending_model=bending_model)
    rng = np.random.default_rng(9)
    q = np.stack([x * [1.08, 0.93, 1.0], x * [0.9, 0.95, 1.0], fold(x, 1.5, 9)]) + 0.01 * rng.standard_normal((3,) + x.shape)
    s = rng.standard_normal(q.shape)
    lengths = np.linalg.norm(q[:, cloth.springs.pairs[:, 1]] - q[:, cloth.springs.pairs[:, 0]], axis=-1)
    assert np.abs(lengths / cloth.springs.rest_length - 1).min() > 1e-3   # no spring at its kink
    exact = cloth.springs.jacobian_derivative(q, times(q), s)
    approx = jacobian_difference(cloth.springs, q, times(q), s)
    assert np.abs(exact - approx).max() < 1e-6 * np.abs(exact).max()


@pytest.mark.parametrize("mesh", ["quads", "triangles", "mixed"])
def test_blender_angular_jacobian_derivative_matches_differences(mesh):
    """Each hinge term's analytic Jacobian derivative along s (linearized scheme) against central differences of
    its Jacobian, per term; a zero step gives zero, and the derivative is linear in s."""
    from solver_core.physics.models.base import jacobian_difference
    x, tris, quads = grid()
    faces = {"quads": quads.tolist(), "triangles": tris.tolist(),
             "mixed": quads[:4].tolist() + np.concatenate([quads[4:, [0, 1, 2]], quads[4:, [0, 2, 3]]]).tolist()}[mesh]
    cloth = BlenderCloth(fold(x, 0.4, 6), faces, 0.3, 15.0, 10.0, 5.0, 0.5, bending_model="angular")
    rng = np.random.default_rng(11)
    q = np.stack([x * [1.08, 0.93, 1.0], x * [0.9, 0.95, 1.0], fold(x, 1.5, 9)]) + 0.01 * rng.standard_normal((3,) + x.shape)
    s = rng.standard_normal(q.shape)
    hinges = cloth.terms[1:]
    assert hinges and all(type(term).__name__ == "BlenderAngularTerm" for term in hinges)
    for term in hinges:
        exact = term.jacobian_derivative(q, times(q), s)
        approx = jacobian_difference(term, q, times(q), s)
        assert exact.shape == approx.shape
        assert np.abs(exact - approx).max() < 1e-6 * np.abs(exact).max()
        np.testing.assert_allclose(term.jacobian_derivative(q, times(q), -2.0 * s), -2.0 * exact, rtol=1e-12, atol=1e-12)
        assert np.abs(term.jacobian_derivative(q, times(q), np.zeros_like(s))).max() == 0.0


@pytest.mark.parametrize("mesh", ["quads", "mixed"])
def test_blender_jacobian_products_match_jacobian_and_differences(mesh):
    """Each Blender term's matrix-free dF/dq s equals its assembled Jacobian times s (to roundoff) and central
    differences of its forces along s; the model's product is the sum of its terms'."""
    from solver_core.physics.models.base import pattern_product
    x, tris, quads = grid()
    faces = {"quads": quads.tolist(),
             "mixed": quads[:4].tolist() + np.concatenate([quads[4:, [0, 1, 2]], quads[4:, [0, 2, 3]]]).tolist()}[mesh]
    cloth = BlenderCloth(fold(x, 0.4, 6), faces, 0.3, 15.0, 10.0, 5.0, 0.5, bending_model="angular")
    rng = np.random.default_rng(10)
    q = np.stack([x * [1.08, 0.93, 1.0], x * [0.9, 0.95, 1.0], fold(x, 1.5, 9)]) + 0.01 * rng.standard_normal((3,) + x.shape)
    s = rng.standard_normal(q.shape)
    t = times(q)
    assert {type(term).__name__ for term in cloth.terms} == {"BlenderSpringTerm", "BlenderAngularTerm"}
    eps = 1e-6
    for term in cloth.terms:
        product = term.jacobian_dot(q, t, s)
        rows, cols = term.jacobian_pattern()
        assembled = pattern_product(rows, cols, term.jacobian_values(q, t), s, 3 * len(x)).reshape(q.shape)
        np.testing.assert_allclose(product, assembled, rtol=0, atol=1e-12 * np.abs(assembled).max())
        difference = (term.forces(q + eps * s, t) - term.forces(q - eps * s, t)) / (2 * eps)
        assert np.abs(product - difference).max() < 1e-6 * np.abs(product).max()
    total = sum(term.jacobian_dot(q, t, s) for term in cloth.terms)
    np.testing.assert_allclose(cloth.jacobian_dot(q, t, s), total, rtol=0, atol=1e-14 * np.abs(total).max())
    # the forces and the product from one evaluation of the geometry (the linearized scheme's residual)
    for part in cloth.terms + [cloth]:
        forces, product = part.forces_and_jacobian_dot(q, t, s)
        np.testing.assert_allclose(forces, part.forces(q, t), rtol=0, atol=1e-14 * np.abs(forces).max())
        np.testing.assert_allclose(product, part.jacobian_dot(q, t, s), rtol=0, atol=1e-14 * np.abs(product).max())


def test_blender_hinges_of_a_quad_grid():
    _, tris, quads = grid()
    groups = build_hinges(quads.tolist(), N_SIDE**2)
    sizes = sorted((len(i), a.shape[1], b.shape[1]) for i, _, a, b in groups)
    interior_edges = 2 * (N_SIDE - 1) * (N_SIDE - 2)
    assert sizes == [(interior_edges, 2, 2), (2 * (N_SIDE - 1) ** 2, 1, 1)]  # diagonals split quads in two
    i, j, a, b = next(g for g in groups if g[2].shape[1] == 2)
    h = np.flatnonzero((i == 1) & (j == 1 + N_SIDE))[0]  # edge between quads 0 and 1 of the first column
    assert {frozenset(a[h]), frozenset(b[h])} == {frozenset({0, N_SIDE}), frozenset({2, 2 + N_SIDE})}
    tri_interior_edges = 2 * N_SIDE * (N_SIDE - 1) + (N_SIDE - 1) ** 2 - 4 * (N_SIDE - 1)
    assert sum(len(g[0]) for g in build_hinges(tris.tolist(), N_SIDE**2)) == tri_interior_edges


def test_blender_angular_compression_uses_choi_ko():
    # Angular model: a compressed structural edge pushes back with Choi–Ko, kb = cb = compression / avg.
    x = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    cloth = BlenderCloth(x, [[0, 1, 2, 3]], 1.0, 10.0, 4.0, 0.0, 0.0, bending_model="angular")
    squeezed = x * [0.9, 1.0, 1.0]
    f = cloth.forces(squeezed[None], np.zeros(1))[0]
    fb = -11.541 * 0.9**4 + 34.193 * 0.9**3 - 39.083 * 0.9**2 + 23.116 * 0.9 - 9.713
    expected = max(4.0 * fb, 4.0 * (0.9 - 1.0))  # negative: vertex 0 is pushed away from vertex 1
    np.testing.assert_allclose(f[0], [expected, 0.0, 0.0], rtol=1e-6)


def test_blender_cloth_rejects_bad_input():
    x, _, quads = grid()
    with pytest.raises(ValueError, match="bending_model"):
        BlenderCloth(x, quads, 0.3, 15.0, 15.0, 5.0, 0.5, bending_model="quadratic")
    with pytest.raises(ValueError, match="out of range"):
        BlenderCloth(x, [[0, 1, 99]], 0.3, 15.0, 15.0, 5.0, 0.5)
    with pytest.raises(ValueError, match="at least 3"):
        BlenderCloth(x, [[0, 1]], 0.3, 15.0, 15.0, 5.0, 0.5)
    with pytest.raises(ValueError, match="non-negative"):
        BlenderCloth(x, quads, 0.3, -1.0, 15.0, 5.0, 0.5)
    with pytest.raises(ValueError, match="mass"):
        BlenderCloth(x, quads, 0.0, 15.0, 15.0, 5.0, 0.5)


@pytest.mark.parametrize("model, bending", [("LINEAR", 200.0), ("ANGULAR", 5.0)])
def test_blender_cloth_balances_gravity_at_blenders_own_equilibrium(model, bending):
    """A cantilevered sheet settled by Blender itself is in equilibrium under BlenderCloth + 0.001 g."""
    bpy = pytest.importorskip("bpy")
    bpy.ops.wm.read_factory_settings(use_empty=True)
    bpy.ops.mesh.primitive_grid_add(x_subdivisions=7, y_subdivisions=7, size=1.0)
    ob = bpy.context.active_object
    rest = np.array([v.co[:] for v in ob.data.vertices])
    faces = [list(p.vertices) for p in ob.data.polygons]
    clamped = np.flatnonzero(rest[:, 1] > 0.3)
    ob.vertex_groups.new(name="pin").add(clamped.tolist(), 1.0, "REPLACE")
    mod = ob.modifiers.new("Cloth", "CLOTH")
    s = mod.settings
    s.vertex_group_mass, s.bending_model, s.bending_stiffness, s.air_damping = "pin", model, bending, 10.0
    for frame in range(1, 201):
        bpy.context.scene.frame_set(frame)
    depsgraph = bpy.context.evaluated_depsgraph_get()
    x = np.array([v.co[:] for v in ob.evaluated_get(depsgraph).data.vertices])
    args = (rest, faces, s.mass, s.tension_stiffness, s.compression_stiffness, s.shear_stiffness)
    weight = Gravity(np.full(len(rest), s.mass), g=(0.0, 0.0, -0.001 * 9.81))
    free = np.setdiff1d(np.arange(len(rest)), clamped)
    residuals = []
    for stiffness in (bending, 0.0):
        cloth = BlenderCloth(*args, stiffness, s.air_damping, model.lower(), s.bending_damping).add(weight)
        residuals.append(np.abs(cloth.forces(x[None], np.zeros(1))[0, free]).max() / (0.001 * 9.81 * s.mass))
    assert rest[:, 2].min() - x[:, 2].min() > 0.1  # it did sag
    assert residuals[0] < 0.02  # balanced to 2% of a vertex weight
    assert residuals[1] > 0.5  # and the bending forces matter for that balance
