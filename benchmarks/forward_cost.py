"""Cost of a saved problem's forward simulation, adjoint gradient and tangent-linear / adjoint sweeps.

Also the process's peak memory; the problem e.g. ``sample_scenes/flag_in_wind.py``'s Blender flag.

    python -m benchmarks forward_cost PROBLEM.npz [--fast-projection K]
"""
import argparse
import resource
import time

import numpy as np

from solver_core.optimize.fast_projection import FastProjectionDiverged, fast_projection
from solver_core.physics.forward import mismatch_gradient, simulate
from solver_core.io import load_problem


def _peak_gb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks forward_cost", description=__doc__.splitlines()[0])
    p.add_argument("problem")
    p.add_argument("--fast-projection", type=int, default=0, help="also run this many fast-projection iterations")
    args = p.parse_args(argv)
    prob = load_problem(args.problem)
    L = prob.n_steps
    t0 = time.perf_counter()
    simulate(prob)
    forward = time.perf_counter() - t0
    t0 = time.perf_counter()
    q, lin = simulate(prob, L + 2, np.zeros((L + 1, prob.n_vertices, 3)), keep_factors=True)
    grad = mismatch_gradient(prob, q, lin)
    gradient = time.perf_counter() - t0
    t0 = time.perf_counter()
    lin.tangent(grad)
    lin.adjoint(np.ones_like(q))
    sweeps = time.perf_counter() - t0
    print(f"{prob.n_vertices} vertices, {L} steps ({prob.scheme}): forward {forward:.1f} s; forward with its "
          f"linearization + adjoint gradient {gradient:.1f} s; one tangent-linear + one adjoint sweep {sweeps:.2f} s; "
          f"peak memory {_peak_gb():.2f} GB", flush=True)
    if args.fast_projection:
        try:
            info = fast_projection(prob, max_iters=args.fast_projection)
            outcome = f"G/G(0) {info['final_G'] / info['G'][0]:.2e}"
            it, seconds = info.nit, info.seconds
        except FastProjectionDiverged as exc:
            outcome, it, seconds = str(exc), args.fast_projection, float("nan")
        print(f"fast projection: {it} iterations, {seconds / max(it, 1):.1f} s/it; {outcome}; "
              f"peak memory {_peak_gb():.2f} GB")
