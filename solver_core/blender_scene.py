"""A Blender scene read into plain data -> the mapped model and the LoopProblem (no bpy).

The add-on's ``scene_reader`` reads the scene into the records below (numpy arrays in world space, the
modifier's settings as a plain mapping, gravity, winds, colliders per frame, fps); the functions here
turn them into the force model with its wind and contact terms, the time step and the sub-steps (the
mappings of ``models/blender_settings.py``), and then the LoopProblem. So the mapping of a scene runs
and is tested without Blender.
"""
from dataclasses import dataclass, field

import numpy as np

from .physics import tetmesh
from .physics.models.blender_settings import (blender_cloth_problem_parts, blender_gravity,
                                              blender_soft_body_problem_parts)
from .physics.models.cloth import Cloth
from .physics.models.contact import MeshContact
from .physics.models.external import Gravity, Wind, WindFlow
from .physics.models.nbody import NBody
from .problem import LoopProblem

BLENDER_WIND_SCALE = 0.02   # effector_scale of Blender's cloth face wind
CONTACT_LOAD = 100.0        # contact pushes out with this many vertex weights at the collider surface


@dataclass
class Collider:
    """A collider's world-space surface per frame: ``vertices`` (N, v, 3), ``tris`` (T, 3), and its
    ``thickness`` (Blender's outer collision thickness, m)."""
    vertices: np.ndarray
    tris: np.ndarray
    thickness: float


@dataclass
class MeshScene:
    """A simulated mesh as read from the scene, in world space and seconds.

    ``model``: "blender_cloth", "shell" (thin shell) or "soft_body". ``physics``: the modifier's settings,
    a mapping with the ``CLOTH_SETTINGS_DEFAULTS`` keys (cloth) or the ``SOFT_BODY_SETTINGS`` (soft body).
    ``rest`` (n, 3) and ``source`` (N, n, 3): the rest shape and the cached frames; ``faces`` (polygons as
    index arrays), ``tris`` (T, 3), ``edges`` (E, 2): the topology. ``fps``: the scene's frames per
    second; ``frame_step``: scene frames between two cached frames. ``gravity``: the scene's gravity times
    the modifier's effector weight (m/s^2; zero when the scene has none). ``wind``: (N, 3) the wind fields'
    summed strength vectors per frame, or None. ``collision_distance``: the cloth's minimum distance, added
    to each collider's thickness. ``pins``: the hard-pinned vertex indices. ``wind_flow``: the wind fields'
    summed Flow (times the modifier's effector weights): Blender's cloth feels the wind relative to its own
    velocity times this (Blender cloth only).
    """
    model: str
    physics: dict
    rest: np.ndarray
    faces: list
    tris: np.ndarray
    edges: np.ndarray
    source: np.ndarray
    fps: float
    frame_step: int = 1
    gravity: np.ndarray = field(default_factory=lambda: np.zeros(3))
    wind: np.ndarray = None
    colliders: list = field(default_factory=list)
    collision_distance: float = 0.0
    pins: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    wind_flow: float = 0.0


@dataclass
class BodiesScene:
    """Animated bodies as read from the scene: ``masses`` (bodies,) kg, world positions ``source``
    (N, bodies, 3), ``fps``, ``frame_step``, and the NBody law's ``G`` and ``softening``."""
    masses: np.ndarray
    source: np.ndarray
    fps: float
    frame_step: int = 1
    G: float = 1.0
    softening: float = 0.0


@dataclass
class LoopParts:
    """A mapped model and its time grid, before the LoopProblem: ``source`` (N, n, 3) the forward cache on
    the model's vertices (a soft body's interior filled in), ``dt`` seconds between two frames, ``substeps``
    per frame, ``pins`` the hard-pinned vertex indices."""
    model: object
    source: np.ndarray
    dt: float
    substeps: int
    pins: np.ndarray


def mesh_parts(scene):
    """LoopParts of a simulated mesh (``MeshScene``): its model with gravity, wind and collider contact."""
    if scene.model == "soft_body":
        return _soft_body(scene)
    return _cloth(scene)


def bodies_parts(bodies):
    """LoopParts of N bodies (``BodiesScene``): an NBody model, one sub-step per frame, no pins."""
    model = NBody(bodies.masses, G=bodies.G, softening=bodies.softening)
    return LoopParts(model, bodies.source, bodies.frame_step / bodies.fps, 1, np.zeros(0, np.int64))


def problem_from_parts(parts, scheme, soft=0.0, substeps=0):
    """The LoopProblem of ``parts`` over its source's frames: r0, r1 and the pins' positions from the
    source; ``soft`` > 0 makes r0 and r1 soft constraints; ``substeps`` 0 takes the parts' own."""
    source = parts.source
    return LoopProblem(parts.model, n_frames=len(source), dt=parts.dt, r0=source[0], r1=source[1],
                       scheme=scheme, eps0=soft, eps1=soft, pins=parts.pins, pin_positions=source[:, parts.pins],
                       substeps=int(substeps) or parts.substeps)


def contact_terms(colliders, n, mass, gravity, extra_thickness=0.0, vertices=None):
    """MeshContact terms for ``colliders`` (Collider records) with stiffness CONTACT_LOAD * |g| * m /
    thickness, in the model's own units (``gravity`` as the model applies it); a collider that does not
    move is one static surface."""
    g = np.linalg.norm(gravity) or 9.81
    terms = []
    for collider in colliders:
        verts = collider.vertices
        verts = verts[0] if np.ptp(verts, axis=0).max() < 1e-9 else verts
        thickness = collider.thickness + extra_thickness
        stiffness = CONTACT_LOAD * g * mass / thickness
        terms.append(MeshContact(n, verts, collider.tris, stiffness=stiffness, thickness=thickness,
                                 vertices=vertices))
    return terms


def _cloth(scene):
    """Blender's cloth springs or the thin-shell cloth. Blender's cloth runs in its own time unit; its
    forces, gravity and face wind are turned into seconds by the factor fps^2 (``blender_cloth_problem_parts``).
    Its face wind is BLENDER_WIND_SCALE x area x the normal pressure of the wind per frame, strength / fps
    (``do_physical_effector`` divides a wind field's force by the scene's frame rate), minus Flow x the
    cloth's velocity per frame (``WindFlow``): coefficient BLENDER_WIND_SCALE x fps in seconds."""
    n, fps, step = len(scene.rest), scene.fps, scene.frame_step
    terms = []
    if scene.model == "blender_cloth":
        built, dt, substeps = blender_cloth_problem_parts(scene.rest, scene.faces, scene.physics, fps, step,
                                                          scene.gravity)
        gravity, coefficient = blender_gravity(scene.gravity, fps), BLENDER_WIND_SCALE * fps
        if scene.wind is not None and scene.wind_flow > 0:
            terms.append(WindFlow(n, scene.tris, coefficient * scene.wind_flow))
    else:
        built = Cloth.cotton(scene.rest, scene.tris)
        built = built.add(Gravity(built.mass, scene.gravity))
        gravity, coefficient = scene.gravity, 1.0
        dt, substeps = step / fps, step * max(int(scene.physics["quality"]), 1)
    if scene.wind is not None:
        wind = scene.wind
        terms.append(Wind(n, scene.tris, wind[0] if np.ptp(wind, axis=0).max() < 1e-12 else wind, coefficient))
    terms += contact_terms(scene.colliders, n, built.mass, gravity, scene.collision_distance)
    return LoopParts(built.add(*terms), scene.source, dt, substeps, scene.pins)


def _soft_body(scene):
    """Blender's soft body as a tetrahedral SoftBody (``blender_soft_body_problem_parts``) with contact on
    its surface vertices; the source's interior is filled in."""
    n_surface = len(scene.rest)
    built, dt, substeps, tet_verts, tets = blender_soft_body_problem_parts(
        scene.rest, scene.tris, scene.edges, scene.physics, scene.fps, scene.frame_step, scene.gravity)
    terms = contact_terms(scene.colliders, len(tet_verts), built.mass, blender_gravity(scene.gravity, scene.fps),
                          scene.collision_distance, vertices=np.arange(n_surface))
    source = tetmesh.fill_interior(tet_verts, tets, n_surface, scene.source)
    return LoopParts(built.add(*terms), source, dt, substeps, scene.pins)
