"""The structured (matrix-free, sweep-preconditioned PCG) Gauss–Newton solve against direct CHOLMOD."""
import copy

import numpy as np
import pytest

import solver_core as sc
from solver_core.gauss_newton import GaussNewton
from solver_core.models.contact import FloorContact
from solver_core.models.external import Gravity, Wind
from solver_core.residual import residual_steps
from solver_core.scenes.bench_speed import cloth_grid
from solver_core.structured_solve import StructuredBackend, supports


def small_cloth(n_frames=8, eps=(0.0, 0.0), pins=(0, 2), floor=False, scheme="backward", seed=0):
    rest, tris = cloth_grid(4, 3, 0.1)
    cloth = sc.Cloth(rest, tris, youngs_modulus=1e4)
    terms = [Gravity(cloth.mass), Wind(cloth.n_vertices, tris, (1.0, 2.0, 0.0), 0.05)]
    if floor:
        terms.append(FloorContact(cloth.n_vertices, height=-0.2, mass=cloth.mass))
    model = cloth.add(*terms)
    rng = np.random.default_rng(seed)
    q0 = rest + 0.01 * rng.normal(size=rest.shape)
    prob = sc.LoopProblem(model, n_frames, 0.01, q0, q0 + 0.002, scheme=scheme, eps0=eps[0], eps1=eps[1],
                          pins=np.array(pins, dtype=np.int64) if pins else None)
    q = rest[None] + 0.02 * rng.normal(size=(prob.n_steps,) + rest.shape)
    return prob, prob.apply_constraints(q)


CASES = {"pins_hard": {}, "soft": dict(eps=(1e-3, 1e-2), pins=()), "hard_and_soft": dict(eps=(0.0, 1e-3)),
         "contact": dict(floor=True), "symplectic": dict(scheme="symplectic")}


@pytest.mark.parametrize("damping", [0.0, 1e-2])
@pytest.mark.parametrize("case", CASES)
def test_structured_step_matches_the_direct_solve(case, damping):
    prob, q = small_cloth(**CASES[case])
    if case == "contact":
        z = q[..., 2] - (-0.2)
        assert np.any(z < 0.01), "some vertices must be inside the contact layer"
    direct = GaussNewton(prob, backend="cholmod")
    H, g = direct.system(q)
    d_direct = direct.direction(H, g, damping)
    backend = StructuredBackend(forcing=1e-13, rtol_min=1e-13, max_cg=5000)
    gn = GaussNewton(prob, backend=backend)
    g_s = backend.linearize(q, residual_steps(prob, q))
    d = backend.direction(g_s, damping)
    assert np.allclose(g_s, g, rtol=0, atol=1e-12 * np.abs(g).max())
    assert np.allclose(backend.op.diagonal(), H.diagonal(), rtol=1e-12, atol=0)
    assert np.linalg.norm(d - d_direct) <= 1e-7 * np.linalg.norm(d_direct)
    assert gn.problem_aware


def test_full_loop_reaches_the_cholmod_loss():
    prob, q = small_cloth(n_frames=12, floor=True)
    runs = []
    for backend in ("cholmod", "structured", StructuredBackend(forcing=1e-12, rtol_min=1e-12, max_cg=5000)):
        gn = GaussNewton(prob, backend=backend)
        gn.run(q, max_iters=300, tol=1e-10)
        assert gn.stop_reason == "tol"
        runs.append([h["loss"] for h in gn.history])
    assert runs[1][-1] < 1e-2 * sc.loss(prob, q)
    assert abs(runs[1][-1] - runs[0][-1]) <= 0.01 * runs[0][-1]
    # with exact inner solves the structured Gauss–Newton takes CHOLMOD's steps (Marquardt damping included)
    assert np.allclose(runs[2][:40], runs[0][:40], rtol=1e-6)


def test_auto_stays_cholmod_and_structured_refuses_what_it_does_not_solve():
    prob, _ = small_cloth()
    assert GaussNewton(prob).backend.name == "cholmod"
    drag = copy.copy(prob.model)
    drag.velocity_terms = ["a velocity-dependent term"]
    for other in (sc.LoopProblem(drag, prob.n_frames, prob.dt, prob.r0, prob.r1, scheme="backward", pins=prob.pins),
                  sc.LoopProblem(prob.model, prob.n_frames, prob.dt, prob.r0, prob.r1, scheme="linearized")):
        assert supports(other) is not None
        assert GaussNewton(other).backend.name == "cholmod"
        with pytest.raises(ValueError, match="does not apply"):
            GaussNewton(other, backend="structured")
