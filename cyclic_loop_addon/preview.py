"""The seam picture of a gathered loop (solver_core.seam_picture) as a PNG file, or as the pixels the panel
shows."""
import numpy as np

from .files import atomic_path
from .solver import sc


def picture(gathered, q, scale=1, compact=False):
    """The seam picture (H, W, 3) uint8 of loop q beside the source cache played as a loop."""
    n = gathered.n_written
    return sc.seam_picture(gathered.source[:, :n], np.asarray(q)[:, :n], gathered.problem.dt, scale=scale,
                           compact=compact)


def save_preview(gathered, q, path):
    """Save the seam picture, twice the sidebar's size, as a PNG at ``path``, atomically."""
    data = sc.png_bytes(picture(gathered, q, scale=2))
    with atomic_path(path, "preview image") as tmp, open(tmp, "wb") as fh:
        fh.write(data)
    return path
