"""The vertices a seam picture tracks: the ones that move the most (numpy only). The add-on's seam picture
and the benchmarks' matplotlib seam plot (benchmarks/seam_plot.py) both pick their vertices here."""
import numpy as np


def tracked_vertices(q, count=3):
    """Indices of the ``count`` vertices that move the most over a trajectory.

    Parameters
    ----------
    q : array_like, shape (L, n, 3)
        Positions per frame.
    count : int
        How many vertices to return.

    Returns
    -------
    numpy.ndarray of int
        Vertex indices, the largest spread (per-vertex standard deviation over the frames) first.
    """
    spread = np.linalg.norm(np.asarray(q).std(axis=0), axis=1)
    return np.argsort(spread)[::-1][:count]
