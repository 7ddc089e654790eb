"""Forward simulation with control forces, and the adjoint gradient of the cyclic mismatch.

States q_0 = r0, q_1 = r1 (step 1); equation j (j >= 1), the scheme's step residual (``solver_core.physics.scheme``)
plus a control, gives q_{j+1}:  u_j(q_{j-1}, q_j, q_{j+1}) = c_j.
  symplectic: explicit (du_j/dq_{j+1} = M/h^2);
  backward:   Newton with line search (on the incremental potential for conservative models);
  linearized: u_j is linear in q_{j+1}: one sparse solve.
Pinned vertices follow their prescription; the equations hold on the free vertices.

``Linearization`` holds the derivatives of a simulated trajectory's equations (one factorization of
du_j/dq_{j+1} per step, the other couplings as sparse matrices assembled on a fixed pattern) for
tangent-linear and adjoint sweeps; its derivative values are evaluated in batches of steps.
"""
import contextlib
import copy
import ctypes
import ctypes.util
import functools

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from . import scheme
from .models.base import Model


class SimulationFailed(ArithmeticError):
    """An implicit step did not converge or the state became non-finite."""


# steps whose derivative values are evaluated in one batch (bounds the force models' temporaries)
_LINEARIZE_BATCH = 16
# up to this many free DOFs a Linearization keeps its couplings as dense arrays: a sweep over a small
# system (N bodies: 15 DOFs) then costs microseconds per step instead of scipy.sparse's per-call overhead
_DENSE_DOFS = 64


class _Assembly:
    """Sparse matrices ``(free DOFs x free DOFs)``, CSC, summed from a diagonal and parts on fixed patterns.

    The slot of every pattern entry in the compressed matrix is found once, so assembling a matrix from
    values is one bincount (no sorting per matrix). Entries in pinned rows or columns are dropped.
    """

    def __init__(self, col_of, parts):
        m = int(col_of.max()) + 1
        dof = col_of.size
        r = col_of[np.concatenate([np.arange(dof)] + [rows for rows, _ in parts])]
        c = col_of[np.concatenate([np.arange(dof)] + [cols for _, cols in parts])]
        self._keep = (r >= 0) & (c >= 0)
        keys, self._slot = np.unique(c[self._keep] * m + r[self._keep], return_inverse=True)
        self.indices = (keys % m).astype(np.int32)
        self.indptr = np.searchsorted(keys // m, np.arange(m + 1)).astype(np.int32)
        self.shape = (m, m)
        self.nnz = keys.size
        kept_diagonal = self._keep[:dof]
        self._diagonal = np.flatnonzero(kept_diagonal), self._slot[:np.count_nonzero(kept_diagonal)]

    def data(self, diagonal, values):
        """Compressed values (B, nnz) from the diagonal (3n,) and each part's values (B, nnz_part)."""
        b = values[0].shape[0] if values else 1
        full = np.concatenate([np.broadcast_to(diagonal, (b, diagonal.size))] + list(values), axis=1)
        kept = full[:, self._keep]
        flat = (np.arange(b)[:, None] * self.nnz + self._slot[None]).ravel()
        return np.bincount(flat, weights=kept.ravel(), minlength=b * self.nnz).reshape(b, self.nnz)

    def add_diagonal(self, data, diagonal):
        """``data`` (nnz,) of a matrix plus the diagonal (3n,) (entries in pinned rows dropped), a new array."""
        out = data.copy()
        kept, slots = self._diagonal
        out[slots] += diagonal[kept]
        return out

    def matrix(self, data):
        """The CSC matrix of one row of ``data``."""
        return sp.csc_matrix((data, self.indices, self.indptr), shape=self.shape)

    def dense(self, data):
        """The dense matrices (B, m, m) of the rows of ``data`` (B, nnz)."""
        out = np.zeros((data.shape[0],) + self.shape)
        out[:, self.indices, np.repeat(np.arange(self.shape[1]), np.diff(self.indptr))] = data
        return out


def _free_columns(prob):
    """(free flat DOF indices, map flat DOF -> free column or -1)."""
    idx = np.flatnonzero(np.repeat(prob.free_vertices(), 3))
    col_of = np.full(3 * prob.n_vertices, -1, dtype=np.int64)
    col_of[idx] = np.arange(idx.size)
    return idx, col_of


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_FIXED_THRESHOLD = 128 * 1024          # glibc's initial mmap and trim thresholds
_RECYCLED_THRESHOLD = 1 << 30


@functools.lru_cache(maxsize=None)
def _libc():
    """The C library, looked up once: ``find_library`` runs ``ldconfig -p`` in a child process, and
    ``recycled_heap`` enters and leaves several times per Gauss–Newton iteration."""
    return ctypes.CDLL(ctypes.util.find_library("c"))


def _mallopt(*settings):
    """glibc ``mallopt(param, value)`` for each pair; nothing without glibc."""
    try:
        libc = _libc()
        for param, value in settings:
            libc.mallopt(ctypes.c_int(param), ctypes.c_int(value))
    except (OSError, AttributeError, TypeError):
        pass


def keep_factor_workspace_off_recycled_memory():
    """Fix glibc's mmap threshold at its initial 128 KiB (its dynamic raise disabled), once per process.

    SuperLU reserves several times its factors' size with each factorization and touches a fraction: on
    fresh pages the rest costs no memory, on heap memory recycled from the force models' temporaries it is
    all resident (docs/design/tuning_starts.md: forward.keep_factor_workspace_off_recycled_memory). No effect
    without glibc.
    """
    _mallopt((_M_MMAP_THRESHOLD, _FIXED_THRESHOLD))


@contextlib.contextmanager
def recycled_heap():
    """Inside: glibc serves large blocks from its heap and keeps them there when freed, so the force models'
    temporaries and CHOLMOD's copies of the matrix reuse pages instead of faulting fresh ones in each call;
    after: both thresholds at 128 KiB, as ``keep_factor_workspace_off_recycled_memory`` leaves them (SuperLU's
    reservations then still get fresh pages); the trim threshold comes down after so that the heap can
    shrink (docs/design/tuning_starts.md: forward.recycled_heap)."""
    _mallopt((_M_MMAP_THRESHOLD, _RECYCLED_THRESHOLD), (_M_TRIM_THRESHOLD, _RECYCLED_THRESHOLD))
    try:
        yield
    finally:
        _mallopt((_M_MMAP_THRESHOLD, _FIXED_THRESHOLD), (_M_TRIM_THRESHOLD, _FIXED_THRESHOLD))


@functools.lru_cache(maxsize=None)
def _openblas_thread_controls():
    """[(get, set)] of the thread counts of the OpenBLAS builds loaded in this process (CHOLMOD's, NumPy's),
    found in /proc/self/maps (on first call); none elsewhere."""
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f if "openblas" in line.split()[-1]})
    except OSError:
        paths = []
    controls = []
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for suffix in ("", "64_"):
            get = getattr(lib, "openblas_get_num_threads" + suffix, None)
            put = getattr(lib, "openblas_set_num_threads" + suffix, None)
            if get is not None and put is not None:
                controls.append((get, put))
    return controls


@contextlib.contextmanager
def single_threaded_blas():
    """OpenBLAS on one thread inside (its count restored after): the structured solve's frame blocks, whose small
    fronts' threaded dgemv spins in sched_yield. The direct solve leaves the BLAS its threads, which its larger
    fronts use (docs/design/tuning_starts.md: forward.single_threaded_blas)."""
    controls = _openblas_thread_controls()
    before = [get() for get, _ in controls]
    for _, put in controls:
        put(1)
    try:
        yield
    finally:
        for (_, put), count in zip(controls, before):
            put(count)


class _ImplicitStep:
    """Newton solver for one implicit step on the free (non-pinned) DOFs, fixed pattern."""

    def __init__(self, prob):
        model = prob.model
        self.potential = model.conservative and prob.scheme == "backward"
        self._conservative = None   # the step without the forces that have no potential (Picard fallback)
        if not self.potential and prob.scheme == "backward" and not model.velocity_terms:
            sub = copy.copy(prob)
            sub.model = Model(model.mass, [t for t in model.terms if hasattr(t, "energy")], model.damping)
            self._conservative = _ImplicitStep(sub)
            self._frozen = [t for t in model.terms if not hasattr(t, "energy")]
        self.free, col_of = _free_columns(prob)
        pattern = scheme.derivative_pattern(prob)
        self._parts = [i for i, (o, _, _) in enumerate(pattern) if o == 1]
        self._assembly = _Assembly(col_of, [pattern[i][1:] for i in self._parts])
        self.mdiag = scheme.diagonals(prob)[1]
        self.inertia = np.repeat(model.mass / prob.h ** 2, 3)
        self.model, self.prob = model, prob

    def matrix(self, q_prev, q_cur, y, j, shift=0.0):
        """S = du_j/dq_{j+1} at q_{j+1} = y on the free DOFs (CSC); ``shift`` adds shift * M/h^2."""
        return self._shifted(self._compressed(self._values(q_prev, q_cur, y, j)), shift)

    def _values(self, q_prev, q_cur, y, j):
        """The derivative values of ``scheme.derivative_values`` at offset 1."""
        return scheme.derivative_values(self.prob, q_prev[None], q_cur[None], y[None], np.array([j]), offsets=(1,))

    def _compressed(self, values):
        """The compressed values (nnz,) of S from its derivative values."""
        return self._assembly.data(self.mdiag, [values[i] for i in self._parts])[0]

    def _shifted(self, data, shift):
        """S + shift M/h^2 from the compressed values of S (a shift only changes the diagonal)."""
        return self._assembly.matrix(self._assembly.add_diagonal(data, shift * self.inertia) if shift else data)

    def solve(self, q_prev, q_cur, control, x_pins, j, tol=1e-9, max_iters=100, factor=True):
        """Solve step j for q_{j+1}; returns (q_next, LU of S at the solution, or None without ``factor``).

        The linearized scheme is linear in q_{j+1}: one factorization and one solve (``_linear``).
        Otherwise Newton (``_newton``). Where it fails for a model without a potential (Newton on |R| stalls
        where a stiff cloth buckles in the wind) the step is solved again: under backward Euler with
        forces that depend on positions only (wind) by Picard iterations that freeze those forces at
        the last iterate and minimize the incremental potential of the others; otherwise by Newton
        with Levenberg–Marquardt steps.
        """
        if self.prob.scheme == "linearized":
            return self._linear(q_prev, q_cur, control, x_pins, j)
        try:
            return self._newton(q_prev, q_cur, control, x_pins, j, tol, max_iters, False, factor=factor)
        except SimulationFailed:
            if self.potential:
                raise
            if self._conservative is not None:
                return self._picard(q_prev, q_cur, control, x_pins, j, tol, max_iters, factor)
            return self._newton(q_prev, q_cur, control, x_pins, j, tol, max_iters, True, factor=factor)

    def _linear(self, q_prev, q_cur, control, x_pins, j):
        """The linearized step: S does not depend on q_{j+1}, so q_{j+1} = x0 - S^-1 R(x0) (one factorization,
        one step of iterative refinement)."""
        x = self._start(q_prev, q_cur, x_pins)
        values = self._values(q_prev, q_cur, x, j)
        S = self._assembly.matrix(self._compressed(values))
        # the first part is -dF/dq at q_j: the step residual reuses it
        r = scheme.step_rows(self.prob, q_prev[None], q_cur[None], x[None], np.array([j]), force_jacobian=-values[0])
        r = (r[0] - control).ravel()[self.free]
        try:
            lu = spla.splu(S)
        except RuntimeError as exc:   # exactly singular
            raise SimulationFailed(f"the linearized step {j} is singular: {exc}") from exc
        dx = lu.solve(r)
        dx += lu.solve(r - S @ dx)
        x.reshape(-1)[self.free] -= dx
        return x, lu

    def _at_solution(self, q_prev, q_cur, x, j, factor):
        """(x, LU of S at x) with ``factor``, else (x, None)."""
        return x, (spla.splu(self.matrix(q_prev, q_cur, x, j)) if factor else None)

    def _newton(self, q_prev, q_cur, control, x_pins, j, tol, max_iters, levenberg_marquardt, x0=None, factor=True):
        """Newton iterations for step j from x0 (default the extrapolation 2 q_cur - q_prev).

        For a conservative model under backward Euler the step is the minimizer of the incremental
        potential Phi(y) = |y - 2 q_cur + q_prev|^2_M / 2h^2 + |y - q_cur|^2_D / 2h + U(y) - c . y, whose
        gradient is the step residual R: Newton directions from S + shift M/h^2, the shift raised until
        the matrix is positive definite (buckling cloth, inverted elements), with backtracking on Phi.
        With forces that depend on positions only but have no potential (wind) the backtracking is on the
        conservative terms' Phi with those forces frozen at the iterate (its gradient there is R too; where
        the direction does not descend on it, on |R|): on |R| the full steps of a stiff cloth are halved
        again and again (docs/design/tuning_starts.md: forward._ImplicitStep). Otherwise (velocity terms) Newton with
        backtracking on |R|; when steps stall, the same shift, or with ``levenberg_marquardt`` the descent
        directions of |R|^2 / 2, -(S^T S + 1e-3 shift diag(S^T S))^-1 S^T R.
        """
        prob, model = self.prob, self.model
        h = prob.h
        m = model.mass[:, None]
        d = model.drag[:, None]
        x = self._start(q_prev, q_cur, x_pins, x0)
        tt = prob.step_times(np.array([j + 1]))
        potential = self.potential
        frozen_merit = not potential and self._conservative is not None
        energy = model.energy if potential else self._conservative.model.energy if frozen_merit else None
        frozen = 0.0
        jj = np.array([j])

        def res(y):
            r = scheme.step_rows(prob, q_prev[None], q_cur[None], y[None], jj)[0] - control
            return r.ravel()[self.free]

        def merit(y, r, on_phi):
            if not on_phi:
                return float(np.linalg.norm(r))
            return float(np.sum(m * (y - 2 * q_cur + q_prev) ** 2) / (2 * h ** 2) + np.sum(d * (y - q_cur) ** 2) / (2 * h)
                         + energy(y[None], tt)[0] - np.sum((control + frozen) * y))

        r = res(x)
        scale = max(self._scale(q_prev, q_cur, x, tt), np.abs(r).max())
        shift = 0.0
        for _ in range(max_iters):
            if np.abs(r).max() <= tol * scale:
                return self._at_solution(q_prev, q_cur, x, j, factor)
            # Phi's round-off swamps its decrease close to the solution: finish on |R| there.
            on_phi = (potential or frozen_merit) and np.abs(r).max() > 1e3 * tol * scale
            if levenberg_marquardt and shift > 0 and not potential:
                dx = self._levenberg_marquardt(q_prev, q_cur, x, j, r, shift)
            else:
                dx, shift = self._direction(q_prev, q_cur, x, j, r, shift, potential and on_phi)
            if on_phi and not potential:
                frozen = self._frozen_forces(x, tt)
                on_phi = float(r @ dx) < 0
            phi0 = merit(x, r, on_phi)
            slope = -float(r @ dx) if on_phi else 0.0
            s = 1.0
            while s >= 1e-4:
                y = x.copy()
                y.reshape(-1)[self.free] += s * dx
                ry = res(y)
                if np.all(np.isfinite(ry)):
                    phi = merit(y, ry, on_phi)
                    if (phi <= phi0 - 1e-4 * s * slope) if on_phi else (phi < (1 - 1e-4 * s) * phi0):
                        break
                s *= 0.5
            shift = (0.0 if shift < 1e-2 else shift / 10) if s >= 0.5 else max(1.0, 10 * shift)
            if s >= 1e-4:
                x, r = y, ry
            elif np.abs(r).max() <= 1e-4 * scale:    # no descent left: round-off of stiff internal forces
                return self._at_solution(q_prev, q_cur, x, j, factor)
        raise SimulationFailed(f"implicit step did not converge (residual {np.abs(r).max():.3e} N)")

    def _direction(self, q_prev, q_cur, x, j, r, shift, potential):
        """Newton direction -(S + shift M/h^2)^-1 R; for potentials the shift grows until S is positive definite
        (the force Jacobian evaluated once)."""
        data = self._compressed(self._values(q_prev, q_cur, x, j))
        while True:
            S = self._shifted(data, shift)
            if not potential:
                return spla.splu(S).solve(-r), shift
            try:   # symmetric pivoting only: positive pivots <=> positive definite
                lu = spla.splu(S, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0, options={"SymmetricMode": True})
                if np.all(lu.U.diagonal() > 0) and np.array_equal(lu.perm_r, lu.perm_c):
                    return lu.solve(-r), shift
            except RuntimeError:   # exactly singular
                pass
            shift = max(1e-3, 10 * shift)

    def _start(self, q_prev, q_cur, x_pins, x0=None):
        """Newton's starting point: x0 (default the extrapolation 2 q_cur - q_prev) with the pins set."""
        x = 2 * q_cur - q_prev if x0 is None else x0.copy()
        x[self.prob.pins] = x_pins
        return x

    def _scale(self, q_prev, q_cur, x, tt):
        """Round-off reference: the largest of the inertia and force terms that the step residual sums."""
        inertia = np.abs(self.model.mass[:, None] * (q_cur - q_prev)).max() / self.prob.h ** 2
        return max(inertia, np.abs(self.model.forces(x[None], tt)).max(), 1e-300)

    def _frozen_forces(self, x, tt):
        """The forces without a potential (wind) at positions x, held fixed by ``_picard`` and by Newton's merit."""
        return sum(term.forces(x[None], tt)[0] for term in self._frozen)

    def _picard(self, q_prev, q_cur, control, x_pins, j, tol, max_iters, factor=True):
        """Lagged non-conservative forces, the conservative step solved by ``self._conservative``."""
        jj = np.array([j])
        tt = self.prob.step_times(np.array([j + 1]))
        x = self._start(q_prev, q_cur, x_pins)
        scale = self._scale(q_prev, q_cur, x, tt)
        for _ in range(max_iters):
            frozen = control + self._frozen_forces(x, tt)
            x, _ = self._conservative._newton(q_prev, q_cur, frozen, x_pins, j, tol, max_iters, False, x, False)
            r = (scheme.step_rows(self.prob, q_prev[None], q_cur[None], x[None], jj)[0] - control).ravel()[self.free]
            if np.abs(r).max() <= tol * scale:
                return self._at_solution(q_prev, q_cur, x, j, factor)
        raise SimulationFailed(f"implicit step did not converge with lagged forces (residual {np.abs(r).max():.3e} N)")

    def _levenberg_marquardt(self, q_prev, q_cur, x, j, r, factor):
        """-(S^T S + 1e-3 factor diag(S^T S))^-1 S^T R: a descent direction for |R|^2 / 2."""
        S = self.matrix(q_prev, q_cur, x, j)
        normal = (S.T @ S).tocsc()
        return spla.splu(normal + sp.diags(1e-3 * factor * normal.diagonal(), format="csc")).solve(-(S.T @ r))


def simulate(prob, n_states=None, controls=None, keep_factors=False, progress=None):
    """Forward simulation on the solver grid from (r0, r1), pins on their paths.

    Parameters
    ----------
    prob : LoopProblem
        The problem: model, scheme, step and initial conditions.
    n_states : int, optional
        Number of states q_0..q_{n_states-1}; ``prob.n_steps`` when None.
    controls : ndarray, optional
        (n_states - 1, n, 3): c_j added to the forces of equation j (row 0 unused); zero when None.
    keep_factors : bool
        Also return the trajectory's ``Linearization`` (for tangent-linear and adjoint sweeps; the
        linearized scheme's step factorizations are reused).
    progress : callable, optional
        ``progress(done, total)`` after each step: the steps simulated and to simulate.

    Returns
    -------
    q : ndarray
        The states (n_states, n, 3).
    lin : Linearization
        Only with ``keep_factors``: ``(q, lin)``.

    Raises
    ------
    SimulationFailed
        When the state blows up or an implicit step fails.
    """
    model, h = prob.model, prob.h
    n_states = prob.n_steps if n_states is None else int(n_states)
    n = model.n_vertices
    q = np.empty((n_states, n, 3))
    q[0], q[1] = prob.r0, prob.r1_step
    pins = prob.pin_path(np.arange(n_states))
    q[0, prob.pins], q[1, prob.pins] = pins[0], pins[1]
    c = np.zeros((n_states, n, 3)) if controls is None else controls
    stepper = None if prob.scheme == "symplectic" else _ImplicitStep(prob)
    factors = [None] if prob.scheme == "linearized" and keep_factors else None   # factors[j]: step j
    with single_threaded_blas():   # one step's products and fronts are small: threads only spin
        for j in range(1, n_states - 1):
            if stepper is None:   # u_j is M/h^2 q_{j+1} + (terms without q_{j+1})
                guess = 2 * q[j] - q[j - 1]
                rows = scheme.step_rows(prob, q[j - 1][None], q[j][None], guess[None], np.array([j]))[0]
                q[j + 1] = guess - h ** 2 * (rows - c[j]) / model.mass[:, None]
                q[j + 1, prob.pins] = pins[j + 1]
            else:
                q[j + 1], lu = stepper.solve(q[j - 1], q[j], c[j], pins[j + 1], j, factor=False)
                if factors is not None:
                    factors.append(lu)
            if not np.all(np.isfinite(q[j + 1])):
                raise SimulationFailed(f"the simulation blew up at step {j + 1}")
            if progress is not None:
                progress(j, n_states - 2)
    if not keep_factors:
        return q
    return q, Linearization(prob, q, factors)


class _Diagonal:
    """A diagonal matrix with the interface of the sparse ones used here (solve, products, transposes)."""

    def __init__(self, d):
        self.d = d

    def solve(self, b, trans="N"):
        return b / self.d.reshape((-1,) + (1,) * (b.ndim - 1))

    def __matmul__(self, x):
        return self.d.reshape((-1,) + (1,) * (x.ndim - 1)) * x

    @property
    def T(self):
        return self


def _solve_transposed(lu, b):
    """S^-T b for many right-hand sides b (dof, m): for a SuperLU factorization (Pr S Pc = L U) by dense
    triangular solves (BLAS 3; SuperLU solves column by column), S^-T b = Pr^T L^-T U^-T Pc^T b."""
    if not isinstance(lu, spla.SuperLU):
        return lu.solve(b, trans="T")
    x = np.empty_like(b)
    x[lu.perm_c] = b
    x = sla.solve_triangular(lu.U.toarray(), x, trans="T", check_finite=False)
    x = sla.solve_triangular(lu.L.toarray(), x, trans="T", lower=True, unit_diagonal=True, check_finite=False)
    return x[lu.perm_r]


class Linearization:
    """Derivatives of the step equations u_j(q_{j-1}, q_j, q_{j+1}) = c_j along a simulated trajectory q.

    Per step j = 1..L (L = len(q) - 2): the factors of S_j = du_j/dq_{j+1} and the couplings
    A_j = du_j/dq_j, B_j = du_j/dq_{j-1}, all on the free DOFs (a pinned vertex does not respond to
    controls). ``factors``: the forward pass's factors of S_j to reuse (linearized scheme), else S_j is
    factored here at the solution. Built on the first sweep, derivative values in batches of steps.
    """

    def __init__(self, prob, q, factors=None):
        self.prob, self.q, self._factors = prob, q, factors
        self.n_states = q.shape[0]
        self._shape = q.shape
        self._S = None

    def _build(self):
        """Evaluate and assemble the step derivatives (on first use)."""
        prob, q, factors = self.prob, self.q, self._factors
        self.free, col_of = _free_columns(prob)
        pattern = scheme.derivative_pattern(prob)
        diagonals = scheme.diagonals(prob)
        implicit = prob.scheme != "symplectic"
        offsets = (0, -1) if factors is not None or not implicit else (1, 0, -1)
        parts = {o: [i for i, (po, _, _) in enumerate(pattern) if po == o] for o in offsets}
        assembly = {o: _Assembly(col_of, [pattern[i][1:] for i in parts[o]]) for o in offsets if parts[o]}
        S, A, B = [None], [None], [None]   # index j: step j
        steps = self.n_states - 2
        for start in range(1, steps + 1, _LINEARIZE_BATCH):
            j = np.arange(start, min(start + _LINEARIZE_BATCH, steps + 1))
            values = scheme.derivative_values(prob, q[j - 1], q[j], q[j + 1], j, offsets=offsets)
            data = {o: a.data(diagonals[o], [values[i] for i in parts[o]]) for o, a in assembly.items()}
            dense = {o: assembly[o].dense(data[o]) for o in assembly if o != 1 and self.free.size <= _DENSE_DOFS}
            for k, jj in enumerate(j):
                mats = {o: (dense[o][k] if o in dense else assembly[o].matrix(data[o][k]) if o in assembly
                            else _Diagonal(diagonals[o][self.free])) for o in offsets}
                if not implicit:
                    S.append(_Diagonal(diagonals[1][self.free]))
                elif factors is not None:
                    S.append(factors[jj])
                else:
                    S.append(spla.splu(mats[1]))
                A.append(mats[0])
                B.append(mats[-1])
        self._S, self._A, self._B = S, A, B
        self._factors = None

    def tangent(self, dc):
        """Tangent-linear sweep: dq (n_states, n, 3) of the controls' variation ``dc`` (n_states - 1, n, 3)."""
        if self._S is None:
            self._build()
        dc = np.asarray(dc).reshape(dc.shape[0], -1)[:, self.free]
        dq = np.zeros((self.n_states, self.free.size))
        for j in range(1, self.n_states - 1):
            rhs = dc[j] - self._A[j] @ dq[j] - self._B[j] @ dq[j - 1]
            dq[j + 1] = self._S[j].solve(rhs)
        out = np.zeros((self.n_states, self._shape[1] * 3))
        out[:, self.free] = dq
        return out.reshape(self._shape)

    def adjoint(self, sensitivity):
        """Adjoint sweep: the gradient (n_states - 1, n, 3) with respect to the controls of a function of the
        states whose gradient with respect to them is ``sensitivity`` (n_states, n, 3)."""
        if self._S is None:
            self._build()
        lam = np.asarray(sensitivity, dtype=float).reshape(self.n_states, -1)[:, self.free].copy()
        grad = np.zeros((self.n_states - 1, self.free.size))
        for k in range(self.n_states - 1, 1, -1):
            j = k - 1
            z = self._S[j].solve(lam[k], trans="T")
            grad[j] = z
            lam[j] -= self._A[j].T @ z
            lam[j - 1] -= self._B[j].T @ z
        out = np.zeros((self.n_states - 1, self._shape[1] * 3))
        out[:, self.free] = grad
        return out.reshape((self.n_states - 1,) + self._shape[1:])

    def gram(self, last, weight):
        """sum_j Z_j^T diag(weight) Z_j (m, m), Z_j the adjoint gradients with respect to the controls c_j of
        m functions of the last two states whose gradients are ``last`` (2, n, 3, m); ``weight`` (n,) per
        vertex (the mass: the Gram matrix J M J^T of the closure). One block adjoint sweep, O(dof m) memory."""
        if self._S is None:
            self._build()
        m = last.shape[-1]
        end = self.n_states - 1
        lam = {end - 1: last[0].reshape(-1, m)[self.free], end: last[1].reshape(-1, m)[self.free]}
        root = np.sqrt(np.repeat(weight, 3)[self.free])[:, None]
        gram = np.zeros((m, m), order="F")
        for k in range(end, 1, -1):
            j = k - 1
            z = _solve_transposed(self._S[j], lam.pop(k))
            # the upper triangle of gram += Z^T diag(w) Z (BLAS syrk)
            gram = sla.blas.dsyrk(1.0, root * z, beta=1.0, c=gram, trans=1, overwrite_c=1)
            lam[j] = lam[j] - self._A[j].T @ z
            lam[j - 1] = lam.get(j - 1, 0.0) - self._B[j].T @ z
        return np.triu(gram) + np.triu(gram, 1).T


def mismatch(prob, q):
    """G = |q_L - r0|^2 / 2 + |q_{L+1} - r1|^2 / 2 over free vertices, L = n_steps (eq. 26)."""
    L = prob.n_steps
    free = prob.free_vertices()
    return 0.5 * float(np.sum((q[L, free] - prob.r0[free]) ** 2) + np.sum((q[L + 1, free] - prob.r1_step[free]) ** 2))


def mismatch_gradient(prob, q, factors=None):
    """dG/dc_j (n_states - 1, n, 3) for the trajectory q (L + 2 states) by the adjoint method.

    ``factors``: the trajectory's ``Linearization`` (``simulate(..., keep_factors=True)``), built when None.
    """
    lin = factors if isinstance(factors, Linearization) else Linearization(prob, q)
    L = prob.n_steps
    sensitivity = np.zeros_like(q)
    sensitivity[L] = q[L] - prob.r0
    sensitivity[L + 1] = q[L + 1] - prob.r1_step
    return lin.adjoint(sensitivity)
