"""The force-model interface every physical system implements.

A *force term* maps positions of all frames at once, ``q`` of shape ``(B, n, 3)``, to forces of the
same shape, and supplies the exact Jacobian dF/dq in a sparse pattern that is fixed for the term's
lifetime. Degrees of freedom are flattened as ``3 * vertex + axis``. A pattern may list an entry more
than once; duplicates are summed when the matrix is assembled.

``t`` is the time of each of the B configurations in frames (float, shape ``(B,)``). Terms with
per-frame data (moving colliders, animated wind) hold ``P`` samples and read them periodically, with
linear interpolation, at ``t mod P``; time-independent terms ignore it.

A *model* is a set of terms acting on bodies with a lumped (diagonal) mass, one value per vertex,
and an optional linear drag ``-damping[i] * v_i``.
"""
import numpy as np


class ForceTerm:
    """Base class of a force law. Subclasses set ``n_vertices`` and implement the three methods."""

    n_vertices: int

    def __new__(cls, *args, **kwargs):
        # Remember the constructor arguments so that problems can be saved and rebuilt (solver_core.io).
        obj = super().__new__(cls)
        obj.init_args = (args, kwargs)
        return obj

    def forces(self, q, t):
        """Forces ``(B, n, 3)`` at positions ``q`` ``(B, n, 3)`` and frame times ``t`` ``(B,)``."""
        raise NotImplementedError

    def jacobian_pattern(self):
        """``(rows, cols)`` int64 arrays of the nonzeros of dF/dq in flattened DOF indices."""
        raise NotImplementedError

    def jacobian_values(self, q, t):
        """Values ``(B, nnz)`` of dF/dq at each configuration, in the order of ``jacobian_pattern``."""
        raise NotImplementedError


def sample_periodic(data, t):
    """Linear interpolation of per-frame ``data`` (P, ...) at frame times ``t`` (B,), periodic in P."""
    data = np.asarray(data)
    p = data.shape[0]
    t = np.asarray(t, dtype=float) % p
    i0 = np.floor(t).astype(np.int64) % p
    w = (t - np.floor(t)).reshape((-1,) + (1,) * (data.ndim - 1))
    return (1.0 - w) * data[i0] + w * data[(i0 + 1) % p]


class Model(ForceTerm):
    """Bodies with lumped ``mass`` (n,) under a sum of force ``terms`` and optional linear drag.

    ``Model(mass, [term, ...])``; ``model.add(term, ...)`` returns a new model with more terms.
    """

    def __init__(self, mass, terms=(), damping=None):
        mass = np.asarray(mass, dtype=float)
        if mass.ndim != 1 or mass.size == 0:
            raise ValueError(f"mass must be a non-empty 1-D array of per-vertex masses, got shape {mass.shape}")
        if not np.all(np.isfinite(mass)) or np.any(mass <= 0):
            raise ValueError("every vertex mass must be finite and positive (a vertex has zero or negative mass)")
        self.mass = mass
        self.n_vertices = mass.size
        self.terms = list(terms)
        for term in self.terms:
            if term.n_vertices != self.n_vertices:
                raise ValueError(f"{type(term).__name__} acts on {term.n_vertices} vertices, model has {self.n_vertices}")
        if damping is not None:
            damping = np.broadcast_to(np.asarray(damping, dtype=float), mass.shape).copy()
            if np.any(damping < 0) or not np.all(np.isfinite(damping)):
                raise ValueError("damping must be finite and non-negative")
        self.damping = damping
        self._pattern = None

    def add(self, *terms):
        """A new model with the same mass and damping and these extra force terms."""
        return Model(self.mass, self.terms + list(terms), self.damping)

    def forces(self, q, t):
        q = np.asarray(q)
        total = np.zeros(q.shape, dtype=np.result_type(q, float))
        for term in self.terms:
            total = total + term.forces(q, t)
        return total

    def jacobian_pattern(self):
        if self._pattern is None:
            pats = [term.jacobian_pattern() for term in self.terms]
            rows = np.concatenate([np.asarray(p[0], dtype=np.int64) for p in pats]) if pats else np.zeros(0, np.int64)
            cols = np.concatenate([np.asarray(p[1], dtype=np.int64) for p in pats]) if pats else np.zeros(0, np.int64)
            self._pattern = (rows, cols)
        return self._pattern

    @property
    def conservative(self):
        """True when every term has a potential ``energy(q, t)`` (its forces are minus its gradient)."""
        return all(hasattr(term, "energy") for term in self.terms)

    def energy(self, q, t):
        """Total potential energy (B,) of a conservative model."""
        q = np.asarray(q)
        return sum((term.energy(q, t) for term in self.terms), np.zeros(q.shape[0]))

    def jacobian_values(self, q, t):
        q = np.asarray(q)
        if not self.terms:
            return np.zeros((q.shape[0], 0))
        return np.concatenate([term.jacobian_values(q, t) for term in self.terms], axis=1)
