"""Speed: Gauss–Newton steps with plain CHOLMOD against the structured (sweep-preconditioned PCG) solve.

    python -m benchmarks speed [--steps K] [--no-scaling] [--no-big] [--big-only]

Runs, in one process, the same Gauss–Newton solve with both backends on problems the size of the paper's
flag post, swinging cloth and bouncing doughnut (``solver_core.scenes.speed_problems``): CHOLMOD for
``--steps`` steps, the structured solve until it reaches CHOLMOD's final loss (inexact steps may need more
of them), and prints seconds per step and in total; then a scaling table of the structured solve on cloth
from 100 to 2,000 vertices and 100 to 1,000 frames.
"""
import argparse
import gc
import resource
import threading
import time

import numpy as np

from solver_core.physics.forward import simulate
from solver_core.optimize.gauss_newton import GaussNewton
from solver_core.scenes.speed_problems import PROBLEMS, swing_problem


class PeakMemory:
    """Peak resident memory (GB) of this process while the ``with`` block runs, sampled every 20 ms."""

    def __enter__(self):
        self.peak, self._stop = _rss_gb(), threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, _rss_gb())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_gb())


def _rss_gb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2 ** 30


def timed_solve(prob, q0, backend, iters, target=None):
    """Gauss–Newton from q0 for at most ``iters`` steps, stopping early once the loss is <= ``target``.

    Returns a dict: per_step (s), steps, seconds (total), loss (final), peak (GB), cg (PCG iterations
    per solve or None) and losses (per step)."""
    gc.collect()
    with PeakMemory() as mem:
        gn = GaussNewton(prob, backend=backend)
        t0 = time.perf_counter()
        gn.run(q0, max_iters=iters, tol=1e-10, callback=None if target is None else lambda i: i["loss"] <= target)
        seconds = time.perf_counter() - t0
    steps = len(gn.history) - 1
    return dict(per_step=seconds / max(steps, 1), steps=steps, seconds=seconds, loss=gn.history[-1]["loss"],
                peak=mem.peak, cg=getattr(gn.backend, "cg_iterations", None),
                losses=[h["loss"] for h in gn.history])


def compare_scenes(iters, names=tuple(PROBLEMS), slack=4):
    """CHOLMOD Gauss–Newton for ``iters`` steps from the forward simulation, then the structured solve
    until it reaches CHOLMOD's final loss (+1%), at most ``slack * iters`` steps: per step and in total."""
    print(f"{'scene':>15} {'verts':>5} {'frames':>6} {'unknowns':>8} | {'backend':>10} {'s/step':>7} {'steps':>5} "
          f"{'total s':>8} {'final loss':>11} {'peak GB':>7} | PCG its per solve")
    for name in names:
        prob = PROBLEMS[name]()
        q0 = prob.apply_constraints(simulate(prob))
        head = f"{name:>15} {prob.n_vertices:>5} {prob.n_steps:>6} {int(prob.free_mask().sum()):>8} | "
        runs = {"cholmod": timed_solve(prob, q0, "cholmod", iters)}
        runs["structured"] = timed_solve(prob, q0, "structured", slack * iters, 1.01 * runs["cholmod"]["loss"])
        for backend, r in runs.items():
            print(head + f"{backend:>10} {r['per_step']:>7.2f} {r['steps']:>5} {r['seconds']:>8.1f} {r['loss']:>11.5g} "
                  f"{r['peak']:>7.2f} | {'' if r['cg'] is None else ','.join(map(str, r['cg']))}", flush=True)
        c, s = runs["cholmod"], runs["structured"]
        same = s["losses"][min(iters, s["steps"])]
        print(f"{name:>15}  per step {c['per_step'] / s['per_step']:.1f}x faster, to CHOLMOD's loss "
              f"{c['seconds'] / s['seconds']:.1f}x faster; final loss structured vs CHOLMOD "
              f"{100 * (s['loss'] / c['loss'] - 1):+.2f}% (after {min(iters, s['steps'])} steps "
              f"{100 * (same / c['loss'] - 1):+.2f}%)", flush=True)


def scaling_table(sizes, frames, iters, cholmod_limit):
    """Seconds per step and peak memory of the structured solve (CHOLMOD up to ``cholmod_limit`` unknowns)."""
    print(f"{'verts':>6} {'frames':>6} {'unknowns':>9} | {'structured s/step':>17} {'us/(vert*frame)':>15} "
          f"{'peak GB':>7} {'PCG its':>10} | {'CHOLMOD s/step':>14} {'peak GB':>7}")
    for nx, ny in sizes:
        for n_frames in frames:
            prob = swing_problem(nx=nx, ny=ny, n_frames=n_frames)
            q0 = prob.apply_constraints(np.broadcast_to(prob.r0, (prob.n_steps,) + prob.r0.shape))
            unknowns = int(prob.free_mask().sum())
            r = timed_solve(prob, q0, "structured", iters)
            line = (f"{nx * ny:>6} {n_frames:>6} {unknowns:>9} | {r['per_step']:>17.2f} "
                    f"{1e6 * r['per_step'] / (nx * ny * n_frames):>15.1f} {r['peak']:>7.2f} "
                    f"{','.join(map(str, r['cg'])):>10} | ")
            if unknowns <= cholmod_limit:
                c = timed_solve(prob, q0, "cholmod", iters)
                line += f"{c['per_step']:>14.2f} {c['peak']:>7.2f}"
            else:
                line += f"{'-':>14} {'-':>7}"
            print(line, flush=True)
            del prob, q0
            gc.collect()


def run_benchmark(iters=4, scenes=None, scaling=True, big=True, big_only=False):
    """Scene comparison (``scenes``: names from PROBLEMS, default all, [] for none), then the scaling
    table (cloth grids 10x10 .. 50x40 vertices, 100 .. 1000 frames; 2000 x 1000 alone and last when
    ``big``); ``big_only``: just the 2000 x 1000 row, ``iters`` steps."""
    def big_case(steps):
        scaling_table([(50, 40)], [1000], steps, cholmod_limit=0)

    if big_only:
        big_case(iters)
        return
    compare_scenes(iters, tuple(PROBLEMS) if scenes is None else scenes)
    if scaling:
        print()
        scaling_table([(10, 10), (25, 20), (50, 40)], [100, 300], 2, cholmod_limit=60_000)
        scaling_table([(10, 10), (25, 20)], [1000], 2, cholmod_limit=0)
        if big:
            big_case(2)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks speed", description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=4,
                   help="Gauss-Newton steps per solve (with --big-only: steps of the big case)")
    p.add_argument("--scenes", nargs="*", choices=list(PROBLEMS), help="scenes to compare (default all)")
    p.add_argument("--no-scaling", action="store_true", help="skip the scaling table")
    p.add_argument("--no-big", action="store_true", help="skip the 2000-vertex x 1000-frame case")
    p.add_argument("--big-only", action="store_true", help="only the 2000-vertex x 1000-frame case")
    args = p.parse_args(argv)
    run_benchmark(args.steps, args.scenes, scaling=not args.no_scaling, big=not args.no_big, big_only=args.big_only)
