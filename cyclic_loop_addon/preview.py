"""A preview strip of frames around the wrap: the forward cache played as a loop above, the loop below.

Drawn with matplotlib from the vertex arrays (no rendering, no bpy), projected on the two axes along
which the simulation extends most.
"""
import numpy as np

from .files import atomic_path


def wrap_indices(n_frames, around=3):
    """Loop frame indices N - around .. N - 1, 0 .. around - 1 (the wrap in the middle)."""
    return np.r_[np.arange(n_frames - around, n_frames), np.arange(around)]


def save_preview(gathered, q, path, around=3):
    """Save the strip as an image (PNG by extension) at ``path``, atomically."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.collections import LineCollection
    from matplotlib.figure import Figure

    rows = (("forward cache", gathered.source), ("loop", np.asarray(q)))
    rows = [(name, x[:, :gathered.n_written]) for name, x in rows]
    both = np.concatenate([x for _, x in rows]).reshape(-1, 3)
    axes = np.sort(np.argsort(np.ptp(both, axis=0))[-2:])
    lo, hi = both[:, axes].min(axis=0), both[:, axes].max(axis=0)
    pad = 0.05 * (hi - lo).max() + 1e-9
    idx = wrap_indices(gathered.n_frames, min(around, gathered.n_frames // 2))
    fig = Figure(figsize=(1.8 * len(idx), 4.0))
    FigureCanvasAgg(fig)
    grid = fig.subplots(2, len(idx), squeeze=False)
    for r, (name, x) in enumerate(rows):
        for c, j in enumerate(idx):
            ax = grid[r, c]
            pts = x[j][:, axes]
            if gathered.edges is not None and gathered.kind == "mesh":
                ax.add_collection(LineCollection(pts[gathered.edges], linewidths=0.6, colors="C0" if r else "C1"))
            else:
                ax.plot(*x[:, :, axes].transpose(2, 0, 1), color="0.85", linewidth=0.5)
                ax.scatter(*pts.T, s=12, color="C0" if r else "C1")
            ax.set_xlim(lo[0] - pad, hi[0] + pad)
            ax.set_ylim(lo[1] - pad, hi[1] + pad)
            ax.set_aspect("equal")
            ax.set_xticks([])
            ax.set_yticks([])
            frame = gathered.frame_start + int(j) * gathered.frame_step
            ax.set_title(f"{frame}" + (" (wrap)" if j == 0 else ""), fontsize=8)
        grid[r, 0].set_ylabel(name, fontsize=9)
    last = gathered.frame_start + (gathered.n_frames - 1) * gathered.frame_step
    fig.suptitle(f"{', '.join(gathered.object_names)}: the period ends at frame {last} and starts again at "
                 f"{gathered.frame_start}; top: the forward cache played as a loop, bottom: the loop", fontsize=9)
    with atomic_path(path, "preview image") as tmp:
        fig.savefig(tmp, dpi=80, format=path.rsplit(".", 1)[-1].lower() if "." in path else "png")
    return path
