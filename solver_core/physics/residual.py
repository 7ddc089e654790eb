"""Residual forces of the equations of motion around the loop, the loss, and their Jacobian.

Row j of the residual is the scheme's step residual (``solver_core.physics.scheme``: symplectic eq. 14, backward
eq. 13, or linearized) with indices mod n_steps. Pinned vertices' rows are zero: the pin supplies whatever
force it takes.
"""
import numpy as np
import scipy.sparse as sp

from . import scheme
from ..options import DEFAULTS

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
    """Residual forces of the equations of motion around the loop ``q``.

    Parameters
    ----------
    prob : LoopProblem
        The problem (model, time step, scheme, pins).
    q : ndarray, shape (n_steps, n, 3)
        A trajectory on the solver grid (n_steps == n_frames without substeps), played cyclically.

    Returns
    -------
    ndarray, shape (n_steps, n, 3)
        u_j, the force beyond physics in each step's equation of motion (zero on pinned vertices).
    """
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


def loss(prob, q, with_penalty=True, u=None):
    """The loop loss E[q] = sum_j h/2 |u_j|^2_{M^-1}, with the eq. 15 penalties of soft initial conditions.

    Parameters
    ----------
    prob : LoopProblem
        The problem.
    q : ndarray, shape (n_steps, n, 3)
        A trajectory on the solver grid.
    with_penalty : bool, optional
        Add the soft initial conditions' penalties (when the problem's eps0 / eps1 > 0).
    u : ndarray, optional
        q's residual ``residual_steps(prob, q)`` when the caller has it.

    Returns
    -------
    float
        The loss.
    """
    q = prob.check_trajectory(q)
    u = residual_steps(prob, q) if u is None else u
    value = 0.5 * prob.h * np.sum(u * u / prob.model.mass[:, None])
    if with_penalty:
        for w, j, target in penalty_terms(prob, q):
            value += 0.5 * np.sum(w[:, None] * (q[j] - target) ** 2)
    return float(value)


def block_gram(a):
    """a^T a (CSR) of a sparse matrix whose rows and columns come in 3 x 3 blocks (a vertex's coordinates), multiplied
    as BSR: the same matrix in about half the time of a CSR product."""
    a = a.tobsr(blocksize=(3, 3))
    return (a.T @ a).tocsr()


def inertia_metric(prob):
    """The inertia part of the Gauss–Newton diagonal on the free unknowns, 6 m / h^3 per coordinate:
    Levenberg–Marquardt damping ``lambda * inertia_metric`` is isotropic in the mass norm."""
    free = prob.free_mask()
    return np.broadcast_to((6.0 * prob.model.mass / prob.h ** 3)[None, :, None], free.shape)[free]


def damping_metric(prob, q=None, smoothing=None):
    """Levenberg–Marquardt's metric D (CSC) on the free unknowns: the inertia diagonal (``inertia_metric``) plus
    ``smoothing`` (None: ``DEFAULTS.gauss_newton.smoothing``) times the graph Laplacian of the model's mesh
    (``Model.mesh_edges``) in every step and coordinate, an edge weighing 6 m / h^3 with m the mean of its ends'
    masses; an edge to a fixed vertex (a pin) adds its free end's diagonal only. The Laplacian damps rough steps
    (single vertices out of a membrane's plane) more than smooth ones (docs/design/tuning.md: smoothing). At a
    trajectory ``q`` an edge is left out in the steps where one of its ends touches a collider
    (``Model.touching``): a contact moves single vertices, and damping their rough steps more makes contact crawl
    longer; their entries stay, zero, so D's pattern does not change with q. Without a mesh (N bodies) D is the
    inertia diagonal."""
    smoothing = DEFAULTS.gauss_newton.smoothing if smoothing is None else smoothing
    free = prob.free_mask()
    n_free = int(free.sum())
    column = np.full(free.shape, -1, dtype=np.int64)
    column[free] = np.arange(n_free)
    diagonal = inertia_metric(prob)
    edges = prob.model.mesh_edges()
    if smoothing == 0 or len(edges) == 0:
        return sp.diags(diagonal, format="csc")
    mass = prob.model.mass
    weight = smoothing * 3.0 * (mass[edges[:, 0]] + mass[edges[:, 1]]) / prob.h ** 3
    a, b = column[:, edges[:, 0]], column[:, edges[:, 1]]        # (n_steps, E, 3)
    w = np.broadcast_to(weight[None, :, None], a.shape)
    touching = None if q is None else prob.model.touching(q, prob.step_times(np.arange(prob.n_steps)))
    if touching is not None:
        apart = ~(touching[:, edges[:, 0]] | touching[:, edges[:, 1]])
        w = w * apart[:, :, None]
    both = (a >= 0) & (b >= 0)
    rows = np.concatenate([a[a >= 0], b[b >= 0], a[both], b[both], np.arange(n_free)])
    cols = np.concatenate([a[a >= 0], b[b >= 0], b[both], a[both], np.arange(n_free)])
    values = np.concatenate([w[a >= 0], w[b >= 0], -w[both], -w[both], diagonal])
    metric = sp.csc_matrix((values, (rows, cols)), shape=(n_free, n_free))
    metric.sum_duplicates()
    return metric


class ResidualJacobian:
    """Assembles J = du/dq restricted to free unknowns and non-pinned rows, with a fixed sparsity pattern.

    Computed once: per time offset o, the distinct spatial entries of du_j/dq_{j+o} (the inertia and drag
    diagonal and the model's parts, whose patterns repeat entries) with a sparse 0/1 matrix summing each
    part's values onto them, and the CSR slot of every (step, offset, entry). Each ``assemble(q)``
    evaluates the force Jacobians of all steps, sums them per offset (one sparse product per pattern) and
    scatters the sums into J's slots.
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

        self._diagonals = scheme.diagonals(prob)
        self._parts = scheme.derivative_pattern(prob)   # at offsets among the diagonals' (-1, 0, 1)
        diagonal = np.arange(dof) * (dof + 1)
        self._entries = {o: np.unique(np.concatenate([diagonal] + [r * dof + c for p, r, c in self._parts if p == o]))
                         for o in self._diagonals}
        self._diagonal_slots = {o: np.searchsorted(keys, diagonal) for o, keys in self._entries.items()}
        # parts at one offset on one pattern (a velocity term's dG/dq and dG/dv at the same offset, force and
        # velocity terms on the same springs and hinges) are added before one product sums them onto the entries
        # per offset: [(part indices, 0/1 matrix (entries x pattern nonzeros))]
        self._groups = {o: [] for o in self._diagonals}
        for o, groups in self._groups.items():
            for group in scheme.pattern_groups(self._parts, [i for i, part in enumerate(self._parts) if part[0] == o]):
                _, r, c = self._parts[group[0]]
                slots = np.searchsorted(self._entries[o], r * dof + c)
                groups.append((group, sp.csr_matrix((np.ones(r.size), (slots, np.arange(r.size))),
                                                    shape=(self._entries[o].size, r.size))))
        j = np.arange(n_steps)[:, None]
        rows = np.concatenate([(j * dof + k // dof).ravel() for k in self._entries.values()])
        cols = np.concatenate([(((j + o) % n_steps) * dof + k % dof).ravel() for o, k in self._entries.items()])
        r, c = row_of[rows], col_of[cols]
        keep = (r >= 0) & (c >= 0)
        self.shape = (self.row_flat.size, self.free_flat.size)
        uniq, slot = np.unique(r[keep] * self.shape[1] + c[keep], return_inverse=True)
        self._nnz = uniq.size
        self._slot = np.full(keep.size, self._nnz, dtype=np.int64)   # dropped entries go to one extra slot
        self._slot[keep] = slot
        self._indices = (uniq % self.shape[1]).astype(np.int32)
        counts = np.bincount(uniq // self.shape[1], minlength=self.shape[0])
        self._indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        self.row_weights = (prob.h / np.repeat(model.mass, 3))[self.row_flat % dof]
        self._entry_roots = np.sqrt(self.row_weights)[np.repeat(np.arange(self.shape[0]), counts)]

    def assemble(self, q):
        """Sparse CSR J (active rows x free unknowns) at trajectory q (n_steps, n, 3)."""
        prob = self.prob
        values = scheme.derivative_values(prob, np.roll(q, 1, axis=0), q, np.roll(q, -1, axis=0),
                                          np.arange(prob.n_steps))
        summed = {o: np.zeros((prob.n_steps, keys.size)) for o, keys in self._entries.items()}
        for o, groups in self._groups.items():
            scheme.sum_parts(values, groups, summed[o])
        for o, coefficients in self._diagonals.items():
            summed[o][:, self._diagonal_slots[o]] += coefficients
        flat = np.concatenate([part.ravel() for part in summed.values()])
        data = np.bincount(self._slot, weights=flat, minlength=self._nnz + 1)[:self._nnz]
        return sp.csr_matrix((data, self._indices, self._indptr), shape=self.shape)

    def normal_matrix(self, J):
        """J^T diag(row_weights) J (CSC, sorted indices) of an assembled J, multiplied in 3 x 3 blocks (a vertex's
        coordinates are free or fixed together)."""
        H = block_gram(sp.csr_matrix((J.data * self._entry_roots, J.indices, J.indptr), shape=J.shape))
        H.sort_indices()
        return sp.csc_matrix((H.data, H.indices, H.indptr), shape=H.shape)  # symmetric: its CSR arrays are its CSC's

    def active_rows(self, u):
        """The active entries of a residual array, in row order of J."""
        return np.asarray(u).reshape(-1)[self.row_flat]
