"""N-body benchmark: 3 and 5 bodies, 200 frames, dt 0.01."""
import time

from ..fast_projection import FastProjectionDiverged, fast_projection
from ..forward import simulate
from ..gauss_newton import GaussNewton
from ..residual import loss
from .nbody import nbody_problem


def run_benchmark(cases=((3, 1), (5, 1)), repeats=3):
    """Print per case: fast projection and Gauss–Newton iterations and seconds, loss before and after.

    Each case is timed ``repeats`` times in this process and the fastest run is reported."""
    print(f"{'case':>10} {'FP it':>6} {'FP s':>7} {'GN it':>6} {'GN s':>7} {'total s':>8} "
          f"{'forward loss':>13} {'init loss':>11} {'final loss':>11} {'reduction':>10}")
    for n_bodies, seed in cases:
        prob = nbody_problem(n_bodies, seed=seed, perturbation=0.02)
        best = None
        for _ in range(repeats):
            t0 = time.perf_counter()
            try:
                q0, info = fast_projection(prob)
                fp_iters = info["iterations"]
            except FastProjectionDiverged:
                q0, fp_iters = simulate(prob), -1
            t1 = time.perf_counter()
            gn = GaussNewton(prob)
            q = gn.run(q0)
            t2 = time.perf_counter()
            run = (t2 - t0, t1 - t0, t2 - t1, fp_iters, len(gn.history) - 1, loss(prob, q0), loss(prob, q))
            best = run if best is None or run[0] < best[0] else best
        total, fp_s, gn_s, fp_it, gn_it, l0, l1 = best
        lf = loss(prob, simulate(prob))
        print(f"{n_bodies:>4}-body s{seed} {fp_it:>6} {fp_s:>7.3f} {gn_it:>6} {gn_s:>7.3f} {total:>8.3f} "
              f"{lf:>13.4g} {l0:>11.4g} {l1:>11.4g} {lf / l1:>10.3g}")
