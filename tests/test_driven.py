"""Loops that keep the clip's motion: the driving families, the driven loss's derivatives, the solve, and that
pure physics and hard initial conditions stay as asked."""
import pathlib
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

import solver_core as sc
from solver_core.metrics import rms_speed
from solver_core.motion import budget_forces, force_budget
from solver_core.optimize import driven
from solver_core.options import DEFAULTS
from solver_core.physics.driving import ModesDrive, WindDrive, choose_drive, laplacian_modes
from solver_core.physics.forward import simulate
from solver_core.physics.models.cloth import COTTON_YOUNGS_MODULUS, Cloth
from solver_core.physics.models.base import Model
from solver_core.physics.models.external import Gravity, Wind
from solver_core.scenes.nbody import nbody_problem
from solver_core.scenes.speed_problems import cloth_grid

from derivatives import assert_jacobian_matches

ROOT = str(pathlib.Path(__file__).parents[1])


def gust_scene(n_frames=24, warmup=40, eps=1000.0, nx=5, ny=4):
    """A sheet hung by its top edge, simulated in gusts (a wind varying at two incommensurate periods), and its
    loop problem in the steady wind: the clip swings; the problem's own wind cannot keep it swinging."""
    rest, tris = cloth_grid(nx, ny, 0.1)
    cloth = Cloth(rest, tris, youngs_modulus=0.1 * COTTON_YOUNGS_MODULUS)
    pins = np.arange(nx) * ny
    steady = np.array([0.0, 6.0, 0.0])
    t = np.arange(warmup + n_frames + 2)[:, None]
    gust = steady * (1 + 0.8 * np.sin(2 * np.pi * t / 17.0) + 0.4 * np.sin(2 * np.pi * t / 7.3))
    sim = sc.LoopProblem(cloth.add(Gravity(cloth.mass), Wind(cloth.n_vertices, tris, gust, 0.05)),
                         warmup + n_frames, 0.02, rest, rest, scheme="backward", pins=pins)
    clip = simulate(sim)[warmup:]
    model = cloth.add(Gravity(cloth.mass), Wind(cloth.n_vertices, tris, steady, 0.05))
    prob = sc.LoopProblem(model, n_frames, 0.02, clip[0], clip[1], scheme="backward", pins=pins, eps0=eps, eps1=eps)
    return prob, clip


def motion(**fields):
    return replace(DEFAULTS, motion=replace(DEFAULTS.motion, **fields))


def test_the_wind_in_given_vectors_is_the_wind_law_and_its_jacobian_matches_finite_differences():
    prob, clip = gust_scene(n_frames=6)
    wind = next(t for t in prob.model.terms if isinstance(t, Wind))
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((3, 3))
    q = clip[:3]
    for b in range(3):
        one = Wind(wind.n_vertices, wind.triangles, vectors[b], wind.coefficient)
        assert np.allclose(wind.forces_in(q, vectors)[b], one.forces(q[b:b + 1], None)[0])
        assert np.allclose(wind.jacobian_values_in(q, vectors)[b], one.jacobian_values(q[b:b + 1], None)[0])
        assert_jacobian_matches(one, q[b:b + 1] + 0.01 * rng.standard_normal(q[:1].shape), None)


def test_the_body_modes_are_mass_orthonormal_and_the_lowest_is_rigid():
    prob, _ = gust_scene(n_frames=6)
    phi = laplacian_modes(prob.model, 4)
    assert np.allclose(phi.T @ (prob.model.mass[:, None] * phi), np.eye(4), atol=1e-10)
    assert np.ptp(phi[:, 0]) < 1e-8                        # the constant mode first


@pytest.mark.parametrize("family, eps, bound", [("wind", 1000.0, 1.05), ("wind", 0.0, 0.0), ("modes", 1000.0, 0.0)])
def test_every_block_of_the_driven_loss_matches_central_differences(family, eps, bound):
    prob, clip = gust_scene(n_frames=8, eps=eps)
    drive = choose_drive(prob, family, modes=3)
    assert isinstance(drive, WindDrive if family == "wind" else ModesDrive)
    start = sc.crossfade_loop(clip)
    loss = driven.DrivenLoss(prob, drive, start, clip, DEFAULTS.motion if not bound else
                             replace(DEFAULTS.motion, wind_bound=bound))
    rng = np.random.default_rng(1)
    theta = rng.standard_normal((prob.n_steps, loss.per_step)) * (3.0 if family == "wind" else 0.3)
    x = loss.pack(loss.start, theta)
    x[:loss.n_q] += 1e-3 * rng.standard_normal(loss.n_q)
    parts = loss.blocks(x)
    if bound:   # the bound is active on some steps and not on others: both sides of the hinge are checked
        active = parts["wind bound"][0] > 0
        assert active.any() and not active.all()
    assert set(parts) >= {"physics", "size", "roughness", "speed"} | ({"initial 0"} if eps else set())
    v = rng.standard_normal(x.size)
    v[:loss.n_q] *= 1e-3
    h = 1e-6
    plus, minus = loss.blocks(x + h * v, False), loss.blocks(x - h * v, False)
    for name, (r, J) in parts.items():
        fd = (plus[name][0] - minus[name][0]) / (2 * h)
        Jv = J @ v if name != "speed" else np.array([J @ v])
        assert np.linalg.norm(Jv - fd) <= 1e-5 * max(np.linalg.norm(fd), 1e-12), name
    only_theta = np.r_[np.zeros(loss.n_q), v[loss.n_q:]]      # the driving force's own columns
    fd = (loss.blocks(x + h * only_theta, False)["physics"][0] - loss.blocks(x - h * only_theta, False)["physics"][0])
    assert np.linalg.norm(parts["physics"][1] @ only_theta - fd / (2 * h)) <= 1e-5 * np.linalg.norm(fd / (2 * h))


def test_a_damped_cloth_with_designed_gusts_loops_at_its_clips_speed_nearly_exactly():
    prob, clip = gust_scene()
    res = sc.loop_clip(prob, clip, init="cache", max_iters=30, options=motion(wind_bound=3.0))
    m, kept = res.metrics["loop"], res.metrics["motion"]
    assert res.drive_family == "wind" and res.success and res.stop_reason == "physics_tol"
    assert kept["speed_ratio"] >= 0.85 and m["residual_rel_mean"] <= 0.01
    assert max(m["velocity_jump_ratio"], m["position_jump_ratio"]) <= sc.metrics.SEAMLESS_RATIO
    # near zero residual: Gauss–Newton converges in a few iterations, not the crawl of a loss with a floor
    assert res.gauss_newton_iterations <= 8
    assert kept["wind_peak_ratio"] <= 3.0 * (1 + DEFAULTS.motion.bound_slack)
    assert "moving at" in res.message and "gusts up to" in res.message
    assert res.wind.shape == (prob.n_frames, 3)
    assert np.allclose(sc.driving_force(prob, res), choose_drive(prob).forces(res.q_steps, res.drive_parameters))


def test_the_wind_bound_holds_the_gusts_to_twice_the_scenes_wind_at_some_cost_in_residual():
    prob, clip = gust_scene()
    free = sc.loop_clip(prob, clip, init="cache", max_iters=30, options=motion(wind_bound=0.0))
    held = sc.loop_clip(prob, clip, init="cache", max_iters=30)
    assert free.metrics["motion"]["wind_peak_ratio"] > 2.2
    assert held.metrics["motion"]["wind_peak_ratio"] <= 2.0 * (1 + DEFAULTS.motion.bound_slack)
    assert held.metrics["motion"]["speed_ratio"] >= 0.85
    assert held.metrics["loop"]["residual_rel_mean"] > free.metrics["loop"]["residual_rel_mean"]


def test_with_the_driving_force_off_the_loop_goes_calm_and_says_so():
    prob, clip = gust_scene()
    res = sc.loop_clip(prob, clip, init="cache", max_iters=30, options=motion(drive="none", keep_speed=0.0))
    assert res.drive_family == "none" and res.metrics["motion"]["family"] == "none"
    assert res.metrics["motion"]["speed_ratio"] < 0.85
    assert "calmer than the clip" in res.message and "allow a driving force" in res.message
    assert res.metrics["motion"]["speed_ratio"] == pytest.approx(rms_speed(res.q, prob.dt) / rms_speed(clip, prob.dt))


def in_scene_wind(prob, scale):
    """``prob`` with its scene wind ``scale`` times as strong."""
    terms = [Wind(t.n_vertices, t.triangles, scale * t.wind, t.coefficient) if isinstance(t, Wind) else t
             for t in prob.model.terms]
    model = Model(prob.model.mass, terms, prob.model.damping, prob.model.velocity_terms)
    return sc.LoopProblem(model, prob.n_frames, prob.dt, prob.r0, prob.r1, scheme=prob.scheme, pins=prob.pins,
                          eps0=prob.eps0, eps1=prob.eps1)


def test_the_force_budget_is_the_clips_inertia_over_gusts_of_the_bound_along_the_normals():
    rest, tris = cloth_grid(4, 3, 0.1)                 # flat in the x-z plane: every normal along y
    cloth = Cloth(rest, tris, youngs_modulus=0.1 * COTTON_YOUNGS_MODULUS)
    wind = Wind(cloth.n_vertices, tris, np.array([0.0, 3.0, 0.0]), 0.05)
    pins = np.arange(4) * 3
    dt, amplitude, omega, frames = 0.02, 0.05, 2 * np.pi * 1.5, np.arange(12)
    clip = rest + amplitude * np.sin(omega * dt * frames)[:, None, None] * np.array([0.0, 1.0, 0.0])
    prob = sc.LoopProblem(cloth.add(Gravity(cloth.mass), wind), 12, dt, clip[0], clip[1], scheme="backward",
                          pins=pins)
    free = prob.free_vertices()
    # the sheet translates along its normal: its acceleration in closed form
    accel = -amplitude * np.sin(omega * dt * frames[1:-1]) * 4 * np.sin(omega * dt / 2) ** 2 / dt ** 2
    need = np.sqrt(np.mean((accel[:, None] * cloth.mass[None, free]) ** 2))
    along = wind.forces_in(clip[1:-1], np.tile([0.0, 2 * 3.0, 0.0], (10, 1)))   # the wind law, blowing along y
    give = np.sqrt(np.mean(np.sum(along[:, free] ** 2, axis=-1)))
    drive = WindDrive(prob, wind)
    assert budget_forces(prob, drive, clip, 2.0) == pytest.approx((need, give), rel=1e-12)
    assert force_budget(prob, drive, clip, 2.0) == pytest.approx(need / give, rel=1e-12)
    assert force_budget(prob, drive, clip, 4.0) == pytest.approx(need / give / 2, rel=1e-12)
    assert force_budget(prob, drive, clip, 0.0) is None and budget_forces(prob, drive, clip, 0.0) is None
    assert force_budget(prob, ModesDrive(prob, 3), clip, 2.0) is None    # body forces are not bounded


def test_a_calm_loop_in_a_wind_too_weak_for_its_clip_says_how_much_force_it_lacks():
    prob, clip = gust_scene()
    assert force_budget(prob, choose_drive(prob), clip, 2.0) < 1          # the gusts' own scene: enough wind
    weak = in_scene_wind(prob, 0.1)
    res = sc.loop_clip(weak, clip, init="cache", max_iters=30, options=motion(keep_speed=0.0))
    figures = res.metrics["motion"]
    assert figures["force_needed"] == pytest.approx(10 * force_budget(prob, choose_drive(prob), clip, 2.0))
    assert figures["speed_ratio"] < 0.85 and figures["force_needed"] > 1
    assert (f"calmer than the clip ({figures['speed_ratio']:.0%} of its speed): its motion takes "
            f"{figures['force_needed']:.2g}x the force of gusts within 2x the scene's wind") in res.message


def test_hard_initial_conditions_stay_hard_on_cloth_with_gusts():
    prob, clip = gust_scene(eps=0.0)
    res = sc.loop_clip(prob, clip, init="cache", max_iters=10)
    assert res.initial_conditions == "hard" and res.drive_family == "wind"
    assert np.abs(res.q_steps[0] - prob.r0).max() <= 1e-9
    assert np.abs(res.q_steps[1] - prob.r1_step).max() <= 1e-9


def test_hard_initial_conditions_stay_hard_on_n_bodies_with_the_paper_formulation():
    prob = nbody_problem(3, seed=1, perturbation=0.05, n_frames=60)
    clip = simulate(prob)
    assert choose_drive(prob) is None                   # no mesh: pure physics, the paper's formulation
    res = sc.loop_clip(prob, clip, init="forward", max_iters=30)
    assert res.initial_conditions == "hard" and res.drive_family == "none"
    assert np.abs(res.q_steps[0] - prob.r0).max() <= 1e-9
    assert np.abs(res.q_steps[1] - prob.r1_step).max() <= 1e-9


def test_a_driven_loop_saves_and_loads_with_its_driving_force(tmp_path):
    prob, clip = gust_scene(n_frames=12)
    res = sc.loop_clip(prob, clip, init="cache", max_iters=4)
    sc.save_result(tmp_path / "r.npz", res)
    back = sc.load_result(tmp_path / "r.npz")
    assert back.drive_family == "wind" and np.array_equal(back.drive_parameters, res.drive_parameters)
    assert np.array_equal(back.wind, res.wind)
    assert back.metrics["motion"]["speed_ratio"] == res.metrics["motion"]["speed_ratio"]
    assert np.allclose(sc.driving_force(prob, back), sc.driving_force(prob, res))


def test_the_command_line_takes_the_driving_force_and_the_speed_weight(tmp_path):
    prob, clip = gust_scene(n_frames=12)
    sc.save_problem(tmp_path / "p.npz", prob)
    np.save(tmp_path / "c.npy", clip)
    results = {}
    for drive in ("auto", "none"):
        out = tmp_path / f"{drive}.npz"
        done = subprocess.run([sys.executable, "-m", "solver_core", "loop", str(tmp_path / "p.npz"), "-o", str(out),
                               "--clip", str(tmp_path / "c.npy"), "--init", "cache", "--max-iters", "6", "--quiet",
                               "--drive", drive, "--keep-speed", "0" if drive == "none" else "100"],
                              capture_output=True, text=True, timeout=300,
                              env={"PYTHONPATH": ROOT})
        assert done.returncode == 0, done.stderr
        results[drive] = sc.load_result(out)
    assert results["auto"].drive_family == "wind" and results["none"].drive_family == "none"
    bad = subprocess.run([sys.executable, "-m", "solver_core", "loop", str(tmp_path / "p.npz"), "-o",
                          str(tmp_path / "x.npz"), "--clip", str(tmp_path / "c.npy"), "--drive", "storm"],
                         capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": ROOT})
    assert bad.returncode == 2 and "storm" in bad.stderr and not (tmp_path / "x.npz").exists()
