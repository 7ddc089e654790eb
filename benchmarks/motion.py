"""Loops that keep the cache's motion: a designed driving force (wind or smooth body forces) solved with q.

A prototype of the formulation in docs/design/motion.md, measured on Blender flags (the README's main job by
default): Levenberg–Marquardt on the augmented unknowns (q, theta) of the loss

    1/2 sum_j h |u_j(q) - f_j(q_j, theta_j)|^2_{M^-1}  +  the problem's soft initial conditions
    + a h sum_j |f(theta_j)|^2 + b h sum_j |theta_{j+1} - 2 theta_j + theta_{j-1}|^2 (scaled alike)
    + the motion criterion,

with u the problem's residual forces (solver_core.physics.residual) and f a driving family:

- ``wind``: per frame a wind vector d_j (3 unknowns) added to the scene's wind, acting through the scene's
  ``Wind`` term (pressure on triangles, linear in the wind vector: f = G(q) d);
- ``modes``: per frame 3 coefficients of each of the lowest k eigenvectors of the mesh's mass-weighted graph
  Laplacian, an acceleration field (f = M Phi theta, Phi M-orthonormal, so |f|^2_{M^-1} = |theta|^2);
- ``none``: no driving force (the problem's own loss).

Motion criteria: ``none``; ``track`` (w m / h^3 |q_j - cache_j|^2 on the frames more than ``--seam`` frames from
the wrap); ``speed`` (g ((K - K_c) / K_c)^2 / 2, K the loop's kinetic energy summed over its steps, K_c the
cache's over as many steps, E_0 the crossfade's loss). Every Jacobian (the physics rows, the driving force's
dq and dtheta, the penalties, the speed row) is checked against central finite differences before the solve.

``python -m benchmarks motion`` gathers the scene with the bpy module (bake.py's reader and options); with
``--problem FILE.npz --clip FILE.npy`` it reads a saved problem instead. Results: benchmarks/results/motion.md.
"""
import argparse
import os
import sys
import time

import numpy as np
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import solver_core as sc
from solver_core.baselines import crossfade_loop
from solver_core.metrics import loop_metrics, relative_residual, rms_speed
from solver_core.physics.models.external import Wind
from solver_core.physics.residual import ResidualJacobian, force_steps, loss, penalty_terms, residual_steps

README_JOB = ["sample_scenes/flag.blend", "--object", "Flag", "--frames", "49", "72", "--init", "cache",
              "--substeps", "1", "--soft", "1000", "--iterations", "20"]
GUSTS_JOB = ["sample_scenes/flag_gusts.blend", "--object", "Flag", "--init", "cache", "--substeps", "1",
             "--soft", "1000", "--iterations", "20"]
CANDIDATES = ("make_loop", "none/none", "wind/none", "wind/track", "wind/speed", "modes/none", "modes/track",
              "modes/speed", "wind/track+speed", "modes/track+speed")


def gather(job):
    """(LoopProblem, cache clip (n_frames, n, 3)) of bake.py's options ``job`` (bpy module)."""
    import bpy
    from cyclic_loop_addon import bake
    from cyclic_loop_addon.pipeline import scene_reader
    args = bake.parse_args(["bake.py", job[0], "--", *job[1:]])
    bake._open(args)
    if args.frames is None and "loop_frames" in bpy.context.scene:
        args.frames = [int(v) for v in bpy.context.scene["loop_frames"]]
    gathered = scene_reader.gather(bake._settings(args), None)
    return gathered.problem, np.asarray(gathered.source, dtype=float), args.frames


class _FrameWind(Wind):
    """The scene's wind law with one wind vector per row (``wind`` (B, 3)), read as given, not by time."""

    def _wind_at(self, t, b):
        return np.broadcast_to(self.wind, (b, 3))


def periodic_second_difference(n):
    """(n x n) CSR D2 with (D2 x)_j = x_{j+1} - 2 x_j + x_{j-1}, indices mod n."""
    i = np.arange(n)
    return sp.csr_matrix((np.r_[np.ones(n), -2 * np.ones(n), np.ones(n)],
                          (np.r_[i, i, i], np.r_[(i + 1) % n, i, (i - 1) % n])), shape=(n, n))


def laplacian_modes(prob, k):
    """The lowest ``k`` eigenvectors (n, k) of the mesh's graph Laplacian L phi = lambda M phi, M-orthonormal."""
    n, mass = prob.n_vertices, prob.model.mass
    e = prob.model.mesh_edges()
    A = sp.csr_matrix((np.ones(2 * len(e)), (np.r_[e[:, 0], e[:, 1]], np.r_[e[:, 1], e[:, 0]])), shape=(n, n))
    A.data[:] = 1.0
    L = (sp.diags(np.asarray(A.sum(axis=1)).ravel()) - A).toarray()
    _, vectors = scipy.linalg.eigh(L, np.diag(mass))
    return vectors[:, :k]


class Augmented:
    """Residual vector r(x) and Jacobian of the augmented loss 1/2 |r|^2 on x = (free q, theta)."""

    def __init__(self, prob, clip, family="none", criterion="none", a=1e-2, b=1.0, modes=6, track=1e-3, seam=4,
                 speed=1e2, start="crossfade", soft_from_start=False, track_target="cache"):
        self.prob, self.family, self.criterion = prob, family, criterion
        self.rj = ResidualJacobian(prob)
        n_steps, n = prob.n_steps, prob.n_vertices
        self.dof = 3 * n
        self.cache = prob.steps_of(clip)
        # the cache's crossfade plays the cache's middle frame at frame 0; the cache itself ("cache") agrees in
        # phase with the soft initial conditions (frame 0 near the cache's first frame) and jumps at the wrap
        first = crossfade_loop(clip) if start == "crossfade" else np.asarray(clip, dtype=float)
        self.start = prob.apply_constraints(prob.steps_of(first))
        self.k_rows, _ = force_steps(prob)
        self.roots = np.sqrt(self.rj.row_weights)
        self.n_q = self.rj.free_flat.size
        self.free_rows = prob.free_vertices()
        wind_terms = [t for t in prob.model.terms if isinstance(t, Wind)]
        self.scene_wind = wind_terms[0] if wind_terms else None
        self.D2 = periodic_second_difference(n_steps)
        if family == "wind":
            if self.scene_wind is None:
                raise ValueError("the scene has no wind term to design")
            w = self.scene_wind
            self.wind = _FrameWind(n, w.triangles, np.zeros(3), w.coefficient)
            r, c = self.wind.jacobian_pattern()
            self._wind_pattern = (r, c)
            self.n_theta = 3 * n_steps
            # |G d|^2_{M^-1} ~ s^2 |d|^2 at the start: the size of a unit wind's force, so a and b weigh
            # the wind as they weigh a body force of the same size
            G = self._wind_columns(self.start)
            self.scale = float(np.sqrt(np.mean(np.sum(G ** 2 / prob.model.mass[None, :, None, None], axis=(1, 2)))
                                       / 3.0))
        elif family == "modes":
            self.phi = laplacian_modes(prob, modes)
            self.n_theta = 3 * modes * n_steps
            self.scale = 1.0
        else:
            self.n_theta = 0
            self.scale = 1.0
        self.a, self.b = a, b
        self.penalties = penalty_terms(prob, self.start)
        if soft_from_start:     # the soft initial conditions in the start's phase (its frames 0 and 1)
            self.penalties = [(w, j, self.start[j]) for w, j, _ in self.penalties]
        self.seam = seam
        steps = np.arange(n_steps)
        far = np.minimum(steps, n_steps - steps) > seam
        self.track_steps = steps[far]
        self.track_weight = track * prob.model.mass / prob.h ** 3
        # the path tracked: the cache (it does not close at the wrap) or the crossfade (periodic)
        self.reference = self.cache if track_target == "cache" else prob.steps_of(crossfade_loop(clip))
        self.kinetic_cache = self._kinetic(self.cache, wrap=False) * n_steps / (n_steps - 1)
        self.speed_weight = speed

    # -- the pieces --------------------------------------------------------------------------------------------
    def _kinetic(self, q, wrap=True):
        step = np.diff(q, axis=0, append=q[:1]) if wrap else np.diff(q, axis=0)
        return 0.5 * float(np.sum(self.prob.model.mass[None, :, None] * step ** 2)) / self.prob.h ** 2

    def _wind_columns(self, q):
        """dF/dd per row and vertex (n_steps, n, 3, 3): the force of a unit wind along each axis."""
        cols = []
        for axis in range(3):
            d = np.zeros((self.prob.n_steps, 3))
            d[:, axis] = 1.0
            self.wind.wind = d
            cols.append(self.wind.forces(q[self.k_rows], None))
        return np.stack(cols, axis=-1)

    def split(self, x):
        q = self.prob.apply_constraints(self.start.copy())
        flat = q.reshape(-1)
        flat[self.rj.free_flat] = x[:self.n_q]
        return q, x[self.n_q:]

    def pack(self, q, theta):
        return np.concatenate([q.reshape(-1)[self.rj.free_flat], theta])

    def drive(self, q, theta):
        """Driving force (n_steps, n, 3) of the rows, zero on pinned vertices."""
        prob = self.prob
        if self.family == "wind":
            self.wind.wind = theta.reshape(prob.n_steps, 3)
            f = self.wind.forces(q[self.k_rows], None)
        elif self.family == "modes":
            c = theta.reshape(prob.n_steps, -1, 3)
            f = prob.model.mass[None, :, None] * np.einsum("ik,jkc->jic", self.phi, c)
        else:
            f = np.zeros(q.shape)
        f[:, prob.pins] = 0.0
        return f

    def blocks(self, x, jacobian=True):
        """[(name, r, J or None)] of the loss 1/2 sum |r|^2 at x."""
        prob, rj = self.prob, self.rj
        q, theta = self.split(x)
        u = residual_steps(prob, q) - self.drive(q, theta)
        out = []
        r = self.roots * rj.active_rows(u)
        J = None
        if jacobian:
            Jq = rj.assemble(q)
            Jt = sp.csr_matrix((rj.shape[0], self.n_theta))
            if self.family == "wind":
                Jq = Jq - self._wind_dq(q, theta)
                Jt = -self._wind_dtheta(q)
            elif self.family == "modes":
                Jt = -self._modes_dtheta()
            J = sp.diags(self.roots) @ sp.hstack([Jq, Jt]).tocsr()
        out.append(("physics", r, J))
        for w, j, target in self.penalties:
            diff = (q[j] - target).reshape(-1)
            rows = self._cols_of_step(j)
            weights = np.sqrt(np.repeat(w, 3))[self.rj.free_flat[rows] % self.dof]
            r = weights * diff[self.rj.free_flat[rows] % self.dof]
            J = sp.csr_matrix((weights, (np.arange(rows.size), rows)), shape=(rows.size, self.n_q + self.n_theta)) \
                if jacobian else None
            out.append((f"initial {j}", r, J))
        if self.n_theta:
            t = theta.reshape(prob.n_steps, -1)
            for name, weight, op in (("size", self.a, sp.identity(prob.n_steps, format="csr")),
                                     ("roughness", self.b, self.D2)):
                big = sp.kron(op, sp.identity(t.shape[1]), format="csr") * (np.sqrt(weight * prob.h) * self.scale)
                r = big @ theta
                J = sp.hstack([sp.csr_matrix((big.shape[0], self.n_q)), big]).tocsr() if jacobian else None
                out.append((name, r, J))
        if "track" in self.criterion.split("+"):
            cols = np.concatenate([self._cols_of_step(j) for j in self.track_steps])
            flat = self.rj.free_flat[cols]
            weights = np.sqrt(np.repeat(self.track_weight, 3))[flat % self.dof]
            r = weights * (q.reshape(-1)[flat] - self.reference.reshape(-1)[flat])
            J = sp.csr_matrix((weights, (np.arange(cols.size), cols)), shape=(cols.size, self.n_q + self.n_theta)) \
                if jacobian else None
            out.append(("track", r, J))
        if "speed" in self.criterion.split("+"):
            K = self._kinetic(q)
            s = np.sqrt(self.speed_weight)
            r = np.array([s * (K - self.kinetic_cache) / self.kinetic_cache])
            J = None
            if jacobian:
                step = np.diff(q, axis=0, append=q[:1])                     # q_{j+1} - q_j
                grad = self.prob.model.mass[None, :, None] * (np.roll(step, 1, axis=0) - step) / prob.h ** 2
                row = np.zeros(self.n_q + self.n_theta)
                row[:self.n_q] = s * grad.reshape(-1)[self.rj.free_flat] / self.kinetic_cache
                J = sp.csr_matrix(row[None, :])
            out.append(("speed", r, J))
        return out

    def _cols_of_step(self, j):
        """Columns of x holding step j's free coordinates."""
        lo, hi = np.searchsorted(self.rj.free_flat, [j * self.dof, (j + 1) * self.dof])
        return np.arange(lo, hi)

    def _wind_dq(self, q, theta):
        prob, rj = self.prob, self.rj
        self.wind.wind = theta.reshape(prob.n_steps, 3)
        values = self.wind.jacobian_values(q[self.k_rows], None)          # (n_steps, nnz)
        r, c = self._wind_pattern
        j = np.arange(prob.n_steps)[:, None]
        rows = (j * self.dof + r[None, :]).ravel()
        cols = (self.k_rows[:, None] * self.dof + c[None, :]).ravel()
        return self._restrict(rows, cols, values.ravel(), rj.free_flat.size)

    def _restrict(self, rows, cols, values, n_cols, col_map=True):
        rj = self.rj
        row_of = np.full(self.prob.n_steps * self.dof, -1)
        row_of[rj.row_flat] = np.arange(rj.row_flat.size)
        r = row_of[rows]
        if col_map:
            col_of = np.full(self.prob.n_steps * self.dof, -1)
            col_of[rj.free_flat] = np.arange(rj.free_flat.size)
            c = col_of[cols]
        else:
            c = cols
        keep = (r >= 0) & (c >= 0)
        return sp.csr_matrix((values[keep], (r[keep], c[keep])), shape=(rj.shape[0], n_cols))

    def _wind_dtheta(self, q):
        G = self._wind_columns(q)                                          # (n_steps, n, 3, 3)
        n_steps, n = G.shape[:2]
        j, i, c, a = np.meshgrid(np.arange(n_steps), np.arange(n), np.arange(3), np.arange(3), indexing="ij")
        rows = (j * self.dof + 3 * i + c).ravel()
        return self._restrict(rows, (3 * j + a).ravel(), G.ravel(), self.n_theta, col_map=False)

    def _modes_dtheta(self):
        prob = self.prob
        n, k = self.phi.shape
        vals = prob.model.mass[:, None] * self.phi                          # (n, k)
        j, i, m, c = np.meshgrid(np.arange(prob.n_steps), np.arange(n), np.arange(k), np.arange(3), indexing="ij")
        rows = (j * self.dof + 3 * i + c).ravel()
        cols = (j * 3 * k + 3 * m + c).ravel()
        return self._restrict(rows, cols, np.broadcast_to(vals[None, :, :, None], j.shape).ravel(), self.n_theta,
                              col_map=False)

    def residual(self, x, jacobian=True):
        parts = self.blocks(x, jacobian)
        r = np.concatenate([p[1] for p in parts])
        J = sp.vstack([p[2] for p in parts]).tocsr() if jacobian else None
        return r, J, parts


def check_jacobians(aug, x, rng, eps=1e-6):
    """{block: relative error of J v against the central difference of r along a random v}."""
    v = rng.standard_normal(x.size)
    v[:aug.n_q] *= 1e-3                                  # positions move by millimetres
    v[aug.n_q:] *= 1e-1
    x = x + 0.1 * rng.standard_normal(x.size) * np.r_[np.full(aug.n_q, 1e-3), np.full(aug.n_theta, 1.0)]
    parts = aug.blocks(x)
    plus, minus = aug.blocks(x + eps * v, False), aug.blocks(x - eps * v, False)
    errors = {}
    for (name, _, J), (_, rp, _), (_, rm, _) in zip(parts, plus, minus):
        fd = (rp - rm) / (2 * eps)
        errors[name] = float(np.linalg.norm(J @ v - fd) / max(np.linalg.norm(fd), 1e-300))
    if aug.n_theta:
        # the driving force's theta-columns alone
        w = np.r_[np.zeros(aug.n_q), v[aug.n_q:]]
        rp, rm = aug.blocks(x + eps * w, False)[0][1], aug.blocks(x - eps * w, False)[0][1]
        fd = (rp - rm) / (2 * eps)
        errors["drive dtheta"] = float(np.linalg.norm(parts[0][2] @ w - fd) / max(np.linalg.norm(fd), 1e-300))
    return errors


def _factor(A):
    """A function b -> A^-1 b of a symmetric positive definite sparse A: CHOLMOD when sksparse is installed,
    else SuperLU."""
    try:
        from sksparse.cholmod import cholesky
    except ImportError:
        return spla.factorized(A.tocsc())
    return cholesky(A.tocsc())


def _split_dense(parts):
    """(sparse J of the parts but the speed row, residual, the speed row as a dense vector or None)."""
    sparse = [p for p in parts if p[0] != "speed"]
    dense = [p for p in parts if p[0] == "speed"]
    r = np.concatenate([p[1] for p in sparse] + [p[1] for p in dense])
    J = sp.vstack([p[2] for p in sparse]).tocsr()
    row = dense[0][2].toarray().ravel() if dense else None
    return J, r, row


def solve(aug, max_iters=30, tol=sc.TOL, lam=1e-3):
    """Levenberg–Marquardt from ``aug.start`` and theta = 0; (x, iterations, loss).

    The speed criterion's one dense row enters as a rank-one update (Sherman–Morrison), so the normal matrix
    keeps the sparsity of the physics rows."""
    x = aug.pack(aug.start, np.zeros(aug.n_theta))
    J, r, row = _split_dense(aug.blocks(x))
    f = 0.5 * r @ r
    prob = aug.prob
    diag = np.r_[np.broadcast_to((6.0 * prob.model.mass / prob.h ** 3)[None, :, None],
                                 (prob.n_steps, prob.n_vertices, 3)).reshape(-1)[aug.rj.free_flat],
                 np.full(aug.n_theta, prob.h * aug.scale ** 2)]
    it = 0
    for it in range(1, max_iters + 1):
        H = (J.T @ J).tocsc()
        g = J.T @ r[:J.shape[0]]
        if row is not None:
            g = g + row * r[-1]
        while True:
            solve_a = _factor(H + lam * sp.diags(diag, format="csc"))
            step = solve_a(-g)
            if row is not None:
                a_row = solve_a(row)
                step = step - a_row * (row @ step) / (1.0 + row @ a_row)
            r_new = np.concatenate([p[1] for p in aug.blocks(x + step, False)])
            f_new = 0.5 * r_new @ r_new
            if f_new < f:
                lam = max(lam / 3, 1e-9)
                break
            lam *= 4
            if lam > 1e12:
                return x, it, f
        x = x + step
        decrease = (f - f_new) / f
        f = f_new
        J, r, row = _split_dense(aug.blocks(x))
        if decrease < tol:
            break
    return x, it, f


def figures(prob, clip, q, drive=None, scene_wind=None, wind=None):
    """The table's figures of a loop q (solver grid)."""
    frames = prob.frames_of(q)
    m = loop_metrics(prob, q)
    u = residual_steps(prob, q) - (0 if drive is None else drive)
    rel = relative_residual(prob, q, u)
    motion = np.sqrt(np.mean(np.sum((clip - clip.mean(axis=0)) ** 2, axis=-1)))
    dist = np.sqrt(np.mean(np.sum((frames - clip) ** 2, axis=-1)))
    dist0 = np.sqrt(np.mean(np.sum((frames[0] - clip[0]) ** 2, axis=-1)))
    row = dict(residual=float(rel.mean()), wrap_v=m["velocity_jump_ratio"], wrap_p=m["position_jump_ratio"],
               speed=rms_speed(frames, prob.dt) / rms_speed(clip, prob.dt), dist=dist / motion, dist0=dist0 / motion)
    if scene_wind is not None:
        k, t = force_steps(prob)
        wforce = scene_wind.forces(q[k], t)
        wrms = np.sqrt(np.mean(np.sum(wforce ** 2, axis=-1)))
        d = 0.0 if drive is None else np.sqrt(np.mean(np.sum(drive ** 2, axis=-1), axis=-1)).max()
        row["drive"] = float(d / wrms)
        base = np.asarray(scene_wind.wind, dtype=float)
        if wind is not None:      # a scene wind varying in time counts as its mean vector
            row["wind"] = float(np.linalg.norm(base.reshape(-1, 3).mean(axis=0) + wind, axis=1).max()
                                / np.linalg.norm(base.reshape(-1, 3).mean(axis=0)))
    return row


def run_case(prob, clip, args, rng):
    cache_q = prob.steps_of(clip)
    cache_rel = relative_residual(prob, cache_q)
    wrap_free = np.delete(cache_rel, [0, prob.n_steps - 1])
    print(f"  {prob.n_vertices} vertices, {prob.n_frames} frames, scheme {prob.scheme}, {len(prob.pins)} pins; "
          f"cache's mean relative residual {cache_rel.mean():.3f} played as a loop, {wrap_free.mean():.3f} "
          f"without the wrap's rows")
    header = (f"  {'candidate':<12} {'iters':>5} {'s':>6} {'loss':>10} {'resid':>7} {'wrap v':>6} {'wrap p':>6} "
              f"{'speed':>6} {'dist':>6} {'dist0':>6} {'drive':>6} {'wind':>6}")
    print(header)
    rows = []
    for name in args.candidates:
        t0 = time.perf_counter()
        drive, wind_peak = None, None
        if name == "make_loop":
            result = sc.loop_clip(prob, clip, init="cache", max_iters=20, physics_tol=sc.PHYSICS_TOL)
            q, iters = result.q, result.nit
            value = loss(prob, q)
            aug = Augmented(prob, clip)
        else:
            family, criterion = name.split("/")
            aug = Augmented(prob, clip, family, criterion, a=args.a, b=args.b, modes=args.modes, track=args.track,
                            seam=args.seam, speed=args.speed, start=args.start,
                            soft_from_start=args.soft_from_start, track_target=args.track_target)
            if args.check:
                errors = check_jacobians(aug, aug.pack(aug.start, np.zeros(aug.n_theta)), rng)
                print("    finite differences, relative error: "
                      + ", ".join(f"{k} {v:.1e}" for k, v in errors.items()))
                t0 = time.perf_counter()
            x, iters, value = solve(aug, args.iterations)
            q, theta = aug.split(x)
            drive = aug.drive(q, theta)
            if family == "wind":
                wind_peak = theta.reshape(-1, 3)
        seconds = time.perf_counter() - t0
        row = dict(name=name, iters=iters, seconds=seconds, loss=value,
                   **figures(prob, clip, q, drive, aug.scene_wind, wind_peak))
        rows.append(row)
        print(f"  {name:<12} {iters:>5} {seconds:>6.1f} {value:>10.4g} {row['residual']:>7.3f} {row['wrap_v']:>6.2f} "
              f"{row['wrap_p']:>6.2f} {row['speed']:>6.2f} {row['dist']:>6.2f} {row['dist0']:>6.2f} "
              f"{row.get('drive', float('nan')):>6.2f} {row.get('wind', float('nan')):>6.2f}", flush=True)
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks motion", description=__doc__.splitlines()[0])
    p.add_argument("--scene", choices=("readme", "gusts", "both"), default="readme",
                   help="the README's main job (flag.blend, frames 49-72), the gusts flag, or both")
    p.add_argument("--problem", help="a saved LoopProblem (.npz) instead of gathering with the bpy module")
    p.add_argument("--clip", help="its cache clip (.npy, n_frames x n x 3), with --problem")
    p.add_argument("--candidates", nargs="+", default=list(CANDIDATES), choices=CANDIDATES, metavar="FAMILY/CRITERION",
                   help=f"which to run (default all: {' '.join(CANDIDATES)})")
    p.add_argument("--iterations", type=int, default=30, help="Levenberg–Marquardt iterations at most")
    p.add_argument("--a", type=float, default=1e-2, help="weight of the driving force's size (1: as a residual)")
    p.add_argument("--b", type=float, default=1.0, help="weight of its periodic second difference")
    p.add_argument("--modes", type=int, default=6, help="Laplacian modes of the body-force family")
    p.add_argument("--track", type=float, default=1e-3, help="tracking weight in units of m / h^3")
    p.add_argument("--seam", type=int, default=4, help="frames either side of the wrap left free of tracking (-1: track every frame)")
    p.add_argument("--speed", type=float, default=1e2, help="weight of the kinetic-energy penalty")
    p.add_argument("--start", choices=("crossfade", "cache"), default="crossfade",
                   help="the start of q: the cache's crossfade (as --init cache) or the cache itself, in phase "
                        "with the soft initial conditions")
    p.add_argument("--soft-from-start", action="store_true",
                   help="pull frames 0 and 1 toward the start's (not the cache's first two frames)")
    p.add_argument("--track-target", choices=("cache", "crossfade"), default="cache",
                   help="the path the track criterion follows: the cache, or its crossfade (periodic)")
    p.add_argument("--no-check", dest="check", action="store_false", help="skip the finite-difference checks")
    p.add_argument("--save", metavar="FOLDER", help="save each gathered problem and clip there")
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    if args.problem:
        cases = [("saved", sc.load_problem(args.problem), np.load(args.clip))]
    else:
        jobs = {"readme": README_JOB, "gusts": GUSTS_JOB}
        names = ["readme", "gusts"] if args.scene == "both" else [args.scene]
        cases = []
        for name in names:
            prob, clip, frames = gather(jobs[name])
            cases.append((f"{name} (frames {frames[0]}-{frames[1]})" if frames else name, prob, clip))
            if args.save:
                os.makedirs(args.save, exist_ok=True)
                sc.save_problem(os.path.join(args.save, f"{name}.npz"), prob)
                np.save(os.path.join(args.save, f"{name}_clip.npy"), clip)
    for label, prob, clip in cases:
        print(f"{label}:")
        run_case(prob, clip, args, rng)
    return 0


if __name__ == "__main__":
    sys.exit(main())
