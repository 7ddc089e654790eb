"""Loop -> glTF / GLB through Blender's own exporter, as morph-target (shape-key) animation.

One period: N morph targets and N keyframes at t = j * step / fps, linear interpolation, the last
sample not repeating the first (open interval). A player loops it by setting the clip's length to
N * step / fps, so that it interpolates from the last sample back to the first (the node's ``extras``
hold frame count, fps and duration for that).
"""
import os

import bpy

from . import export, writeback
from ..errors import LoopInputError
from .files import atomic_path, check_writable


def export_selected(path, animations):
    """Export the selected objects as GLB (``path`` ends .glb) or glTF with Blender's exporter, atomically."""
    options = dict(export_format="GLB" if path.lower().endswith(".glb") else "GLTF_EMBEDDED",
                   use_selection=True, export_extras=True, export_yup=True, export_apply=False,
                   export_animations=animations, export_morph=animations, export_morph_normal=animations,
                   export_force_sampling=False, export_optimize_animation_size=False)
    if bpy.app.version >= (4, 0):
        options["export_animation_mode"] = "ACTIONS"
    with atomic_path(path, "glTF file") as tmp:
        result = bpy.ops.export_scene.gltf(filepath=tmp, **options)
        if result != {"FINISHED"} or not os.path.exists(tmp):
            raise LoopInputError(f"Blender's glTF exporter wrote nothing for {path}")
    return path


def loop_extras(gathered, scene):
    """What a player needs to loop the clip: frame count, fps (of the loop's samples) and duration."""
    rate = scene.render.fps / scene.render.fps_base / gathered.frame_step
    return {"frame_count": gathered.n_frames, "fps": rate, "duration": gathered.n_frames / rate,
            "loop": "open interval: wrap from the last sample back to the first over one sample interval"}


def checked_path(path):
    """``path`` if it names a glTF file (.glb binary or .gltf with the data embedded)."""
    if not path.lower().endswith((".glb", ".gltf")):
        raise LoopInputError(f"the glTF file {path} must end in .glb or .gltf")
    return path


def export_gltf(gathered, q, path, context=None):
    """GLB / glTF of loop q (object space, the node carrying the object's world transform); returns ``path``."""
    if gathered.kind != "mesh":
        raise LoopInputError("glTF export is for meshes; N bodies are written as location keyframes")
    checked_path(path)
    local = writeback.local_loop(gathered, q)
    check_writable(path, "glTF file")
    with export.temporary_copy(gathered, context) as (temp, source):
        temp.matrix_world = source.matrix_world
        writeback.add_loop_keys(temp, local, 0, gathered.frame_step, wrap=False)
        temp["cyclic_loop"] = loop_extras(gathered, temp.users_scene[0])
        export_selected(path, animations=True)
    return path
