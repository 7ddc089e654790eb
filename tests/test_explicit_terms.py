"""Terms explicit in the linearized scheme (Blender's angular springs and their damping): the residual, its
Jacobian, the forward step and its adjoint take them at the step's start, as Blender's cloth does."""
import numpy as np
import pytest

import solver_core as sc
from derivatives import assembled_jacobians, assert_adjoint_gradient_matches, quad_grid, residual_jacobians
from solver_core.physics import scheme
from solver_core.physics.models.blender_cloth import BlenderAngularDampingTerm, BlenderAngularTerm


def blender_problem(pins=(0, 3), n_frames=4, bending="ANGULAR", scheme_name="linearized", **extra):
    """A 3 x 2-quad Blender cloth, damping on (the defaults plus air, bending and angular damping), bent out of
    its rest shape so the hinges push; pinned at two top corners unless ``pins`` is empty."""
    rest, faces = quad_grid(3, 2)
    settings = dict(sc.CLOTH_SETTINGS_DEFAULTS, quality=2, bending_model=bending, air_damping=1.0,
                    bending_damping=0.5, **extra)
    model, dt, substeps = sc.blender_cloth_problem_parts(rest, faces, settings, fps=24)
    rng = np.random.default_rng(0)
    q0 = rest + 0.02 * rng.normal(size=rest.shape)
    q1 = q0 + 0.002 * rng.normal(size=rest.shape)
    return sc.LoopProblem(model, n_frames, dt, q0, q1, scheme=scheme_name, substeps=substeps,
                          pins=np.array(pins, dtype=np.int64) if pins else None)


def test_the_angular_terms_are_the_explicit_ones_and_other_models_are_not_split():
    prob = blender_problem()
    implicit, explicit = prob.model.split_explicit(prob.h)
    angular = {BlenderAngularTerm, BlenderAngularDampingTerm}
    assert {type(t) for t in explicit.terms + explicit.velocity_terms} == angular
    assert not any(isinstance(t, (BlenderAngularTerm, BlenderAngularDampingTerm))
                   for t in implicit.terms + implicit.velocity_terms)
    assert len(implicit.terms) + len(explicit.terms) == len(prob.model.terms)
    assert scheme.split(blender_problem(scheme_name="backward"))[1] is None
    linear = blender_problem(bending="LINEAR")
    assert linear.model.split_explicit(linear.h) == (linear.model, None)
    assert scheme.derivative_pattern(linear)[0][0] == 1 and len(scheme.derivative_pattern(linear)) == 5


@pytest.mark.parametrize("pins", [(0, 3), ()])
def test_residual_jacobian_matches_finite_differences(pins):
    # u_j now depends on q_{j-1} through the explicit damping: offsets -1, 0 and 1 all carry explicit parts
    prob = blender_problem(pins=pins)
    rng = np.random.default_rng(1)
    q = prob.apply_constraints(sc.simulate(prob) + 0.003 * rng.normal(size=(prob.n_steps, prob.n_vertices, 3)))
    J, fd = residual_jacobians(prob, q)
    assert np.abs(J - fd).max() < 1e-7 * np.abs(J).max()
    explicit_parts = [i for i, (o, _, _) in enumerate(scheme.derivative_pattern(prob)) if o == -1]
    assert explicit_parts      # the explicit damping's coupling to the previous step


def test_adjoint_gradient_matches_finite_differences():
    prob = blender_problem()
    assert_adjoint_gradient_matches(prob, 0.05)


def blender_like_steps(prob, n_states):
    """Blender's cloth step written out densely (``SIM_mass_spring_solve_velocities``, no pins): solve
    (M - h dF/dv - h^2 dF/dx) dv = h (F(x, v) + h dF/dx v), x += h (v + dv), with the angular springs and
    their damping in F but not in its derivatives."""
    model, h = prob.model, prob.h
    n = 3 * model.n_vertices
    angular = (BlenderAngularTerm, BlenderAngularDampingTerm)
    mass = np.repeat(model.mass, 3)
    q = [prob.r0, prob.r1_step]
    for j in range(1, n_states - 1):
        x, v = q[j], (q[j] - q[j - 1]) / h
        t = prob.step_times(np.array([j]))
        force = model.forces(x[None], t)[0] + model.velocity_forces(x[None], v[None], t)[0] - model.drag[:, None] * v
        K = sum(assembled_jacobians(term, x[None], t)[0] for term in model.terms if not isinstance(term, angular))
        C = -np.diag(np.repeat(model.drag, 3))
        for term in model.velocity_terms:
            if not isinstance(term, angular):
                rows, cols = term.jacobian_pattern()
                np.add.at(C, (rows, cols), term.jacobian_values(x[None], v[None], t)[1][0])
        dv = np.linalg.solve(np.diag(mass) - h * C - h ** 2 * K, h * (force.ravel() + h * K @ v.ravel()))
        q.append(x + h * (v + dv.reshape(v.shape)))
    return np.array(q)


def test_forward_simulation_is_blenders_step_and_has_zero_residual():
    prob = blender_problem(pins=())
    n_states = prob.n_steps + 2
    blender = blender_like_steps(prob, n_states)
    simulated = sc.simulate(prob, n_states)
    extent = np.ptp(blender, axis=(0, 1)).max()
    assert np.abs(simulated - blender).max() < 1e-9 * extent
    j = np.arange(1, n_states - 1)
    u = scheme.step_rows(prob, blender[:-2], blender[1:-1], blender[2:], j)
    inertia = np.abs(prob.model.mass[:, None] * (blender[2:] - 2 * blender[1:-1] + blender[:-2]) / prob.h ** 2).max()
    assert np.abs(u).max() < 1e-8 * inertia
    # linearizing the hinges as well leaves a residual on Blender's steps
    explicit = prob.model.split_explicit(prob.h)[1]
    t = prob.step_times(j)
    linearized = explicit.jacobian_dot(blender[1:-1], t, blender[2:] - blender[1:-1])
    assert np.abs(linearized).max() > 1e-3 * inertia


def test_hinges_are_explicit_on_blenders_step_and_linearized_on_longer_steps(tmp_path):
    # On Blender's own sub-step (quality 2: two steps per frame) the hinges are explicit; on the frame grid
    # (one step per frame, twice as long) the linearized scheme linearizes them with the rest.
    fine = blender_problem()
    coarse = sc.LoopProblem(fine.model, fine.n_frames, fine.dt, fine.r0, fine.r1, scheme="linearized", substeps=1,
                            pins=fine.pins)
    assert scheme.split(fine)[1] is not None
    assert scheme.split(coarse) == (coarse.model, None)
    assert len(scheme.derivative_pattern(coarse)) < len(scheme.derivative_pattern(fine))
    path = tmp_path / "problem.npz"
    sc.save_problem(path, fine)
    loaded = sc.load_problem(path)
    assert scheme.split(loaded)[1] is not None
    q = sc.simulate(fine)
    assert np.allclose(scheme.step_rows(loaded, q[:-2], q[1:-1], q[2:], np.arange(1, fine.n_steps - 1)),
                       scheme.step_rows(fine, q[:-2], q[1:-1], q[2:], np.arange(1, fine.n_steps - 1)))
