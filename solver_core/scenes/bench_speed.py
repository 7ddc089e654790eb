"""Speed benchmark: Gauss–Newton steps with plain CHOLMOD vs. the structured (sweep-preconditioned PCG) solve.

``python -m solver_core bench speed`` runs, in one process, the same Gauss–Newton solve with both
backends on problems the size of the paper's flag post, swinging cloth and bouncing doughnut (Table 1):
CHOLMOD for ``--steps`` steps, the structured solve until it reaches CHOLMOD's final loss (inexact
steps may need more of them), and prints seconds per step and in total; then a scaling table of the structured solve on cloth from 100 to 2,000 vertices and 100 to 1,000 frames.
The scenes here are built from the models (cotton cloth, wind, gravity, a tet soft body on a floor) at
the paper's sizes: flag 176 vertices / 300 triangles / 100 frames, swinging cloth 121 / 200 / 200,
doughnut 294 vertices / 973 tets / 60 frames.
"""
import gc
import resource
import threading
import time

import numpy as np

from ..forward import simulate
from ..gauss_newton import GaussNewton
from ..models.cloth import COTTON_YOUNGS_MODULUS, Cloth
from ..models.contact import FloorContact
from ..models.external import Gravity, Wind
from ..models.softbody import SoftBody
from ..problem import LoopProblem
from ..residual import loss
from ..tetmesh import tetrahedralize
from .meshes import torus


def cloth_grid(nx, ny, spacing):
    """Rest positions (nx*ny, 3) of a flat grid in the x-z plane (top row at z = 0) and its triangles."""
    i, j = np.meshgrid(np.arange(nx), np.arange(ny), indexing="ij")
    x = np.stack([i * spacing, np.zeros_like(i, dtype=float), -j * spacing], axis=-1).reshape(-1, 3)
    a = (i[:-1, :-1] * ny + j[:-1, :-1]).ravel()
    b, c, d = a + ny, a + ny + 1, a + 1
    tris = np.concatenate([np.stack([a, b, c], 1), np.stack([a, c, d], 1)])
    return x.astype(float), tris


def flag_problem(nx=16, ny=11, n_frames=100, dt=0.01, wind=(4.0, 1.5, 0.0), warmup=60):
    """Flag post (paper Fig. 2): cotton flag (membrane softened 10x, as Codim-IPC's cloth examples) pinned at its two pole-side corners, gravity and wind.

    16 x 11 vertices (176 vertices, 300 triangles) by default; r0, r1 are frames ``warmup`` and
    ``warmup + 1`` of a forward simulation from rest, as in the paper."""
    rest, tris = cloth_grid(nx, ny, 0.05)
    cloth = Cloth(rest, tris, youngs_modulus=0.1 * COTTON_YOUNGS_MODULUS)
    model = cloth.add(Gravity(cloth.mass), Wind(cloth.n_vertices, tris, wind, coefficient=0.05))
    pins = np.array([0, ny - 1])
    bent = rest + np.array([0.0, 0.01, 0.0]) * np.sin(np.pi * rest[:, :1] / rest[:, 0].max())
    start = LoopProblem(model, warmup + 2, dt, bent, bent, scheme="backward", pins=pins)
    q = simulate(start)
    return LoopProblem(model, n_frames, dt, q[warmup], q[warmup + 1], scheme="backward", pins=pins)


def swing_problem(nx=11, ny=11, n_frames=200, dt=0.01, spacing=0.1):
    """Swinging cloth (paper Fig. 11): a horizontal cotton sheet at rest, pinned at two corners of one edge,
    swings down under gravity (121 vertices, 200 triangles by default)."""
    rest, tris = cloth_grid(nx, ny, spacing)
    flat = rest[:, [0, 2, 1]] * np.array([1.0, -1.0, 0.0])
    flat[:, 2] = 0.02 * np.sin(np.pi * flat[:, 1] / flat[:, 1].max())
    cloth = Cloth(flat, tris, youngs_modulus=0.1 * COTTON_YOUNGS_MODULUS)
    model = cloth.add(Gravity(cloth.mass))
    return LoopProblem(model, n_frames, dt, flat, flat, scheme="backward", pins=np.array([0, (nx - 1) * ny]))


def doughnut_problem(n_frames=60, dt=0.01, nu=24, nv=10, spacing=0.045):
    """Bouncing doughnut (paper Fig. 8): a rubber torus thrown down onto a floor (penalty contact),
    no pins, soft initial conditions on neither frame (hard r0, r1)."""
    surface, tris = torus(0.15, 0.06, nu, nv)
    rest, tets = tetrahedralize(surface, tris, spacing=spacing)
    rest = rest + np.array([0.0, 0.0, 0.12])
    body = SoftBody(rest, tets, density=1100.0, youngs_modulus=2e5, poisson_ratio=0.4)
    model = body.add(Gravity(body.mass), FloorContact(body.n_vertices, mass=body.mass))
    velocity = np.array([0.3, 0.0, -1.5])
    return LoopProblem(model, n_frames, dt, rest, rest + dt * velocity, scheme="backward")


class PeakMemory:
    """Peak resident memory (GB) of this process while the ``with`` block runs, sampled every 20 ms."""

    def __enter__(self):
        self.peak, self._stop = _rss_gb(), threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, _rss_gb())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_gb())


def _rss_gb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2 ** 30


def timed_solve(prob, q0, backend, iters, target=None):
    """Gauss–Newton from q0 for at most ``iters`` steps, stopping early once the loss is <= ``target``.

    Returns a dict: per_step (s), steps, seconds (total), loss (final), peak (GB), cg (PCG iterations
    per solve or None) and losses (per step)."""
    gc.collect()
    with PeakMemory() as mem:
        gn = GaussNewton(prob, backend=backend)
        t0 = time.perf_counter()
        gn.run(q0, max_iters=iters, tol=1e-10, callback=None if target is None else lambda i: i["loss"] <= target)
        seconds = time.perf_counter() - t0
    steps = len(gn.history) - 1
    return dict(per_step=seconds / max(steps, 1), steps=steps, seconds=seconds, loss=gn.history[-1]["loss"],
                peak=mem.peak, cg=getattr(gn.backend, "cg_iterations", None),
                losses=[h["loss"] for h in gn.history])


SCENES = {"flag post": flag_problem, "swinging cloth": swing_problem, "doughnut": doughnut_problem}


def compare_scenes(iters, names=tuple(SCENES), slack=4):
    """CHOLMOD Gauss–Newton for ``iters`` steps from the forward simulation, then the structured solve
    until it reaches CHOLMOD's final loss (+1%), at most ``slack * iters`` steps: per step and in total."""
    print(f"{'scene':>15} {'verts':>5} {'frames':>6} {'unknowns':>8} | {'backend':>10} {'s/step':>7} {'steps':>5} "
          f"{'total s':>8} {'final loss':>11} {'peak GB':>7} | PCG its per solve")
    for name in names:
        prob = SCENES[name]()
        q0 = prob.apply_constraints(simulate(prob))
        head = f"{name:>15} {prob.n_vertices:>5} {prob.n_steps:>6} {int(prob.free_mask().sum()):>8} | "
        runs = {"cholmod": timed_solve(prob, q0, "cholmod", iters)}
        runs["structured"] = timed_solve(prob, q0, "structured", slack * iters, 1.01 * runs["cholmod"]["loss"])
        for backend, r in runs.items():
            print(head + f"{backend:>10} {r['per_step']:>7.2f} {r['steps']:>5} {r['seconds']:>8.1f} {r['loss']:>11.5g} "
                  f"{r['peak']:>7.2f} | {'' if r['cg'] is None else ','.join(map(str, r['cg']))}", flush=True)
        c, s = runs["cholmod"], runs["structured"]
        same = s["losses"][min(iters, s["steps"])]
        print(f"{name:>15}  per step {c['per_step'] / s['per_step']:.1f}x faster, to CHOLMOD's loss "
              f"{c['seconds'] / s['seconds']:.1f}x faster; final loss structured vs CHOLMOD "
              f"{100 * (s['loss'] / c['loss'] - 1):+.2f}% (after {min(iters, s['steps'])} steps "
              f"{100 * (same / c['loss'] - 1):+.2f}%)", flush=True)


def scaling_table(sizes, frames, iters, cholmod_limit):
    """Seconds per step and peak memory of the structured solve (CHOLMOD up to ``cholmod_limit`` unknowns)."""
    print(f"{'verts':>6} {'frames':>6} {'unknowns':>9} | {'structured s/step':>17} {'us/(vert*frame)':>15} "
          f"{'peak GB':>7} {'PCG its':>10} | {'CHOLMOD s/step':>14} {'peak GB':>7}")
    for nx, ny in sizes:
        for n_frames in frames:
            prob = swing_problem(nx=nx, ny=ny, n_frames=n_frames)
            q0 = prob.apply_constraints(np.broadcast_to(prob.r0, (prob.n_steps,) + prob.r0.shape))
            unknowns = int(prob.free_mask().sum())
            r = timed_solve(prob, q0, "structured", iters)
            line = (f"{nx * ny:>6} {n_frames:>6} {unknowns:>9} | {r['per_step']:>17.2f} "
                    f"{1e6 * r['per_step'] / (nx * ny * n_frames):>15.1f} {r['peak']:>7.2f} "
                    f"{','.join(map(str, r['cg'])):>10} | ")
            if unknowns <= cholmod_limit:
                c = timed_solve(prob, q0, "cholmod", iters)
                line += f"{c['per_step']:>14.2f} {c['peak']:>7.2f}"
            else:
                line += f"{'-':>14} {'-':>7}"
            print(line, flush=True)
            del prob, q0
            gc.collect()


def run_benchmark(iters=4, scenes=None, scaling=True, big=True, big_only=False):
    """Scene comparison (``scenes``: names from SCENES, default all, [] for none), then the scaling
    table (cloth grids 10x10 .. 50x40 vertices, 100 .. 1000 frames; 2000 x 1000 alone and last when
    ``big``); ``big_only``: just the 2000 x 1000 row, ``iters`` steps."""
    def big_case(steps):
        scaling_table([(50, 40)], [1000], steps, cholmod_limit=0)

    if big_only:
        big_case(iters)
        return
    compare_scenes(iters, tuple(SCENES) if scenes is None else scenes)
    if scaling:
        print()
        scaling_table([(10, 10), (25, 20), (50, 40)], [100, 300], 2, cholmod_limit=60_000)
        scaling_table([(10, 10), (25, 20)], [1000], 2, cholmod_limit=0)
        if big:
            big_case(2)
