"""The seam picture of a gathered loop (seam_picture) as a PNG file, or as the pixels the panel shows."""
import numpy as np

from .images import write_picture
from ..report.seam_picture import seam_picture


def picture(gathered, q, scale=1, compact=False):
    """The seam picture of a gathered loop.

    Parameters
    ----------
    gathered : scene_reader.Gathered
        The gathered simulation: its source cache, written vertices and problem's dt.
    q : array_like, (N, n, 3)
        The loop's frames.
    scale, compact
        As ``seam_picture.seam_picture``.

    Returns
    -------
    numpy.ndarray, (H, W, 3) uint8
        Loop q beside the source cache played as a loop.
    """
    n = gathered.n_written
    return seam_picture(gathered.source[:, :n], np.asarray(q)[:, :n], gathered.problem.dt, scale=scale,
                        compact=compact)


def save_preview(gathered, q, path):
    """Save the seam picture, twice the sidebar's size, as a PNG at ``path``, atomically."""
    return write_picture(path, picture(gathered, q, scale=2), "preview image")
