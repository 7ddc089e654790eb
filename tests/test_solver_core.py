"""The loop solver on N-body systems: derivatives, constraints, Gauss–Newton, fast projection, I/O."""
import json
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

import solver_core as sc
from counting import count_calls
from derivatives import assert_adjoint_gradient_matches, assert_jacobian_matches, residual_jacobians
from solver_core.physics import scheme
from solver_core.options import DEFAULTS
from solver_core.physics.residual import penalty_terms, residual_steps
from solver_core.scenes.nbody import nbody_problem

# make_loop's "fast_projection" runs fast projection (and its race) on N bodies too, as on every problem that
# is not reversible: by default N bodies start from the two-sided guess (solver_core.optimize.reversible).
ONE_SIDED = replace(DEFAULTS, start=replace(DEFAULTS.start, two_sided=False))


def small_problem(scheme="symplectic", pins=None, damping=None, substeps=1, eps=0.0, n_frames=8, seed=0):
    rng = np.random.default_rng(seed)
    model = sc.NBody([1.0, 2.0, 1.5, 0.7], G=1.0, softening=0.3)
    if damping is not None:
        model = sc.Model(model.mass, model.terms, damping=damping)
    pos = rng.normal(size=(4, 3))
    vel = 0.3 * rng.normal(size=(4, 3))
    h = 0.05
    pin_positions = None
    if pins is not None:
        phase = 2 * np.pi * np.arange(n_frames) / n_frames
        pin_positions = pos[pins][None] + 0.1 * np.stack([np.cos(phase), np.sin(phase), 0 * phase], 1)[:, None]
    return sc.LoopProblem(model, n_frames, h, pos, pos + h * vel, scheme=scheme, eps0=eps, eps1=eps,
                          pins=pins, pin_positions=pin_positions, substeps=substeps)


def small_cloth_problem(scheme="linearized", pins=(0, 2), eps=0.0, n_frames=6, seed=0):
    """A 3 x 3 vertex Blender cloth with spring and hinge damping, air drag and gravity, two corners pinned."""
    rng = np.random.default_rng(seed)
    u, v = np.meshgrid(np.arange(3), np.arange(3), indexing="ij")
    x = np.stack([0.1 * u.ravel(), 0.1 * v.ravel(), np.zeros(9)], 1)
    quads = [(0, 3, 4, 1), (1, 4, 5, 2), (3, 6, 7, 4), (4, 7, 8, 5)]
    cloth = sc.BlenderCloth(x, quads, 0.3, 400.0, 400.0, 100.0, 5.0, air_damping=10.0, bending_model="angular",
                            tension_damping=20.0, compression_damping=20.0, shear_damping=10.0, angular_damping=2.0)
    model = cloth.add(sc.Gravity(cloth.mass, [0.0, 0.0, -9.81]))
    h = 0.02
    pos = x + 0.01 * rng.normal(size=x.shape)
    vel = 0.5 * rng.normal(size=x.shape)
    return sc.LoopProblem(model, n_frames, h, pos, pos + h * vel, scheme=scheme, eps0=eps, eps1=eps, pins=list(pins))


@pytest.mark.parametrize("softening", [0.0, 0.2])
def test_nbody_force_jacobian_matches_finite_differences(softening):
    rng = np.random.default_rng(1)
    term = sc.NBodyGravity(rng.uniform(0.5, 2.0, 5), G=1.3, softening=softening)
    q = rng.normal(size=(3, 5, 3))
    assert_jacobian_matches(term, q, np.zeros(3), eps=1e-6, rtol=1e-6)


def test_nbody_force_jacobian_complex_step():
    rng = np.random.default_rng(2)
    term = sc.NBodyGravity(rng.uniform(0.5, 2.0, 4), G=1.0, softening=0.1)
    q = rng.normal(size=(1, 4, 3))
    rows, cols = term.jacobian_pattern()
    exact = np.zeros((12, 12))
    np.add.at(exact, (rows, cols), term.jacobian_values(q, None)[0])
    for dof in range(12):
        dq = np.zeros(q.shape, complex)
        dq[0, dof // 3, dof % 3] = 1e-30j
        col = term.forces(q + dq, None).imag.ravel() / 1e-30
        np.testing.assert_allclose(col, exact[:, dof], rtol=1e-12, atol=1e-12 * np.abs(exact).max())


def test_nbody_forces_are_newtonian():
    term = sc.NBodyGravity([2.0, 3.0], G=0.5)
    f = term.forces(np.array([[[0.0, 0, 0], [2.0, 0, 0]]]), None)[0]
    np.testing.assert_allclose(f[0], [0.5 * 6 / 4, 0, 0])
    np.testing.assert_allclose(f.sum(axis=0), 0, atol=1e-15)


@pytest.mark.parametrize("kwargs", [
    dict(scheme="symplectic"), dict(scheme="backward"),
    dict(scheme="symplectic", pins=[1], damping=[0.1, 0.2, 0.0, 0.3]),
    dict(scheme="backward", pins=[0, 3], damping=0.2, eps=1e-3),
    dict(scheme="symplectic", substeps=2, eps=1e-2),
    dict(scheme="linearized", pins=[1], damping=[0.1, 0.2, 0.0, 0.3], eps=1e-3),
    dict(cloth=True, scheme="linearized"), dict(cloth=True, scheme="backward", eps=1e-3),
    dict(cloth=True, scheme="symplectic", pins=[0]),
])
def test_residual_jacobian_matches_finite_differences(kwargs):
    kwargs = dict(kwargs)
    prob = small_cloth_problem(**kwargs) if kwargs.pop("cloth", False) else small_problem(**kwargs)
    rng = np.random.default_rng(3)
    n = prob.n_vertices
    q = prob.apply_constraints(prob.steps_of(np.repeat(prob.r0[None], prob.n_frames, 0))
                               + 0.05 * rng.normal(size=(prob.n_steps, n, 3)))
    J, fd = residual_jacobians(prob, q)
    assert np.abs(J - fd).max() < 1e-6 * np.abs(J).max()


def dense_system(prob, q):
    """(H, g) of the Gauss–Newton system assembled densely, one step and one derivative part at a time."""
    n_steps, dof = prob.n_steps, 3 * prob.n_vertices
    J = np.zeros((n_steps * dof, n_steps * dof))
    for j in range(n_steps):
        for o, coefficients in scheme.diagonals(prob).items():
            k = (j + o) % n_steps
            J[j * dof:(j + 1) * dof, k * dof:(k + 1) * dof] += np.diag(coefficients)
        values = scheme.derivative_values(prob, q[j - 1][None], q[j][None], q[(j + 1) % n_steps][None], [j])
        for (o, prows, pcols), part in zip(scheme.derivative_pattern(prob), values):
            np.add.at(J, (j * dof + prows, (j + o) % n_steps * dof + pcols), part[0])
    active = np.tile(np.repeat(prob.free_vertices(), 3), n_steps)
    free = prob.free_mask().ravel()
    w = np.tile(np.repeat(prob.h / prob.model.mass, 3), n_steps)[active]
    J = J[active][:, free]
    H, g = J.T @ (w[:, None] * J), J.T @ (w * residual_steps(prob, q).ravel()[active])
    grad, diag = np.zeros(q.shape), np.zeros(q.shape)
    for weight, j, target in penalty_terms(prob, q):
        grad[j] += weight[:, None] * (q[j] - target)
        diag[j] += weight[:, None]
    return H + np.diag(diag.ravel()[free]), g + grad.ravel()[free]


@pytest.mark.parametrize("kwargs", [
    dict(scheme="backward", pins=[0, 3], damping=0.2, eps=1e-3),
    dict(scheme="symplectic", substeps=2, eps=1e-2),
    dict(scheme="linearized", pins=[1], damping=[0.1, 0.2, 0.0, 0.3], n_frames=4),
    dict(cloth=True, scheme="linearized"), dict(cloth=True, scheme="backward", eps=1e-3),
])
def test_gauss_newton_system_equals_a_dense_assembly(kwargs):
    kwargs = dict(kwargs)
    prob = small_cloth_problem(**kwargs) if kwargs.pop("cloth", False) else small_problem(**kwargs)
    rng = np.random.default_rng(5)
    q = prob.apply_constraints(prob.steps_of(np.repeat(prob.r0[None], prob.n_frames, 0))
                               + 0.05 * rng.normal(size=(prob.n_steps, prob.n_vertices, 3)))
    H, g = sc.GaussNewton(prob, backend="scipy").system(q)
    H_ref, g_ref = dense_system(prob, q)
    np.testing.assert_allclose(H.toarray(), H_ref, rtol=0, atol=1e-13 * np.abs(H_ref).max())
    np.testing.assert_allclose(g, g_ref, rtol=0, atol=1e-13 * np.abs(g_ref).max())
    assert H.format == "csc" and H.has_sorted_indices


def test_gauss_newton_gradient_is_the_loss_gradient():
    prob = small_problem(scheme="backward", pins=[2], damping=0.1, eps=1e-2)
    rng = np.random.default_rng(4)
    q = prob.apply_constraints(sc.simulate(prob) + 0.05 * rng.normal(size=(prob.n_steps, 4, 3)))
    gn = sc.GaussNewton(prob)
    _, g = gn.system(q)
    d = rng.normal(size=g.size)
    dq = np.zeros(q.size)
    dq[gn.jac.free_flat] = d
    dq = dq.reshape(q.shape)
    eps = 1e-6
    fd = (sc.loss(prob, q + eps * dq) - sc.loss(prob, q - eps * dq)) / (2 * eps)
    assert abs(fd - g @ d) < 1e-6 * abs(fd)


@pytest.mark.parametrize("kwargs", [dict(scheme="symplectic", pins=[1], damping=0.2),
                                    dict(scheme="backward", pins=[2], damping=[0.1, 0.0, 0.2, 0.3]),
                                    dict(scheme="symplectic", substeps=3),
                                    dict(scheme="linearized", pins=[2], damping=0.2),
                                    dict(cloth=True, scheme="linearized"), dict(cloth=True, scheme="backward"),
                                    dict(cloth=True, scheme="symplectic")])
def test_adjoint_gradient_matches_finite_differences(kwargs):
    kwargs = dict(kwargs)
    prob = small_cloth_problem(**kwargs) if kwargs.pop("cloth", False) else small_problem(**kwargs)
    assert_adjoint_gradient_matches(prob, 0.1)


def test_hard_constraints_hold_exactly_and_pins_follow_their_path():
    prob = small_problem(pins=[3], n_frames=10)
    res = sc.make_loop(prob, init="forward", max_iters=20)
    free = [0, 1, 2]
    assert np.array_equal(res.q[0, free], prob.r0[free])
    assert np.array_equal(res.q[1, free], prob.r1[free])
    np.testing.assert_array_equal(res.q[:, 3], prob.pin_positions[:, 0])


def test_soft_constraints_approach_hard_ones_as_eps_shrinks():
    errors = []
    for eps in (1e-1, 1e-3, 1e-5):
        prob = small_problem(eps=eps, n_frames=10)
        res = sc.make_loop(prob, init="forward", max_iters=50)
        errors.append(np.abs(res.q[0] - prob.r0).max() + np.abs(res.q[1] - prob.r1).max())
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 1e-3 * errors[0]


@pytest.mark.parametrize("n_bodies", [3, 5])
def test_gauss_newton_never_increases_loss_and_beats_forward_by_1e4(n_bodies):
    prob = nbody_problem(n_bodies, seed=1, perturbation=0.02)
    res = sc.make_loop(prob, init="forward")
    losses = [h["loss"] for h in res.history if h["phase"] == "gauss_newton"]
    assert all(b <= a for a, b in zip(losses, losses[1:]))
    forward = sc.loss(prob, sc.simulate(prob))
    assert forward / res.final_loss >= 1e4
    metrics = sc.loop_metrics(prob, res.q_steps)
    assert metrics["velocity_jump_ratio"] < 2.0
    assert sc.loop_metrics(prob, sc.simulate(prob))["velocity_jump_ratio"] > 10.0


def test_loop_metrics_evaluate_the_residual_once(monkeypatch):
    # the relative residual and the loss share one residual (seconds per evaluation on a large cloth)
    metrics_module, residual_module = sys.modules["solver_core.metrics"], sys.modules["solver_core.physics.residual"]
    prob = nbody_problem(3, seed=1, perturbation=0.02)
    q = sc.simulate(prob)
    expected = sc.loop_metrics(prob, q)
    calls = count_calls(monkeypatch, residual_module, "residual_steps")
    monkeypatch.setattr(metrics_module, "residual_steps", residual_module.residual_steps)
    assert sc.loop_metrics(prob, q) == expected
    assert len(calls) == 1
    assert expected["loss"] == sc.loss(prob, q, with_penalty=False)


def test_a_loops_speed_is_its_rms_chord_over_the_step():
    # two vertices on circles of radii 1 and 2, 12 frames a turn, one still: chords 2 r sin(pi / 12)
    angle = 2 * np.pi * np.arange(12) / 12
    circle = np.stack([np.cos(angle), np.sin(angle), np.zeros(12)], axis=-1)
    q = np.stack([circle, 2 * circle, np.zeros((12, 3))], axis=1)
    chord = 2 * np.sin(np.pi / 12) * np.array([1.0, 2.0, 0.0])
    assert np.isclose(sc.metrics.rms_speed(q, 0.5), np.sqrt(np.mean(chord ** 2)) / 0.5)
    prob = nbody_problem(3, seed=1, perturbation=0.02)
    clip = sc.simulate(prob)
    assert sc.loop_metrics(prob, clip)["speed"] == sc.metrics.rms_speed(prob.frames_of(clip), prob.dt) > 0


def test_fast_projection_closes_a_mild_loop():
    prob = nbody_problem(2, seed=1, perturbation=0.05)      # a perturbed Kepler orbit
    info = sc.fast_projection(prob)
    q = info.x
    assert info["final_G"] <= 1e-4 * info["G"][0]
    L = prob.n_steps
    closed = sc.simulate(prob, L + 2, info["controls"])
    np.testing.assert_allclose(closed[L], prob.r0, atol=1e-2 * np.abs(sc.simulate(prob, L + 1)[L] - prob.r0).max())
    assert np.array_equal(q[0], prob.r0)


@pytest.mark.parametrize("n_bodies, seed, winner", [(5, 3, "forward"), (3, 9, "fast_projection")])
def test_fast_projection_divergence_races_forward_crossfade_and_its_best_iterate(n_bodies, seed, winner):
    prob = nbody_problem(n_bodies, seed=seed, perturbation=0.02)
    with pytest.raises(sc.FastProjectionDiverged) as failed:
        sc.fast_projection(prob)
    assert failed.value.nit > 0 and failed.value.best.shape == (prob.n_steps, prob.n_vertices, 3)
    res = sc.make_loop(prob, max_iters=5, options=ONE_SIDED)
    assert "fast projection" in res.fallback_reason and res.fast_projection_iterations == failed.value.nit
    clip = sc.simulate(prob)
    raced = {}
    for name, q0 in (("forward", clip), ("crossfade", sc.crossfade_loop(clip)), ("fast_projection", failed.value.best)):
        gn = sc.GaussNewton(prob)
        gn.run(prob.apply_constraints(q0), max_iters=5)
        raced[name] = gn.history[-1]["loss"]
        if name == res.init_used:
            np.testing.assert_allclose(res.initial_guess, prob.apply_constraints(q0))
    assert res.init_used == min(raced, key=raced.get) == winner
    assert res.final_loss == raced[res.init_used] and res.gauss_newton_iterations == 5


def test_cache_or_forward_drops_the_start_that_falls_behind():
    """loop_clip's "cache_or_forward" runs the start of lower loss to its end first (here the simulation);
    the other run stops at the first iteration from race_from on where it is behind times behind, the
    message giving its figures there: the same loop as with both run to their end. A cancel in the second
    run returns that run, cancelled."""
    prob = nbody_problem(3, seed=1, perturbation=0.02)
    clip = sc.simulate(prob)
    runs = []
    for behind in (DEFAULTS.start.behind, np.inf):
        options = replace(DEFAULTS, start=replace(DEFAULTS.start, behind=behind))
        seen = []
        runs.append((sc.loop_clip(prob, clip, "cache_or_forward", callback=lambda info: seen.append(info["iteration"]),
                                  options=options), seen))
    (raced, seen), (full, seen_full) = runs
    assert raced.init_used == full.init_used == "forward" and raced.final_loss == full.final_loss
    assert seen == list(range(1, raced.gauss_newton_iterations + sc.clip_loop.RACE_FROM + 1))
    assert len(seen_full) > len(seen) + 50   # the cache's run to its end (66 iterations; 130 before: see gauss_newton)
    assert f"the cache's dropped after {sc.clip_loop.RACE_FROM} iterations" in raced.message
    assert "dropped" not in full.message and "the cache's loss" in full.message

    stop = sc.loop_clip(prob, clip, "cache_or_forward", callback=lambda info: info["iteration"] > len(seen) - 3)
    assert stop.cancelled and stop.init_used == "cache" and stop.gauss_newton_iterations == 1


def test_cache_or_forward_keeps_a_first_loop_within_the_physics_tolerance_without_the_second_run():
    prob = nbody_problem(3, seed=1, perturbation=0.005, n_frames=100)
    clip = sc.simulate(prob)
    runs = []
    for tol in (0.01, 0.0):
        seen = []
        runs.append((sc.loop_clip(prob, clip, "cache_or_forward", physics_tol=tol,
                                  callback=lambda info: seen.append(info["iteration"])), seen))
    (within, seen), (full, seen_full) = runs
    assert within.stop_reason == "physics_tol" and within.init_used == "forward"
    assert seen == list(range(1, within.gauss_newton_iterations + 1))     # the cache's start never ran
    assert "converged within the physics tolerance" in within.message
    assert len(seen_full) > full.gauss_newton_iterations >= within.gauss_newton_iterations


def test_cache_or_forward_runs_both_starts_when_the_first_loop_has_a_seam():
    """A first loop whose wrap can be seen may lose to a seamless one of higher loss: the second run is
    not dropped, however far behind (the race is pure physics' start: no driving force)."""
    prob = small_cloth_problem(eps=1e-3, n_frames=12)
    options = replace(DEFAULTS, start=replace(DEFAULTS.start, behind=0.0),
                      motion=replace(DEFAULTS.motion, drive="none"))
    seen = []
    res = sc.loop_clip(prob, sc.simulate(prob), "cache_or_forward", callback=lambda info: seen.append(info),
                       options=options)
    assert res.init_used == "forward" and res.status == sc.loop.CONVERGED_WITH_SEAM
    assert len(seen) > res.gauss_newton_iterations + 10 and "dropped" not in res.message


@pytest.mark.parametrize("phase", ["fast_projection", "gauss_newton"])
def test_cancel_stops_within_one_iteration_with_best_iterate(phase):
    prob = nbody_problem(3, seed=1, perturbation=0.005, n_frames=100)
    calls = []

    def cancel(info):
        calls.append(info)
        return info["phase"] == phase

    res = sc.make_loop(prob, callback=cancel, options=ONE_SIDED)
    assert res.cancelled
    assert calls[-1]["phase"] == phase and calls[-1]["iteration"] == 1
    assert sum(c["phase"] == phase for c in calls) == 1
    if phase == "gauss_newton":
        assert res.gauss_newton_iterations == 1
        assert res.final_loss <= res.initial_loss
        assert np.isclose(sc.loss(prob, res.q_steps), res.final_loss)


def test_crossfade_baseline_is_seamless_but_unphysical():
    prob = nbody_problem(3, seed=1, perturbation=0.02)
    clip = sc.simulate(prob)
    loop = sc.crossfade_loop(clip)
    fwd, cf = sc.loop_metrics(prob, clip), sc.loop_metrics(prob, loop)
    assert cf["position_jump"] < 1e-2 * fwd["position_jump"]
    assert cf["loss"] > 1e3 * sc.make_loop(prob, init="forward").final_loss


def test_backends_give_the_same_step():
    prob = small_problem(scheme="backward", pins=[1])
    q = sc.simulate(prob)
    steps = []
    for backend in ("cholmod", "scipy"):
        gn = sc.GaussNewton(prob, backend=backend)
        steps.append(gn.direction(*gn.system(q)))
    np.testing.assert_allclose(steps[0], steps[1], rtol=1e-8, atol=1e-12 * np.abs(steps[1]).max())


def test_problem_and_result_round_trip(tmp_path):
    prob = small_problem(scheme="backward", pins=[1], eps=1e-3, substeps=2)
    sc.save_problem(tmp_path / "p.npz", prob)
    back = sc.load_problem(tmp_path / "p.npz")
    q = sc.simulate(prob)
    assert sc.loss(back, q) == sc.loss(prob, q)
    res = sc.make_loop(prob, init="forward", max_iters=3)
    sc.save_result(tmp_path / "r.npz", res)
    again = sc.load_result(tmp_path / "r.npz")
    np.testing.assert_array_equal(again.q, res.q)
    assert again.history == res.history and again.init_used == res.init_used


def test_command_line_solves_a_saved_problem(tmp_path):
    prob = nbody_problem(3, seed=1, n_frames=40, perturbation=0.005)
    sc.save_problem(tmp_path / "p.npz", prob)
    out = subprocess.run([sys.executable, "-m", "solver_core", "loop", str(tmp_path / "p.npz"),
                          "-o", str(tmp_path / "r.npz")], capture_output=True, text=True, check=True)
    assert "[gauss_newton] iteration" in out.stdout
    report = sc.loop_report(prob, sc.load_result(tmp_path / "r.npz"))     # the result file is the report's source
    assert report["final_loss"] < report["initial_loss"]
    assert sc.load_result(tmp_path / "r.npz").q.shape == (40, 3, 3)


def test_command_line_crossfade_blends_the_clip_without_a_solve(tmp_path):
    prob = nbody_problem(3, seed=1, n_frames=40, perturbation=0.005)
    clip = sc.simulate(prob)
    sc.save_problem(tmp_path / "p.npz", prob)
    np.save(tmp_path / "clip.npy", clip)
    cmd = [sys.executable, "-m", "solver_core", "loop", str(tmp_path / "p.npz"), "-o", str(tmp_path / "r.npz"),
           "--method", "crossfade"]
    refused = subprocess.run(cmd, capture_output=True, text=True)
    assert refused.returncode == 2 and "--method crossfade blends the clip: give it with --clip" in refused.stderr
    out = subprocess.run([*cmd, "--clip", str(tmp_path / "clip.npy")], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[0] == "[crossfade] iteration    0  loss nan"
    assert "[gauss_newton]" not in out.stdout and "[fast_projection]" not in out.stdout
    report = sc.loop_report(prob, sc.load_result(tmp_path / "r.npz"))     # the result file is the report's source
    assert report["init_used"] == "crossfade" and report["gauss_newton_iterations"] == 0
    np.testing.assert_array_equal(sc.load_result(tmp_path / "r.npz").q, sc.crossfade_loop(clip))


@pytest.mark.parametrize("change, message", [
    (dict(n_frames=3), "at least 4 frames"),
    (dict(dt=0.0), "dt must be"),
    (dict(dt=-1.0), "dt must be"),
    (dict(r0=np.zeros((3, 3))), "r0 must have shape"),
    (dict(r1=np.full((4, 3), np.nan)), "NaN"),
    (dict(pins=[7]), "pins must be vertex indices"),
    (dict(pins=[-1]), "pins must be vertex indices"),
    (dict(pins=[1], pin_positions=np.zeros((5, 1, 3))), "pin_positions must have shape"),
    (dict(scheme="rk4"), "scheme must be"),
    (dict(eps0=-1.0), "eps0 must be"),
])
def test_bad_input_raises_clear_errors(change, message):
    model = sc.NBody(np.ones(4))
    args = dict(n_frames=8, dt=0.01, r0=np.eye(4, 3), r1=np.eye(4, 3))
    args.update(change)
    with pytest.raises(ValueError, match=message):
        sc.LoopProblem(model, **args)


def test_bad_models_and_trajectories_raise():
    with pytest.raises(ValueError, match="positive"):
        sc.NBody([1.0, 0.0])
    prob = small_problem()
    with pytest.raises(ValueError, match="shape"):
        sc.loss(prob, np.zeros((3, 4, 3)))
    with pytest.raises(ValueError, match="init must be"):
        sc.make_loop(prob, init="magic")


def test_cholmod_symbolic_analysis_is_computed_once():
    prob = nbody_problem(3, seed=1, perturbation=0.02, n_frames=60)
    gn = sc.GaussNewton(prob, backend="cholmod")
    gn.run(sc.simulate(prob), max_iters=5, tol=0.0)
    assert len(gn.history) - 1 == 5
    assert gn.backend.analyses == 1


def test_direct_solves_leave_blas_its_threads_and_the_frame_blocks_take_one():
    from solver_core.physics import forward
    from solver_core.optimize import linsolve
    controls = forward._openblas_thread_controls()
    if not controls:
        pytest.skip("no OpenBLAS loaded")
    before = [get() for get, _ in controls]
    seen = []
    prob = nbody_problem(3, seed=1, perturbation=0.02, n_frames=30)
    backend = linsolve.make_backend("cholmod" if linsolve.cholmod is not None else "scipy")
    backend.factorize = lambda A, shift, f=backend.factorize: (seen.append([get() for get, _ in controls]), f(A, shift))
    backend.bind(prob)
    try:
        for _, put in controls:
            put(2)
        d = backend.direction(backend.linearize(sc.simulate(prob), None), 1e-3)
        assert np.all(np.isfinite(d)) and seen and all(count == 2 for counts in seen for count in counts)
        with forward.single_threaded_blas():
            assert all(get() == 1 for get, _ in controls)
        assert all(get() == 2 for get, _ in controls)
    finally:
        for (_, put), count in zip(controls, before):
            put(count)
