"""Residual of a cloth cache baked by Blender's own solver, under the compatible model and a mismatched one.

    .venv/bin/python -m benchmarks blender_cloth_residual

Builds a 2 m plane of 10 x 10 quads pinned at two corners in memory, bakes Blender's cloth cache (40
frames), reads the evaluated mesh per frame in world space and prints, for the compatible model
(``solver_core.blender_cloth_problem_parts``: Blender's springs, hinges, air drag and velocity damping) and
for ``Cloth.cotton`` with SI gravity: the residual of ``solver_core.physics.residual`` relative to the applied force
and the loss, under the backward-Euler and the linearized scheme, pinned rows and the two rows that wrap
around the (non-looping) cache left out. Blender's sub-step grid is read from a cache baked with
``quality=1`` and ``time_scale / quality``, which takes exactly the same steps.

Blender takes one linearized backward-Euler step per sub-step (``SIM_mass_spring_solve_velocities``); at
the default quality 5 its structural springs have omega * h ~ 3, so a converged backward-Euler residual
does not describe its cache, the linearized scheme does.
"""
import argparse
import contextlib
import os
import sys

import bpy  # first: it makes bmesh importable
import bmesh
import numpy as np

import solver_core as sc
from solver_core.physics.residual import force_steps

FPS = 24
# Blender's damping of relative velocities along springs and across hinges, which BlenderCloth does not model.
NO_VELOCITY_DAMPING = dict(tension_damping=0.0, compression_damping=0.0, shear_damping=0.0, bending_damping=0.0)


@contextlib.contextmanager
def _quiet():
    """Silence the process's stdout (the bake prints one line per frame from C)."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def bake_cloth(settings=None, n_frames=40, segments=10, fps=FPS):
    """Bake Blender's cloth on a fresh scene; returns ``(q (n_frames, n, 3), faces, pins)``.

    ``settings``: ClothSettings attributes to override (Blender's defaults otherwise). Frame 1 is the rest
    shape; the two corners of the +y edge are pinned through the vertex group "pin".
    """
    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    scene.render.fps, scene.render.fps_base = fps, 1.0
    mesh = bpy.data.meshes.new("cloth")
    bm = bmesh.new()
    bmesh.ops.create_grid(bm, x_segments=segments, y_segments=segments, size=1.0)
    bm.to_mesh(mesh)
    bm.free()
    obj = bpy.data.objects.new("cloth", mesh)
    scene.collection.objects.link(obj)
    n = len(mesh.vertices)
    co = np.empty(3 * n)
    mesh.vertices.foreach_get("co", co)
    co = co.reshape(n, 3)
    edge = np.flatnonzero(np.isclose(co[:, 1], co[:, 1].max()))
    pins = np.array([edge[np.argmin(co[edge, 0])], edge[np.argmax(co[edge, 0])]])
    obj.vertex_groups.new(name="pin").add(pins.tolist(), 1.0, "REPLACE")
    cloth = obj.modifiers.new("Cloth", "CLOTH")
    cloth.settings.vertex_group_mass = "pin"
    for name, value in (settings or {}).items():
        setattr(cloth.settings, name, value)
    scene.frame_start = cloth.point_cache.frame_start = 1
    scene.frame_end = cloth.point_cache.frame_end = n_frames
    with _quiet(), bpy.context.temp_override(scene=scene, active_object=obj, object=obj,
                                             point_cache=cloth.point_cache):
        bpy.ops.ptcache.bake_all(bake=True)
    q = np.empty((n_frames, n, 3))
    x = np.empty(3 * n)
    for k in range(n_frames):
        scene.frame_set(k + 1)
        evaluated = obj.evaluated_get(bpy.context.evaluated_depsgraph_get())
        evaluated.data.vertices.foreach_get("co", x)
        world = np.array(evaluated.matrix_world)
        q[k] = x.reshape(n, 3) @ world[:3, :3].T + world[:3, 3]
    faces = [tuple(p.vertices) for p in mesh.polygons]
    return q, faces, pins


def cotton_model(rest, faces):
    """The mismatched model: thin-shell cotton on the triangulated quads, SI gravity."""
    triangles = [(f[0], f[i], f[i + 1]) for f in faces for i in range(1, len(f) - 1)]
    cloth = sc.Cloth.cotton(rest, triangles)
    return cloth.add(sc.Gravity(cloth.mass))


def _relative(u, f, pins):
    """Mean over steps of |u_j| / |F_j| (net force) on the free vertices (the measure of the compatibility
    figures in benchmarks/results, not the forces at play of ``sc.loop_metrics``)."""
    free = np.setdiff1d(np.arange(u.shape[1]), pins)
    u_norm = np.linalg.norm(u[:, free].reshape(len(u), -1), axis=1)
    f_norm = np.linalg.norm(f[:, free].reshape(len(f), -1), axis=1)
    return float(np.mean(u_norm / f_norm))


def residual_figures(model, dt, substeps, q, pins, scheme):
    """``(relative residual, loss)`` of a cached trajectory under ``scheme``.

    ``q``: the cache on a grid of ``substeps`` steps per frame. Only rows that do not wrap around the cache
    count; relative residual: mean over steps of |u_j| / |F_j| on the free vertices (F at the positions the
    scheme's forces see); loss = sum_j h/2 |u_j|^2_{M^-1}.
    """
    prob = sc.LoopProblem(model, len(q) // substeps, dt, q[0], q[substeps], scheme=scheme, pins=pins,
                          substeps=substeps)
    u = sc.residual(prob, q)[1:-1]
    k, t = force_steps(prob)
    f = model.forces(q[k], t)[1:-1]
    loss = float(0.5 * prob.h * np.sum(u * u / model.mass[:, None]))
    return _relative(u, f, pins), loss


def compare(label, settings, n_frames, substep_grid):
    """Bake with ``settings`` (overrides of Blender's defaults), print both models' figures per scheme.

    Returns ``{scheme: (compatible relative residual, mismatched relative residual)}``."""
    full = dict(sc.CLOTH_SETTINGS_DEFAULTS, **{k: v for k, v in settings.items() if k in sc.CLOTH_SETTINGS_DEFAULTS})
    if substep_grid:  # quality 1 at time_scale / quality takes Blender's sub-steps as frames
        q, faces, pins = bake_cloth(dict(settings, quality=1, time_scale=full["time_scale"] / full["quality"]),
                                    n_frames * full["quality"])
    else:
        q, faces, pins = bake_cloth(settings, n_frames)
    model, dt, substeps = sc.blender_cloth_problem_parts(q[0], faces, full, FPS)
    substeps = substeps if substep_grid else 1
    print(f"{label}: dt {dt:.5f} s, {substeps} step(s) per frame")
    out = {}
    for scheme in ("backward", "linearized"):
        compatible = residual_figures(model, dt, substeps, q, pins, scheme)
        mismatched = residual_figures(cotton_model(q[0], faces), dt, substeps, q, pins, scheme)
        print(f"  {scheme:10s}  compatible BlenderCloth: residual/force {compatible[0]:.4f} (loss {compatible[1]:.4g})"
              f"   mismatched Cloth.cotton: {mismatched[0]:.4f} (loss {mismatched[1]:.4g})"
              f"   ratio {mismatched[0] / compatible[0]:.1f}")
        out[scheme] = (compatible[0], mismatched[0])
    return out


def main(argv=None):
    argparse.ArgumentParser(prog="python -m benchmarks blender_cloth_residual",
                            description=__doc__.splitlines()[0]).parse_args(argv)
    print(f"Blender {bpy.app.version_string}, 10x10 quads, 2 corners pinned, 40 frames at {FPS} fps")
    compare("default settings, Blender's sub-step grid", {}, 40, True)
    compare("quality 40, sub-step grid", dict(quality=40), 40, True)
