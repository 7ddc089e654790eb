"""Gauss–Newton on a Blender cloth problem with the structured solve against CHOLMOD, in one process.

    python -m benchmarks structured_blender PROBLEM.npz [--frames N] [--iterations K] [--no-cholmod]

PROBLEM.npz from ``sample_scenes/flag_in_wind.py``; ``--frames`` keeps the problem's first N frames (its model,
step and pins). Both start from the crossfade of the problem's forward simulation. Prints, per backend, the
loss after each iteration, seconds, PCG iterations, and the structured solve's time to CHOLMOD's final loss.
"""
import argparse
import resource
import time

import solver_core as sc
from solver_core.optimize.gauss_newton import GaussNewton


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks structured_blender", description=__doc__.splitlines()[0])
    p.add_argument("problem")
    p.add_argument("--frames", type=int, default=None)
    p.add_argument("--iterations", type=int, default=4)
    p.add_argument("--no-cholmod", action="store_true")
    args = p.parse_args(argv)
    full = sc.load_problem(args.problem)
    n_frames = args.frames or full.n_frames
    prob = sc.LoopProblem(full.model, n_frames, full.dt, full.r0, full.r1, scheme=full.scheme, pins=full.pins,
                          substeps=full.substeps)
    q0 = prob.apply_constraints(sc.crossfade_loop(sc.simulate(prob)))
    print(f"{prob.n_vertices} vertices, {n_frames} frames x {prob.substeps} substeps, "
          f"{int(prob.free_mask().sum())} unknowns, start loss {sc.loss(prob, q0):.5g}")
    runs = {}
    for backend in ("structured",) if args.no_cholmod else ("cholmod", "structured"):
        gn = GaussNewton(prob, backend=backend)
        t0 = time.perf_counter()
        gn.run(q0, max_iters=args.iterations, tol=1e-12)
        runs[backend] = gn
        cg = getattr(gn.backend, "cg_iterations", None)
        print(f"{backend}: {time.perf_counter() - t0:.1f} s, loss "
              + " ".join(f"{h['loss']:.4g}" for h in gn.history) + (f", PCG iterations {cg}" if cg else "")
              + f", backends {sorted({h.get('backend', '') for h in gn.history[1:]})}, peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    if "cholmod" in runs:
        target = runs["cholmod"].history[-1]
        reached = [h for h in runs["structured"].history if h["loss"] <= target["loss"] * 1.001]
        when = f"{reached[0]['seconds']:.1f} s" if reached else "not reached"
        print(f"CHOLMOD's loss {target['loss']:.5g} in {target['seconds']:.1f} s; structured: {when}")
