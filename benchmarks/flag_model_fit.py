"""How well the compatible model describes the README's flag (frames 49-72) as Blender simulates it (bpy module).

    .venv/bin/python -m benchmarks flag_model_fit

Gathers the flag sample as ``bake.py`` does (frames 49-72, 4 sub-steps per frame) and prints:

- the forward simulation of the model from the cache's frames 49 and 50, against the cache (largest vertex
  distance after 6, 12, 18 and 23 frames);
- the residual of Blender's own sub-steps under the model: the flag baked again at quality 1 and Speed
  1/4 (the same steps, each a frame), relative to the net force |F_j| (the measure of
  ``blender_cloth_residual``, not the forces at play of ``sc.loop_metrics``); once under the model's
  linearized scheme (``solver_core.physics.scheme``: the angular springs and their damping taken at the step's
  start, as ``SIM_mass_spring_force_spring_angular`` adds them, no Jacobian), once with every term
  linearized (no explicit terms).
"""
import argparse
import os

import bpy
import numpy as np

import solver_core as sc
from cyclic_loop_addon.pipeline import scene_reader
from solver_core.physics import scheme

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FRAMES = (49, 72)


def gathered(first, last):
    bpy.ops.wm.open_mainfile(filepath=os.path.join(ROOT, "sample_scenes", "flag.blend"))
    return scene_reader.gather(scene_reader.LoopSettings(objects=("Flag",), frame_start=first, frame_end=last))


def substep_cache(quality, frames):
    """Blender's sub-steps of the open flag: baked again at quality 1 and Speed / quality, read per frame."""
    scene, obj = bpy.context.scene, bpy.data.objects["Flag"]
    mod = obj.modifiers["Cloth"]
    mod.settings.quality, mod.settings.time_scale = 1, mod.settings.time_scale / quality
    scene.frame_end = mod.point_cache.frame_end = frames * quality
    with bpy.context.temp_override(scene=scene, active_object=obj, object=obj, point_cache=mod.point_cache):
        bpy.ops.ptcache.free_bake()
        bpy.ops.ptcache.bake(bake=True)
    n = len(obj.data.vertices)
    out, x = np.empty((frames * quality, n, 3)), np.empty(3 * n)
    for k in range(frames * quality):
        scene.frame_set(k + 1)
        evaluated = obj.evaluated_get(bpy.context.evaluated_depsgraph_get())
        evaluated.data.vertices.foreach_get("co", x)
        world = np.array(evaluated.matrix_world)
        out[k] = x.reshape(n, 3) @ world[:3, :3].T + world[:3, 3]
    return out


def relative_residual(prob, q, free, linearize_all):
    """Mean over steps of |u_j| / |F(q_j)| on the free vertices, rows 1..len(q)-2 of the trajectory q: under
    the problem's scheme, or with ``linearize_all`` with every term linearized at the step's start."""
    prev, here, nxt = q[:-2], q[1:-1], q[2:]
    j = np.arange(1, len(q) - 1)
    u = scheme.step_rows(prob, prev, here, nxt, j)
    model, t = prob.model, prob.step_times(j)
    if linearize_all:
        explicit = scheme.split(prob)[1]
        u -= explicit.jacobian_dot(here, t, nxt - here)
        h = prob.h
        u -= explicit.velocity_forces(here, (nxt - here) / h, t) - explicit.velocity_forces(here, (here - prev) / h, t)
    force = model.forces(here, t)
    un = np.linalg.norm(u[:, free].reshape(len(u), -1), axis=1)
    fn = np.linalg.norm(force[:, free].reshape(len(u), -1), axis=1)
    return float(np.mean(un / fn))


def main(argv=None):
    argparse.ArgumentParser(prog="python -m benchmarks flag_model_fit", description=__doc__.splitlines()[0]).parse_args(argv)
    g = gathered(*FRAMES)
    prob = g.problem
    drift = np.linalg.norm(prob.frames_of(sc.simulate(prob)) - g.source, axis=-1).max(axis=1)
    print(f"flag frames {FRAMES[0]}-{FRAMES[1]}: {prob.n_vertices} vertices, {prob.substeps} sub-steps; terms "
          f"{sorted({type(t).__name__ for t in prob.model.terms + prob.model.velocity_terms})}")
    print("forward simulation from the cache's first two frames, largest distance from the cache (m): "
          + ", ".join(f"frame {k}: {drift[k]:.3f}" for k in (6, 12, 18, len(drift) - 1)))
    q = substep_cache(prob.substeps, FRAMES[1])[(FRAMES[0] - 1) * prob.substeps:]
    free = prob.free_vertices()
    for linearize_all in (False, True):
        label = "every term linearized" if linearize_all else f"the model's {prob.scheme} scheme"
        print(f"Blender's sub-steps, residual/force under {label}: "
              f"{relative_residual(prob, q, free, linearize_all):.4f}")
