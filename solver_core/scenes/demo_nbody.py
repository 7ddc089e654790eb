"""N-body demo (paper Fig. 6): forward simulation with its jump vs. the physical loop."""
import json
import os

import numpy as np

from ..physics.forward import simulate
from ..loop import make_loop
from ..report import compare, format_table
from .nbody import nbody_problem


def plot_trajectories(path, forward, loop, title):
    """Save the bodies' paths: forward simulation (its wrap jump dashed) beside the loop."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(11, 5.2))
    colors = plt.cm.tab10(np.arange(forward.shape[1]))
    for k, (name, q) in enumerate((("forward simulation (dashed: jump at the wrap)", forward), ("cyclic loop", loop))):
        ax = fig.add_subplot(1, 2, k + 1, projection="3d")
        for b in range(q.shape[1]):
            ax.plot(*q[:, b].T, color=colors[b], lw=1.4)
            ax.plot(*np.stack([q[-1, b], q[0, b]]).T, color=colors[b], lw=1.4, ls="--")
            ax.scatter(*q[0, b], color=colors[b], s=18)
        ax.set_title(name, fontsize=10)
        lim = np.abs(np.concatenate([forward, loop])).max()
        ax.set(xlim=(-lim, lim), ylim=(-lim, lim), zlim=(-lim, lim))
        ax.view_init(elev=35, azim=-60)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_demo(out_dir, n_bodies=5, seed=1):
    """Make the N-body loop, print forward / crossfade / initial guess / loop metrics, save plot + JSON."""
    os.makedirs(out_dir, exist_ok=True)
    prob = nbody_problem(n_bodies, seed=seed, perturbation=0.02)
    res = make_loop(prob)
    rows = compare(prob, res)
    print(f"{n_bodies}-body loop, {prob.n_frames} frames, dt {prob.dt}: init {res.init_used}"
          f"{' (' + res.fallback_reason + ')' if res.fallback_reason else ''}, "
          f"{res.fast_projection_iterations} fast-projection + {res.gauss_newton_iterations} Gauss-Newton "
          f"iterations, {res.seconds:.2f} s")
    print(res.message)
    print(format_table(rows))
    png = os.path.join(out_dir, "nbody_loop.png")
    plot_trajectories(png, simulate(prob), res.q, f"{n_bodies} bodies, {prob.n_frames} frames")
    with open(os.path.join(out_dir, "nbody_report.json"), "w") as f:
        json.dump(dict(init_used=res.init_used, seconds=res.seconds, status=res.status, message=res.message,
                       metrics=rows), f, indent=2)
    print(f"plot: {png}")
    return rows
