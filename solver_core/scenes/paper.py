"""The paper's scenes (Section 5) rebuilt as LoopProblems, at the paper's size or reduced for tests.

Each builder returns a ``Scene``: the problem, its element count, and the paper's Table 1 row. The
``scale`` argument (0 < scale <= 1) shrinks the mesh and frame counts for fast tests.
"""
from dataclasses import dataclass, field

import numpy as np

from ..physics.forward import simulate
from ..physics.models.cloth import Cloth
from ..physics.models.contact import FloorContact, SphereContact
from ..physics.models.external import Gravity, Wind
from ..physics.models.softbody import SoftBody
from ..problem import LoopProblem
from ..physics import tetmesh
from .meshes import box_tets, grid, torus
from .nbody import nbody_problem

DT = 0.01    # the paper's time step (Section 5)

# Table 1 of the paper: vertices, elements, frames, FP iterations, GN iterations, FP s/it, GN s/it.
PAPER_TABLE = {
    "flag": (174, 300, 100, 24, 246, 5.6, 11.2),
    "nbody": (5, None, 200, None, 80, None, 0.16),
    "ribbons": (243, 243, 100, 96, 156, 2.1, 2.7),
    "doughnut": (281, 990, 60, 19, 86, 2.3, 33.8),
    "wobbly_bar": (133, 390, 250, 19, 82, 6.5, 11.1),
    "swinging_cloth": (121, 200, 200, 97, 17, 3.7, 8.6),
    "twisting_bar": (133, 390, 100, None, 59, None, 5.4),
}


@dataclass
class Scene:
    """A built scene: ``prob`` and what the tables and figures need."""
    name: str
    prob: LoopProblem
    n_elements: int
    init: str = "fast_projection"
    extras: dict = field(default_factory=dict)

    @property
    def paper(self):
        return PAPER_TABLE[self.name]


def _count(full, scale, minimum):
    return max(minimum, int(round(full * scale)))


def _settle(model, x0, n_frames, dt, scheme="backward", pins=None, pin_positions=None, v0=None):
    """Forward simulation of ``n_frames`` from x0 (velocity v0), for starting states taken mid-motion."""
    x1 = x0 if v0 is None else x0 + dt * v0
    prob = LoopProblem(model, max(n_frames, 4), dt, x0, x1, scheme=scheme, pins=pins, pin_positions=pin_positions)
    return simulate(prob, n_frames)


def flag(scale=1.0):
    """Flag post (Fig. 2): a cotton flag held at two corners of its pole edge, gusting wind and gravity;
    r0, r1 from frames 60 and 61 of a forward simulation from rest; 100 frames."""
    nu, nv = _count(29, np.sqrt(scale), 5), _count(6, np.sqrt(scale), 3)
    n_frames = _count(100, scale, 12)
    x, tri = grid(nu, nv, 1.0, 0.4)
    x = x[:, [0, 2, 1]] + [0.0, 0.0, 1.6]           # vertical, in the xz-plane
    pins = np.array([0, (nv - 1) * nu])             # the two corners on the pole (x = 0)
    start = _count(60, scale, 4)
    phase = 2 * np.pi * (start + np.arange(start + n_frames)) / n_frames
    gust = np.stack([4.0 + 1.5 * np.sin(phase), 2.0 * np.sin(2 * phase + 0.3), 0.5 * np.cos(phase)], axis=1)
    cloth = Cloth.cotton(x, tri)
    run_in = cloth.add(Gravity(cloth.mass), Wind(len(x), tri, gust, coefficient=0.3))
    warm = _settle(run_in, x, start + 2, DT, pins=pins)
    model = cloth.add(Gravity(cloth.mass), Wind(len(x), tri, np.roll(gust, -start, axis=0)[:n_frames], coefficient=0.3))
    prob = LoopProblem(model, n_frames, DT, warm[start], warm[start + 1], scheme="backward", pins=pins)
    return Scene("flag", prob, len(tri))


def ribbons(scale=1.0):
    """Ribbons (Fig. 7): three cotton strips hanging from a point handle that orbits 3 times in 100
    frames (fewer turns in a reduced loop, at the same speed)."""
    n_long = _count(27, scale, 6)
    n_frames = _count(100, scale, 12)
    xs, ts, pins = [], [], []
    for k in range(3):
        x, tri = grid(3, n_long, 0.03, 0.5)
        x = x[:, [0, 2, 1]] * [1, 1, -1]                    # hanging down from z = 0
        angle = 2 * np.pi * k / 3
        rot = np.array([[np.cos(angle), -np.sin(angle), 0], [np.sin(angle), np.cos(angle), 0], [0, 0, 1]])
        x = (x - [0.015, 0, 0] + [0, -0.02, 0]) @ rot.T + [0, 0, 1.0]
        ts.append(tri + len(xs) * 3 * n_long)
        pins.append(len(xs) * 3 * n_long + np.arange(3))
        xs.append(x)
    x, tri, pins = np.concatenate(xs), np.concatenate(ts), np.concatenate(pins)
    turns = 3 * n_frames / 100                         # 3 turns in 100 frames: the handle's speed
    t = turns * np.arange(n_frames) / n_frames
    handle = 0.12 * np.stack([np.cos(2 * np.pi * t) - 1, np.sin(2 * np.pi * t), 0 * t], axis=1)
    pin_positions = x[pins][None] + handle[:, None]
    cloth = Cloth.cotton(x, tri)
    model = cloth.add(Gravity(cloth.mass))
    r1 = x + (handle[1] - handle[0])                   # the strips start moving with the handle
    prob = LoopProblem(model, n_frames, DT, x, r1, scheme="backward", pins=pins, pin_positions=pin_positions)
    return Scene("ribbons", prob, len(tri))


def doughnut(scale=1.0):
    """Bouncing doughnut (Fig. 8): a soft torus thrown down onto the floor; 60 frames."""
    n_major = _count(18, np.sqrt(scale), 8)
    n_minor = _count(8, np.sqrt(scale), 5)
    n_frames = _count(60, scale, 12)
    surf, tris = torus(0.25, 0.1, n_major, n_minor)
    rest, tets = tetmesh.tetrahedralize(surf, tris)
    body = SoftBody(rest, tets, density=1000.0, youngs_modulus=2e5, poisson_ratio=0.4)
    rot = np.array([[1, 0, 0], [0, np.cos(0.4), -np.sin(0.4)], [0, np.sin(0.4), np.cos(0.4)]])
    x0 = rest @ rot.T + [0, 0, 0.3]
    model = body.add(Gravity(body.mass), FloorContact(len(rest), height=0.0, mass=body.mass,
                                                      vertices=np.arange(len(surf))))
    v0 = np.array([0.0, 0.0, -2.0])
    prob = LoopProblem(model, n_frames, DT, x0, x0 + DT * v0, scheme="backward")
    return Scene("doughnut", prob, len(tets), extras=dict(n_surface=len(surf), floor=0.0))


def _bar(scale):
    nz = _count(8, scale, 4)
    x, tets = box_tets(4, 4, nz, (0.08, 0.08, 0.4))
    pinned = np.flatnonzero(x[:, 2] == 0.0)          # the bottom face is clamped
    return x, tets, pinned


def wobbly_bar(scale=1.0):
    """Wobbly bar (Fig. 10): an upright bar clamped at its base, hit by a ball moving at constant
    velocity through the scene; 250 frames."""
    x, tets, pins = _bar(scale)
    n_frames = _count(250, scale, 12)
    body = SoftBody(x, tets, density=1000.0, youngs_modulus=1e5, poisson_ratio=0.4)
    t = np.arange(n_frames) / n_frames
    centers = np.stack([0.04 + 0 * t, -0.6 + 1.2 * t, 0.32 + 0 * t], axis=1)
    model = body.add(Gravity(body.mass), SphereContact(len(x), centers, 0.08, mass=body.mass))
    prob = LoopProblem(model, n_frames, DT, x, x, scheme="backward", pins=pins)
    return Scene("wobbly_bar", prob, len(tets), extras=dict(ball_centers=centers, ball_radius=0.08))


def swinging_cloth(scale=1.0):
    """Swinging cloth (Fig. 11): a square cotton cloth held along one edge, released flat under gravity."""
    n = _count(11, np.sqrt(scale), 5)
    n_frames = _count(200, scale, 12)
    x, tri = grid(n, n, 0.5, 0.5)
    x = x + [0, 0, 1.0]
    pins = np.arange(n)                               # the edge y = 0
    cloth = Cloth.cotton(x, tri)
    model = cloth.add(Gravity(cloth.mass))
    prob = LoopProblem(model, n_frames, DT, x, x, scheme="backward", pins=pins)
    return Scene("swinging_cloth", prob, len(tri))


def twisting_bar(scale=1.0):
    """Twisting bar (Fig. 12): an upright bar clamped at its base, released twisted by 180 degrees at
    its top; fast projection diverges (Remark 2) and make_loop falls back to the forward simulation."""
    x, tets, pins = _bar(scale)
    n_frames = _count(100, scale, 12)
    body = SoftBody(x, tets, density=1000.0, youngs_modulus=1e5, poisson_ratio=0.4)
    angle = np.pi * x[:, 2] / x[:, 2].max()
    c = x[:, :2] - 0.04
    twisted = np.stack([0.04 + c[:, 0] * np.cos(angle) - c[:, 1] * np.sin(angle),
                        0.04 + c[:, 0] * np.sin(angle) + c[:, 1] * np.cos(angle), x[:, 2]], axis=1)
    prob = LoopProblem(body, n_frames, DT, twisted, twisted, scheme="backward", pins=pins)
    return Scene("twisting_bar", prob, len(tets), init="fast_projection")


def nbody(scale=1.0):
    """N-body (Fig. 6): five equal masses, 200 frames."""
    return Scene("nbody", nbody_problem(5, n_frames=_count(200, scale, 20), seed=1, perturbation=0.02), 0)


SCENES = {f.__name__: f for f in (flag, ribbons, doughnut, wobbly_bar, swinging_cloth, twisting_bar, nbody)}
