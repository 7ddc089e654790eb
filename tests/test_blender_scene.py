"""The scene -> LoopProblem mapping (solver_core/blender_scene.py) on plain records, without Blender."""
import numpy as np
import pytest

import solver_core as sc
from solver_core.blender_scene import BLENDER_WIND_SCALE, CONTACT_LOAD
from solver_core.physics.models.contact import MeshContact
from solver_core.physics.models.external import Gravity, Wind
from solver_core.scenes import meshes

FPS = 24.0
G = np.array([0.0, 0.0, -9.81])
N = 6


def swinging(rest):
    """(N, n, 3): ``rest`` moving to and fro along x over one period."""
    return rest[None] + 0.01 * np.sin(2 * np.pi * np.arange(N) / N)[:, None, None] * np.array([1.0, 0.0, 0.0])


def edges_of(tris):
    return np.unique(np.sort(tris[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2), axis=1), axis=0)


def cloth_scene(model="blender_cloth", physics=(), **overrides):
    """A 3 x 3 cloth grid pinned at two corners, as scene_reader would read it."""
    rest, tris = meshes.grid(3, 3, 1.0, 1.0)
    values = dict(model=model, physics={**sc.CLOTH_SETTINGS_DEFAULTS, **dict(physics)}, rest=rest, faces=list(tris),
                  tris=tris, edges=edges_of(tris), source=swinging(rest), fps=FPS, frame_step=2, gravity=G,
                  pins=np.array([0, 2]))
    values.update(overrides)
    return sc.MeshScene(**values)


def collider(moving):
    """A small triangle below the cloth, still or sinking over the frames."""
    triangle = np.array([[0.0, 0.0, -0.5], [1.0, 0.0, -0.5], [0.0, 1.0, -0.5]])
    sink = 0.1 * np.arange(N) if moving else np.zeros(N)
    return sc.Collider(triangle[None] - sink[:, None, None] * np.array([0.0, 0.0, 1.0]), np.array([[0, 1, 2]]), 0.02)


def terms_of(model, kind):
    return [term for term in model.terms if isinstance(term, kind)]


def test_a_blender_cloth_record_maps_to_a_problem_in_seconds():
    scene = cloth_scene()
    parts = sc.mesh_parts(scene)
    problem = sc.problem_from_parts(parts, "linearized")
    assert problem.dt == pytest.approx(2 / FPS)                 # frame_step x time_scale / fps
    assert problem.substeps == 2 * sc.CLOTH_SETTINGS_DEFAULTS["quality"]
    assert problem.scheme == "linearized" and problem.eps0 == problem.eps1 == 0.0
    assert problem.pins.tolist() == [0, 2]
    np.testing.assert_array_equal(problem.pin_positions, scene.source[:, [0, 2]])
    np.testing.assert_array_equal(problem.r0, scene.source[0])
    np.testing.assert_array_equal(problem.r1, scene.source[1])
    (gravity,) = terms_of(parts.model, Gravity)
    np.testing.assert_allclose(gravity.weight, parts.model.mass[:, None] * 0.001 * FPS ** 2 * G)
    assert not terms_of(parts.model, sc.MembraneTerm)                   # Blender's springs, not the shell
    assert not terms_of(parts.model, Wind) and not terms_of(parts.model, MeshContact)


def test_speed_multiplier_quality_soft_constraints_and_the_users_substeps():
    parts = sc.mesh_parts(cloth_scene(physics={"time_scale": 0.5, "quality": 3}, frame_step=1))
    assert parts.dt == pytest.approx(0.5 / FPS) and parts.substeps == 3
    problem = sc.problem_from_parts(parts, "backward", soft=0.1, substeps=7)
    assert problem.substeps == 7 and problem.eps0 == problem.eps1 == 0.1 and problem.scheme == "backward"


def test_the_thin_shell_feels_the_scenes_gravity_unscaled():
    parts = sc.mesh_parts(cloth_scene(model="shell", physics={"quality": 4}))
    assert terms_of(parts.model, sc.MembraneTerm)
    assert parts.dt == pytest.approx(2 / FPS) and parts.substeps == 2 * 4
    (gravity,) = terms_of(parts.model, Gravity)
    np.testing.assert_allclose(gravity.weight, parts.model.mass[:, None] * G)


# Blender's cloth: BLENDER_WIND_SCALE x fps^2 (its time unit in seconds) x the wind per frame, strength / fps
@pytest.mark.parametrize("model, coefficient", [("blender_cloth", BLENDER_WIND_SCALE * FPS), ("shell", 1.0)])
def test_a_steady_wind_is_one_vector_and_a_changing_wind_one_per_frame(model, coefficient):
    steady = np.tile([0.0, 2.0, 0.0], (N, 1))
    (wind,) = terms_of(sc.mesh_parts(cloth_scene(model=model, wind=steady)).model, Wind)
    np.testing.assert_array_equal(wind.wind, [0.0, 2.0, 0.0])
    assert wind.coefficient == pytest.approx(coefficient)
    gusts = steady * (1 + np.arange(N))[:, None]
    (wind,) = terms_of(sc.mesh_parts(cloth_scene(model=model, wind=gusts)).model, Wind)
    np.testing.assert_array_equal(wind.wind, gusts)


def test_the_winds_flow_damps_blender_cloth_across_its_triangles_and_only_blender_cloth():
    steady = np.tile([0.0, 2.0, 0.0], (N, 1))
    model = sc.mesh_parts(cloth_scene(wind=steady, wind_flow=0.5)).model
    (flow,) = [term for term in model.velocity_terms if isinstance(term, sc.WindFlow)]
    assert flow.coefficient == pytest.approx(0.5 * BLENDER_WIND_SCALE * FPS)
    for scene in (cloth_scene(wind=steady), cloth_scene(wind_flow=0.5), cloth_scene(model="shell", wind=steady,
                                                                                     wind_flow=0.5)):
        assert not any(isinstance(term, sc.WindFlow) for term in sc.mesh_parts(scene).model.velocity_terms)


def test_collider_contact_takes_the_thickness_plus_the_cloths_distance_and_blenders_gravity():
    parts = sc.mesh_parts(cloth_scene(colliders=[collider(False), collider(True)], collision_distance=0.015))
    still, sinking = terms_of(parts.model, MeshContact)
    assert not still.per_frame and still.collider_vertices.shape == (1, 3, 3)
    assert sinking.per_frame and sinking.collider_vertices.shape == (N, 3, 3)
    assert still.thickness == sinking.thickness == pytest.approx(0.02 + 0.015)
    g = 0.001 * FPS ** 2 * np.linalg.norm(G)
    np.testing.assert_allclose(still.stiffness, CONTACT_LOAD * g * parts.model.mass / 0.035)


def test_a_soft_body_record_is_filled_with_tetrahedra_and_collides_on_its_surface():
    rest, tris = meshes.torus(1.0, 0.4, 10, 6)
    physics = {"pull": 0.5, "push": 0.5, "friction": 0.5, "mass": 1.0, "speed": 2.0}
    scene = sc.MeshScene(model="soft_body", physics=physics, rest=rest, faces=list(tris), tris=tris,
                         edges=edges_of(tris), source=swinging(rest), fps=FPS, frame_step=1, gravity=G,
                         colliders=[collider(False)])
    parts = sc.mesh_parts(scene)
    n = len(rest)
    assert terms_of(parts.model, sc.ElasticTetTerm) and parts.model.n_vertices > n
    assert parts.source.shape == (N, parts.model.n_vertices, 3)
    np.testing.assert_allclose(parts.source[:, :n], scene.source)
    assert parts.dt == pytest.approx(2.0 / FPS) and parts.substeps == 1 and parts.pins.size == 0
    (contact,) = terms_of(parts.model, MeshContact)
    np.testing.assert_array_equal(contact.vertices, np.arange(n))
    assert contact.thickness == pytest.approx(0.02)


def test_bodies_map_to_nbody_with_one_substep_and_no_pins():
    source = np.array([[[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]] * N) + swinging(np.zeros((2, 3)))
    parts = sc.bodies_parts(sc.BodiesScene(np.array([1.0, 2.0]), source, FPS, frame_step=3, G=0.5, softening=0.1))
    (gravity,) = terms_of(parts.model, sc.NBodyGravity)
    np.testing.assert_array_equal(parts.model.mass, [1.0, 2.0])
    assert gravity.G == 0.5 and gravity.softening == 0.1
    problem = sc.problem_from_parts(parts, "symplectic")
    assert problem.dt == pytest.approx(3 / FPS) and problem.substeps == 1 and problem.pins.size == 0
    assert sc.problem_from_parts(parts, "symplectic", substeps=4).substeps == 4


def test_an_invalid_problem_is_a_value_error():
    source = swinging(np.zeros((2, 3)))
    source[0, 1, 2] = np.nan
    parts = sc.bodies_parts(sc.BodiesScene(np.array([1.0, 2.0]), source, FPS))
    with pytest.raises(ValueError, match="r0"):
        sc.problem_from_parts(parts, "symplectic")
