"""Fast projection (vector, M^-1 norm, Newton–Krylov) and the forward/adjoint simulation it runs on:
derivatives against finite differences, cost per step as counts, convergence on the paper's scenes."""
from dataclasses import replace

import numpy as np
import pytest
import scipy.sparse.linalg as spla

import solver_core as sc
from counting import count_calls
from solver_core.optimize.fast_projection import _Closure, _GramStep, _stop_reason
from solver_core.physics.forward import _ImplicitStep, mismatch_gradient
from solver_core.options import DEFAULTS
from solver_core.scenes.paper import SCENES
from test_solver_core import small_cloth_problem, small_problem

PROBLEMS = {
    "nbody symplectic": lambda: small_problem(scheme="symplectic", pins=[1], damping=0.2),
    "nbody backward": lambda: small_problem(scheme="backward", pins=[2], damping=0.1),
    "blender cloth linearized": lambda: small_cloth_problem(scheme="linearized"),
    "blender cloth backward": lambda: small_cloth_problem(scheme="backward"),
}


def _options(**fields):
    """DEFAULTS with these fast-projection fields changed."""
    return replace(DEFAULTS, fast_projection=replace(DEFAULTS.fast_projection, **fields))


def _controls(prob, rng, scale):
    u = scale * rng.normal(size=(prob.n_steps + 1, prob.n_vertices, 3))
    u[0] = 0.0
    return u


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_tangent_and_adjoint_sweeps_match_finite_differences(name):
    prob = PROBLEMS[name]()
    L = prob.n_steps
    rng = np.random.default_rng(7)
    u = _controls(prob, rng, 0.1)
    du = _controls(prob, rng, 1.0)
    q, lin = sc.simulate(prob, L + 2, u, keep_factors=True)
    dq = lin.tangent(du)
    eps = 1e-4
    fd = (sc.simulate(prob, L + 2, u + eps * du) - sc.simulate(prob, L + 2, u - eps * du)) / (2 * eps)
    assert np.abs(dq - fd).max() < 1e-5 * np.abs(fd).max()
    assert np.all(dq[:, prob.pins] == 0.0) and np.all(dq[:2] == 0.0)
    s = rng.normal(size=q.shape)
    # the adjoint sweep is the transpose of the tangent-linear one
    assert abs(np.sum(lin.adjoint(s) * du) - np.sum(s[:, np.setdiff1d(np.arange(prob.n_vertices), prob.pins)]
                                                    * dq[:, np.setdiff1d(np.arange(prob.n_vertices), prob.pins)])) \
        < 1e-10 * np.abs(s).sum() * np.abs(dq).max()


def test_dense_and_sparse_linearizations_agree(monkeypatch):
    # small systems keep their couplings dense (forward._DENSE_DOFS); the sweeps must not change
    import solver_core.physics.forward as forward
    prob = PROBLEMS["nbody symplectic"]()
    L = prob.n_steps
    rng = np.random.default_rng(10)
    u, du = _controls(prob, rng, 0.1), _controls(prob, rng, 1.0)
    s, last = rng.normal(size=(L + 2, prob.n_vertices, 3)), rng.normal(size=(2, prob.n_vertices, 3, 4))
    sweeps = []
    for dense in (64, 0):
        monkeypatch.setattr(forward, "_DENSE_DOFS", dense)
        q, lin = sc.simulate(prob, L + 2, u, keep_factors=True)
        sweeps.append((lin.tangent(du), lin.adjoint(s), lin.gram(last, prob.model.mass)))
        assert isinstance(lin._A[1], np.ndarray) == (dense > 0)
    for a, b in zip(*sweeps):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * np.abs(b).max())


def test_closure_jacobian_and_its_transpose_match_finite_differences():
    prob = small_cloth_problem(scheme="linearized")
    L = prob.n_steps
    rng = np.random.default_rng(8)
    u, du = _controls(prob, rng, 0.1), _controls(prob, rng, 1.0)
    q, lin = sc.simulate(prob, L + 2, u, keep_factors=True)
    closure = _Closure(prob, q)
    jdu = closure.tangent(lin.tangent(du))
    eps = 1e-4
    fd = (closure.residual(sc.simulate(prob, L + 2, u + eps * du))
          - closure.residual(sc.simulate(prob, L + 2, u - eps * du))) / (2 * eps)
    assert np.abs(jdu - fd).max() < 1e-5 * np.abs(fd).max()
    y = rng.normal(size=jdu.shape)
    jty = lin.adjoint(closure.sensitivity(y, q.shape))
    assert np.isclose(np.sum(jty[1:] * du[1:]), np.sum(y * jdu), rtol=1e-9)


@pytest.mark.parametrize("name", ["nbody symplectic", "blender cloth backward"])
def test_gram_matrix_of_the_closure_equals_its_adjoint_rows(name):
    prob = PROBLEMS[name]()
    L = prob.n_steps
    u = _controls(prob, np.random.default_rng(9), 0.1)
    q, lin = sc.simulate(prob, L + 2, u, keep_factors=True)
    closure = _Closure(prob, q)
    r = closure.residual(q)
    step = _GramStep(closure, lin, r, prob.model.mass)
    rows = []
    for y in np.eye(r.size):
        g = lin.adjoint(closure.sensitivity(y.reshape(r.shape), q.shape))
        rows.append((np.sqrt(prob.model.mass)[None, :, None] * g).ravel())
    gram = np.array(rows) @ np.array(rows).T
    np.testing.assert_allclose((step.V * step.lam) @ step.V.T, gram, atol=1e-10 * np.abs(gram).max())
    # the step for a trust radius has that M^-1 norm, and its linear model is J du
    du, lin_res, _, norm = step(0.5 * step._norm(0.0))
    assert np.isclose(np.sqrt(np.sum(du * du / prob.model.mass[None, :, None])), norm)
    jdu = closure.tangent(lin.tangent(du))
    assert np.isclose(np.linalg.norm(r + jdu) / np.linalg.norm(r), lin_res)


def _counting_jacobians(monkeypatch, model):
    """Configurations at which each force term's Jacobian is evaluated, summed over the terms."""
    counts = []
    for term in model.terms + model.velocity_terms:
        real = term.jacobian_values

        def counted(*args, _real=real):
            counts.append(np.shape(args[0])[0])
            return _real(*args)

        monkeypatch.setattr(term, "jacobian_values", counted)
    return counts


def test_blender_cloth_forward_and_gradient_cost_per_step(monkeypatch):
    # the linearized scheme: one factorization per step for the simulation and its adjoint together, and a
    # bounded number of Jacobian evaluations per step and term (the step matrix, the step residual's
    # linearized force, and the Jacobian's derivative along the step by central differences)
    prob = small_cloth_problem(scheme="linearized", n_frames=12)
    L = prob.n_steps
    u = _controls(prob, np.random.default_rng(9), 0.1)
    model = prob.model
    n_terms = len(model.terms) + len(model.velocity_terms)
    factorizations = count_calls(monkeypatch, spla, "splu")
    evaluations = _counting_jacobians(monkeypatch, model)
    q, lin = sc.simulate(prob, L + 2, u, keep_factors=True)
    assert len(factorizations) == L
    grad = mismatch_gradient(prob, q, lin)
    lin.tangent(grad)
    lin.adjoint(np.ones_like(q))
    assert len(factorizations) == L            # the sweeps reuse the simulation's factors
    assert sum(evaluations) <= 3 * n_terms * L


def test_backward_scheme_factors_each_step_once_for_its_linearization(monkeypatch):
    prob = small_cloth_problem(scheme="backward")
    L = prob.n_steps
    u = _controls(prob, np.random.default_rng(10), 0.1)
    q, lin = sc.simulate(prob, L + 2, u, keep_factors=True)
    factorizations = count_calls(monkeypatch, spla, "splu")
    for _ in range(3):
        lin.adjoint(np.ones_like(q))
    assert len(factorizations) == L
    # the tangent-linear sweep and the closure's Gram matrix (a block adjoint sweep) reuse the same factors
    lin.tangent(u)
    closure = _Closure(prob, q)
    _GramStep(closure, lin, closure.residual(q), prob.model.mass)
    assert len(factorizations) == L


def test_fast_projection_iteration_factors_each_step_once_beyond_newton(monkeypatch):
    # per iteration: the trial simulations' Newton directions, and one factorization per step for the
    # iterate's linearization, which the Gram matrix and the steps of every trust radius share
    prob = small_cloth_problem(scheme="backward")
    L = prob.n_steps
    factorizations = count_calls(monkeypatch, spla, "splu")
    in_newton = []
    for name in ("_direction", "_levenberg_marquardt"):     # Newton's directions and its fallback's
        real = getattr(_ImplicitStep, name)

        def counted(self, *args, _real=real):
            before = len(factorizations)
            out = _real(self, *args)
            in_newton.append(len(factorizations) - before)
            return out

        monkeypatch.setattr(_ImplicitStep, name, counted)
    info = sc.fast_projection(prob, max_iters=3, options=_options(accept=np.inf))
    assert info.nit == 3 and sum(info["trials"]) >= 3
    assert len(factorizations) - sum(in_newton) == L * info.nit


# The ribbons' handle makes 3 turns in 100 frames: only at full size is its path periodic, so a reduced
# ribbons loop has a jump in its pins at the wrap that no control of the free vertices closes.
MUST_CONVERGE = ("flag", "doughnut", "wobbly_bar", "swinging_cloth")


@pytest.mark.parametrize("name", MUST_CONVERGE)
def test_fast_projection_converges_on_the_papers_scenes(name):
    prob = SCENES[name](0.08).prob
    info = sc.fast_projection(prob)
    q = info.x
    G = info["G"]
    assert info["converged"] and info["final_G"] <= 1e-6 * G[0]
    assert all(b < a for a, b in zip(G, G[1:]))
    assert info["position_jump"][-1] < 0.1 * info["position_jump"][0]
    assert info["velocity_jump"][-1] < 0.1 * info["velocity_jump"][0]
    L = prob.n_steps
    closed = sc.simulate(prob, L + 2, info["controls"])
    np.testing.assert_allclose(closed[:L], q)


def test_fast_projection_by_lsqr_converges_where_the_gram_matrix_is_too_large():
    prob = SCENES["doughnut"](0.08).prob
    info = sc.fast_projection(prob, max_iters=60, options=_options(gram_max_rows=0))
    assert info["converged"] and all(k > 0 for k in info["krylov_iterations"])
    assert all(b < a for a, b in zip(info["G"], info["G"][1:]))


def test_fast_projection_stops_early_and_keeps_its_iterates():
    prob = SCENES["swinging_cloth"](0.08).prob
    info = sc.fast_projection(prob, keep_iterates=True, options=_options(stop_fraction=0.1))
    q = info.x
    G = info["G"]
    assert G[-1] <= 0.1 * G[0] < G[-2]
    assert "stopped early" in info["message"] and not info["converged"]
    assert len(info["iterates"]) == len(G)
    np.testing.assert_array_equal(info["iterates"][-1], q)


def test_a_stall_needs_a_slow_fall_and_a_trust_region_that_does_not_grow():
    # G as on the flag at scale 1: it falls by 37% over 5 iterations while the trust region grows, then 100-fold
    G = [764.0, 730.0, 664.0, 613.0, 570.0, 484.0]
    growing, shrinking = [1.0, 3.0, 9.0, 27.0, 81.0], [1.0, 0.5, 0.5, 0.25, 0.1]
    assert _stop_reason(G, growing, 1e-6, 0.0, 30, 5) == ""
    assert _stop_reason(G, shrinking, 1e-6, 0.0, 30, 5).startswith("stalled")
    assert _stop_reason(G[:5], shrinking[:4], 1e-6, 0.0, 30, 5) == ""          # too few iterations to say
    assert _stop_reason(G[:2] + [1e-4], [1.0, 0.1], 1e-6, 0.0, 30, 5).startswith("converged")
    assert _stop_reason(G, growing, 1e-6, 0.0, 5, 5).startswith("stopped at the iteration cap")
