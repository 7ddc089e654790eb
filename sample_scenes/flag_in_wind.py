"""Save the LoopProblem of a 150-vertex Blender cloth flag in wind (14 x 9 quads, pinned edge, quality 5,
frames 30-77: 240 linearized steps) to an .npz, for profiling the solver without Blender.

    python sample_scenes/flag_in_wind.py OUT.npz        (bpy module)
"""
import math
import os
import sys

import bpy
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build_samples as bs  # noqa: E402
import solver_core as sc  # noqa: E402
from cyclic_loop_addon.pipeline import scene_reader  # noqa: E402


def main(out):
    """Build and bake the flag, gather frames 30-77 and save the problem to ``out``."""
    bs._empty_scene(80)
    obj, verts = bs._grid("Flag", 15, 10, 1.5, 0.9)
    verts = verts[:, [0, 2, 1]] + [0.75, 0.0, 2.0]
    bs._set_vertices(obj, verts)
    bs._pin_group(obj, np.flatnonzero(verts[:, 0] < 1e-6))
    mod = bs._cloth(obj, "Pin", 80, quality=5, mass=0.15, air_damping=1.0)
    bpy.ops.object.effector_add(type="WIND", location=(-1.0, 0.0, 2.0), rotation=(0.0, math.pi / 2, 0.6))
    bpy.context.active_object.field.strength = 10.0
    bs._bake(obj, mod)
    gathered = scene_reader.gather(scene_reader.LoopSettings(objects=("Flag",), frame_start=30, frame_end=77))
    prob = gathered.problem
    sc.save_problem(out, prob)
    print(f"{prob.n_vertices} vertices, {prob.n_frames} frames x {prob.substeps} substeps, {prob.scheme}: {out}")


if __name__ == "__main__":
    main(sys.argv[-1])
