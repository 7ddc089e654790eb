"""The driven loop's subspace and two-level operators (``benchmarks/scale.py``) against explicit matrices, on a
small gusting sheet."""
import numpy as np
import pytest
import scipy.sparse as sp

import solver_core as sc
from benchmarks import scale
from solver_core.optimize import driven
from solver_core.options import DEFAULTS, PHYSICS_TOL, TOL

from test_driven import gust_scene


@pytest.fixture(scope="module")
def sheet():
    prob, clip = gust_scene(n_frames=12)
    loss, x0, _, _ = scale.setup(prob, clip)
    U = scale.subspace_basis(prob, clip, 4, 2)
    sub = scale.Subspace(loss, U)
    E = sp.block_diag([sp.kron(sp.identity(sub.N), sp.csr_matrix(U)), sp.identity(loss.n_theta)], format="csr")
    x = x0 + np.random.default_rng(0).standard_normal(x0.size) * 1e-3 * np.r_[np.ones(loss.n_q),
                                                                              np.zeros(loss.n_theta)]
    return prob, clip, loss, x, sub, E.toarray()


def test_the_basis_is_mass_orthonormal_and_holds_the_clips_wrap_mismatch(sheet):
    prob, clip, _, _, sub, _ = sheet
    active = np.flatnonzero(np.repeat(prob.free_vertices(), 3))
    mass = np.repeat(prob.model.mass, 3)[active]
    assert np.allclose(sub.U.T @ (mass[:, None] * sub.U), np.eye(sub.r), atol=1e-10)
    gap = (clip[0] - clip[-1]).reshape(-1)[active]
    inside = sub.U @ (sub.U.T @ (mass * gap))
    assert np.allclose(inside, gap, atol=1e-10 * np.abs(gap).max())
    _, k = scale.pca_modes(prob, clip)
    assert 1 <= k <= len(clip)


def test_expand_and_restrict_are_the_subspace_matrix_and_its_transpose(sheet):
    _, _, _, x, sub, E = sheet
    y = np.random.default_rng(1).standard_normal(sub.n_y)
    assert np.allclose(sub.expand(y), E @ y, atol=1e-13)
    assert np.allclose(sub.restrict(x), E.T @ x, rtol=1e-12, atol=1e-12)


def test_the_reduced_jacobian_and_normal_matrix_equal_j_times_the_subspace(sheet):
    _, _, loss, x, sub, E = sheet
    parts = loss.blocks(x)
    J = parts["physics"][1]
    JE = J.toarray() @ E
    assert np.allclose(sub.reduce(J).toarray(), JE, atol=1e-12 * np.abs(JE).max())
    assert np.allclose(sub.physics_normal(J).toarray(), JE.T @ JE, atol=1e-10 * np.abs(JE.T @ JE).max())
    H, g, row_r = scale.reduced_system(sub, parts)
    Jall = np.vstack([J.toarray() for name, (_, J) in parts.items() if name != "speed"])
    full = E.T @ Jall.T @ Jall @ E
    assert np.allclose(H.toarray(), full, atol=1e-10 * np.abs(full).max())
    assert np.allclose(row_r, E.T @ parts["speed"][1], atol=1e-12 * np.abs(row_r).max())
    assert np.allclose(g, E.T @ scale.gradient(parts), atol=1e-10 * np.abs(g).max())


def test_the_gradient_is_the_losss_finite_difference(sheet):
    _, _, loss, x, _, _ = sheet
    d = np.random.default_rng(2).standard_normal(x.size) * 1e-6
    g = scale.gradient(loss.blocks(x))
    fd = (loss.value(loss.blocks(x + d, False)) - loss.value(loss.blocks(x - d, False))) / 2
    assert abs(g @ d - fd) <= 1e-5 * abs(fd)


def test_the_frame_blocks_are_the_block_diagonal_of_the_normal_matrix(sheet):
    _, _, loss, x, sub, _ = sheet
    parts = loss.blocks(x)
    J = sp.vstack([J for name, (_, J) in parts.items() if name != "speed"], format="csr")
    H = (J.T @ J).toarray()
    m = loss.n_q // sub.N
    block = np.r_[np.arange(loss.n_q) // m, np.arange(loss.n_theta) // loss.per_step]
    assert np.allclose(scale.frame_blocks(loss, J).toarray(), np.where(block[:, None] == block[None, :], H, 0.0),
                       atol=1e-12 * np.abs(H).max())


def test_the_subspace_solve_halves_the_loss_of_its_start(sheet):
    prob, clip, loss, _, sub, _ = sheet
    _, x0, _, _ = scale.setup(prob, clip)
    x, it, stop, _ = scale.subspace_solve(loss, x0, sub, 10, DEFAULTS.motion)
    assert loss.value(loss.blocks(x, False)) < 0.5 * loss.value(loss.blocks(x0, False))
    assert it >= 1 and stop in ("tol", "max_iters")


def test_the_subspace_metric_and_the_pcg_operator_equal_their_explicit_matrices(sheet):
    _, _, loss, x, sub, E = sheet
    d = loss.metric()
    assert np.allclose(sub.metric(d).toarray(), E.T @ np.diag(d) @ E, rtol=1e-12, atol=1e-12 * d.max())
    parts = loss.blocks(x)
    J = sp.vstack([J for name, (_, J) in parts.items() if name != "speed"], format="csr")
    row = parts["speed"][1]
    A = J.toarray().T @ J.toarray() + np.outer(row, row) + np.diag(1e-3 * d)
    apply = scale.normal_operator(J, row, 1e-3 * d)
    V = np.random.default_rng(3).standard_normal((x.size, 3))
    assert np.allclose(np.column_stack([apply(v) for v in V.T]), A @ V, atol=1e-10 * np.abs(A @ V).max())


def test_the_speed_row_enters_the_damped_solve_as_its_rank_one_update(sheet):
    rng = np.random.default_rng(4)
    A = rng.standard_normal((6, 6))
    A = A @ A.T + 6 * np.eye(6)
    g, row = rng.standard_normal(6), rng.standard_normal(6)
    step = scale.sherman_morrison(lambda b: np.linalg.solve(A, b), g, row)
    assert np.allclose(step, np.linalg.solve(A + np.outer(row, row), -g))


def test_the_two_level_polish_of_the_subspace_loop_reaches_the_direct_solves_loss(sheet):
    prob, clip, loss, _, sub, _ = sheet
    _, x0, clip_speed, _ = scale.setup(prob, clip)
    direct = driven.solve(loss, x0, clip_speed, 30, TOL, PHYSICS_TOL)
    x, _, _, _ = scale.subspace_solve(loss, x0, sub, 30, DEFAULTS.motion)
    x, _, _, _, n_cg = scale.two_level_solve(loss, x, sub, 30, DEFAULTS.motion)
    assert loss.value(loss.blocks(x, False)) <= 1.05 * loss.value(loss.blocks(direct.x, False))
    assert n_cg > 0


def test_the_linearization_report_names_every_stage(sheet, tmp_path, capsys):
    prob, clip = sheet[:2]
    sc.save_problem(str(tmp_path / "p.npz"), prob)
    np.save(tmp_path / "c.npy", clip)
    scale.main(["--linearization", "--problem", str(tmp_path / "p.npz"), "--clip", str(tmp_path / "c.npy"),
                "--modes", "4", "--smooth", "2"])
    out = capsys.readouterr().out
    for stage in ("the loss", "one Jacobian", "the frame blocks", "their factor", "first direction, two-level"):
        assert stage in out
