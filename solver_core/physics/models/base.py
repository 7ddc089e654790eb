"""The force-model interface every physical system implements.

A *force term* maps positions of all frames at once, ``q`` of shape ``(B, n, 3)``, to forces of the
same shape, and supplies the exact Jacobian dF/dq in a sparse pattern that is fixed for the term's
lifetime. Degrees of freedom are flattened as ``3 * vertex + axis``. A pattern may list an entry more
than once; duplicates are summed when the matrix is assembled.

``t`` is the time of each of the B configurations in frames (float, shape ``(B,)``). Terms with
per-frame data (moving colliders, animated wind) hold ``P`` samples and read them periodically, with
linear interpolation, at ``t mod P``; time-independent terms ignore it.

A *velocity term* is a force linear in the velocities with coefficients that depend on positions,
``G(q, v) = C(q) v`` (damping along springs or across hinges); it supplies dG/dq and dG/dv = C(q) on
one fixed pattern.

A *model* is a set of terms acting on bodies with a lumped (diagonal) mass, one value per vertex,
an optional linear drag ``-damping[i] * v_i`` and optional velocity terms.

A term with an ``explicit_step`` > 0 is taken at the step's start by the linearized scheme
(``solver_core.physics.scheme``) on steps up to that many seconds, without its Jacobian in the step, as Blender's
cloth adds its angular springs on its own sub-steps; on longer steps (a loop on the frame grid) that would
be past an explicit step's stability limit, and the scheme linearizes it with the rest.
"""
import numpy as np


class Term:
    """Remembers its constructor arguments so that problems can be saved and rebuilt (solver_core.io)."""

    def __new__(cls, *args, **kwargs):
        obj = super().__new__(cls)
        obj.init_args = (args, kwargs)
        return obj


class ForceTerm(Term):
    """Base class of a force law. Subclasses set ``n_vertices`` and implement the three methods."""

    n_vertices: int
    explicit_step = 0.0   # the longest step the linearized scheme takes it at the step's start (module docstring)
    smooth = True         # continuously differentiable in q (a law that switches at a threshold is not)
    mesh = False          # the elastic forces of a mesh: its vertex couplings are the model's ``mesh_edges``

    def forces(self, q, t):
        """Forces ``(B, n, 3)`` at positions ``q`` ``(B, n, 3)`` and frame times ``t`` ``(B,)``."""
        raise NotImplementedError

    def jacobian_pattern(self):
        """``(rows, cols)`` int64 arrays of the nonzeros of dF/dq in flattened DOF indices."""
        raise NotImplementedError

    def jacobian_values(self, q, t):
        """Values ``(B, nnz)`` of dF/dq at each configuration, in the order of ``jacobian_pattern``."""
        raise NotImplementedError

    def jacobian_dot(self, q, t, s):
        """``dF/dq (q) s`` ``(B, n, 3)`` along ``s`` ``(B, n, 3)``; terms may supply it without the Jacobian."""
        rows, cols = self.jacobian_pattern()
        q = np.asarray(q)
        return pattern_product(rows, cols, self.jacobian_values(q, t), s, 3 * self.n_vertices).reshape(q.shape)

    def forces_and_jacobian_dot(self, q, t, s):
        """``(forces(q, t), jacobian_dot(q, t, s))``; terms whose product computes the forces' geometry anyway
        supply both from one evaluation of it."""
        return self.forces(q, t), self.jacobian_dot(q, t, s)


class VelocityTerm(Term):
    """Base class of a force ``G(q, v) = C(q) v`` linear in the velocities ``v`` ``(B, n, 3)``."""

    n_vertices: int
    explicit_step = 0.0   # the longest step the linearized scheme takes it at the step's start (module docstring)
    smooth = True         # continuously differentiable in q and v (a law that switches at a threshold is not)

    def forces(self, q, v, t):
        """Forces ``(B, n, 3)`` at positions ``q``, velocities ``v`` and frame times ``t``."""
        raise NotImplementedError

    def jacobian_pattern(self):
        """``(rows, cols)`` of the nonzeros of both dG/dq and dG/dv."""
        raise NotImplementedError

    def jacobian_values(self, q, v, t):
        """``(dG/dq, dG/dv)`` values, each ``(B, nnz)`` in the order of ``jacobian_pattern``."""
        raise NotImplementedError


def pattern_product(rows, cols, values, s, n_dof):
    """Batched sparse products ``A_b s_b`` ``(B, n_dof)`` of matrices given by a pattern and values (B, nnz)."""
    b = values.shape[0]
    s = np.asarray(s).reshape(b, n_dof)
    flat_rows = (np.arange(b)[:, None] * n_dof + rows[None, :]).ravel()
    return np.bincount(flat_rows, weights=(values * s[:, cols]).ravel(), minlength=b * n_dof).reshape(b, n_dof)


_FD_RELATIVE = 1e-6


def jacobian_difference(term, q, t, s):
    """Central-difference derivative ``(B, nnz)`` of ``term.jacobian_values`` along ``s`` (B, n, 3)."""
    q, s = np.asarray(q, dtype=float), np.asarray(s, dtype=float)
    size = np.abs(s).max(axis=(1, 2))
    extent = np.ptp(q, axis=1).max(axis=1)
    eps = _FD_RELATIVE * np.maximum(extent, 1e-300) / np.where(size > 0, size, 1.0)
    ds = eps[:, None, None] * s
    diff = term.jacobian_values(q + ds, t) - term.jacobian_values(q - ds, t)
    return np.where(size[:, None] > 0, diff / (2 * eps[:, None]), 0.0)


def _concat_patterns(terms):
    pats = [term.jacobian_pattern() for term in terms]
    if not pats:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return (np.concatenate([np.asarray(p[0], dtype=np.int64) for p in pats]),
            np.concatenate([np.asarray(p[1], dtype=np.int64) for p in pats]))


def sample_periodic(data, t):
    """Linear interpolation of per-frame ``data`` (P, ...) at frame times ``t`` (B,), periodic in P."""
    data = np.asarray(data)
    p = data.shape[0]
    t = np.asarray(t, dtype=float) % p
    i0 = np.floor(t).astype(np.int64) % p
    w = (t - np.floor(t)).reshape((-1,) + (1,) * (data.ndim - 1))
    return (1.0 - w) * data[i0] + w * data[(i0 + 1) % p]


class Model(ForceTerm):
    """Bodies with lumped ``mass`` (n,) under a sum of force ``terms``, optional linear drag ``damping``
    (n,) and ``velocity_terms`` (VelocityTerm).

    ``Model(mass, [term, ...])``; ``model.add(term, ...)`` returns a new model with more terms (force or
    velocity terms).
    """

    def __init__(self, mass, terms=(), damping=None, velocity_terms=()):
        mass = np.asarray(mass, dtype=float)
        if mass.ndim != 1 or mass.size == 0:
            raise ValueError(f"mass must be a non-empty 1-D array of per-vertex masses, got shape {mass.shape}")
        if not np.all(np.isfinite(mass)) or np.any(mass <= 0):
            raise ValueError("every vertex mass must be finite and positive (a vertex has zero or negative mass)")
        self.mass = mass
        self.n_vertices = mass.size
        self.terms = list(terms)
        self.velocity_terms = list(velocity_terms)
        for term in self.terms + self.velocity_terms:
            if term.n_vertices != self.n_vertices:
                raise ValueError(f"{type(term).__name__} acts on {term.n_vertices} vertices, model has {self.n_vertices}")
        if damping is not None:
            damping = np.broadcast_to(np.asarray(damping, dtype=float), mass.shape).copy()
            if np.any(damping < 0) or not np.all(np.isfinite(damping)):
                raise ValueError("damping must be finite and non-negative")
        self.damping = damping
        self._pattern = None
        self._mesh_edges = None
        self._velocity_pattern = None
        self._split = {}

    def add(self, *terms):
        """A new model with the same mass and damping and these extra force or velocity terms."""
        velocity = [t for t in terms if isinstance(t, VelocityTerm)]
        force = [t for t in terms if not isinstance(t, VelocityTerm)]
        return Model(self.mass, self.terms + force, self.damping, self.velocity_terms + velocity)

    def forces(self, q, t):
        q = np.asarray(q)
        total = np.zeros(q.shape, dtype=np.result_type(q, float))
        for term in self.terms:
            total = total + term.forces(q, t)
        return total

    def jacobian_pattern(self):
        if self._pattern is None:
            self._pattern = _concat_patterns(self.terms)
        return self._pattern

    def mesh_edges(self):
        """(E, 2) vertex pairs i < j coupled by the model's mesh terms (``mesh``: FEM membranes, tets); empty
        without a mesh (N bodies, Blender cloth)."""
        if self._mesh_edges is None:
            pairs = [np.stack(term.jacobian_pattern(), axis=1) // 3 for term in self.terms if term.mesh]
            pairs = np.concatenate(pairs) if pairs else np.zeros((0, 2), dtype=np.int64)
            self._mesh_edges = np.unique(pairs[pairs[:, 0] < pairs[:, 1]], axis=0)
        return self._mesh_edges

    @property
    def contact(self):
        """True when a force term is a contact (it has ``touching``)."""
        return any(hasattr(term, "touching") for term in self.terms)

    def touching(self, q, t):
        """Boolean (B, n): the vertices some contact term pushes at positions ``q`` (B, n, 3); None without
        contact terms."""
        terms = [term for term in self.terms if hasattr(term, "touching")]
        if not terms:
            return None
        return np.logical_or.reduce([term.touching(q, t) for term in terms])

    @property
    def drag(self):
        """Per-vertex linear drag coefficients (n,), zeros when the model has none."""
        return np.zeros(self.n_vertices) if self.damping is None else self.damping

    @property
    def smooth(self):
        """True when every force and velocity term is continuously differentiable."""
        return all(term.smooth for term in self.terms + self.velocity_terms)

    @property
    def conservative(self):
        """True when every force term has a potential ``energy(q, t)`` and no velocity term acts."""
        return not self.velocity_terms and all(hasattr(term, "energy") for term in self.terms)

    def energy(self, q, t):
        """Total potential energy (B,) of a conservative model."""
        q = np.asarray(q)
        return sum((term.energy(q, t) for term in self.terms), np.zeros(q.shape[0]))

    def jacobian_values(self, q, t):
        q = np.asarray(q)
        if not self.terms:
            return np.zeros((q.shape[0], 0))
        return np.concatenate([term.jacobian_values(q, t) for term in self.terms], axis=1)

    def stable_jacobian_values(self, q, t):
        """Values ``(B, nnz)`` of a negative semi-definite stand-in for dF/dq, for preconditioners (terms with a
        ``stable_jacobian_values`` method replace the parts that make an implicit step unstable, e.g.
        compressed springs); None if no term has one."""
        if not any(hasattr(term, "stable_jacobian_values") for term in self.terms):
            return None
        q = np.asarray(q)
        return np.concatenate([term.stable_jacobian_values(q, t) if hasattr(term, "stable_jacobian_values")
                               else term.jacobian_values(q, t) for term in self.terms], axis=1)

    def jacobian_dot(self, q, t, s):
        """``dF/dq (q) s`` ``(B, n, 3)``: the force Jacobian at each configuration times ``s`` ``(B, n, 3)``,
        summed over the terms' own products."""
        q = np.asarray(q)
        total = np.zeros(q.shape, dtype=np.result_type(q, s, float))
        for term in self.terms:
            total += term.jacobian_dot(q, t, s)
        return total

    def forces_and_jacobian_dot(self, q, t, s):
        """``(forces(q, t), jacobian_dot(q, t, s))`` summed over the terms' own pairs."""
        q = np.asarray(q)
        forces = np.zeros(q.shape, dtype=np.result_type(q, float))
        product = np.zeros(q.shape, dtype=np.result_type(q, s, float))
        for term in self.terms:
            f, df = term.forces_and_jacobian_dot(q, t, s)
            forces += f
            product += df
        return forces, product

    def jacobian_derivative(self, q, t, s):
        """Values ``(B, nnz)`` of d/de dF/dq(q + e s) at e = 0, the Jacobian's derivative along ``s``.

        Terms with a ``jacobian_derivative`` method supply it (piecewise laws take the branch at q); the
        others by central differences of ``jacobian_values`` with a step of 1e-6 of each configuration's
        extent.
        """
        q = np.asarray(q, dtype=float)
        return np.concatenate([term.jacobian_derivative(q, t, s) if hasattr(term, "jacobian_derivative")
                               else jacobian_difference(term, q, t, s) for term in self.terms]
                              + [np.zeros((q.shape[0], 0))], axis=1)

    def split_explicit(self, h):
        """``(implicit, explicit)`` at step ``h``: models of this mass, without drag, holding the force and
        velocity terms that the linearized scheme linearizes and those it takes at the step's start
        (``h <= explicit_step``); ``(self, None)`` when no term is explicit at ``h``."""
        if h not in self._split:
            groups = (self.terms, self.velocity_terms)
            explicit = [[h <= t.explicit_step * (1 + 1e-9) for t in group] for group in groups]
            if not any(map(any, explicit)):
                self._split[h] = (self, None)
            else:
                parts = [[t for t, e in zip(group, flags) if e == side]
                         for side in (False, True) for group, flags in zip(groups, explicit)]
                self._split[h] = (Model(self.mass, parts[0], None, parts[1]), Model(self.mass, parts[2], None, parts[3]))
        return self._split[h]

    def velocity_forces(self, q, v, t):
        """Sum of the velocity terms' forces ``(B, n, 3)``."""
        q = np.asarray(q)
        total = np.zeros(q.shape)
        for term in self.velocity_terms:
            total = total + term.forces(q, v, t)
        return total

    def velocity_jacobian_pattern(self):
        """``(rows, cols)`` of the velocity terms' dG/dq and dG/dv."""
        if self._velocity_pattern is None:
            self._velocity_pattern = _concat_patterns(self.velocity_terms)
        return self._velocity_pattern

    def velocity_jacobian_values(self, q, v, t):
        """``(dG/dq, dG/dv)`` values ``(B, nnz)`` of the velocity terms."""
        q = np.asarray(q)
        if not self.velocity_terms:
            empty = np.zeros((q.shape[0], 0))
            return empty, empty
        parts = [term.jacobian_values(q, v, t) for term in self.velocity_terms]
        return (np.concatenate([p[0] for p in parts], axis=1), np.concatenate([p[1] for p in parts], axis=1))
