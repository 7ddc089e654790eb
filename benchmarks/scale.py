"""The driven (gusts) loop beyond the direct factor's size: a subspace correction and a two-level PCG, measured.

    .venv/bin/python -m benchmarks scale [--cases flag square] [--problem P.npz --clip C.npy] [--modes R] [--smooth S]
        [--iters N] [--polish-iters N] [--pcg-iters N] [--no-direct] [--linearization]

Per case (``blender_cloth``'s scenes built, baked and gathered with the bpy module as bake.py's defaults do,
or a saved problem and its clip), from the start ``keep_motion`` takes (the clip closed at its wrap, or its
crossfade where it does not nearly repeat):

- ``modes``: how many mass-weighted PCA modes of the clip's frames keep 99% of their variance;
- ``direct``: the direct driven solve (``optimize.driven.solve``), where ``driven.fits`` takes the loop: the
  baseline every other row's time is divided by;
- ``subspace``: Levenberg–Marquardt on the ``DrivenLoss`` restricted to x = x0 + blockdiag(U) z (and the full
  theta): U the PCA modes, the clip's wrap mismatch and the smoothest Laplacian modes (M-orthonormal);
  its reduced normal matrix is formed from the physics rows' products with U, frame block by frame block;
- ``subspace + two-level``: from the subspace solve's loop, Levenberg–Marquardt in the full space, each direction
  by PCG on the damped normal equations (matrix-free J^T J products with the speed row), preconditioned by the
  factored frame blocks of J^T J (theta_j with frame j) plus an exact coarse correction in the subspace
  (additive).

``--linearization`` prints instead where one linearization's time and memory go at the start.

Each row gives wall seconds, the process's peak resident GB so far, iterations (and PCG iterations), the wrap's
velocity and position jump ratios, RMS speed over the clip's, the mean relative residual outside the driving
force and the clip's (under the solver's model), the designed wind's peak over the scene's, and the time over
the direct solve's. Results: benchmarks/results/scale.md; the reasoning: docs/design/scale.md.
"""
import argparse
import resource
import time

import numpy as np
import scipy.sparse as sp

from solver_core.metrics import loop_metrics, relative_residual, rms_speed
from solver_core.motion import _start
from solver_core.optimize import driven
from solver_core.optimize.linsolve import NotPositiveDefinite, cholmod, make_backend
from solver_core.optimize.structured_solve import pcg
from solver_core.physics.forward import single_threaded_blas
from solver_core.options import DEFAULTS, MAX_ITERS, PHYSICS_TOL, TOL
from solver_core.physics.driving import choose_drive, laplacian_modes
from solver_core.physics.residual import residual_steps

HEADER = ("case", "route", "s", "peak GB", "it", "pcg it", "wrap v", "wrap p", "speed", "resid", "resid cache",
          "wind", "x direct")


def peak_gb():
    """This process's peak resident GB so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20


# -- the subspace ------------------------------------------------------------------------------------------------
def pca_modes(prob, clip, variance=0.99):
    """(modes (m, k) on the free coordinates, M-orthonormal; how many keep ``variance`` of the clip's
    mass-weighted variance about its mean shape)."""
    active = np.flatnonzero(np.repeat(prob.free_vertices(), 3))
    w = np.sqrt(np.repeat(prob.model.mass, 3))[active]
    X = (np.asarray(clip) - np.mean(clip, axis=0)).reshape(len(clip), -1)[:, active] * w
    _, s, vt = np.linalg.svd(X, full_matrices=False)
    kept = np.cumsum(s ** 2) / max(float(np.sum(s ** 2)), 1e-300)
    return (vt / w).T, int(np.searchsorted(kept, variance) + 1)


def subspace_basis(prob, clip, n_pca, n_smooth):
    """U (m, r), M-orthonormal on the free coordinates: ``n_pca`` PCA modes of the clip, its position and
    velocity mismatch at the wrap, and the ``n_smooth`` smoothest Laplacian modes along x, y and z."""
    active = np.flatnonzero(np.repeat(prob.free_vertices(), 3))
    modes, _ = pca_modes(prob, clip)
    clip = np.asarray(clip)
    seam = [(clip[0] - clip[-1]).reshape(-1), (clip[1] - 2 * clip[0] + clip[-1]).reshape(-1)]
    phi = laplacian_modes(prob.model, n_smooth)
    smooth = [np.kron(phi[:, k], np.eye(3)[c]) for k in range(phi.shape[1]) for c in range(3)]
    V = np.column_stack([modes[:, :n_pca]] + [v[active] for v in seam + smooth])
    w = np.sqrt(np.repeat(prob.model.mass, 3))[active]
    Q, R = np.linalg.qr(V * w[:, None])
    keep = np.abs(np.diag(R)) > 1e-10 * np.abs(np.diag(R)).max()
    return Q[:, keep] / w[:, None]


class Subspace:
    """x = x0 + E y on a ``DrivenLoss``: E = blockdiag(U) on the free positions of every step, identity on theta.

    Needs every step to have the same free coordinates (soft initial conditions)."""

    def __init__(self, loss, U):
        self.loss, self.U = loss, U
        self.N = loss.prob.n_steps
        self.m, self.r = U.shape
        if loss.n_q != self.N * self.m:
            raise ValueError("the subspace needs the same free coordinates on every step")
        self.n_y = self.N * self.r + loss.n_theta

    def expand(self, y):
        """E y (a vector of x's size)."""
        z = y[:self.N * self.r].reshape(self.N, self.r)
        return np.concatenate([(z @ self.U.T).ravel(), y[self.N * self.r:]])

    def restrict(self, x):
        """E^T x."""
        return np.concatenate([(x[:self.loss.n_q].reshape(self.N, self.m) @ self.U).ravel(), x[self.loss.n_q:]])

    def metric(self, diag):
        """E^T diag(d) E (CSR): per step U^T diag(d_j) U, and d on theta."""
        N, m, r = self.N, self.m, self.r
        n_q = self.loss.n_q
        blocks = np.einsum("jar,as->jrs", diag[:n_q].reshape(N, m)[:, :, None] * self.U[None], self.U)
        q = sp.block_diag(list(blocks), format="csr")
        return sp.block_diag([q, sp.diags(diag[n_q:])], format="csr")

    def reduce(self, J):
        """J E (CSR) of a sparse J on x: each row's entries grouped by step, times U (one sparse x dense product
        per group of rows: no loop over vertices)."""
        J = J.tocsr()
        n_q, N, m, r = self.loss.n_q, self.N, self.m, self.r
        Jq = J[:, :n_q].tocoo()
        pair, inverse = np.unique(Jq.row.astype(np.int64) * N + Jq.col // m, return_inverse=True)
        P = sp.csr_matrix((Jq.data, (inverse, Jq.col % m)), shape=(pair.size, m))
        PU = P @ self.U
        rows = np.repeat(pair // N, r)
        cols = ((pair % N)[:, None] * r + np.arange(r)).ravel()
        Jr = sp.csr_matrix((PU.ravel(), (rows, cols)), shape=(J.shape[0], N * r))
        return sp.hstack([Jr, J[:, n_q:]], format="csr")

    def physics_normal(self, J):
        """E^T J^T J E (CSR) of the physics rows J (rows of step j: q_j+o columns for a few offsets o, theta_j),
        from per-step products A_o(j)^T A_o'(j) (batched over the steps): block-banded and periodic in time."""
        loss, N, m, r = self.loss, self.N, self.m, self.r
        p = loss.per_step
        R = J.shape[0] // N
        Jq = J[:, :loss.n_q].tocoo()
        step = Jq.row // R
        o = (Jq.col // m - step + N // 2) % N - N // 2
        A = {}
        for off in np.unique(o):
            sel = o == off
            P = sp.csr_matrix((Jq.data[sel], (Jq.row[sel], Jq.col[sel] % m)), shape=(J.shape[0], m))
            A[int(off)] = (P @ self.U).reshape(N, R, r)
        if p:
            Jt = J[:, loss.n_q:].tocoo()
            T = np.zeros((N, R, p))
            T[Jt.row // R, Jt.row % R, Jt.col % p] = Jt.data
            A["t"] = T
        j = np.arange(N)

        def index(key):
            if key == "t":
                return N * r + j[:, None] * p + np.arange(p)
            return ((j + key) % N)[:, None] * r + np.arange(r)

        rows, cols, values = [], [], []
        for k1, a1 in A.items():
            for k2, a2 in A.items():
                G = np.matmul(a1.transpose(0, 2, 1), a2)
                rows.append(np.broadcast_to(index(k1)[:, :, None], G.shape).ravel())
                cols.append(np.broadcast_to(index(k2)[:, None, :], G.shape).ravel())
                values.append(G.ravel())
        return sp.csr_matrix((np.concatenate(values), (np.concatenate(rows), np.concatenate(cols))),
                             shape=(self.n_y, self.n_y))


def _split_parts(parts):
    """(physics J, the other sparse blocks stacked, the speed row or None)."""
    others = [J for name, (_, J) in parts.items() if name not in ("physics", "speed")]
    row = parts["speed"][1] if "speed" in parts else None
    return parts["physics"][1], sp.vstack(others, format="csr") if others else None, row


def gradient(parts):
    """J^T r of every block of ``DrivenLoss.blocks``' output (the speed row's included)."""
    g = sum(J.T @ r if name != "speed" else J * float(r[0]) for name, (r, J) in parts.items())
    return np.asarray(g).ravel()


def reduced_system(sub, parts):
    """(E^T H E of the sparse blocks (CSC), E^T g, E^T of the speed row or None) at ``parts``."""
    J, other, row = _split_parts(parts)
    H = sub.physics_normal(J)
    if other is not None:
        Jo = sub.reduce(other)
        H = H + Jo.T @ Jo
    return H.tocsc(), sub.restrict(gradient(parts)), None if row is None else sub.restrict(row)


def sherman_morrison(solve, g, row):
    """The solution of (A + row row^T) d = -g from ``solve`` (A^-1 b); ``row`` None: A alone."""
    step = solve(-g)
    if row is not None:
        a_row = solve(row)
        step -= a_row * (row @ step) / (1.0 + row @ a_row)
    return step


def levenberg_marquardt(loss, x0, max_iters, motion, linearize):
    """Levenberg–Marquardt on ``loss`` from x0 with the direct driven solve's damping rule (divide by 3 after an
    accepted step, multiply by 4 after a rejected one) and stop ("tol": a relative decrease below TOL or
    ``motion.settle``; "no_progress"; "max_iters"). ``linearize(parts)`` returns, at a linearization, the
    function damping -> step (raising NotPositiveDefinite when the damped matrix does not factor). Returns
    (x, iterations, stop, seconds)."""
    t0 = time.perf_counter()
    x = x0.copy()
    parts = loss.blocks(x)
    f = loss.value(parts)
    lam, stop, it = motion.damping0, "max_iters", 0
    for it in range(1, max_iters + 1):
        direction = linearize(parts)
        while True:
            try:
                step = direction(lam)
            except NotPositiveDefinite:
                lam *= 4.0
                continue
            f_new = loss.value(loss.blocks(x + step, jacobian=False))
            if np.isfinite(f_new) and f_new < f:
                lam = max(lam / 3.0, 1e-9)
                break
            lam *= 4.0
            if lam > 1e12:
                return x, it - 1, "no_progress", time.perf_counter() - t0
        x = x + step
        decrease, f = (f - f_new) / max(f, 1e-300), f_new
        parts = loss.blocks(x)
        if decrease < max(TOL, motion.settle):
            stop = "tol"
            break
    return x, it, stop, time.perf_counter() - t0


def subspace_solve(loss, x0, sub, max_iters, motion):
    """``levenberg_marquardt`` on y (x = x0 + E y), the reduced matrix factored sparse (block-banded in time).
    Returns (x, iterations, stop, seconds)."""
    D = sub.metric(loss.metric())
    solver = make_backend(driven.linear_solver())
    solver.bind(loss.prob)

    def linearize(parts):
        H, g, row = reduced_system(sub, parts)

        def direction(lam):
            solver.factorize((H + lam * D).tocsc())
            return sub.expand(sherman_morrison(solver.solve, g, row))
        return direction

    return levenberg_marquardt(loss, x0, max_iters, motion, linearize)


# -- the two-level preconditioner --------------------------------------------------------------------------------
def frame_blocks(loss, J):
    """The frame-block-diagonal part of J^T J (theta_j in frame j's block), CSC: J's entries split by their block
    minus their row's step (the physics rows' steps; the few other rows any step), so that a row's entries in
    different blocks fall in different parts, and the parts' J_o^T J_o summed."""
    N = loss.prob.n_steps
    m = loss.n_q // N
    p = loss.per_step
    Jc = J.tocoo()
    block = np.where(Jc.col < loss.n_q, Jc.col // m, (Jc.col - loss.n_q) // max(p, 1))
    R = max(J.shape[0] // N, 1)
    step = np.minimum(Jc.row // R, N - 1)
    o = (block - step + N // 2) % N - N // 2
    blocks = sp.csr_matrix((J.shape[1], J.shape[1]))
    for off in np.unique(o):
        sel = o == off
        Jo = sp.csr_matrix((Jc.data[sel], (Jc.row[sel], Jc.col[sel])), shape=J.shape)
        blocks = blocks + (Jo.T @ Jo)
    return blocks.tocsc()


def normal_operator(J, row, damping):
    """v -> (J^T J + row row^T + diag(damping)) v, matrix-free (``row`` None: no speed row)."""
    def apply(v):
        out = J.T @ (J @ v) + damping * v
        return out if row is None else out + row * (row @ v)
    return apply


def two_level_solve(loss, x0, sub, max_iters, motion, pcg_iters=200, rtol=1e-3):
    """``levenberg_marquardt`` in the full space, each direction by PCG on the damped normal equations with the
    two-level preconditioner (the frame blocks' factor plus the coarse solve in the subspace, added), each to a
    relative residual of ``rtol`` within ``pcg_iters``. Returns (x, iterations, stop, seconds, PCG iterations)."""
    diag = loss.metric()
    D = sub.metric(diag)
    coarse = make_backend(driven.linear_solver())
    coarse.bind(loss.prob)
    total = [0]

    def linearize(parts):
        J_all = sp.vstack([J for name, (_, J) in parts.items() if name != "speed"], format="csr")
        row = parts["speed"][1] if "speed" in parts else None
        g = gradient(parts)
        B = frame_blocks(loss, J_all)
        Hc, _, row_c = reduced_system(sub, parts)
        factor = []

        def direction(lam):
            Bd = (B + sp.diags(lam * diag)).tocsc()
            with single_threaded_blas():   # the frame blocks' fronts are small (``structured_solve``)
                if not factor:
                    factor.append(cholmod.analyze(Bd, mode="supernodal", ordering_method="amd"))
                factor[0].cholesky_inplace(Bd)
            coarse.factorize((Hc + lam * D).tocsc())

            def apply_m(v):
                return factor[0](v) + sub.expand(sherman_morrison(coarse.solve, -sub.restrict(v), row_c))

            with single_threaded_blas():
                step, n_cg, _ = pcg(normal_operator(J_all, row, lam * diag), -g, apply_m, rtol, pcg_iters)
            total[0] += n_cg
            return step
        return direction

    return (*levenberg_marquardt(loss, x0, max_iters, motion, linearize), total[0])


# -- the figures -------------------------------------------------------------------------------------------------
def figures(loss, x, clip, clip_speed):
    """The wrap's jump ratios, the speed over the clip's, the residual outside the driving force and the wind's
    peak over the scene's (None without a wind bound) of x."""
    prob = loss.prob
    q, theta = loss.split(x)
    f = loss.driving_force(q, theta)
    m = loop_metrics(prob, q, drive=f)
    wind = None
    if loss.bound is not None:
        wind = float(np.linalg.norm(loss.drive.total_wind(theta), axis=1).max()
                     / np.linalg.norm(loss.drive.scene, axis=1).max())
    return dict(wrap_v=m["velocity_jump_ratio"], wrap_p=m["position_jump_ratio"],
                speed=rms_speed(prob.frames_of(q), prob.dt) / clip_speed, resid=m["residual_rel_mean"], wind=wind)


def setup(prob, clip, options=None):
    """(DrivenLoss at keep_motion's start, x0, the clip's speed, its residual under the model)."""
    options = options or DEFAULTS
    drive = choose_drive(prob, options.motion.drive, options.motion.modes)
    _, q0 = _start(prob, clip, "cache", None, options)
    q0 = prob.apply_constraints(q0)
    loss = driven.DrivenLoss(prob, drive, q0, prob.steps_of(clip), options.motion)
    x0 = loss.pack(q0, np.zeros((prob.n_steps, loss.per_step)))
    clip_speed = rms_speed(np.asarray(clip, dtype=float), prob.dt)
    steps = prob.steps_of(clip)
    resid = float(relative_residual(prob, steps, residual_steps(prob, steps)).mean())
    return loss, x0, clip_speed, resid


def gathered(name):
    """(problem, clip) of ``blender_cloth``'s case ``name``, built, baked and read as bake.py's defaults do."""
    from cyclic_loop_addon import bake
    from cyclic_loop_addon.pipeline import scene_reader

    from .blender_cloth import CASES, build
    obj, _, _ = build(name)
    first, last = CASES[name][-1]
    args = bake.parse_args(["bake.py", "--", "--object", obj.name, "--frames", str(first), str(last)])
    g = scene_reader.gather(bake._settings(args))
    return g.problem, g.source


def each_case(args, run):
    """``run(label, problem, clip, args)`` on the saved problem ``args.problem`` (and its ``args.clip``), else on
    each of ``args.cases`` as ``gathered`` gathers it."""
    if args.problem:
        from solver_core.io import load_problem
        run(args.problem, load_problem(args.problem), np.load(args.clip), args)
        return
    for name in args.cases:
        prob, clip = gathered(name)
        run(name, prob, clip, args)


def run_case(label, prob, clip, args):
    """Print the rows of one case: its start, the direct solve (where it fits), the subspace solve, the
    two-level polish from the subspace's loop."""
    motion = DEFAULTS.motion
    loss, x0, clip_speed, resid_cache = setup(prob, clip)
    _, k99 = pca_modes(prob, clip)
    print(f"{label}: {prob.n_vertices} vertices x {prob.n_steps} steps, {loss.n_q} + {loss.n_theta} unknowns; "
          f"{k99} PCA modes keep 99% of the clip's variance; fits the direct solve: "
          f"{driven.fits(loss.n_q, prob.n_steps)}", flush=True)
    base = None

    def add(route, seconds, x, it, cg="-"):
        nonlocal base
        base = seconds if route == "direct" else base
        f = figures(loss, x, clip, clip_speed)
        row = (label, route, f"{seconds:.1f}", f"{peak_gb():.2f}", it, cg, f"{f['wrap_v']:.2f}",
               f"{f['wrap_p']:.2f}", f"{f['speed']:.2f}", f"{f['resid']:.4f}", f"{resid_cache:.3f}",
               "-" if f["wind"] is None else f"{f['wind']:.2f}", "-" if base is None else f"{seconds / base:.2f}")
        print(" | ".join(str(v) for v in row), flush=True)

    add("start", 0.0, x0, 0)
    if not args.no_direct and driven.fits(loss.n_q, prob.n_steps):
        run = driven.solve(loss, x0, clip_speed, MAX_ITERS, TOL, PHYSICS_TOL)
        add("direct", run.seconds, run.x, run.nit)
    t0 = time.perf_counter()
    sub = Subspace(loss, subspace_basis(prob, clip, args.modes, args.smooth))
    x, it, _, _ = subspace_solve(loss, x0, sub, args.iters, motion)
    seconds = time.perf_counter() - t0
    add(f"subspace (r = {sub.r})", seconds, x, it)
    polish = args.iters if args.polish_iters is None else args.polish_iters
    x, it2, _, s2, cg = two_level_solve(loss, x, sub, polish, motion, pcg_iters=args.pcg_iters)
    add("subspace + two-level", seconds + s2, x, f"{it} + {it2}", cg)


def linearization(label, prob, clip, args):
    """Print where one linearization's time goes at the start: the loss, its Jacobian, the frame blocks and
    their factor, the coarse matrix, and the first direction by PCG with the blocks alone and with both levels."""
    t = time.perf_counter()

    def lap(what, extra=""):
        nonlocal t
        print(f"{label} | {what} | {time.perf_counter() - t:.1f} s | {peak_gb():.2f} GB peak | {extra}", flush=True)
        t = time.perf_counter()

    loss, x0, _, _ = setup(prob, clip)
    lap("the loss")
    sub = Subspace(loss, subspace_basis(prob, clip, args.modes, args.smooth))
    parts = loss.blocks(x0)
    J = sp.vstack([J for name, (_, J) in parts.items() if name != "speed"], format="csr")
    lap("one Jacobian", f"{J.nnz} nonzeros")
    row, g, damping = parts["speed"][1], gradient(parts), DEFAULTS.motion.damping0 * loss.metric()
    B = frame_blocks(loss, J)
    lap("the frame blocks")
    Bd = (B + sp.diags(damping)).tocsc()
    with single_threaded_blas():
        factor = cholmod.analyze(Bd, mode="supernodal", ordering_method="amd")
        factor.cholesky_inplace(Bd)
    lap("their factor", f"{factor.L().nnz} nonzeros")
    Hc, _, row_c = reduced_system(sub, parts)
    coarse = make_backend(driven.linear_solver())
    coarse.bind(prob)
    coarse.factorize((Hc + DEFAULTS.motion.damping0 * sub.metric(loss.metric())).tocsc())
    lap("the coarse matrix and its factor")
    levels = {"blocks": factor,
              "two-level": lambda v: factor(v) + sub.expand(sherman_morrison(coarse.solve, -sub.restrict(v), row_c))}
    for name, apply_m in levels.items():
        with single_threaded_blas():
            _, n, _ = pcg(normal_operator(J, row, damping), -g, apply_m, 1e-3, args.pcg_iters)
        lap(f"first direction, {name}", f"{n} PCG")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks scale", description=__doc__.splitlines()[0])
    p.add_argument("--cases", nargs="*", default=["flag", "square"], choices=["flag", "square", "square16"])
    p.add_argument("--problem", help="a saved problem (solver_core.save_problem) instead of the cases")
    p.add_argument("--clip", help="its clip (.npy)")
    p.add_argument("--modes", type=int, default=30, help="PCA modes in the subspace")
    p.add_argument("--smooth", type=int, default=10, help="Laplacian modes in the subspace (times x, y, z)")
    p.add_argument("--iters", type=int, default=30, help="iterations of each solve at most")
    p.add_argument("--polish-iters", type=int, help="iterations of the two-level polish at most (default --iters)")
    p.add_argument("--pcg-iters", type=int, default=200, help="PCG iterations per direction at most")
    p.add_argument("--no-direct", action="store_true", help="skip the direct solve")
    p.add_argument("--linearization", action="store_true",
                   help="instead of the solves, where one linearization's time goes at the start")
    args = p.parse_args(argv)
    run = linearization if args.linearization else run_case
    if not args.linearization:
        print(" | ".join(HEADER), flush=True)
    each_case(args, run)
