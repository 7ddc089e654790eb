"""The structured solve on Blender cloth: linearized scheme, spring and angular damping, sub-steps."""
from dataclasses import replace

import numpy as np
import pytest
import scipy.sparse as sp

import solver_core as sc
from derivatives import assembled_jacobians, quad_grid
from solver_core.physics import scheme
from solver_core.physics.models.blender_cloth import SWEEP_BENDING, BlenderAngularTerm, BlenderSpringTerm
from solver_core.optimize.gauss_newton import GaussNewton, choose_backend
from solver_core.optimize.linsolve import make_backend
from solver_core.options import DEFAULTS
from solver_core.physics.residual import ResidualJacobian, residual_steps
from solver_core.optimize.structured_solve import (BlockPreconditioner, LoopOperator, StructuredBackend,
                                                   choose_preconditioner, pcg, supports)

AUTO_STRUCTURED_MIN_UNKNOWNS_VELOCITY = DEFAULTS.linear_solve.auto_structured_min_unknowns_velocity
REUSE_CG_ITERS = DEFAULTS.linear_solve.reuse_cg_iters


def blender_cloth(n_frames=6, scheme="linearized", eps=(0.0, 0.0), quality=2, bending="ANGULAR", seed=0,
                  forward=False):
    """A 3 x 2-quad Blender cloth (default settings: damping on) pinned at its top corners, and a trajectory:
    random (springs stretched and compressed), or with ``forward`` its forward simulation slightly perturbed."""
    rest, faces = quad_grid(3, 2)
    settings = dict(sc.CLOTH_SETTINGS_DEFAULTS, quality=quality, bending_model=bending)
    model, dt, substeps = sc.blender_cloth_problem_parts(rest, faces, settings, fps=24)
    rng = np.random.default_rng(seed)
    q0 = rest + 0.01 * rng.normal(size=rest.shape)
    prob = sc.LoopProblem(model, n_frames, dt, q0, q0 + 0.003, scheme=scheme, eps0=eps[0], eps1=eps[1],
                          pins=np.array([0, 3]), substeps=substeps)
    q = rest[None] + 0.03 * rng.normal(size=(prob.n_steps,) + rest.shape)
    if forward:
        q = sc.simulate(prob) + 0.003 * rng.normal(size=q.shape)
    return prob, prob.apply_constraints(q)


# exact inner solves converge within the cap at physical and at crumpled (random) trajectories: at a random
# one the angular model took 1,987 PCG iterations with the stabilized sweep, 14,145 with the exact Jacobian in it
CASES = {"linearized": dict(forward=True), "linearized_soft": dict(eps=(1e-3, 1e-2), forward=True),
         "linear_bending": dict(bending="LINEAR"),
         "backward": dict(scheme="backward"),
         "angular_crumpled": dict()}


@pytest.mark.parametrize("case", CASES)
def test_products_equal_the_assembled_jacobian(case):
    prob, q = blender_cloth(**CASES[case])
    assert prob.model.velocity_terms and supports(prob) is None
    op = LoopOperator(prob)
    op.update(q)
    jac = ResidualJacobian(prob)
    J = jac.assemble(q)
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=J.shape[1]), rng.normal(size=(op.n_steps, op.m))
    assert J.shape == (op.n_steps * op.m, op.n_free)
    np.testing.assert_allclose(op.apply_j(x).ravel(), np.sqrt(jac.row_weights) * (J @ x),
                               rtol=0, atol=1e-12 * np.abs(J).max() * np.abs(x).max())
    np.testing.assert_allclose(op.apply_jt(y), J.T @ y.ravel(), rtol=0, atol=1e-12 * np.abs(J).max() * np.abs(y).max())


def test_operator_values_sum_every_part_onto_its_slots():
    """``LoopOperator.update`` adds the parts on one pattern (Blender cloth's damping on its springs' and hinges'
    patterns) before summing them onto the pattern's slots: per offset its values, and the sweep's (the stabilized
    force Jacobian and the damping), equal every part's entries added one by one."""
    prob, q = blender_cloth(**CASES["linearized"])
    op = LoopOperator(prob)
    op.update(q)
    parts, n, m = scheme.derivative_pattern(prob), prob.n_steps, op.m
    at = {o: [i for i, p in enumerate(parts) if p[0] == o] for o in op.offsets}
    assert any(len(g) > 1 for o in at for g in scheme.pattern_groups(parts, at[o]))   # parts are added before the sum
    local = np.full(3 * prob.n_vertices, -1)
    local[op.active] = np.arange(m)
    keys = op.pattern_rows.astype(np.int64) * m + op.pattern_cols
    rows = (np.roll(q, 1, axis=0), q, np.roll(q, -1, axis=0), np.arange(n))
    values = scheme.derivative_values(prob, *rows)

    def one_by_one(indices):
        out = np.zeros((n, op.nnz))
        for i in indices:
            r, c = local[parts[i][1]], local[parts[i][2]]
            keep = (r >= 0) & (c >= 0)
            for j in range(n):
                np.add.at(out[j], np.searchsorted(keys, r[keep] * m + c[keep]), values[i][j, keep])
        return out

    scale = max(np.abs(v).max() for v in values)
    for o in op.offsets:
        np.testing.assert_allclose(op.values[o], one_by_one(at[o]), rtol=0, atol=1e-13 * scale)
    values[0] = scheme.stable_force_part(prob, *rows)
    kept = scheme.sweep_parts(prob)
    assert op.sweep_values and op.sweep_values[1] is not op.values[1]
    for o in op.sweep_values:
        np.testing.assert_allclose(op.sweep_values[o], one_by_one([i for i in kept if parts[i][0] == o]),
                                   rtol=0, atol=1e-13 * scale)


@pytest.mark.parametrize("damping", [0.0, 1e-2])
@pytest.mark.parametrize("case", CASES)
def test_directions_equal_cholmod(case, damping):
    prob, q = blender_cloth(**CASES[case])
    direct = GaussNewton(prob, backend="cholmod")
    H, g = direct.system(q)
    d_direct = direct.direction(H, g, damping)
    exact = StructuredBackend(forcing=1e-12, rtol_min=1e-12, max_cg=20000)
    GaussNewton(prob, backend=exact)
    g_s = exact.linearize(q, residual_steps(prob, q))
    np.testing.assert_allclose(g_s, g, rtol=0, atol=1e-12 * np.abs(g).max())
    np.testing.assert_allclose(exact.op.diagonal(), H.diagonal(), rtol=1e-12, atol=0)
    assert np.linalg.norm(exact.direction(g_s, damping) - d_direct) <= 1e-7 * np.linalg.norm(d_direct)
    assert exact.cg_iterations[-1] < 20000


def test_inexact_direction_within_its_tolerance_on_the_cholmod_system():
    """At a physical trajectory (the forward simulation, slightly perturbed) the default inexact solve
    converges to its forcing tolerance on CHOLMOD's own system, a descent direction."""
    prob, q = blender_cloth(n_frames=8, forward=True)
    H, g = GaussNewton(prob, backend="cholmod").system(q)
    inexact = StructuredBackend()
    GaussNewton(prob, backend=inexact)
    d = inexact.direction(inexact.linearize(q, residual_steps(prob, q)))
    assert inexact.cg_iterations[-1] < inexact.max_cg
    assert np.linalg.norm(H @ d + g) <= inexact.forcing * np.linalg.norm(g)
    assert g @ d < 0


def test_auto_picks_structured_for_large_blender_cloth():
    rest, faces = quad_grid(10, 10, 0.1)
    model, dt, substeps = sc.blender_cloth_problem_parts(rest, faces, sc.CLOTH_SETTINGS_DEFAULTS, fps=24)
    sizes = {}
    for n_frames in (25, 40):
        prob = sc.LoopProblem(model, n_frames, dt, rest, rest, scheme="linearized", pins=np.array([0, 10]),
                              substeps=substeps)
        sizes[n_frames] = (int(prob.free_mask().sum()), choose_backend(prob))
    assert sizes[25][0] < AUTO_STRUCTURED_MIN_UNKNOWNS_VELOCITY
    assert sizes[25][1] == "auto"   # CHOLMOD
    assert sizes[40][0] >= AUTO_STRUCTURED_MIN_UNKNOWNS_VELOCITY and sizes[40][1] == "structured"


def test_reaches_the_cholmod_loss():
    """From the same start the structured Gauss–Newton reaches CHOLMOD's 5-step loss within 15 steps, or stops
    where exact directions stop too.

    Blender's damping switches off at a spring's rest length, so the loss jumps there, and a monotone
    Gauss–Newton stops against such a jump wherever its path meets one. Which path meets one depends on
    rounding: on an AMD EPYC machine the structured run stopped at 549,710 (CHOLMOD's 5 steps: 532,643), where
    every step longer than ~5e-5 raised the loss by ~800 with exact directions as well; ten CHOLMOD
    iterations from there lowered it by 0.03%. An inexact solve that held Gauss–Newton back would leave the
    exact directions a decrease to make."""
    prob, q = blender_cloth(n_frames=8, forward=True)
    cholmod = GaussNewton(prob, backend="cholmod")
    cholmod.run(q, max_iters=5, tol=1e-12)
    target = cholmod.history[-1]["loss"]
    assert target < 0.5 * sc.loss(prob, q)
    structured = GaussNewton(prob, backend="structured")
    reached = structured.run(q, max_iters=15, tol=1e-12, callback=lambda info: info["loss"] <= 1.01 * target)
    assert {h["backend"] for h in structured.history[1:]} == {"structured"}
    end = structured.history[-1]["loss"]
    assert end < 0.5 * sc.loss(prob, q)
    if end > 1.01 * target:
        exact = GaussNewton(prob, backend="cholmod")
        exact.run(reached.x, max_iters=10, tol=1e-12)
        assert exact.history[-1]["loss"] >= (1 - 1e-3) * end


def test_stable_jacobian_is_symmetric_negative_semidefinite():
    """The preconditioner's stand-in for Blender cloth's force Jacobian at a crumpled configuration (springs
    compressed, hinges bent): symmetric and negative semi-definite, equal to the exact Jacobian on stretched
    springs, and the hinges' part is -c k grad(angle) grad(angle)^T with the gradient by central differences."""
    prob, q = blender_cloth()
    model, x, t = prob.model, q[:3], np.zeros(3)
    rows, cols = model.jacobian_pattern()
    values = model.stable_jacobian_values(x, t)
    stable = np.zeros((3, x[0].size, x[0].size))
    for k in range(3):
        np.add.at(stable[k], (rows, cols), values[k])
    scale = np.abs(stable).max()
    np.testing.assert_allclose(stable, stable.transpose(0, 2, 1), rtol=0, atol=1e-12 * scale)
    assert np.linalg.eigvalsh(stable).max() <= 1e-12 * scale
    exact = assembled_jacobians(model, x, t)
    assert np.linalg.eigvalsh(exact + exact.transpose(0, 2, 1)).max() > 0.1 * scale   # the exact one is not

    springs = next(term for term in model.terms if isinstance(term, BlenderSpringTerm))
    stretched = 1.2 * prob.r0[None]
    np.testing.assert_allclose(springs.stable_jacobian_values(stretched, t[:1]),
                               springs.jacobian_values(stretched, t[:1]), rtol=1e-12, atol=0)

    hinge = next(term for term in model.terms if isinstance(term, BlenderAngularTerm))
    eps = 1e-6
    grad = np.zeros((x.shape[0], len(hinge.stiffness), x[0].size))
    for dof in range(x[0].size):
        dq = np.zeros_like(x)
        dq[:, dof // 3, dof % 3] = eps
        grad[:, :, dof] = (hinge._geometry(x + dq, False)[0] - hinge._geometry(x - dq, False)[0]) / (2 * eps)
    expected = -SWEEP_BENDING * np.einsum("h,bhi,bhj->bij", hinge.stiffness, grad, grad)
    np.testing.assert_allclose(assembled_jacobians(_Stable(hinge), x, t), expected, rtol=0,
                               atol=1e-6 * np.abs(expected).max())


class _Stable:
    """A term whose values are another term's ``stable_jacobian_values`` (for ``assembled_jacobians``)."""

    def __init__(self, term):
        self.term = term

    def jacobian_pattern(self):
        return self.term.jacobian_pattern()

    def jacobian_values(self, q, t):
        return self.term.stable_jacobian_values(q, t)


def test_sweep_is_stable_where_the_exact_stiffness_is_not():
    """Quality 5 at a crumpled trajectory: the exact force Jacobian makes most rows' implicit steps unstable
    (scaled stiffness >= 4; the sweep through it overflowed, |P g| / |g| ~ 5e24 over 60 steps); the sweep's
    own blocks have no destabilizing mode."""
    prob, q = blender_cloth(n_frames=12, quality=5)
    backend = StructuredBackend()
    GaussNewton(prob, backend=backend)
    g = backend.linearize(q, residual_steps(prob, q))
    assert (backend.op.stiffness_bound() >= 4).mean() > 0.5
    assert backend.op.stiffness_bound(sweep=True).max() <= 0
    assert np.linalg.norm(backend.preconditioner.apply(g)) <= 1e-4 * np.linalg.norm(g)


def test_factor_reuse_gives_the_direct_solves_iterates():
    """CHOLMOD's last factorization preconditioning CG (damping raises, the next linearization) yields the
    directions of a fresh factorization: the same Gauss–Newton path, with fewer factorizations."""
    prob, q = blender_cloth(n_frames=8, forward=True)
    runs = {}
    for reuse in (True, False):
        backend = make_backend("cholmod")
        gn = GaussNewton(prob, backend, options=replace(DEFAULTS, linear_solve=replace(DEFAULTS.linear_solve,
                                                                                         reuse=reuse)))
        runs[reuse] = (gn.run(q, max_iters=8, tol=0.0), backend)
    (fast, fb), (plain, pb) = runs[True], runs[False]
    assert fast.nit == plain.nit == 8
    np.testing.assert_allclose([h["loss"] for h in fast.history], [h["loss"] for h in plain.history], rtol=1e-7)
    np.testing.assert_allclose(fast.x, plain.x, rtol=0, atol=1e-8 * np.abs(plain.x).max())
    # every solve of the plain run that factorizes is a factorization or a reuse in the other; the geodesic
    # acceleration's second solve is a back-substitution after a factorization but CG after a reuse
    assert pb.reused == 0 and fb.factorizations < pb.factorizations <= fb.factorizations + fb.reused
    assert fb.reused >= 1 and max(fb.reuse_cg_iterations) <= REUSE_CG_ITERS


def frame_grid_cloth(quads=3, n_frames=12, eps=1000.0):
    """A quads x quads Blender cloth (quality 5) on the frame grid with soft first frames (the add-on's
    defaults), at its forward simulation slightly perturbed."""
    rest, faces = quad_grid(quads, quads, 1.0 / quads)
    model, dt, _ = sc.blender_cloth_problem_parts(rest, faces, dict(sc.CLOTH_SETTINGS_DEFAULTS, quality=5), fps=24)
    rng = np.random.default_rng(0)
    q0 = rest + 0.01 * rng.normal(size=rest.shape)
    prob = sc.LoopProblem(model, n_frames, dt, q0, q0 + 0.003, scheme="linearized", pins=np.array([0, quads]),
                          substeps=1, eps0=eps, eps1=eps)
    return prob, prob.apply_constraints(sc.simulate(prob) + 0.003 * rng.normal(size=(n_frames,) + rest.shape))


def test_frame_blocks_are_the_diagonal_blocks_of_the_gauss_newton_matrix():
    prob, q = frame_grid_cloth(n_frames=6)
    H, _ = GaussNewton(prob, backend="cholmod").system(q)
    backend = StructuredBackend()
    GaussNewton(prob, backend=backend)
    backend.linearize(q, residual_steps(prob, q))
    assert isinstance(backend.preconditioner, BlockPreconditioner)
    m = backend.op.m
    blocks = sp.block_diag([H[f * m:(f + 1) * m, f * m:(f + 1) * m] for f in range(H.shape[0] // m)])
    assert abs(backend.preconditioner.matrix() - blocks).max() <= 1e-12 * abs(H).max()
    x = np.random.default_rng(1).normal(size=H.shape[0])
    np.testing.assert_allclose(blocks @ backend.preconditioner.apply(x), x, rtol=0, atol=1e-8 * np.abs(x).max())


def test_frame_blocks_hold_a_large_damping():
    """Levenberg–Marquardt damping far above the blocks' diagonal is factorized into them (``damped_refactor``):
    at lambda 1e6 PCG takes 4 iterations to 1e-6 where the undamped blocks took 1,210; a damping within that
    factor of the one held keeps the factor."""
    prob, q = frame_grid_cloth(quads=4, n_frames=12)
    iterations = {}
    for damped in (True, False):
        backend = StructuredBackend(forcing=1e-6, max_cg=5000)
        GaussNewton(prob, backend=backend)
        if not damped:
            backend.preconditioner.damp = lambda damping, metric: None
        g = backend.linearize(q, residual_steps(prob, q))
        backend.direction(g, 1e6)
        iterations[damped] = backend.cg_iterations[-1]
    assert iterations[True] <= 10 and iterations[False] >= 500, iterations
    blocks = backend.preconditioner.matrix()
    backend = StructuredBackend()
    GaussNewton(prob, backend=backend)
    backend.linearize(q, residual_steps(prob, q))
    precond, metric = backend.preconditioner, backend.metric
    x = np.random.default_rng(1).normal(size=blocks.shape[0])
    precond.damp(1e6, metric)
    damped = blocks + 1e6 * metric
    np.testing.assert_allclose(damped @ precond.apply(x), x, rtol=0, atol=1e-8 * np.abs(x).max())
    precond.damp(2e6, metric)                       # within the factor: the same preconditioner
    np.testing.assert_allclose(damped @ precond.apply(x), x, rtol=0, atol=1e-8 * np.abs(x).max())
    precond.damp(0.0, metric)
    np.testing.assert_allclose(blocks @ precond.apply(x), x, rtol=0, atol=1e-8 * np.abs(x).max())


def test_soft_first_frames_take_the_frame_blocks_where_the_sweep_stalls():
    """Soft first frames on the frame grid: the sweep's T takes frames 0 and 1 from their weak penalty rows
    alone and does not reach a relative residual of 1e-3 in 500 PCG iterations; the frame blocks (what "auto"
    picks with soft first frames, the sweep with hard ones) reach it in under 100."""
    prob, q = frame_grid_cloth()
    hard = sc.LoopProblem(prob.model, prob.n_frames, prob.dt, prob.r0, prob.r1, scheme=prob.scheme, pins=prob.pins)
    assert choose_preconditioner(prob) == "blocks" and choose_preconditioner(hard) == "sweep"
    iterations = {}
    for name in ("sweep", "blocks"):
        backend = StructuredBackend(preconditioner=name)
        GaussNewton(prob, backend=backend)
        g = backend.linearize(q, residual_steps(prob, q))
        _, iterations[name], _ = pcg(backend.op.apply_h, -g, backend.preconditioner.apply, 1e-3, 500)
    assert iterations["blocks"] < 100 and iterations["sweep"] == 500, iterations


def test_cache_or_forward_race_shares_one_symbolic_analysis(monkeypatch):
    """Both runs of loop_clip's "cache_or_forward" race factorize through one direct backend: one symbolic
    analysis; a problem of another pattern (here hard initial conditions, fewer unknowns) is analyzed anew."""
    prob, _ = blender_cloth(n_frames=8, forward=True, eps=(1e-3, 1e-3))
    steps = sc.simulate(prob)
    clip = prob.frames_of(steps)
    made = []
    monkeypatch.setattr(sc.clip_loop, "make_backend", lambda name: made.append(make_backend(name)) or made[-1])
    options = replace(DEFAULTS, start=replace(DEFAULTS.start, behind=np.inf),   # the second run goes on to its end
                      motion=replace(DEFAULTS.motion, drive="none"))             # the race: pure physics' start
    res = sc.loop_clip(prob, clip, "cache_or_forward", max_iters=3, backend="cholmod", options=options)
    assert "started from the cache and from the solver's own simulation" in res.message
    assert len(made) == 1 and made[0].analyses == 1 and made[0].factorizations >= 1
    hard = sc.LoopProblem(prob.model, prob.n_frames, prob.dt, prob.r0, prob.r1, scheme=prob.scheme,
                          pins=prob.pins, substeps=prob.substeps)
    backend = made[0]
    sc.GaussNewton(hard, backend).run(hard.apply_constraints(steps), max_iters=1)
    assert backend.analyses == 2


def test_factor_reuse_skips_far_dampings_of_its_own_linearization():
    """At the linearization of the last factorization, CG preconditioned by it is tried for a damping within
    REUSE_DAMPING_RATIO of the factorization's and not beyond (a fresh factorization at once); at the next
    linearization it is tried whatever the damping."""
    REUSE_DAMPING_RATIO = DEFAULTS.linear_solve.reuse_damping_ratio
    prob, q = blender_cloth(n_frames=8, forward=True)
    backend = make_backend("cholmod")
    backend.bind(prob)
    g = backend.linearize(q, residual_steps(prob, q))
    backend.direction(g, 1e-2)
    backend.direction(g, 2e-2)
    assert backend.factorizations == 1 and len(backend.reuse_cg_iterations) == 1
    backend.direction(g, 1e-2 * 2 * REUSE_DAMPING_RATIO)
    assert backend.factorizations == 2 and len(backend.reuse_cg_iterations) == 1
    q2 = q + 1e-4 * np.random.default_rng(3).normal(size=q.shape)
    g2 = backend.linearize(q2, residual_steps(prob, q2))
    backend.direction(g2, 1e-2)
    assert len(backend.reuse_cg_iterations) == 2


def test_a_second_right_hand_side_at_the_factored_damping_is_one_back_substitution():
    """The geodesic acceleration's solve (same matrix, same damping) uses the factor as it is: no CG, no new
    factorization, and the solution of the damped system to rounding."""
    prob, q = blender_cloth(n_frames=8, forward=True)
    backend = make_backend("cholmod")
    backend.bind(prob)
    g = backend.linearize(q, residual_steps(prob, q))
    backend.direction(g, 1e-2)
    b = np.random.default_rng(5).normal(size=g.shape)
    d = backend.direction(b, 1e-2)
    assert backend.factorizations == 1 and backend.reuse_cg_iterations == []
    damped = backend._H + 1e-2 * backend.metric
    np.testing.assert_allclose(damped @ d, -b, rtol=0, atol=1e-8 * np.abs(b).max())


def test_resolve_at_a_raised_damping_starts_from_the_last_direction():
    """After a rejected step (the damping doubled) PCG starts from the last direction of the linearization: it
    meets its tolerance on CHOLMOD's damped system in fewer iterations than from zero."""
    prob, q = frame_grid_cloth()
    direct = GaussNewton(prob, backend="cholmod")
    H, g = direct.system(q)
    metric = direct.backend.metric
    iterations = {}
    for warm in (True, False):
        backend = StructuredBackend()
        GaussNewton(prob, backend=backend)
        g_s = backend.linearize(q, residual_steps(prob, q))
        if warm:
            backend.direction(g_s, 1e-3)
        d = backend.direction(g_s, 2e-3)
        iterations[warm] = backend.cg_iterations[-1]
        assert np.linalg.norm((H + 2e-3 * metric) @ d + g) <= backend.forcing * np.linalg.norm(g)
        assert g @ d < 0
    assert iterations[True] < iterations[False] / 3, iterations
