"""Loop -> glTF / GLB through Blender's own exporter, as morph-target (shape-key) animation.

One period: N morph targets and N + 1 keyframes at t = j * step / fps, linear interpolation, the last key
(t = N * step / fps) repeating the first, so that a player that wraps at the clip's end (three.js's default
``LoopRepeat``, Godot's looping Animation) plays the loop seamlessly as imported. Blender's exporter writes
the mesh and the N open keys; ``glb_loop.rewrite`` adds the closing key, the animation's extras and, with
``storage``, the quantized targets, the normal basis and sparse weights (docs/design/exports.md).
"""
import base64
import json
import os

import bpy
import numpy as np

from . import export, glb_loop, writeback
from ..errors import LoopInputError
from .files import atomic_path, check_writable, temp_folder

SHADINGS = ("smooth", "flat")
# (name, label, description) of each shading: the panel's enum items; bake.py's --glb-shading choices.
SHADING_ITEMS = (
    ("smooth", "Smooth", "Smooth normals: vertices shared between faces, a normal per vertex and target"),
    ("flat", "Flat", "Flat faces: vertices split at every face with a face normal per target, as Blender "
     "exports flat shading (with Compact storage: no split and no normals, the player computes flat normals)"),
)
STORAGES = glb_loop.STORAGES
# (name, label, description) of each storage: the panel's enum items; bake.py's --glb-storage choices.
STORAGE_ITEMS = (
    ("float", "Float", "Every value a 32-bit float, a normal per vertex and target, the weights dense: read by "
     "any glTF 2.0 importer"),
    ("quantized", "Quantized", "Morph-target positions as 16-bit integers (KHR_mesh_quantization), the node's "
     "scale holding the step; the normals as a few float morph targets within half a degree: three.js and "
     "Godot 3 play it"),
    ("compact", "Compact", "Quantized, the normal targets 8-bit, only the nonzero weights stored (sparse "
     "accessor), flat shading without normals: three.js plays it, Godot 3's importer does not"),
)
DEFAULTS = {"shading": "smooth", "storage": "quantized"}


def export_selected(path, animations):
    """Export the selected objects as GLB (``path`` ends .glb) or glTF with Blender's exporter, atomically."""
    with atomic_path(path, "glTF file") as tmp:
        _blender_export(tmp, animations)
    return path


def _blender_export(tmp, animations):
    options = dict(export_format="GLB" if tmp.lower().endswith(".glb") else "GLTF_EMBEDDED",
                   use_selection=True, export_extras=True, export_yup=True, export_apply=False,
                   export_animations=animations, export_morph=animations, export_morph_normal=animations,
                   export_force_sampling=False, export_optimize_animation_size=False)
    if bpy.app.version >= (4, 0):
        options["export_animation_mode"] = "ACTIONS"
    result = bpy.ops.export_scene.gltf(filepath=tmp, **options)
    if result != {"FINISHED"} or not os.path.exists(tmp):
        raise LoopInputError(f"Blender's glTF exporter wrote nothing for {tmp}")


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


def checked_options(shading=DEFAULTS["shading"], storage=DEFAULTS["storage"]):
    """The glTF options as ``export_gltf`` takes them; LoopInputError names an option value it does not know."""
    if shading not in SHADINGS:
        raise LoopInputError(f"the glTF shading {shading!r} is not one of {', '.join(SHADINGS)}")
    if storage not in STORAGES:
        raise LoopInputError(f"the glTF storage {storage!r} is not one of {', '.join(STORAGES)}")
    return {"shading": shading, "storage": storage}


def _set_shading(mesh, shading):
    """Shade every face of ``mesh`` (the temporary copy) smooth or flat; smooth also clears sharp edges, so
    that Blender's exporter shares each vertex between its faces (UV seams still split)."""
    smooth = shading == "smooth"
    mesh.polygons.foreach_set("use_smooth", np.full(len(mesh.polygons), smooth))
    if smooth:
        mesh.edges.foreach_set("use_edge_sharp", np.zeros(len(mesh.edges), bool))
    mesh.update()


def _gltf_embedded(doc, blob):
    """A .gltf document with the binary chunk embedded as a data URI."""
    doc["buffers"] = [{"byteLength": len(blob),
                       "uri": "data:application/octet-stream;base64," + base64.b64encode(blob).decode()}]
    return json.dumps(doc, separators=(",", ":")).encode()


def export_gltf(gathered, q, path, context=None, shading=DEFAULTS["shading"], storage=DEFAULTS["storage"]):
    """GLB / glTF of loop q (object space, the node carrying the object's world transform).

    Parameters
    ----------
    gathered, q
        The gathered mesh and its loop (N, n, 3).
    path : str
        The file, .glb or .gltf (data embedded).
    shading : {"smooth", "flat"}
        Smooth: vertices shared, a normal per vertex; flat: Blender's flat-shaded export (split vertices).
    storage : {"float", "quantized", "compact"}
        How the targets and weights are stored (``STORAGE_ITEMS``).

    Returns
    -------
    dict
        ``path`` and the figures of ``glb_loop.rewrite`` and ``glb_loop.size_report`` (the bytes of the file
        written: a .gltf holds the binary chunk as base64).
    """
    if gathered.kind != "mesh":
        raise LoopInputError("glTF export is for meshes; N bodies are written as location keyframes")
    checked_path(path)
    options = checked_options(shading, storage)
    local = writeback.local_loop(gathered, q)
    check_writable(path, "glTF file")
    with export.temporary_copy(gathered, context) as (temp, source):
        temp.matrix_world = source.matrix_world
        # Flat faces: split vertices with face normals, except in compact storage, whose players (three.js)
        # compute flat normals when the file has none, so that its vertices stay shared.
        without_normals = options["shading"] == "flat" and options["storage"] == "compact"
        _set_shading(temp.data, "smooth" if without_normals else options["shading"])
        writeback.add_loop_keys(temp, local, 0, gathered.frame_step, wrap=False)
        extras = loop_extras(gathered, temp.users_scene[0])
        temp["cyclic_loop"] = dict(extras, loop="closed: the clip's last key, at t = duration, repeats the first")
        blender_glb = os.path.join(temp_folder(), "blender_export.glb")
        try:
            _blender_export(blender_glb, animations=True)
            with open(blender_glb, "rb") as f:
                data = f.read()
        finally:
            if os.path.exists(blender_glb):
                os.remove(blender_glb)
    loop = {"name": gathered.object_names[0], "frame_count": extras["frame_count"], "fps": extras["fps"]}
    glb, figures = glb_loop.rewrite(data, loop, storage=options["storage"], normals=not without_normals)
    written = glb if path.lower().endswith(".glb") else _gltf_embedded(*glb_loop.read_glb(glb))
    with atomic_path(path, "glTF file") as tmp, open(tmp, "wb") as f:
        f.write(written)
    return dict(figures, path=path, **glb_loop.size_report(len(written), len(local[0]), len(local)), **options)


def size_line(figures):
    """The glTF file's size against the raw data it holds, in words (bake.py and the panel say it)."""
    step = f", positions quantized in steps of {figures['position_step']:.2g} m" if figures["position_step"] else ""
    if figures["normal_targets"]:
        step += (f", normals from {figures['normal_targets']} morph targets within "
                 f"{figures['normal_error']:.2f} degrees")
    return (f"glTF {os.path.basename(figures['path'])}: {figures['glb_bytes'] / 1024:.1f} KiB, "
            f"{figures['ratio']:.2f} x the raw data ({figures['raw_bytes'] / 1024:.1f} KiB: vertices x frames x 3 "
            f"float32; {figures['shading']} shading, {figures['storage']} storage{step})")
