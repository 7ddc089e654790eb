"""A plot of the seam for the benchmarks' figures: tracked vertices over two periods of each loop, the wrap
marked (matplotlib, no bpy)."""
import numpy as np

from solver_core.metrics import seam_statistics
from solver_core.metrics import tracked_vertices

__all__ = ["save_seam_plot", "tracked_vertices"]


def save_seam_plot(path, loops, dt, title="", vertices=None, axis=2):
    """Save a PNG with one column per loop (``loops``: label -> (L, n, 3), played twice) and two rows:
    the tracked vertices' coordinate ``axis`` (default height) and their speed, the wraps dotted.
    Each column's title gives the wrap's velocity-jump ratio against the median frame boundary.
    Returns the tracked vertex indices."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first = np.asarray(next(iter(loops.values())))
    vertices = tracked_vertices(first) if vertices is None else np.asarray(vertices)
    # heights share a scale; speeds do not (a raw clip's wrap spike would flatten the others)
    fig, axes = plt.subplots(2, len(loops), figsize=(4.2 * len(loops), 5.6), sharex=True, squeeze=False)
    for ax in axes[0, 1:]:
        ax.sharey(axes[0, 0])
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for col, (label, q) in enumerate(loops.items()):
        q = np.asarray(q, dtype=float)
        L = q.shape[0]
        twice = np.concatenate([q, q, q[:1]])[:, vertices]           # two periods and the first frame again
        t = np.arange(2 * L + 1) * dt
        speed = np.linalg.norm(np.diff(twice, axis=0), axis=-1) / dt
        _, vel = seam_statistics(q, dt)
        ratio = vel[0] / max(np.median(vel), 1e-300)
        for k, v in enumerate(vertices):
            c = colors[k % len(colors)]
            axes[0, col].plot(t, twice[:, k, axis], color=c, lw=1.2, label=f"vertex {v}")
            axes[1, col].plot(0.5 * (t[1:] + t[:-1]), speed[:, k], color=c, lw=1.2)
        for row in axes[:, col]:
            for wrap in (L * dt, 2 * L * dt):
                row.axvline(wrap, color="gray", ls=":", lw=1)
        axes[0, col].set_title(f"{label}\nwrap velocity jump {ratio:.2g}x the median", fontsize=10)
        axes[1, col].set_xlabel("time (s), two periods; dotted: the wrap")
    axes[0, 0].set_ylabel("xyz"[axis] + " (m)")
    axes[1, 0].set_ylabel("speed (m/s)")
    axes[0, 0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return vertices
