"""Blender Cloth modifier settings mapped to a ``BlenderCloth`` model, a time step and a sub-step count.

Blender integrates cloth in its own time unit tau, not seconds (Blender 4.x sources):

- ``SIM_cloth_solve`` (``SIM_mass_spring.cc``) advances one frame by ``tf = timescale`` in steps of
  ``dt = sim_parms->dt * timescale``, where ``sim_parms->dt = 1 / stepsPerFrame`` (``do_init_cloth`` in
  ``cloth.cc``) and ``timescale = framelen * time_scale`` (``clothModifier_do``; ``framelen`` is 1 without
  time remapping, ``BKE_ptcache_id_time``). So a frame lasts ``time_scale`` tau, in ``quality`` sub-steps.
- ``cloth_calc_force`` applies gravity ``mass * 0.001 * scene_gravity * effector_weights.gravity`` and drag
  ``-0.01 * air_damping * v`` (``SIM_mass_spring_force_drag``: no mass factor), all in tau units;
  ``cloth_calc_spring_force`` damps relative velocities along springs with ``tension_damping``,
  ``compression_damping``, ``shear_damping`` and across hinges with ``bending_damping`` (angular model).
- ``SIM_mass_spring_solve_velocities`` takes one linearized backward-Euler step per sub-step, the scheme
  ``"linearized"`` of ``solver_core.physics.scheme``.

Taking one tau as ``1 / fps`` seconds turns Blender's equations ``m x'' = F + ...`` (' = d/dtau) into
seconds by multiplying every force by ``fps**2`` and every damping coefficient by ``fps``: the model below
has stiffnesses ``fps**2`` times the settings, damping coefficients ``fps`` times, and gravity
``0.001 * fps**2 * g``.
The Speed Multiplier then only stretches time: a frame lasts ``time_scale / fps`` seconds.

Not mapped (``BlenderCloth`` has no such terms): internal springs, pressure, shrinking, sewing, per-vertex
stiffness groups, collisions and force fields. Blender evaluates the angular springs and their damping explicitly
(no Jacobian); so does the linearized scheme on steps no longer than Blender's sub-step (their terms'
``explicit_step``), and linearizes them on longer ones (a loop on the frame grid), where they would be past an
explicit step's stability limit.
"""
import numpy as np

from .. import tetmesh
from .blender_cloth import BlenderCloth
from .external import Gravity
from .softbody import SoftBody

GRAVITY_SCALE = 0.001  # Blender's cloth and soft body scale scene gravity by this factor (cloth_calc_force)
DRAG_SCALE = 0.01      # Blender's soft body media friction per unit velocity and setting
# the ``bpy.types.SoftBodySettings`` attributes read by ``blender_soft_body_problem_parts``
SOFT_BODY_SETTINGS = ("pull", "push", "friction", "mass", "speed")


def blender_gravity(gravity, fps):
    """Scene gravity (m/s^2) as Blender's cloth and soft body apply it, in seconds: GRAVITY_SCALE per
    frame^2 of their time unit, so ``GRAVITY_SCALE * fps**2 * gravity``."""
    return GRAVITY_SCALE * fps ** 2 * np.asarray(gravity, dtype=float)

# Blender 4.x defaults of the ``ClothSettings`` read by ``blender_cloth_problem_parts``; the keys are the
# ``bpy.types.ClothSettings`` attribute names.
CLOTH_SETTINGS_DEFAULTS = {
    "mass": 0.3,
    "tension_stiffness": 15.0,
    "compression_stiffness": 15.0,
    "shear_stiffness": 5.0,
    "bending_stiffness": 0.5,
    "air_damping": 1.0,
    "bending_model": "ANGULAR",
    "bending_damping": 0.5,
    "tension_damping": 5.0,
    "compression_damping": 5.0,
    "shear_damping": 5.0,
    "quality": 5,
    "time_scale": 1.0,
}


def blender_cloth_problem_parts(rest_positions, faces, settings, fps, frame_step=1, gravity=(0.0, 0.0, -9.81)):
    """``(model, dt, substeps)`` reproducing what Blender's cloth solver integrates, in seconds.

    ``rest_positions``: (n, 3) world-space rest shape (the mesh at the cache's start frame); ``faces``: the
    polygons as vertex-index sequences (``mesh.polygons``). ``settings``: a mapping with every key of
    ``CLOTH_SETTINGS_DEFAULTS`` (``ClothSettings`` attributes; ``bending_model`` is ``"ANGULAR"`` or
    ``"LINEAR"``, any case). ``fps``: ``scene.render.fps / scene.render.fps_base``. ``frame_step``: the cache
    frames the loop samples are this many frames apart. ``gravity``: ``scene.gravity`` times the cloth's
    ``effector_weights.gravity`` (zero when ``scene.use_gravity`` is off).

    ``model``: ``BlenderCloth`` plus ``Gravity``, mass in kg (the Vertex Mass), time in seconds.
    ``dt = frame_step * time_scale / fps``: seconds between two sampled frames. ``substeps = frame_step *
    quality``: Blender's implicit steps in that time, for ``LoopProblem(..., substeps=substeps)``.
    """
    missing = sorted(set(CLOTH_SETTINGS_DEFAULTS) - set(settings))
    if missing:
        raise ValueError(f"cloth settings lack {missing}")
    fps, time_scale = float(fps), float(settings["time_scale"])
    if not (np.isfinite(fps) and fps > 0):
        raise ValueError(f"fps must be positive, got {fps}")
    if not (np.isfinite(time_scale) and time_scale > 0):
        raise ValueError(f"time_scale must be positive, got {time_scale}")
    for name, value in (("frame_step", frame_step), ("quality", settings["quality"])):
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value}")
    force_scale = fps ** 2
    cloth = BlenderCloth(
        rest_positions, faces, settings["mass"],
        tension_stiffness=force_scale * settings["tension_stiffness"],
        compression_stiffness=force_scale * settings["compression_stiffness"],
        shear_stiffness=force_scale * settings["shear_stiffness"],
        bending_stiffness=force_scale * settings["bending_stiffness"],
        air_damping=fps * settings["air_damping"],
        bending_model=str(settings["bending_model"]).lower(),
        bending_damping=settings["bending_damping"],
        tension_damping=fps * settings["tension_damping"],
        compression_damping=fps * settings["compression_damping"],
        shear_damping=fps * settings["shear_damping"],
        angular_damping=fps * settings["bending_damping"],
        explicit_step=time_scale / (fps * int(settings["quality"])))
    model = cloth.add(Gravity(cloth.mass, blender_gravity(gravity, fps)))
    return model, int(frame_step) * time_scale / fps, int(frame_step) * int(settings["quality"])


def blender_soft_body_problem_parts(rest_positions, tris, edges, settings, fps, frame_step=1,
                                    gravity=(0.0, 0.0, -9.81)):
    """(model, dt, substeps, tet_vertices, tets) mapping a Blender soft body to a tetrahedral SoftBody.

    Blender's soft body is a spring network on the mesh ``edges`` with force ``iks * strain``,
    ``iks = 1 / (1 - pull) - 1``; an isotropic central-force network of total edge length L in a volume
    V has Young's modulus ``iks * L / (6 V)`` and Poisson's ratio 1/4. Like cloth it runs in frames (times
    its Speed) with GRAVITY_SCALE x gravity and drag DRAG_SCALE x Friction, turned into seconds here.
    ``settings``: the SOFT_BODY_SETTINGS values; the closed surface ``rest_positions`` / ``tris`` is filled
    with tetrahedra whose first vertices are the surface's.
    """
    fps = float(fps)
    tet_verts, tets = tetmesh.tetrahedralize(rest_positions, tris)
    n_surface = len(rest_positions)
    volume = abs(tetmesh.enclosed_volume(rest_positions, tris))
    stiffness = 0.5 * (settings["pull"] + settings["push"])
    iks = 1.0 / (1.0 - min(stiffness, 0.999)) - 1.0
    length = np.linalg.norm(rest_positions[edges[:, 0]] - rest_positions[edges[:, 1]], axis=1).sum()
    damping = np.zeros(len(tet_verts))
    damping[:n_surface] = DRAG_SCALE * fps * settings["friction"]
    body = SoftBody(tet_verts, tets, density=settings["mass"] * n_surface / volume,
                    youngs_modulus=fps ** 2 * max(iks, 1e-6) * length / (6.0 * volume), poisson_ratio=0.25,
                    damping=damping)
    model = body.add(Gravity(body.mass, blender_gravity(gravity, fps)))
    return model, frame_step * settings["speed"] / fps, 1, tet_verts, tets
