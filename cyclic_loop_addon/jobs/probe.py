"""The size of each loop a farm job will solve, read from the scene for the job's memory requirement:

    blender -b --factory-startup SCENE --python cyclic_loop_addon/jobs/probe.py -- OBJECTS ...

OBJECTS as bake.py's --object values (``batch.object_names``): a spec naming an object is that object
(commas allowed), otherwise "A,B" is N bodies. Prints one line ``cyclic-loop-sizes {json}``:
per OBJECTS, the solver's vertices, the solver steps per frame and the loop frames bake.py takes by default
(``scene_reader.physics_defaults``: a Blender cloth on the frame grid, over its cache without the settle from
rest), the physics' own steps per frame (a cloth's quality: for variants of another model), the residual
scheme "auto" picks and whether the model has velocity terms (Blender cloth), or an ``error``; and the
scene's frame range.
"""
import json
import os
import sys

import bpy
import numpy as np

PREFIX = "cyclic-loop-sizes "


def _mesh_size(obj, sc):
    """(vertices, the physics' own steps per frame, scheme, velocity terms) of a mesh's Cloth / Soft Body."""
    mod = next((m for m in obj.modifiers if m.type in {"CLOTH", "SOFT_BODY"}), None)
    if mod is None:
        raise ValueError(f"{obj.name!r} has no Cloth or Soft Body modifier")
    mesh = obj.data
    if mod.type == "CLOTH":
        own = max(bpy.context.scene.frame_step, 1) * max(int(mod.settings.quality), 1)
        return len(mesh.vertices), own, "linearized", True
    mesh.calc_loop_triangles()
    rest = np.array([v.co for v in mesh.vertices], dtype=float)
    tris = np.array([t.vertices for t in mesh.loop_triangles], dtype=np.int64)
    return len(sc.physics.tetmesh.tetrahedralize(rest, tris)[0]), 1, "backward", False


def sizes(specs):
    """{spec: size dict or {"error": ...}} for object specs of the open scene."""
    from cyclic_loop_addon.pipeline import scene_reader
    from cyclic_loop_addon.core import sc
    from cyclic_loop_addon.jobs.batch import object_names
    out = {}
    for spec in specs:
        names = object_names([spec], bpy.data.objects)
        missing = [n for n in names if n not in bpy.data.objects]
        if missing:
            out[spec] = {"error": f"no object {missing[0]!r} in {bpy.data.filepath}"}
        elif len(names) > 1:
            out[spec] = dict(vertices=len(names), physics_substeps=1, scheme="symplectic", velocity_terms=False)
        else:
            try:
                v, own, scheme, vt = _mesh_size(bpy.data.objects[names[0]], sc)
            except ValueError as exc:
                out[spec] = {"error": str(exc)}
                continue
            out[spec] = dict(vertices=v, physics_substeps=own, scheme=scheme, velocity_terms=vt)
        if "error" not in out[spec]:
            defaults = scene_reader.physics_defaults([bpy.data.objects[n] for n in names])
            out[spec].update(substeps=defaults.substeps, soft=defaults.soft,
                             frames=[defaults.frame_start, defaults.frame_end])
    return out


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    scene = bpy.context.scene
    print(PREFIX + json.dumps(dict(objects=sizes(sys.argv[sys.argv.index("--") + 1:]),
                                   frames=[scene.frame_start, scene.frame_end])), flush=True)
