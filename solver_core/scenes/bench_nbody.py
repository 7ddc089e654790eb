"""N-body benchmark: make_loop's defaults on 3-, 4- and 5-body loops of 200 frames, dt 0.01, over many seeds."""
import time

from ..forward import simulate
from ..loop import make_loop
from ..residual import loss
from .nbody import nbody_problem


def run_benchmark(bodies=(3, 4, 5), seeds=range(1, 21), repeats=1):
    """Print per case: initial guess used, fast-projection and Gauss–Newton iterations, seconds (fastest of
    ``repeats`` runs in this process), the time of one forward simulation, loss before and after, status;
    then the median and the slowest case."""
    print(f"{'case':>10} {'init':>16} {'FP it':>6} {'GN it':>6} {'total s':>8} {'fwd s':>7} "
          f"{'forward loss':>13} {'final loss':>11} {'vel ratio':>10}  status")
    rows = []
    for n_bodies in bodies:
        for seed in seeds:
            prob = nbody_problem(n_bodies, seed=seed, perturbation=0.02)
            t0 = time.perf_counter()
            clip = simulate(prob)
            forward_s = time.perf_counter() - t0
            best = None
            for _ in range(repeats):
                t0 = time.perf_counter()
                res = make_loop(prob)
                seconds = time.perf_counter() - t0
                best = (seconds, res) if best is None or seconds < best[0] else best
            seconds, res = best
            rows.append((seconds, f"{n_bodies}-body s{seed}"))
            print(f"{rows[-1][1]:>10} {res.init_used:>16} {res.fast_projection_iterations:>6} "
                  f"{res.gauss_newton_iterations:>6} {seconds:>8.3f} {forward_s:>7.3f} {loss(prob, clip):>13.4g} "
                  f"{res.final_loss:>11.4g} {res.metrics['loop']['velocity_jump_ratio']:>10.3g}  {res.status}",
                  flush=True)
    rows.sort()
    print(f"{len(rows)} cases: median {rows[len(rows) // 2][0]:.3f} s, slowest {rows[-1][0]:.3f} s ({rows[-1][1]})")
