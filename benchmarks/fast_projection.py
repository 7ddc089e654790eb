"""Fast projection: iterations, cost in forward simulations, closure, and which iterate starts Gauss–Newton best.

    python -m benchmarks fast_projection [--scale S] [--gn K] [--fractions F ...]
        [--stop-fraction F] [--max-iters K] [--stall-window K] [--budget SECONDS] SCENE|PROBLEM.npz ...

Per scene (a paper scene, or a problem saved as .npz, e.g. by ``sample_scenes/flag_in_wind.py``): one plain
forward simulation of the clip (the unit of loop cost), then fast projection (cancelled after ``--budget``
seconds): iterations, seconds per iteration, final G / G(0), the RMS position (m) and velocity (m/s)
mismatch at the wrap before and after, the loop loss of its result and the process's peak resident memory.
With ``--gn K`` also, for the first iterate whose G is below each fraction of G(0) (and the last; fast
projection is then not asked to close the loop), the loop loss of that iterate and after K Gauss–Newton
iterations from it.
"""
import argparse
import resource
import time
from dataclasses import replace

from solver_core.optimize.fast_projection import FastProjectionDiverged, fast_projection
from solver_core.options import DEFAULTS
from solver_core.physics.forward import simulate
from solver_core.optimize.gauss_newton import GaussNewton
from solver_core.io import load_problem
from solver_core.physics.residual import loss
from solver_core.scenes.paper import SCENES


def _candidates(G, fractions):
    """{label: iterate index}: the first iterate with G <= f G(0) for each fraction, and the last."""
    out = {}
    for f in fractions:
        hit = [i for i, g in enumerate(G) if g <= f * G[0]]
        if hit:
            out[f"G<={f:g}G0 (it {hit[0]})"] = hit[0]
    out[f"last (it {len(G) - 1})"] = len(G) - 1
    return out


def bench_scene(name, scale, gn_iters, fractions, stop_fraction=0.0, max_iters=30, budget=float("inf"),
                stall_window=5):
    """Print the figures of one scene."""
    prob = load_problem(name) if name.endswith(".npz") else SCENES[name](scale).prob
    t0 = time.perf_counter()
    clip = simulate(prob)
    forward = time.perf_counter() - t0
    print(f"{name} (scale {scale:g}): {prob.n_vertices} vertices, {prob.n_steps} steps; forward simulation "
          f"{forward:.2f} s, loss {loss(prob, clip):.4g}", flush=True)
    t0 = time.perf_counter()

    def progress(it):
        print(f"    iteration {it['iteration']}: G {it['loss']:.3e} ({time.perf_counter() - t0:.0f} s)", flush=True)
        return time.perf_counter() - t0 > budget

    try:
        # figures for every run, closed or not (with --gn every iterate is a candidate start)
        options = replace(DEFAULTS, fast_projection=replace(
            DEFAULTS.fast_projection, stop_fraction=stop_fraction, accept=float("inf"), stall_window=stall_window))
        info = fast_projection(prob, callback=progress, options=options, max_iters=max_iters,
                               keep_iterates=gn_iters > 0)
    except FastProjectionDiverged as exc:
        print(f"  fast projection diverged: {exc}")
        return
    q, it = info.x, info.nit
    per_it = info["seconds"] / max(it, 1)
    print(f"  fast projection: {it} iterations, {per_it:.2f} s/it ({per_it / forward:.1f} forward simulations), "
          f"{info['seconds']:.1f} s in all; G/G(0) {info['final_G'] / info['G'][0]:.2e}; position mismatch "
          f"{info['position_jump'][0]:.3e} -> {info['position_jump'][-1]:.3e} m, velocity "
          f"{info['velocity_jump'][0]:.3e} -> {info['velocity_jump'][-1]:.3e} m/s; Krylov iterations (0: exact) "
          f"{info['krylov_iterations']}; {info['message']}; peak memory "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB", flush=True)
    print(f"  loop loss of the result {loss(prob, prob.apply_constraints(q)):.4g}", flush=True)
    if gn_iters <= 0:
        return
    for label, i in _candidates(info["G"], fractions).items():
        q0 = prob.apply_constraints(info["iterates"][i])
        gn = GaussNewton(prob)
        t0 = time.perf_counter()
        gn.run(q0, max_iters=gn_iters)
        print(f"  {label}: G/G(0) {info['G'][i] / info['G'][0]:.2e}, loss {loss(prob, q0):.4g} -> "
              f"{gn.history[-1]['loss']:.4g} after {len(gn.history) - 1} Gauss-Newton iterations "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks fast_projection", description=__doc__.splitlines()[0])
    p.add_argument("scenes", nargs="+", help=f"{', '.join(sorted(SCENES))} or a problem .npz")
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--gn", type=int, default=0, help="Gauss-Newton iterations from candidate iterates")
    p.add_argument("--fractions", type=float, nargs="*", default=[0.3, 0.1, 1e-2, 1e-4])
    p.add_argument("--stop-fraction", type=float, default=0.0, help="stop fast projection once G <= this G(0)")
    p.add_argument("--max-iters", type=int, default=30)
    p.add_argument("--budget", type=float, default=float("inf"), help="cancel fast projection after this many seconds")
    p.add_argument("--stall-window", type=int, default=5, help="stop when G has not halved over this many iterations")
    args = p.parse_args(argv)
    for name in args.scenes:
        bench_scene(name, args.scale, args.gn, args.fractions, args.stop_fraction, args.max_iters, args.budget,
                    args.stall_window)
