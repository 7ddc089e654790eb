"""The size of each loop a farm job will solve, read from the scene for the job's memory requirement:

    blender -b --factory-startup SCENE --python cyclic_loop_addon/farm_probe.py -- OBJECTS ...

OBJECTS as in the batch file ("A,B" for N bodies). Prints one line ``cyclic-loop-sizes {json}``:
per OBJECTS, the solver's vertices, steps per frame, the residual scheme "auto" picks and whether the
model has velocity terms (Blender cloth), or an ``error``; and the scene's frame range.
"""
import json
import os
import sys

import bpy
import numpy as np

PREFIX = "cyclic-loop-sizes "


def _mesh_size(obj, sc):
    """(vertices, substeps, scheme, velocity terms) of a mesh's Cloth / Soft Body physics."""
    mod = next((m for m in obj.modifiers if m.type in {"CLOTH", "SOFT_BODY"}), None)
    if mod is None:
        raise ValueError(f"{obj.name!r} has no Cloth or Soft Body modifier")
    mesh = obj.data
    if mod.type == "CLOTH":
        return len(mesh.vertices), max(int(mod.settings.quality), 1), "linearized", True
    mesh.calc_loop_triangles()
    rest = np.array([v.co for v in mesh.vertices], dtype=float)
    tris = np.array([t.vertices for t in mesh.loop_triangles], dtype=np.int64)
    return len(sc.tetmesh.tetrahedralize(rest, tris)[0]), 1, "backward", False


def sizes(specs):
    """{spec: size dict or {"error": ...}} for object specs of the open scene."""
    from cyclic_loop_addon.solver import sc
    out = {}
    for spec in specs:
        names = [n for n in spec.split(",") if n]
        missing = [n for n in names if n not in bpy.data.objects]
        if missing:
            out[spec] = {"error": f"no object {missing[0]!r} in {bpy.data.filepath}"}
        elif len(names) > 1:
            out[spec] = dict(vertices=len(names), substeps=1, scheme="symplectic", velocity_terms=False)
        else:
            try:
                v, s, scheme, vt = _mesh_size(bpy.data.objects[names[0]], sc)
            except ValueError as exc:
                out[spec] = {"error": str(exc)}
            else:
                out[spec] = dict(vertices=v, substeps=s, scheme=scheme, velocity_terms=vt)
    return out


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    scene = bpy.context.scene
    print(PREFIX + json.dumps(dict(objects=sizes(sys.argv[sys.argv.index("--") + 1:]),
                                   frames=[scene.frame_start, scene.frame_end])), flush=True)
