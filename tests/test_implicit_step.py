"""The implicit step's fallbacks where Newton on |R| stalls: Picard with frozen wind, Levenberg–Marquardt."""
import numpy as np

import solver_core as sc
from solver_core import scheme
from solver_core.forward import _ImplicitStep
from solver_core.models.external import Gravity, Wind
from solver_core.scenes.bench_speed import cloth_grid


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
