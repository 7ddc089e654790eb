"""Cloth and soft-body LoopProblems the size of the paper's flag post, swinging cloth and bouncing doughnut
(Table 1), built from the models (cotton cloth, wind, gravity, a tet soft body on a floor): flag 176 vertices /
300 triangles / 100 frames, swinging cloth 121 / 200 / 200, doughnut 294 vertices / 973 tets / 60 frames.
The speed benchmark (``python -m benchmarks speed``) times Gauss–Newton on them; tests solve reduced ones.
``paper.py`` holds the paper's scenes as Table 1 rebuilds them (with their Table 1 rows).
"""
import numpy as np

from ..physics.forward import simulate
from ..physics.models.cloth import COTTON_YOUNGS_MODULUS, Cloth
from ..physics.models.contact import FloorContact
from ..physics.models.external import Gravity, Wind
from ..physics.models.softbody import SoftBody
from ..problem import LoopProblem
from ..physics.tetmesh import tetrahedralize
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


PROBLEMS = {"flag post": flag_problem, "swinging cloth": swing_problem, "doughnut": doughnut_problem}
