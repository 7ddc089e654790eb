"""The structured (matrix-free, sweep-preconditioned PCG) Gauss–Newton solve against direct CHOLMOD."""
import copy
import importlib
import warnings
from dataclasses import replace

import numpy as np
import pytest

import solver_core as sc
from solver_core.optimize import gauss_newton, linsolve
from solver_core.optimize.gauss_newton import GaussNewton
from solver_core.physics.models.contact import FloorContact
from solver_core.physics.models.external import Gravity, Wind
from solver_core.options import DEFAULTS
from solver_core.physics.residual import residual_steps
from solver_core.physics.forward import simulate
from solver_core.scenes import speed_problems
from solver_core.scenes.speed_problems import cloth_grid, doughnut_problem
from solver_core.optimize.structured_solve import LoopOperator, StructuredBackend, pcg, supports


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
    # a small bouncing doughnut (soft body on the floor, contact active) from its forward simulation
    prob = doughnut_problem(n_frames=16, nu=10, nv=5, spacing=0.06)
    q = prob.apply_constraints(simulate(prob))
    floor = next(t for t in prob.model.terms if isinstance(t, FloorContact))
    assert np.any(floor.forces(q, np.zeros(len(q)))), "the floor must push"
    final = {}
    for backend in ("cholmod", "structured"):
        gn = GaussNewton(prob, backend=backend)
        gn.run(q, max_iters=300, tol=1e-10)
        assert gn.stop_reason == "tol"
        final[backend] = gn.history[-1]["loss"]
    assert final["structured"] < 0.05 * sc.loss(prob, q)  # from 5.1e4 to 6.2e2
    assert abs(final["structured"] - final["cholmod"]) <= 0.01 * final["cholmod"]


def test_exact_inner_solves_take_the_cholmod_steps():
    # with exact inner solves the structured Gauss–Newton takes CHOLMOD's steps (Marquardt damping included)
    prob, q = small_cloth(n_frames=12, floor=True)
    runs = []
    for backend in ("cholmod", StructuredBackend(forcing=1e-12, rtol_min=1e-12, max_cg=5000)):
        gn = GaussNewton(prob, backend=backend)
        gn.run(q, max_iters=40, tol=1e-10)
        runs.append([h["loss"] for h in gn.history])
    assert len(runs[0]) == len(runs[1]) == 41
    assert np.allclose(runs[1], runs[0], rtol=1e-6)


def test_auto_picks_structured_where_the_direct_factor_is_large_only():
    small, _ = small_cloth()
    assert GaussNewton(small).backend.name == "cholmod"
    rest, tris = cloth_grid(10, 10, 0.1)
    cloth = sc.Cloth(rest, tris, youngs_modulus=1e4)
    model = cloth.add(Gravity(cloth.mass))
    # 100 vertices over 300 frames: 89,400 free unknowns, the direct factor ~59 M nonzeros (the swinging cloth's)
    long = sc.LoopProblem(model, 300, 0.01, rest, rest, scheme="backward", pins=np.array([0, 9]))
    assert long.free_mask().sum() > 40_000 and gauss_newton.choose_backend(long) == "auto"   # the direct solve
    rest, tris = cloth_grid(40, 40, 0.025)
    cloth = sc.Cloth(rest, tris, youngs_modulus=1e4)
    # 1,600 vertices over 20 frames: 95,520 free unknowns, ~1e9 nonzeros in a direct factor
    large = sc.LoopProblem(cloth.add(Gravity(cloth.mass)), 20, 0.01, rest, rest, scheme="backward",
                           pins=np.array([0, 39]))
    linear = DEFAULTS.linear_solve
    assert gauss_newton.factor_nonzeros(large.free_mask().sum(), 20) > linear.auto_direct_max_factor_nonzeros
    assert gauss_newton.choose_backend(large) == "structured"
    assert gauss_newton.choose_backend(large, "cholmod") == "cholmod"
    linearized = sc.LoopProblem(large.model, 20, 0.01, rest, rest, scheme="linearized", pins=large.pins)
    assert gauss_newton.choose_backend(linearized) == "structured"


class Overshooting(StructuredBackend):
    """A structured solve whose directions are 1e4 times too long: the line search all but rejects them."""

    def direction(self, g, damping=0.0):
        return 1e4 * super().direction(g, damping)


def test_failing_inexact_directions_tighten_then_auto_switches_to_direct(monkeypatch):
    # in the inertia metric: from this random start on the floor the smoothing metric crawls three times as many
    # direct iterations to the tolerance (residual.damping_metric), and the switch is what is tested here;
    # "auto" takes the structured solve at any size
    options = replace(DEFAULTS, gauss_newton=replace(DEFAULTS.gauss_newton, smoothing=0.0),
                      linear_solve=replace(DEFAULTS.linear_solve, auto_direct_max_factor_nonzeros=0))
    prob, q = small_cloth(n_frames=12, floor=True)
    monkeypatch.setitem(linsolve.BACKENDS, "structured", lambda: Overshooting(max_tighten=1))
    gn = GaussNewton(prob, options=options)
    assert gn.backend.name == "structured"
    gn.run(q, max_iters=300, tol=1e-10)
    assert gn.backend.name == "cholmod" and gn.switched is not None
    assert gn.stop_reason == "tol" and gn.history[-1]["loss"] < 0.05 * sc.loss(prob, q)
    names = [h["backend"] for h in gn.history[1:]]
    assert names[0] == "structured" and names[-1] == "cholmod"
    # asked for by name, the structured solve tightens but never switches
    strict = GaussNewton(prob, backend=Overshooting(max_tighten=1), options=options)
    strict.run(q, max_iters=300, tol=1e-10)
    assert strict.backend.tightened == 1 and strict.switched is None
    assert {h["backend"] for h in strict.history[1:]} == {"structured"}


def test_inexact_solve_is_tightened_before_gauss_newton_stops():
    prob, q = small_cloth(n_frames=12, floor=True)
    gn = GaussNewton(prob, backend=StructuredBackend(max_cg=1, max_tighten=2))
    gn.run(q, max_iters=1000, tol=1e-5)   # one PCG iteration per solve crawls: stops on tol only once tightened
    assert gn.stop_reason == "tol" and gn.backend.tightened == 2
    assert max(gn.backend.cg_iterations) > 1


class Truncating(StructuredBackend):
    """The structured solve's directions, each reported as cut at the PCG cap."""

    def direction(self, g, damping=0.0):
        d = super().direction(g, damping)
        self.truncated = True
        return d


def test_a_rejected_first_step_tightens_only_a_truncated_direction():
    """Levenberg–Marquardt rejects a first step while it finds its damping: on directions PCG solved to the
    forcing the solve stays as it is; the same directions reported as truncated are tightened right after
    the first iteration whose first step was rejected."""
    prob, q = small_cloth(n_frames=12)
    runs = {}
    for cls in (StructuredBackend, Truncating):
        backend = cls()
        gn = GaussNewton(prob, backend=backend)
        tightened_at = []
        tighten = backend.tighten
        backend.tighten = lambda: tightened_at.append(len(gn.history) - 1) or tighten()
        gn.run(q, max_iters=8, tol=1e-10, damping=1e-6)
        rejected = [h["iteration"] for h in gn.history[1:] if h["rejected"]]
        runs[cls] = [h["loss"] for h in gn.history]
        assert rejected and max(backend.cg_iterations) < backend.max_cg   # every solve met its tolerance
        assert tightened_at == ([rejected[0]] if cls is Truncating else []), (cls.__name__, rejected, tightened_at)
    k = rejected[0]
    assert runs[StructuredBackend][:k + 1] == runs[Truncating][:k + 1]   # the same directions up to then


def test_structured_refuses_what_it_does_not_solve():
    prob, _ = small_cloth()
    anisotropic = copy.copy(prob.model)
    anisotropic.damping = np.ones((prob.n_vertices, 3))
    other = sc.LoopProblem(anisotropic, prob.n_frames, prob.dt, prob.r0, prob.r1, scheme="backward", pins=prob.pins)
    assert supports(other) is not None
    assert GaussNewton(other).backend.name == "cholmod"
    with pytest.raises(ValueError, match="does not apply"):
        GaussNewton(other, backend="structured")


@pytest.mark.parametrize("make", [lambda: speed_problems.flag_problem(nx=6, ny=5, n_frames=12, warmup=4),
                                  lambda: speed_problems.doughnut_problem(n_frames=8, nu=10, nv=6, spacing=0.06)],
                         ids=["windy cloth", "soft body on a floor"])
def test_residual_in_frame_batches_equals_all_frames_at_once(make, monkeypatch):
    """Long loops evaluate the residual in batches of frames; the batches must not change a bit."""
    prob = make()
    q = prob.apply_constraints(simulate(prob))
    q = q + 1e-3 * np.random.default_rng(3).standard_normal(q.shape)
    whole = residual_steps(prob, q)
    monkeypatch.setattr(importlib.import_module("solver_core.physics.residual"), "_BATCH_COORDINATES", 2 * q[0].size + 1)   # two frames per batch
    np.testing.assert_array_equal(residual_steps(prob, q), whole)


def _scaled_symmetric_stiffness(op, j):
    s = 1.0 / np.sqrt(op.coef[1])
    K = op.frame_jacobian(j).toarray()
    return s[:, None] * (0.5 * (K + K.T)) * s[None, :]


def test_stiffness_bound_is_each_frames_largest_scaled_stiffness():
    prob, q = small_cloth(n_frames=8, floor=True)
    op = LoopOperator(prob)
    op.update(q)
    exact = np.array([np.linalg.eigvalsh(_scaled_symmetric_stiffness(op, j))[-1] for j in range(op.n_steps)])
    assert np.any(exact > 0), "some frames must be destabilizing for the test to mean anything"
    np.testing.assert_allclose(op.stiffness_bound(), exact, rtol=0, atol=1e-9 * np.abs(exact).max())


def test_stabilized_sweep_blocks_are_stable_and_the_preconditioner_spd():
    prob, q = small_cloth(n_frames=12, floor=True)
    backend = StructuredBackend()
    backend.bind(prob)
    backend.linearize(q, residual_steps(prob, q))
    pre, op = backend.preconditioner, backend.op
    shifted = np.flatnonzero(pre.shifts)
    assert shifted.size >= 3
    for j in shifted:   # each shifted leading block is at least as stable as the free particle
        scaled = (1.0 + pre.shifts[j]) * np.eye(op.m) - _scaled_symmetric_stiffness(op, j)
        assert np.linalg.eigvalsh(scaled)[0] >= 1.0 - 1e-9
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(2, op.n_free))
    assert np.isclose(x @ pre.apply(y), y @ pre.apply(x), rtol=1e-10)
    assert x @ pre.apply(x) > 0 and y @ pre.apply(y) > 0


def test_pcg_stops_cleanly_when_the_residual_underflows():
    with warnings.catch_warnings():
        warnings.simplefilter("error")                      # no 0 / 0 on the way
        x, it, converged = pcg(lambda v: np.array([1.0, 2.0, 3.0]) * v, np.full(3, 1e-170), lambda v: v, 0.0, 5)
    assert converged and it == 0 and np.all(np.isfinite(x))


def test_pcg_gives_up_when_slower_than_its_pace():
    """``pace``: CG stops unconverged once its residual falls slower than the geometric pace to rtol at the cap
    (a badly conditioned system), and still converges on a well-conditioned one."""
    rng = np.random.default_rng(0)
    b = rng.normal(size=500)
    slow, fast = np.geomspace(1, 1e6, 500), np.linspace(1.0, 1.2, 500)
    x, it, converged = pcg(lambda v: slow * v, b, lambda v: v, 1e-10, 12, pace=3)
    assert not converged and it == 3
    x, it, converged = pcg(lambda v: fast * v, b, lambda v: v, 1e-10, 12, pace=3)
    assert converged and it <= 12
    np.testing.assert_allclose(fast * x, b, rtol=0, atol=1e-9 * np.linalg.norm(b))


def test_pcg_warm_start_from_a_nearby_solution_and_never_against_the_gradient():
    """``x0``: CG starts from the best multiple of x0 and reaches the same tolerance in fewer iterations when
    x0 solves a nearby system; an x0 opposite to b (b.x0 < 0) is not used (the iterates stay descent directions)."""
    rng = np.random.default_rng(1)
    a = np.geomspace(1.0, 1e3, 400)
    b = rng.normal(size=400)
    near, _, _ = pcg(lambda v: (a + 1.0) * v, b, lambda v: v, 1e-6, 1000)
    x, warm, converged = pcg(lambda v: (a + 1.001) * v, b, lambda v: v, 1e-4, 1000, x0=near)
    _, cold, _ = pcg(lambda v: (a + 1.001) * v, b, lambda v: v, 1e-4, 1000)
    assert converged and warm < cold / 2, (warm, cold)
    assert np.linalg.norm((a + 1.001) * x - b) <= 1e-4 * np.linalg.norm(b)
    x, it, _ = pcg(lambda v: a * v, b, lambda v: v, 1e-8, 1, x0=-b)
    assert it == 1 and b @ x > 0
    x, it, converged = pcg(lambda v: a * v, b, lambda v: v, 1e-8, 10, x0=b / a)   # the solution itself
    assert converged and it <= 1
    np.testing.assert_allclose(a * x, b, rtol=0, atol=1e-8 * np.linalg.norm(b))
