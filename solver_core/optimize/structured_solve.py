"""Structured Gauss–Newton solve: matrix-free J^T B J products, a time-sweep preconditioner, inexact PCG.

The Gauss–Newton matrix of the loop is H = J^T B J (+ the soft-constraint diagonal). Row j of J is
A_{+1}(j) q_{j+1} + A_0(j) q_j + A_{-1}(j) q_{j-1}: diagonal inertia/drag coefficients plus the scheme's
sparse parts (force Jacobian, its derivative for "linearized", velocity terms) of one row, so J is
block-sparse in space and banded periodic in time. H is never formed:

* ``LoopOperator`` keeps each row's sparse parts on one spatial sparsity pattern (the non-pinned
  degrees of freedom) and applies J and J^T by one block-sparse product per time offset plus
  rolls along the frame axis, vectorized over all frames; memory is linear in vertices x frames.
* ``SweepPreconditioner`` splits the rows of J into T, square and block lower-triangular in time
  (rows 1..N-2, each solved for its latest frame, plus the soft-constraint rows), and the two
  wrap-around rows N-1 and 0: H = T^T B T + (rank <= 2m). It applies (T^T B T)^{-1} by a backward
  and a forward sweep over frames with one sparse LU per frame (the linearized implicit step) with
  the time-varying stiffness, stabilized where the model has a stabilized force Jacobian (Blender
  cloth) and shifted on frames whose forces would still make the sweep blow up, and the velocity
  terms' damping; the low-rank wrap term is left to the Krylov iteration.
* ``BlockPreconditioner`` (soft first frames) factorizes H's diagonal blocks of every frame with the damping.
* ``StructuredBackend`` runs preconditioned conjugate gradients on (H + lambda D) d = -g (Levenberg–
  Marquardt damping) to the relative residual of an inexact-Newton forcing sequence (loose while the
  gradient is large, tight near convergence) and until the quadratic model stops improving, capped at ``max_cg``
  iterations (a truncated CG step is still a descent direction), and solves tighter when Gauss–Newton reports
  that an inexact direction made no progress.

It applies to every scheme ("symplectic", "backward", "linearized") and to velocity terms (Blender
cloth's spring and angular damping); ``supports`` says why it does not apply otherwise.
"""
import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from ..physics import scheme
from ..physics.forward import recycled_heap, single_threaded_blas
from ..options import DEFAULTS
from ..physics.residual import block_gram, damping_metric, penalty_terms

try:
    from sksparse import cholmod
except ImportError:  # scikit-sparse is optional
    cholmod = None

_CHUNK_BYTES = 32 * 2 ** 20  # one batch of per-frame force-Jacobian values (their temporaries are ~4x this)


def supports(prob):
    """None if the structured solve applies to ``prob``, else the reason it does not."""
    damping = prob.model.damping
    if damping is not None and np.shape(damping) != (prob.n_vertices,):
        return "damping that is not per-vertex linear drag"
    return None


class LoopOperator:
    """Matrix-free J (weighted by B^1/2) and J^T on the free unknowns of a LoopProblem.

    Row j of J is sum_o A_o(j) q_{j+o} (o = -1, 0, +1), A_o(j) = diag(coef[o]) + S_o(j): the scheme's
    inertia and drag diagonals (``scheme.diagonals``) plus its sparse parts (``scheme.derivative_pattern``:
    the force Jacobian, for "linearized" also its derivative and its explicit terms, and the velocity terms),
    summed per offset on one spatial pattern. Vectors of unknowns are ordered as the Gauss–Newton solver's
    free unknowns (step-major, then non-pinned degrees of freedom). ``update(q)`` evaluates the sparse parts at q,
    and with ``sweep`` also the sweep preconditioner's (``sweep_values``; the frame blocks use none of them, so
    an operator built for them skips their cost).
    """

    def __init__(self, prob, sweep=True):
        self.prob = prob
        self.sweep = sweep
        n_steps = prob.n_steps
        dof = 3 * prob.n_vertices
        self.active = np.flatnonzero(np.repeat(prob.free_vertices(), 3))
        m = self.m = self.active.size
        self.n_steps = n_steps
        hard0, hard1 = prob.hard()
        self.fixed_frames = np.array([f for f, hard in ((0, hard0), (1, hard1)) if hard], dtype=np.int64)
        self.free_frames = np.setdiff1d(np.arange(n_steps), self.fixed_frames)

        local = np.full(dof, -1, dtype=np.int64)
        local[self.active] = np.arange(m)
        parts = scheme.derivative_pattern(prob)
        self.offsets = sorted({o for o, _, _ in parts})
        self._parts = {o: [i for i, part in enumerate(parts) if part[0] == o] for o in self.offsets}

        def local_entries(indices):
            r = np.concatenate([local[parts[i][1]] for i in indices] + [np.zeros(0, np.int64)])
            c = np.concatenate([local[parts[i][2]] for i in indices] + [np.zeros(0, np.int64)])
            keep = (r >= 0) & (c >= 0)
            return r[keep] * m + c[keep], np.flatnonzero(keep)

        keys = np.concatenate([local_entries(range(len(parts)))[0], np.arange(m) * (m + 1)])  # diagonal always
        uniq = np.unique(keys)
        self.pattern_rows = (uniq // m).astype(np.int32)
        self.pattern_cols = (uniq % m).astype(np.int32)
        self.indptr = np.concatenate([[0], np.cumsum(np.bincount(self.pattern_rows, minlength=m))]).astype(np.int64)
        self.nnz = uniq.size
        self.diag_slots = np.searchsorted(uniq, np.arange(m) * (m + 1))
        # per offset, sums its parts' term-wise (duplicated) entries into the pattern's slots. Parts on one pattern
        # (Blender cloth's velocity terms mirror its springs and hinges) are added first, then one sparse 0/1 product
        # per row sums them onto the slots (faster than a gather sorted by slot and a reduceat).
        def summing(indices):
            """[(indices of parts on one pattern, 0/1 CSR (slots x that pattern's entries))] for ``indices``."""
            groups = []
            for group in scheme.pattern_groups(parts, indices):
                part_keys, kept = local_entries(group[:1])
                slot = np.searchsorted(uniq, part_keys)
                size = parts[group[0]][1].size
                groups.append((group, sp.csr_matrix((np.ones(slot.size), (slot, kept)), shape=(uniq.size, size))))
            return groups

        self._sums = {o: summing(indices) for o, indices in self._parts.items()}
        # The preconditioner's T keeps, of the sparse parts, ``scheme.sweep_parts``: the force Jacobian
        # (stabilized where the model can: ``Model.stable_jacobian_values``), the linearized scheme's explicit
        # terms' and the velocity terms' dG/dv (their damping), summed per offset on the same pattern; the
        # linearized scheme's Jacobian derivative and dG/dq are left out.
        r0 = prob.r0[None]
        self._stable_force = sweep and scheme.stable_force_part(prob, r0, r0, r0, np.zeros(1, np.int64)) is not None
        kept_parts = scheme.sweep_parts(prob) if sweep else []
        self._sweep_sums = {o: summing([i for i in kept_parts if parts[i][0] == o])
                            for o in {parts[i][0] for i in kept_parts}}
        self.values = {o: np.zeros((n_steps, self.nnz)) for o in self.offsets}
        self.sweep_values = {o: np.zeros((n_steps, self.nnz)) for o in self._sweep_sums}
        if kept_parts == [0] and not self._stable_force:   # the force part alone: share its values
            self._sweep_sums = {}
            self.sweep_values = {parts[0][0]: self.values[parts[0][0]]} if parts else {}
        self._column_sum = sp.csr_matrix((np.ones(self.nnz), (np.arange(self.nnz), self.pattern_cols)),
                                         shape=(self.nnz, m))

        self.coef = {o: c[self.active] for o, c in scheme.diagonals(prob).items()}
        self.weight = np.sqrt(prob.h / np.repeat(prob.model.mass, 3)[self.active])   # B^1/2 per row
        pdiag = np.zeros((n_steps, m))
        for w, j, _ in penalty_terms(prob, None):
            pdiag[j] += np.repeat(w, 3)[self.active]
        self.penalty_diag = pdiag
        self._matrix = {}

    @property
    def n_free(self):
        return self.free_frames.size * self.m

    def update(self, q):
        """Evaluate the sparse parts S_o(j) of all rows at trajectory q (n_steps, n, 3), in batches of rows."""
        prob, n, m = self.prob, self.n_steps, self.m
        per_row = max(1, sum(rows.size for _, rows, _ in scheme.derivative_pattern(prob))) * 8
        batch = max(1, _CHUNK_BYTES // per_row)
        for start in range(0, n, batch):
            j = np.arange(start, min(start + batch, n))
            parts = scheme.derivative_values(prob, q[j - 1], q[j], q[(j + 1) % n], j)
            for o, groups in self._sums.items():
                scheme.sum_parts(parts, groups, self.values[o][j[0]:j[-1] + 1])
            if self._stable_force:
                parts[0] = scheme.stable_force_part(prob, q[j - 1], q[j], q[(j + 1) % n], j)
            for o, groups in self._sweep_sums.items():
                scheme.sum_parts(parts, groups, self.sweep_values[o][j[0]:j[-1] + 1])
        for o in self.offsets:
            if o not in self._matrix:
                index_type = np.int32 if max(n * self.nnz, n * m) < 2 ** 31 else np.int64
                col_frame = ((np.arange(n) + o) % n).astype(index_type)
                indices = (self.pattern_cols.astype(index_type)[None, :] + (col_frame * m)[:, None]).ravel()
                indptr = (self.indptr[None, :-1] + (np.arange(n) * self.nnz)[:, None]).ravel()
                self._matrix[o] = sp.csr_matrix(
                    (self.values[o].ravel(), indices, np.append(indptr, n * self.nnz).astype(index_type)),
                    shape=(n * m, n * m))
            else:
                self._matrix[o].data = self.values[o].ravel()

    def frame_part(self, o, j, sweep=False):
        """S_o(j): the sparse part (m x m CSR) of row j's coefficient of q_{j+o}; with ``sweep``, only the
        parts the preconditioner's T keeps (zero if it keeps none at offset o)."""
        if sweep and o not in self.sweep_values:
            return sp.csr_matrix((self.m, self.m))
        values = (self.sweep_values if sweep else self.values)[o]
        return sp.csr_matrix((values[j], self.pattern_cols, self.indptr), shape=(self.m, self.m))

    def frame_jacobian(self, j):
        """-S_{+1}(j) (m x m CSR): the forces' stiffness in row j's leading block (the force Jacobian for
        "backward"; for "linearized" also the velocity terms' damping divided by the step)."""
        if 1 not in self.offsets:
            return sp.csr_matrix((self.m, self.m))
        return -self.frame_part(1, j)

    def embed(self, x):
        """Free-unknown vector -> (n_steps, m) array with zeros at the constrained frames."""
        out = np.zeros((self.n_steps, self.m), dtype=x.dtype)
        out[self.free_frames] = x.reshape(-1, self.m)
        return out

    def restrict(self, full):
        return full[self.free_frames].ravel()

    def apply_j(self, x):
        """B^1/2 J x, as (n_steps, m)."""
        X = self.embed(x)
        y = self.coef[1] * np.roll(X, -1, axis=0) + self.coef[0] * X + self.coef[-1] * np.roll(X, 1, axis=0)
        for matrix in self._matrix.values():
            y += (matrix @ X.ravel()).reshape(X.shape)
        return self.weight * y

    def apply_jt(self, y):
        """J^T y for y (n_steps, m), on the free unknowns."""
        z = self.coef[1] * np.roll(y, 1, axis=0) + self.coef[0] * y + self.coef[-1] * np.roll(y, -1, axis=0)
        for matrix in self._matrix.values():
            z += (matrix.T @ y.ravel()).reshape(y.shape)
        return self.restrict(z)

    def apply_h(self, x):
        """Gauss–Newton matrix product (J^T B J + penalty diagonal) x."""
        return self.apply_jt(self.weight * self.apply_j(x)) + self.restrict(self.penalty_diag) * x

    def diagonal(self):
        """diag(J^T B J + penalty diagonal) on the free unknowns."""
        w2 = self.weight ** 2
        d = np.zeros((self.n_steps, self.m))
        batch = max(1, _CHUNK_BYTES // (8 * self.nnz))
        for o in (-1, 0, 1):
            if o not in self.offsets:
                d += w2 * self.coef[o] ** 2
                continue
            column = np.empty((self.n_steps, self.m))    # row j's contributions to the columns of frame j + o
            for start in range(0, self.n_steps, batch):
                entries = self.values[o][start:start + batch].copy()
                entries[:, self.diag_slots] += self.coef[o]
                column[start:start + batch] = (entries ** 2 * w2[self.pattern_rows]) @ self._column_sum
            d += np.roll(column, o, axis=0)
        return self.restrict(d + self.penalty_diag)

    def stiffness_bound(self, steps=80, seed=0, sweep=False):
        """Per residual row j, the largest eigenvalue of sym(-S_{+1}(j)) scaled by the inertia coefficient
        (C^-1/2 sym(-S_{+1}(j)) C^-1/2, C = coef[+1]): positive where the forces destabilize the implicit
        step (a compressed membrane buckling); zeros when the leading blocks have no sparse part. ``steps``
        Lanczos steps batched over all rows; a Ritz value, so it never exceeds the true eigenvalue."""
        n, m = self.n_steps, self.m
        if 1 not in self.offsets:
            return np.zeros(n)
        K, s = self._matrix[1], 1.0 / np.sqrt(self.coef[1])
        if sweep:
            K = K.copy()
            K.data = self.sweep_values[1].ravel() if 1 in self.sweep_values else np.zeros_like(K.data)

        def apply(V):                                  # row j: C^-1/2 sym(-S_{+1}(j)) C^-1/2 V[j]
            sv = s * V
            y = (K @ np.roll(sv, 1, axis=0).ravel()).reshape(n, m)
            y += np.roll((K.T @ sv.ravel()).reshape(n, m), -1, axis=0)
            return -0.5 * s * y

        steps = min(steps, m)
        v = np.random.default_rng(seed).standard_normal((n, m))
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        v_old, beta = np.zeros_like(v), np.zeros(n)
        tri = np.zeros((n, steps, steps))
        for i in range(steps):
            w = apply(v)
            alpha = np.einsum("nm,nm->n", w, v)
            w -= alpha[:, None] * v + beta[:, None] * v_old
            tri[:, i, i] = alpha
            beta = np.linalg.norm(w, axis=1)
            if i + 1 < steps:
                tri[:, i, i + 1] = tri[:, i + 1, i] = beta
            v_old, v = v, w / np.maximum(beta, 1e-300)[:, None]
        return np.linalg.eigvalsh(tri)[:, -1]

    def gradient(self, u_active, q):
        """J^T B u + penalty gradient, for active residual rows u_active (n_steps, m)."""
        g = self.apply_jt(self.weight ** 2 * u_active)
        dof = 3 * self.prob.n_vertices
        pg = np.zeros((self.n_steps, dof))
        for w, j, target in penalty_terms(self.prob, q):
            pg[j] += np.repeat(w, 3) * (q[j] - target).ravel()
        return g + self.restrict(pg[:, self.active])


class SweepPreconditioner:
    """(T^T B T)^{-1} by two sweeps over frames: T holds rows 1..N-2 of J (each solved for its latest
    frame, a sparse LU per frame of its leading block A_{+1}(j); of the sparse parts only the operator's
    ``sweep_values``: the force Jacobian, stabilized where the model can, and the velocity terms' dG/dv)
    and the soft-constraint rows; the wrap rows N-1 and 0 are left out.

    Stabilized: where a frame's forces destabilize the implicit step (positive ``stiffness_bound``, e.g. a
    buckling membrane at a Gauss–Newton iterate), the sweep would amplify errors exponentially through
    that frame and PCG would stall. Its leading block then gets ``shifts[j]`` times the inertia added
    (``shift_safety`` times the Lanczos bound), so every block is at least as stable as the free particle
    (unless the frame's largest destabilizing stiffness reaches ``stable_above``, where its mode decays anyway).
    T changes identically in both sweeps, so the preconditioner stays symmetric positive definite.
    ``options``: ``LinearSolveOptions`` (None: the defaults)."""

    def __init__(self, op, options=None):
        if not op.sweep:
            raise ValueError("the sweep preconditioner needs an operator built with sweep=True")
        self.options = DEFAULTS.linear_solve if options is None else options
        self.op = op
        n = op.n_steps
        self.penalty = {f: np.sqrt(op.penalty_diag[f]) for f in op.free_frames if f < 2}
        self.sweep_frames = np.arange(2, n)          # frame f is the latest frame of row f - 1
        self.shifts = np.zeros(n)
        self._lu = {}
        self._blocks = {}                            # {0: [S_0(j) for every row j]} for the symplectic scheme

    def update(self):
        """Refactorize the per-frame leading blocks for the operator's current sparse parts."""
        op = self.op
        bound = op.stiffness_bound(sweep=True)
        # a mode of scaled stiffness k, shifted by s, grows through the sweep by the root of (1 + s - k) r^2 - 2 r + 1:
        # growth for 0 < k - s < 4, decay for k - s >= 4 (docs/design/tuning.md: stable_above)
        stable_above, safety = self.options.stable_above, self.options.shift_safety
        self.shifts = np.where((bound > 0) & (bound < stable_above), safety * bound, 0.0)
        for f in self.sweep_frames:
            j = f - 1
            lead = sp.diags(op.coef[1] * (1.0 + self.shifts[j]))
            if 1 in op.offsets:
                lead = lead + op.frame_part(1, j, sweep=True)
            # the block's pattern is symmetric: minimum degree on A + A^T, diagonal pivots preferred (less fill
            # and faster solves than the default COLAMD)
            self._lu[j] = spla.splu(sp.csc_matrix(lead), permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.01,
                                    options={"SymmetricMode": True})
        # T keeps the operator's ``sweep_values``: the force Jacobian (stabilized where the model can: with the
        # exact Jacobian of Blender cloth, compressed springs and hinges make the sweep overflow) and the velocity
        # terms' damping.
        self._blocks = {o: [op.frame_part(o, j, sweep=True) for j in range(op.n_steps)]
                        for o in (0, -1) if o in op.sweep_values}

    def damp(self, damping, metric):
        """The sweep cannot hold the damping (T^T B T + lambda D has no sweep): PCG takes it."""

    def _block(self, o, j, x, transpose=False):
        """T's A_o(j) x (or A_o(j)^T x): row j's coefficient of its frame j + o (o = 0, -1) times x."""
        y = self.op.coef[o] * x
        if o in self._blocks:
            part = self._blocks[o][j % self.op.n_steps]
            y += (part.T if transpose else part) @ x
        return y

    def apply(self, r):
        """(T^T B T)^{-1} r on the free unknowns: T^T s = r backward in time, then T x = s forward."""
        op = self.op
        n, m, w = op.n_steps, op.m, op.weight
        R = op.embed(r)
        z = np.zeros((n + 1, m))                     # the row multipliers of rows 1..N-2 (zero for N-1, N)
        for f in self.sweep_frames[::-1]:
            rhs = R[f] - self._block(0, f, z[f], True) - self._block(-1, f + 1, z[f + 1], True)
            z[f - 1] = self._lu[f - 1].solve(rhs, trans="T")
        X = np.zeros((n, m))
        for f, p in self.penalty.items():
            rhs = R[f] - self._block(-1, f + 1, z[f + 1], True) - (self._block(0, 1, z[1], True) if f == 1 else 0.0)
            X[f] = rhs / p ** 2
        for f in self.sweep_frames:
            j = f - 1
            X[f] = self._lu[j].solve(z[j] / w ** 2 - self._block(0, j, X[j]) - self._block(-1, j, X[j - 1]))
        return op.restrict(X)


class BlockPreconditioner:
    """Block Jacobi in time: the inverse of H's diagonal blocks H_ff = sum_o A_o(f-o)^T B A_o(f-o) (+ the
    penalty diagonal) of all free frames, one sparse Cholesky of their block-diagonal matrix (CHOLMOD, its
    symbolic analysis kept while the pattern is; SuperLU without scikit-sparse). It keeps all of the spatial
    coupling (the stiffness, dominant on the frame grid: k h^2 / m >> 1) and none between frames.

    The factor holds the Levenberg–Marquardt damping lambda D (``damp``; the blocks of H + lambda D are those of
    H plus lambda D), refactorized when lambda moves far from the one it holds (``damped_refactor``).

    It is the preconditioner for soft first frames (the add-on's default): there the sweep's T takes frames 0
    and 1 from their weak penalty rows alone and PCG stalls (docs/design/tuning.md: blocks_forcing).
    ``options``: ``LinearSolveOptions`` (None: the defaults)."""

    def __init__(self, op, options=None):
        self.options = DEFAULTS.linear_solve if options is None else options
        self.op = op
        self._factor = None
        self._pattern = None
        self._blocks = None      # the block-diagonal part of H at the last linearization (CSC)
        self._diagonal = None    # its diagonal
        self._damping, self._metric = 0.0, None   # the damping lambda D the factor holds

    def damp(self, damping, metric):
        """Precondition H + ``damping`` D, D the damping ``metric`` (block-diagonal in time, like H's blocks):
        refactorize the blocks with it where it changes their diagonal by more than ``damped_refactor`` times
        (either way) from the one factorized; else keep the factor: PCG's iterations grow with a damping the
        blocks do not hold."""
        diagonal = metric.diagonal()
        held = self._diagonal + (0.0 if self._metric is None else self._damping * self._metric.diagonal())
        wanted = self._diagonal + damping * diagonal
        if np.max(np.maximum(held / wanted, wanted / held)) > self.options.damped_refactor:
            self._damping, self._metric = float(damping), metric
            self._factorize()

    def matrix(self):
        """The block-diagonal part of H on the free unknowns (CSC, without Levenberg–Marquardt damping)."""
        op = self.op
        n, m = op.n_steps, op.m
        diagonal = op.penalty_diag.ravel().copy()
        stacked = []   # B^1/2 A_o of the offsets with sparse parts, one above the other: one product sums their squares
        for o in (-1, 0, 1):
            if o not in op.offsets:   # B^1/2 A_o is a diagonal: its square adds to every frame's diagonal
                diagonal += np.tile((op.weight * op.coef[o]) ** 2, n)
                continue
            # on the operator's pattern (the diagonal is in it): its values with the coefficients added and the
            # rows scaled, without sparse sums or products with diagonals (faster than those)
            values = op.values[o].copy()
            values[:, op.diag_slots] += op.coef[o]
            values *= op.weight[op.pattern_rows]
            stacked.append(sp.csr_matrix((values.ravel(), op._matrix[o].indices, op._matrix[o].indptr),
                                         shape=op._matrix[o].shape))
        H = sp.diags(diagonal)
        if stacked:
            H = H + block_gram(sp.vstack(stacked, format="csr"))
        if op.free_frames.size == n:
            return sp.csc_matrix(H)
        free = (op.free_frames[:, None] * m + np.arange(m)).ravel()
        return sp.csc_matrix(sp.csr_matrix(H)[free][:, free])

    def update(self):
        """Factorize the diagonal blocks at the operator's current sparse parts, with the damping last held."""
        self._blocks = self.matrix()
        self._diagonal = self._blocks.diagonal()
        self._factorize()

    def _factorize(self):
        H = self._blocks
        if self._damping:       # D's entries (inertia diagonal, mesh edges) are in the blocks' pattern: it stays
            H = (H + self._damping * self._metric).tocsc()
        if cholmod is None:
            self._factor = spla.splu(H, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0,
                                     options={"SymmetricMode": True}).solve
            return
        pattern = (H.indptr, H.indices)
        if self._pattern is None or not all(np.array_equal(x, y) for x, y in zip(pattern, self._pattern)):
            # supernodal, factored and solved on one BLAS thread (``StructuredBackend``): threaded, the small
            # fronts' dgemv spins in sched_yield; supernodal is faster than simplicial here
            self._factor = cholmod.analyze(H, mode="supernodal", ordering_method="amd")
            self._pattern = pattern
        self._factor.cholesky_inplace(H)

    def apply(self, r):
        return self._factor(r)


def pcg(apply_a, b, apply_m, rtol, max_iters, eta=None, pace=None, x0=None):
    """Preconditioned conjugate gradients on A x = b from x = 0, or with ``x0`` from its best multiple
    (the minimizer of Q along x0; zero where b.x0 <= 0, so the iterates stay descent directions).

    Stops when |r| <= rtol |b| and, with ``eta``, the quadratic model Q(x) = x.A x / 2 - b.x has stopped
    improving, i (Q_{i-1} - Q_i) <= eta |Q_i| (Nash and Sofer's truncated-Newton test: a small residual
    alone can stop on a direction that holds a few percent of the model's decrease). With ``pace`` it gives
    up (unconverged) from iteration ``pace`` on when |r| has fallen slower than the geometric pace that
    reaches rtol |b| at ``max_iters``. Returns (x, iterations, converged); an unconverged x is still a
    descent direction for an SPD system."""
    x = np.zeros_like(b)
    r = b.copy()
    model = 0.0
    if x0 is not None and b @ x0 > 0:
        ax0 = apply_a(x0)
        scale = (b @ x0) / (x0 @ ax0)
        x, r = scale * x0, b - scale * ax0
        model = -0.5 * float(x @ (b + r))
        if not np.any(r):
            return x, 0, True
    z = apply_m(r)
    p = z.copy()
    rz = r @ z
    target = rtol * np.linalg.norm(b)
    for it in range(1, max_iters + 1):
        if not rz > 0:       # r.z underflowed: the residual is zero in this precision (the flag's last steps)
            return x, it - 1, True
        ap = apply_a(p)
        alpha = rz / (p @ ap)
        x += alpha * p
        r -= alpha * ap
        previous, model = model, -0.5 * float(x @ (b + r))    # Q(x) = -x.(b + r) / 2, since A x = b - r
        rnorm = np.linalg.norm(r)
        if rnorm <= target and (eta is None or it * (previous - model) <= -eta * model):
            return x, it, True
        if pace is not None and it >= pace and rnorm > rtol ** (it / max_iters) * np.linalg.norm(b):
            return x, it, False
        z = apply_m(r)
        rz, rz_old = r @ z, rz
        p = z + (rz / rz_old) * p
    return x, max_iters, False


PRECONDITIONERS = {"sweep": SweepPreconditioner, "blocks": BlockPreconditioner}


def forcing_and_cap(name, options=None):
    """(forcing, max_cg): the preconditioner ``name``'s default PCG forcing and iteration cap from
    ``options`` (``LinearSolveOptions``; None: the defaults): the sweep leaves most of the coupling to the
    Krylov iteration and solves loosely, the frame blocks converge in few iterations and solve tightly."""
    options = DEFAULTS.linear_solve if options is None else options
    if name == "sweep":
        return options.sweep_forcing, options.sweep_max_cg
    return options.blocks_forcing, options.blocks_max_cg


def choose_preconditioner(prob, name="auto"):
    """What "auto" means: the frame blocks (``BlockPreconditioner``) when a first frame is soft (the sweep's
    T then takes frames 0 and 1 from the weak penalty rows alone), else the time sweep. Other names pass."""
    if name != "auto":
        return name
    return "blocks" if prob.eps0 > 0 or prob.eps1 > 0 else "sweep"


class StructuredBackend:
    """Problem-aware Gauss–Newton solve: PCG on J^T B J (+ damping) with the sweep or the frame-block
    preconditioner (``choose_preconditioner``), each with its own default forcing and cap (``forcing_and_cap``).

    Inexact Gauss–Newton: the relative PCG residual is min(forcing, |g| / |g_0|) (Eisenstat–Walker-like),
    at least ``rtol_min``, and the model-decrease test of ``pcg`` with eta = forcing, with at most ``max_cg``
    iterations while it is ``forcing`` and 10 ``max_cg`` after. ``inexact`` says whether the last solve stopped
    at its cap (``truncated``) or short of ``rtol_min``; ``tighten()`` (called by Gauss–Newton when an inexact
    direction makes no progress) divides the forcing by 10 and multiplies the cap by 4, up to ``max_tighten``
    times. ``cg_iterations`` lists the PCG iterations of every solve.

    Parameters
    ----------
    forcing, rtol_min, max_cg, max_tighten : optional
        Override the values ``bind`` reads from ``options.linear_solve`` (None: those; the forcing and the cap
        are the chosen preconditioner's, ``forcing_and_cap``). Tests ask for an exact solve this way.
    preconditioner : str, optional
        "auto" (``choose_preconditioner``), "sweep" or "blocks".
    """

    name = "structured"

    def __init__(self, forcing=None, rtol_min=None, max_cg=None, max_tighten=None, preconditioner="auto"):
        if preconditioner not in ("auto", *PRECONDITIONERS):
            raise ValueError(f"unknown preconditioner {preconditioner!r}; choose from {sorted(PRECONDITIONERS)}")
        self._forcing, self._rtol_min, self._max_cg, self._max_tighten = forcing, rtol_min, max_cg, max_tighten
        self.preconditioner_name = preconditioner
        self.op = None

    def bind(self, prob, options=None):
        """Set up the operator and preconditioner for a LoopProblem (ValueError if it does not apply), with the
        tuning values ``options`` (None: ``DEFAULTS``; ``options.linear_solve`` and the damping metric's
        ``options.gauss_newton.smoothing``)."""
        reason = supports(prob)
        if reason is not None:
            raise ValueError(f"the structured solve does not apply: {reason}; use backend='cholmod'")
        options = DEFAULTS if options is None else options
        linear = options.linear_solve
        self.smoothing = options.gauss_newton.smoothing
        name = choose_preconditioner(prob, self.preconditioner_name)
        self.op = LoopOperator(prob, sweep=name == "sweep")
        self.metric = damping_metric(prob, smoothing=self.smoothing)
        self.preconditioner = PRECONDITIONERS[name](self.op, linear)
        forcing, max_cg = forcing_and_cap(name, linear)
        self.forcing = forcing if self._forcing is None else self._forcing
        self.max_cg = max_cg if self._max_cg is None else self._max_cg
        self.rtol_min = linear.rtol_min if self._rtol_min is None else self._rtol_min
        self.max_tighten = linear.max_tighten if self._max_tighten is None else self._max_tighten
        self.cg_iterations = []
        self.inexact = self.truncated = False
        self.tightened = 0
        self._g0 = self._last = None

    def tighten(self):
        """Solve more accurately from now on; False once ``max_tighten`` tightenings are used up."""
        if self.tightened >= self.max_tighten:
            return False
        self.tightened += 1
        self.forcing, self.max_cg = self.forcing / 10, self.max_cg * 4
        self._rtol = max(self.rtol_min, min(self.forcing, self._rtol))
        return True

    def linearize(self, q, u):
        """Gradient at q (n_steps, n, 3) with residual u; sets up the next ``direction`` solves."""
        op = self.op
        if op.prob.model.contact:
            self.metric = damping_metric(op.prob, q, self.smoothing)
        with recycled_heap():      # the force models' temporaries reuse their pages
            op.update(q)
        with single_threaded_blas():
            self.preconditioner.update()
        g = op.gradient(u.reshape(op.n_steps, -1)[:, op.active], q)
        gnorm = np.linalg.norm(g)
        self._g0 = gnorm if self._g0 is None else self._g0
        self._rtol = max(self.rtol_min, min(self.forcing, gnorm / self._g0))
        self._last = None
        return g

    def direction(self, g, damping=0.0):
        """Inexact solution d of (J^T B J + damping D) d = -g (with the penalty diagonal), D the damping metric
        (``residual.damping_metric``: block-diagonal in time, so the frame blocks hold it whole).
        PCG starts from the last solve of this linearization: after a rejected step, the last direction (another
        damping), or the geodesic acceleration's solve when one came between; a nearby start saves most of the
        iterations of the trials after the first.

        Parameters
        ----------
        g : ndarray
            The gradient on the free unknowns (``linearize``).
        damping : float, optional
            Levenberg–Marquardt's lambda.

        Returns
        -------
        ndarray
            The (inexact) step on the free unknowns; ``truncated`` and ``inexact`` describe its solve.
        """
        op, damped = self.op, damping * self.metric

        def apply_a(x):
            return op.apply_h(x) + damped @ x

        cap = self.max_cg if self._rtol >= self.forcing else 10 * self.max_cg  # converging: solve tighter
        with single_threaded_blas():
            self.preconditioner.damp(damping, self.metric)
            d, iters, converged = pcg(apply_a, -g, self.preconditioner.apply, self._rtol, cap, eta=self.forcing,
                                      x0=self._last)
        self._last = d
        self.cg_iterations.append(iters)
        self.truncated = not converged
        self.inexact = self.truncated or self._rtol > self.rtol_min
        return d

    def apply(self, d):
        """The Gauss–Newton product (J^T B J + penalty diagonal) d at the last linearization."""
        return self.op.apply_h(d)

    def diagonal(self):
        """diag(J^T B J + penalty diagonal) at the last linearization."""
        return self.op.diagonal()

    def residual_gradient(self, u):
        """J^T B u at the last linearization, for a residual array u (n_steps, n, 3)."""
        op = self.op
        return op.apply_jt(op.weight ** 2 * u.reshape(op.n_steps, -1)[:, op.active])
