"""Residual forces of the equations of motion around the loop, the loss, and their Jacobian.

Row j of the residual is the scheme's step residual (``solver_core.scheme``: symplectic eq. 14, backward
eq. 13, or linearized) with indices mod n_steps. Pinned vertices' rows are zero: the pin supplies whatever
force it takes.
"""
import numpy as np
import scipy.sparse as sp

from . import scheme

# positions per batch of residual rows: the force models' temporaries are ~80x this (a 2,000-vertex cloth: 87 frames)
_BATCH_COORDINATES = 2 ** 19


def force_steps(prob):
    """(step index of the positions the forces of each residual row j see, their frame times)."""
    k = np.arange(prob.n_steps) + scheme.offsets(prob.scheme)[0]
    return k % prob.n_steps, prob.step_times(k)


def residual_steps(prob, q):
    """Residual forces u (n_steps, n, 3) of a trajectory on the solver grid.

    Rows are evaluated in batches of frames, so the force models' temporaries stay bounded on long loops."""
    q = prob.check_trajectory(q)
    n = prob.n_steps
    batch = max(1, _BATCH_COORDINATES // q[0].size)
    u = np.empty(q.shape)
    for start in range(0, n, batch):
        j = np.arange(start, min(start + batch, n))
        u[j] = scheme.step_rows(prob, q[j - 1], q[j], q[(j + 1) % n], j)
    u[:, prob.pins] = 0.0
    return u


def residual(prob, q):
    """Residual forces u_j (n_steps, n, 3) of ``q`` (n_steps, n, 3); n_steps == n_frames without substeps."""
    return residual_steps(prob, q)


def penalty_terms(prob, q):
    """[(weight_per_vertex (n,), frame index, target)] of the soft initial-condition penalties."""
    terms = []
    scale = prob.model.mass / prob.h ** 3
    if prob.eps0 > 0:
        terms.append((scale / prob.eps0, 0, prob.r0))
    if prob.eps1 > 0:
        terms.append((scale / prob.eps1, 1, prob.r1_step))
    return terms


def loss(prob, q, with_penalty=True):
    """E[q] = sum_j h/2 |u_j|^2_{M^-1} (+ the eq. 15 penalties when eps > 0 and ``with_penalty``)."""
    q = prob.check_trajectory(q)
    u = residual_steps(prob, q)
    value = 0.5 * prob.h * np.sum(u * u / prob.model.mass[:, None])
    if with_penalty:
        for w, j, target in penalty_terms(prob, q):
            value += 0.5 * np.sum(w[:, None] * (q[j] - target) ** 2)
    return float(value)


def inertia_metric(prob):
    """The inertia part of the Gauss–Newton diagonal on the free unknowns, 6 m / h^3 per coordinate:
    Levenberg–Marquardt damping ``lambda * inertia_metric`` is isotropic in the mass norm."""
    free = prob.free_mask()
    return np.broadcast_to((6.0 * prob.model.mass / prob.h ** 3)[None, :, None], free.shape)[free]


class ResidualJacobian:
    """Assembles J = du/dq restricted to free unknowns and non-pinned rows, with a fixed sparsity pattern.

    The pattern and the map from (time-stencil, force-Jacobian) entries to CSR slots are computed once;
    each ``assemble(q)`` only evaluates the force Jacobian for all steps and sums values into slots.
    """

    def __init__(self, prob):
        self.prob = prob
        model, n_steps, n = prob.model, prob.n_steps, prob.n_vertices
        dof = 3 * n
        free = prob.free_mask().reshape(n_steps, dof)
        self.free_flat = np.flatnonzero(free.ravel())
        col_of = np.full(n_steps * dof, -1, dtype=np.int64)
        col_of[self.free_flat] = np.arange(self.free_flat.size)
        row_active = np.broadcast_to(prob.free_vertices()[None, :, None], (n_steps, n, 3))
        self.row_flat = np.flatnonzero(row_active.ravel())
        row_of = np.full(n_steps * dof, -1, dtype=np.int64)
        row_of[self.row_flat] = np.arange(self.row_flat.size)

        j = np.arange(n_steps)[:, None]
        a = np.arange(dof)[None, :]
        self._diagonals = scheme.diagonals(prob)
        rows, cols = [], []
        for o in self._diagonals:
            rows.append(np.broadcast_to(j * dof + a, (n_steps, dof)).ravel())
            cols.append((((j + o) % n_steps) * dof + a).ravel())
        for o, prows, pcols in scheme.derivative_pattern(prob):
            rows.append((j * dof + prows[None, :]).ravel())
            cols.append((((j + o) % n_steps) * dof + pcols[None, :]).ravel())
        rows, cols = np.concatenate(rows), np.concatenate(cols)
        r, c = row_of[rows], col_of[cols]
        self._keep = (r >= 0) & (c >= 0)
        keys = r[self._keep] * self.free_flat.size + c[self._keep]
        uniq, self._slot = np.unique(keys, return_inverse=True)
        self.shape = (self.row_flat.size, self.free_flat.size)
        self._indices = (uniq % self.free_flat.size).astype(np.int32)
        counts = np.bincount(uniq // self.free_flat.size, minlength=self.shape[0])
        self._indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        self._nnz = uniq.size
        self.row_weights = (prob.h / np.repeat(model.mass, 3))[self.row_flat % dof]
        self._stencil = np.concatenate([np.tile(c, n_steps) for c in self._diagonals.values()])

    def assemble(self, q):
        """Sparse CSR J (active rows x free unknowns) at trajectory q (n_steps, n, 3)."""
        prob = self.prob
        parts = scheme.derivative_values(prob, np.roll(q, 1, axis=0), q, np.roll(q, -1, axis=0),
                                         np.arange(prob.n_steps))
        values = np.concatenate([self._stencil] + [p.ravel() for p in parts])[self._keep]
        data = np.bincount(self._slot, weights=values, minlength=self._nnz)
        return sp.csr_matrix((data, self._indices, self._indptr), shape=self.shape)

    def active_rows(self, u):
        """The active entries of a residual array, in row order of J."""
        return np.asarray(u).reshape(-1)[self.row_flat]
