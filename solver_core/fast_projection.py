"""Initial guess by fast projection onto the cyclic constraint (paper Algorithm 2)."""
import time

import numpy as np

from .forward import SimulationFailed, mismatch, mismatch_gradient, simulate


class FastProjectionDiverged(RuntimeError):
    """Fast projection failed (Remark 2): the control force it needs is too large."""


def fast_projection(prob, max_iters=100, rtol=1e-6, callback=None, grow_limit=1e3, stall_window=10,
                    accept=1e-2):
    """Control forces u that make the forward simulation close the loop, by fast projection.

    Starting from u = 0, repeat u <- u - G / |grad G|^2 * grad G (eq. 29-30; grad G by the adjoint
    method) until G <= ``rtol`` G(0), or until G has not halved over ``stall_window`` iterations (the
    scalar projection stalls close to the constraint, where grad G vanishes with G). Returns
    ``(q, info)`` for the best iterate: the loop q (n_steps, n, 3) simulated with its controls, and a
    dict with iterations, G history, seconds, controls, converged, cancelled.

    Raises FastProjectionDiverged (Remark 2) when the simulation fails, G grows ``grow_limit``-fold
    over its best value, or the best G is still above ``accept`` G(0) when it stops.
    ``callback(info)`` returning True cancels and returns the best iterate.
    """
    L = prob.n_steps
    controls = np.zeros((L + 1, prob.n_vertices, 3))
    history = []
    t0 = time.perf_counter()
    best = None
    cancelled = False
    for it in range(max_iters + 1):
        try:
            q, factors = simulate(prob, L + 2, controls, keep_factors=True)
        except SimulationFailed as exc:
            raise FastProjectionDiverged(f"fast projection diverged at iteration {it}: {exc}") from exc
        G = mismatch(prob, q)
        history.append(G)
        if not np.isfinite(G):
            raise FastProjectionDiverged(f"fast projection diverged at iteration {it}: G is not finite")
        if best is None or G < best[0]:
            best = (G, q[:L], controls.copy())
        if G > grow_limit * best[0]:
            raise FastProjectionDiverged(
                f"fast projection diverged at iteration {it}: G grew from {best[0]:.3e} to {G:.3e}")
        if callback is not None and it > 0 and callback(dict(phase="fast_projection", iteration=it, loss=G)):
            cancelled = True
            break
        stalled = it >= stall_window and best[0] > 0.5 * min(history[: it - stall_window + 1])
        if G <= rtol * history[0] or stalled or it == max_iters:
            break
        grad = mismatch_gradient(prob, q, factors)
        gnorm2 = float(np.sum(grad * grad))
        if gnorm2 == 0.0 or not np.isfinite(gnorm2):
            raise FastProjectionDiverged(f"fast projection stalled at iteration {it}: zero or non-finite gradient")
        controls -= (G / gnorm2) * grad
    g0, g_best = history[0], best[0]
    if not cancelled and g_best > accept * g0:
        raise FastProjectionDiverged(
            f"fast projection did not close the loop: G went from {g0:.3e} only to {g_best:.3e} "
            f"in {len(history) - 1} iterations")
    info = dict(iterations=len(history) - 1, G=history, seconds=time.perf_counter() - t0, controls=best[2],
                converged=g_best <= rtol * g0, cancelled=cancelled, final_G=g_best)
    return best[1], info
