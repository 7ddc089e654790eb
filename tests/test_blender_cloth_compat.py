"""Blender cloth settings mapping: unit tests, and checks against caches baked by Blender's own solver."""
import importlib

import numpy as np
import pytest

import solver_core as sc
from solver_core.physics.models.blender_cloth import BlenderCloth

REST = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.0, 1.0, 0.0], [2.0, 0.0, 0.0], [2.0, 1.0, 0.0]])
FACES = [(0, 1, 2, 3), (1, 4, 5, 2)]


def test_time_step_and_substeps():
    settings = dict(sc.CLOTH_SETTINGS_DEFAULTS, quality=7, time_scale=0.5)
    _, dt, substeps = sc.blender_cloth_problem_parts(REST, FACES, settings, fps=30, frame_step=2)
    assert dt == pytest.approx(2 * 0.5 / 30)
    assert substeps == 14


def test_forces_are_blender_forces_per_frame_squared():
    fps = 25.0
    settings = dict(sc.CLOTH_SETTINGS_DEFAULTS, bending_model="LINEAR")
    model, _, _ = sc.blender_cloth_problem_parts(REST, FACES, settings, fps, gravity=(0.0, 0.0, -9.81))
    blender = BlenderCloth(REST, FACES, 0.3, 15.0, 15.0, 5.0, 0.5, air_damping=1.0, bending_model="linear")
    q = REST[None] + np.random.default_rng(0).normal(scale=0.1, size=(2,) + REST.shape)
    gravity = 0.3 * 0.001 * np.array([0.0, 0.0, -9.81])
    expected = fps ** 2 * (blender.forces(q, np.zeros(2)) + gravity)
    np.testing.assert_allclose(model.forces(q, np.zeros(2)), expected, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(model.damping, 0.01 * 1.0 * fps)
    np.testing.assert_allclose(model.mass, 0.3)


def test_bending_model_names_and_bad_settings():
    angular, _, _ = sc.blender_cloth_problem_parts(REST, FACES, sc.CLOTH_SETTINGS_DEFAULTS, 24)
    assert len(angular.terms) > 2  # springs, angular hinges, gravity
    with pytest.raises(ValueError, match="lack"):
        sc.blender_cloth_problem_parts(REST, FACES, {"mass": 0.3}, 24)
    with pytest.raises(ValueError, match="fps"):
        sc.blender_cloth_problem_parts(REST, FACES, sc.CLOTH_SETTINGS_DEFAULTS, 0)
    with pytest.raises(ValueError, match="quality"):
        sc.blender_cloth_problem_parts(REST, FACES, dict(sc.CLOTH_SETTINGS_DEFAULTS, quality=0), 24)
    with pytest.raises(ValueError, match="bending_model"):
        sc.blender_cloth_problem_parts(REST, FACES, dict(sc.CLOTH_SETTINGS_DEFAULTS, bending_model="X"), 24)


@pytest.fixture(scope="module")
def measure():
    pytest.importorskip("bpy")
    return importlib.import_module("benchmarks.blender_cloth_residual")


def test_blender_time_is_frames_times_speed_multiplier(measure):
    """A frame is ``time_scale`` of Blender's cloth time, in ``quality`` steps, whatever the fps."""
    reference, _, _ = measure.bake_cloth(dict(quality=5), 9, segments=4)
    assert np.abs(reference[-1] - reference[0]).max() > 0.1  # the cache really moves
    faster, _, _ = measure.bake_cloth(dict(quality=10, time_scale=2.0), 5, segments=4)
    np.testing.assert_allclose(faster, reference[::2], atol=1e-6)
    other_fps, _, _ = measure.bake_cloth(dict(quality=5), 9, segments=4, fps=60)
    np.testing.assert_allclose(other_fps, reference, atol=1e-6)


def _figures(measure, settings, n_frames, scheme):
    full = dict(sc.CLOTH_SETTINGS_DEFAULTS, **{k: v for k, v in settings.items() if k in sc.CLOTH_SETTINGS_DEFAULTS})
    quality = full["quality"]
    q, faces, pins = measure.bake_cloth(dict(settings, quality=1, time_scale=1.0 / quality), n_frames * quality,
                                        segments=4)
    model, dt, substeps = sc.blender_cloth_problem_parts(q[0], faces, full, measure.FPS)
    compatible = measure.residual_figures(model, dt, substeps, q, pins, scheme)
    mismatched = measure.residual_figures(measure.cotton_model(q[0], faces), dt, substeps, q, pins, scheme)
    return compatible, mismatched


def test_compatible_residual_far_below_mismatched(measure):
    """Resolved cache (quality 40, no velocity damping): backward-Euler residual at least 10x below cotton's."""
    compatible, mismatched = _figures(measure, dict(measure.NO_VELOCITY_DAMPING, quality=40), 10, "backward")
    assert compatible[0] * 10 < mismatched[0]


def test_default_settings_cache_fits_the_linearized_scheme(measure):
    """Blender's defaults (quality 5, spring and hinge damping): the linearized residual of the cache under
    the compatible model at least 10x below cotton's (measured 29x on the 10 x 10 sample, 40 frames)."""
    compatible, mismatched = _figures(measure, {}, 15, "linearized")
    assert compatible[0] * 10 < mismatched[0]
    assert compatible[0] < 0.1
