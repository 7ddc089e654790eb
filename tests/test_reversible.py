"""The two-sided initial guess of reversible dynamics (N bodies): exact halves, and loops in few iterations."""
import numpy as np
import pytest

import solver_core as sc
from solver_core import loop
from solver_core.optimize import reversible
from solver_core.physics.forward import SimulationFailed
from solver_core.metrics import jump_ratios
from solver_core.options import DEFAULTS
from solver_core.physics.residual import residual_steps
from solver_core.scenes.nbody import nbody_problem
from test_solver_core import small_problem


@pytest.mark.parametrize("make", [lambda: nbody_problem(4, seed=2, perturbation=0.02),
                                  lambda: small_problem(pins=[1], n_frames=40)],
                         ids=["4 bodies", "animated pin"])
def test_both_halves_are_exact_simulations_up_to_the_blend(make):
    prob = make()
    q = reversible.two_sided_guess(prob)
    n = prob.n_steps
    width = int(round(DEFAULTS.start.blend * n))
    u = np.abs(residual_steps(prob, q)).max(axis=(1, 2))
    force = np.abs(prob.model.forces(q, np.arange(n))).max()
    outside = np.r_[0:n // 2 - width, n // 2 + width + 1:n]      # the wrap rows 0 and n - 1 included
    assert u[outside].max() <= 1e-9 * force
    assert u[n // 2] > 1e-6 * force                                 # the halves do not meet by themselves
    np.testing.assert_array_equal(q[:2], prob.apply_constraints(q)[:2])
    np.testing.assert_allclose(q[:, prob.pins], prob.pin_path(np.arange(n)))


def test_only_the_undamped_symplectic_step_is_reversible():
    assert reversible.reversible(nbody_problem(3, seed=1))
    assert not reversible.reversible(small_problem(damping=0.1))
    assert not reversible.reversible(small_problem(scheme="backward"))
    with pytest.raises(ValueError, match="reversible"):
        reversible.two_sided_guess(small_problem(damping=0.1))


@pytest.mark.parametrize("n_bodies, seed", [(3, 17), (4, 4), (5, 11)])
def test_n_body_loops_from_the_two_sided_guess_are_seamless_in_few_iterations(n_bodies, seed):
    # from fast projection (or its race) these crawl to the iteration cap (docs/design/tuning_starts.md: two_sided)
    prob = nbody_problem(n_bodies, seed=seed, perturbation=0.02)
    res = sc.make_loop(prob)
    assert res.init_used == "two_sided" and res.fast_projection_iterations == 0
    assert res.status == loop.CONVERGED and res.stop_reason in ("tol", "step_tol")
    assert res.gauss_newton_iterations <= 15
    assert max(jump_ratios(res.q, prob.dt)) <= loop.SEAMLESS_RATIO
    assert res.final_loss <= 5.0
    assert res.metrics["loop"]["residual_rel_mean"] <= 0.03


def test_a_backward_simulation_that_blows_up_falls_back_to_fast_projection(monkeypatch):
    def blows_up(prob, first):
        raise SimulationFailed("the backward simulation blew up")
    monkeypatch.setattr(reversible, "simulate_backward", blows_up)
    res = sc.make_loop(nbody_problem(3, seed=4, perturbation=0.02), max_iters=3)
    assert res.init_used == "fast_projection" and res.fast_projection_iterations > 0
