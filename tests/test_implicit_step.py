"""The implicit step: its fallbacks where Newton on |R| stalls (Picard with frozen wind, Levenberg–Marquardt), its
shifts on indefinite matrices, its BLAS threads."""
import numpy as np
import scipy.sparse.linalg as spla

import solver_core as sc
from counting import count_calls
from solver_core.physics import forward, scheme
from solver_core.physics.forward import _ImplicitStep
from solver_core.physics.models.external import Gravity, Wind
from solver_core.scenes.speed_problems import cloth_grid
from solver_core.scenes.paper import SCENES


def windy_cloth_step():
    rest, tris = cloth_grid(5, 4, 0.1)
    cloth = sc.Cloth(rest, tris, youngs_modulus=1e4)
    model = cloth.add(Gravity(cloth.mass), Wind(cloth.n_vertices, tris, (3.0, 2.0, 0.5), 0.3))
    rng = np.random.default_rng(2)
    q0 = rest + 0.01 * rng.normal(size=rest.shape)
    prob = sc.LoopProblem(model, 6, 0.01, q0, q0 + 0.003 * rng.normal(size=rest.shape), scheme="backward",
                          pins=np.array([0, 3]))
    return prob, _ImplicitStep(prob)


def step_residual(prob, q_prev, q_cur, x):
    r = scheme.step_rows(prob, q_prev[None], q_cur[None], x[None], np.array([1]))[0]
    r[prob.pins] = 0.0
    return np.abs(r).max()


def test_picard_step_solves_the_windy_step_newton_solves():
    prob, step = windy_cloth_step()
    assert not step.potential and step._conservative is not None
    q_prev, q_cur = prob.r0, prob.r1
    pins = prob.pin_path(np.array([2]))[0]
    x_newton, _ = step._newton(q_prev, q_cur, 0.0, pins, 1, 1e-10, 100, False)
    x_picard, lu = step._picard(q_prev, q_cur, 0.0, pins, 1, 1e-10, 100)
    assert step_residual(prob, q_prev, q_cur, x_picard) < 1e-7
    assert np.abs(x_picard - x_newton).max() < 1e-9
    assert lu.shape == (step.free.size, step.free.size)


def test_levenberg_marquardt_direction_descends_on_the_residual_norm():
    prob, step = windy_cloth_step()
    q_prev, q_cur = prob.r0, prob.r1
    x = 2 * q_cur - q_prev + 0.02 * np.random.default_rng(3).normal(size=q_cur.shape)
    r = (scheme.step_rows(prob, q_prev[None], q_cur[None], x[None], np.array([1]))[0]).ravel()[step.free]
    S = step.matrix(q_prev, q_cur, x, 1)
    for factor in (1.0, 1e3, 1e8):
        d = step._levenberg_marquardt(q_prev, q_cur, x, 1, r, factor)
        assert float((S.T @ r) @ d) < 0
    # and the fallback solve reaches the same step as plain Newton
    pins = prob.pin_path(np.array([2]))[0]
    x_lm, _ = step._newton(q_prev, q_cur, 0.0, pins, 1, 1e-10, 100, True)
    x_newton, _ = step._newton(q_prev, q_cur, 0.0, pins, 1, 1e-10, 100, False)
    assert np.abs(x_lm - x_newton).max() < 1e-9


def test_newton_shift_reuses_the_steps_force_jacobian(monkeypatch):
    # a cloth compressed in its plane buckles: S is indefinite and Newton raises its shift, which changes
    # only S's diagonal, so the force Jacobian is evaluated once per direction however often S is factored
    rest, tris = cloth_grid(5, 4, 0.1)
    cloth = sc.Cloth(rest, tris)
    prob = sc.LoopProblem(cloth.add(Gravity(cloth.mass)), 6, 0.01, rest, rest, scheme="backward", pins=np.array([0]))
    step = _ImplicitStep(prob)
    assert step.potential
    rng = np.random.default_rng(4)
    x = 0.8 * rest + 1e-3 * rng.normal(size=rest.shape)
    r = (scheme.step_rows(prob, rest[None], rest[None], x[None], np.array([1]))[0]).ravel()[step.free]
    evaluations = count_calls(monkeypatch, cloth.terms[0], "jacobian_values")
    factorizations = count_calls(monkeypatch, spla, "splu")
    dx, shift = step._direction(rest, rest, x, 1, r, 0.0, True)
    assert shift > 0 and len(factorizations) >= 2 and len(evaluations) == 1
    # the direction is the one of the shifted matrix assembled afresh
    S = step.matrix(rest, rest, x, 1, shift).toarray()
    np.testing.assert_allclose(S @ dx, -r, atol=1e-9 * np.abs(r).max())
    assert np.all(np.linalg.eigvalsh(0.5 * (S + S.T)) > 0)


def test_simulation_runs_the_blas_on_one_thread(monkeypatch):
    # one step's products and factorizations are small: a second OpenBLAS thread only spins
    # (docs/design/tuning_starts.md: forward.single_threaded_blas); the count is restored after
    controls = forward._openblas_thread_controls()
    assert controls, "NumPy's OpenBLAS was not found in the process"
    before = [get() for get, _ in controls]
    prob, _ = windy_cloth_step()
    seen = []
    real = Gravity.forces
    monkeypatch.setattr(Gravity, "forces", lambda self, *a: seen.append([get() for get, _ in controls]) or real(self, *a))
    sc.simulate(prob)
    assert seen and all(counts == [1] * len(controls) for counts in seen)
    assert [get() for get, _ in controls] == before


def test_windy_newton_backtracks_on_the_frozen_wind_potential(monkeypatch):
    # the paper's flag at full size: on |R| Newton's full steps are halved again and again and some steps stall
    # into the Picard fallback; backtracking on the conservative potential with the wind frozen at the iterate
    # takes nearly every full step (docs/design/tuning_starts.md: forward._ImplicitStep)
    prob = SCENES["flag"](1.0).prob
    rows = count_calls(monkeypatch, scheme, "step_rows")
    directions = count_calls(monkeypatch, _ImplicitStep, "_direction")
    picard = count_calls(monkeypatch, _ImplicitStep, "_picard")
    q = sc.simulate(prob, n_states=12)
    assert not picard
    assert len(directions) <= 8 * 10 and len(rows) <= 1.5 * len(directions)
    # the steps are solved: each step's residual on the free vertices is at round-off of its forces
    residual = scheme.step_rows(prob, q[:-2], q[1:-1], q[2:], np.arange(1, 11))
    free = prob.free_vertices()
    forces = np.abs(prob.model.forces(q[2:], prob.step_times(np.arange(2, 12)))).max()
    assert np.abs(residual[:, free]).max() <= 1e-6 * forces
