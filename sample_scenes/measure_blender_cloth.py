"""Residual of a cloth cache baked by Blender's own solver, under the compatible model and a mismatched one.

    .venv/bin/python sample_scenes/measure_blender_cloth.py

Builds a 2 m plane of 10 x 10 quads pinned at two corners in memory, bakes Blender's cloth cache (40
frames), reads the evaluated mesh per frame in world space and prints, for the compatible model
(``solver_core.blender_cloth_problem_parts``) and for ``Cloth.cotton`` with SI gravity: the residual of
``solver_core.residual`` relative to the applied force and the loss, pinned rows and the two rows that wrap
around the (non-looping) cache left out. Blender's sub-step grid is read from a cache baked with
``quality=1`` and ``time_scale / quality``, which takes exactly the same steps.

Two things keep a default-settings cache away from a backward-Euler trajectory of its own springs: Blender
takes one Newton step per sub-step (at quality 5 the structural springs have omega * h ~ 3, so the
linearization leaves stretch errors that these stiff springs turn into large forces), and it damps relative
velocities along springs and across hinges, which ``BlenderCloth`` does not model. The "Blender-step"
figure (the residual of Blender's linearized step) isolates the model; the last case removes both.
"""
import contextlib
import os
import sys

import bpy  # first: it makes bmesh importable
import bmesh
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import solver_core as sc  # noqa: E402

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
    """Mean over steps of |u_j| / |F_j| on the free vertices (as ``sc.loop_metrics``)."""
    free = np.setdiff1d(np.arange(u.shape[1]), pins)
    u_norm = np.linalg.norm(u[:, free].reshape(len(u), -1), axis=1)
    f_norm = np.linalg.norm(f[:, free].reshape(len(f), -1), axis=1)
    return float(np.mean(u_norm / f_norm))


def residual_figures(model, dt, substeps, q, pins):
    """Backward-Euler ``(relative residual, loss, Blender-step relative residual)`` of a cached trajectory.

    ``q``: the cache on a grid of ``substeps`` steps per frame. Only rows that do not wrap around the cache
    count; loss = sum_j h/2 |u_j|^2_{M^-1}. Blender's step (``SIM_mass_spring_solve_velocities``) is one
    Newton step of backward Euler, the force at q_{j+1} linearized at q_j: F(q_j) + dF/dq(q_j) (q_{j+1} - q_j);
    its residual is the backward one with that force.
    """
    prob = sc.LoopProblem(model, len(q) // substeps, dt, q[0], q[substeps], scheme="backward", pins=pins,
                          substeps=substeps)
    u = sc.residual(prob, q)[1:-1]
    j = np.arange(1, prob.n_steps - 1)
    here, step = q[j], q[j + 1] - q[j]
    f_next, f_here = model.forces(q[j + 1], prob.step_times(j + 1)), model.forces(here, prob.step_times(j))
    rows, cols = model.jacobian_pattern()
    flat = step.reshape(len(j), -1)
    linear = np.stack([np.bincount(rows, weights=v * d[cols], minlength=flat.shape[1])
                       for v, d in zip(model.jacobian_values(here, prob.step_times(j)), flat)])
    u_blender = u + f_next - f_here - linear.reshape(step.shape)
    u_blender[:, pins] = 0.0
    loss = float(0.5 * prob.h * np.sum(u * u / model.mass[:, None]))
    return _relative(u, f_next, pins), loss, _relative(u_blender, f_next, pins)


def compare(label, settings, n_frames, substep_grid):
    """Bake with ``settings`` (overrides of Blender's defaults), print both models' figures."""
    full = dict(sc.CLOTH_SETTINGS_DEFAULTS, **{k: v for k, v in settings.items() if k in sc.CLOTH_SETTINGS_DEFAULTS})
    if substep_grid:  # quality 1 at time_scale / quality takes Blender's sub-steps as frames
        q, faces, pins = bake_cloth(dict(settings, quality=1, time_scale=full["time_scale"] / full["quality"]),
                                    n_frames * full["quality"])
    else:
        q, faces, pins = bake_cloth(settings, n_frames)
    model, dt, substeps = sc.blender_cloth_problem_parts(q[0], faces, full, FPS)
    substeps = substeps if substep_grid else 1
    figures = {"compatible BlenderCloth": residual_figures(model, dt, substeps, q, pins),
               "mismatched Cloth.cotton": residual_figures(cotton_model(q[0], faces), dt, substeps, q, pins)}
    print(f"{label}: dt {dt:.5f} s, {substeps} step(s) per frame")
    for name, (relative, loss, blender_step) in figures.items():
        step = f"  Blender-step residual/force {blender_step:.4f}" if substep_grid else ""
        print(f"  {name}: residual/force {relative:.4f}  loss {loss:.4g}{step}")
    (compatible, _, compatible_step), (mismatched, _, mismatched_step) = figures.values()
    step = f", Blender step {mismatched_step / compatible_step:.1f}" if substep_grid else ""
    print(f"  ratio mismatched / compatible: residual {mismatched / compatible:.1f}{step}")


def main():
    print(f"Blender {bpy.app.version_string}, 10x10 quads, 2 corners pinned, 40 frames at {FPS} fps, backward Euler")
    compare("default settings, frame grid", {}, 40, False)
    compare("default settings, Blender's sub-step grid", {}, 40, True)
    compare("default settings without velocity damping, sub-step grid", NO_VELOCITY_DAMPING, 40, True)
    compare("quality 40 without velocity damping, sub-step grid", dict(NO_VELOCITY_DAMPING, quality=40), 40, True)


if __name__ == "__main__":
    main()
