"""Loop -> files: Alembic (one period, for game engines) and PC2 (for the Mesh Cache modifier).

Files are written under a temporary name in the target folder and renamed into place, so an interrupted
export never leaves a half-written file. Exports read only the gathered data and the loop, not the
scene's current state, and leave the scene as it was (except ``export_pc2(attach=True)``).
"""
import os
from contextlib import contextmanager

import bpy
import numpy as np

from . import writeback
from ..errors import LoopInputError
from .files import atomic_path, check_writable

PC2_HEADER = np.dtype([("magic", "S12"), ("version", "<i4"), ("points", "<i4"),
                       ("start", "<f4"), ("rate", "<f4"), ("samples", "<i4")])


# ------------------------------------------------------------------------------------------------ PC2


def write_pc2(path, points, start_frame=0.0, sample_rate=1.0):
    """Write point samples (S, n, 3) as a PC2 file (atomically)."""
    points = np.asarray(points, dtype="<f4")
    header = np.array([(b"POINTCACHE2\0", 1, points.shape[1], start_frame, sample_rate, points.shape[0])],
                      dtype=PC2_HEADER)
    with atomic_path(path, "PC2 file") as tmp, open(tmp, "wb") as f:
        f.write(header.tobytes())
        f.write(np.ascontiguousarray(points).tobytes())
    return path


def read_pc2(path):
    """(points (S, n, 3), start frame, sample rate) of a PC2 file."""
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(PC2_HEADER.itemsize), dtype=PC2_HEADER)[0]
        if header["magic"] != b"POINTCACHE2":
            raise ValueError(f"{path} is not a PC2 file")
        data = np.frombuffer(f.read(), dtype="<f4")
    shape = (int(header["samples"]), int(header["points"]), 3)
    if data.size != np.prod(shape):
        raise ValueError(f"{path} is truncated: {data.size} floats for {shape}")
    return data.reshape(shape), float(header["start"]), float(header["rate"])


def export_pc2(gathered, q, path, attach=False):
    """Write one period of the loop in object space as PC2 (sample j at cache frame j * step).

    ``attach`` also plays it on the object through a looping Mesh Cache modifier (see writeback).
    """
    if gathered.kind != "mesh":
        raise LoopInputError("PC2 holds mesh vertices; N bodies are written as location keyframes")
    write_pc2(path, writeback.local_loop(gathered, q), 0.0, float(gathered.frame_step))
    if attach:
        writeback.attach_mesh_cache(gathered, os.path.abspath(path))
    return path


# ------------------------------------------------------------------------------------------------ Alembic


@contextmanager
def temporary_copy(gathered, context=None, suffix="_loop"):
    """Yield (copy, source): the only selected and active object, a copy of the gathered mesh object's mesh
    (named after the source plus ``suffix``, no modifiers, no shape keys, identity transform), linked to
    the scene; afterwards the copy, its mesh and action are removed and selection and frame restored."""
    if gathered.kind != "mesh":
        raise LoopInputError("this export is for meshes; N bodies are written as location keyframes")
    context = context or bpy.context
    source = bpy.data.objects.get(gathered.object_names[0])
    if source is None or source.type != "MESH" or len(source.data.vertices) != gathered.n_written:
        raise LoopInputError(f"{gathered.object_names[0]!r} no longer has the mesh it was gathered with")
    selection = [(ob, ob.select_get()) for ob in context.view_layer.objects]
    active, frame = context.view_layer.objects.active, context.scene.frame_current
    mesh = source.data.copy()
    copied_keys = mesh.shape_keys
    temp = bpy.data.objects.new(f"{source.name}{suffix}", mesh)
    context.scene.collection.objects.link(temp)
    try:
        if copied_keys is not None:
            temp.shape_key_clear()
            bpy.data.batch_remove([copied_keys])   # a cleared Key stays in bpy.data and breaks saving
        for ob, _ in selection:
            ob.select_set(False)
        temp.select_set(True)
        context.view_layer.objects.active = temp
        yield temp, source
    finally:
        keys = temp.data.shape_keys
        action = keys.animation_data.action if keys and keys.animation_data else None
        bpy.data.objects.remove(temp)
        bpy.data.meshes.remove(mesh)
        if action is not None and action.users == 0:
            bpy.data.actions.remove(action)
        for ob, selected in selection:
            ob.select_set(selected)
        context.view_layer.objects.active = active
        context.scene.frame_set(frame)


def export_alembic(gathered, q, path, context=None):
    """Alembic of exactly one period: N samples, one per loop frame, world space, via Blender's exporter.

    The loop is put as cyclic shape keys on a temporary copy of the mesh (object named after the source
    plus "_loop", no modifiers, identity transform), exported alone and removed again. Blender's exporter
    writes every frame from start to end, so with a scene frame step S > 1 the copy is keyed on consecutive
    frames and the scene's frame rate divided by S while exporting: the N samples are S / fps seconds
    apart and start at frame A - A mod S.
    """
    if gathered.kind != "mesh":
        raise LoopInputError("Alembic export is for meshes; N bodies are written as location keyframes")
    world = writeback.written_loop(gathered, q)
    check_writable(path, "Alembic file")
    step, render = gathered.frame_step, (context or bpy.context).scene.render
    first = gathered.frame_start // step
    with temporary_copy(gathered, context) as (temp, _):
        writeback.add_loop_keys(temp, world, first, 1)
        fps_base = render.fps_base
        render.fps_base = fps_base * step
        try:
            with atomic_path(path, "Alembic file") as tmp:
                bpy.ops.wm.alembic_export(filepath=tmp, start=first, end=first + gathered.n_frames - 1,
                                          selected=True, flatten=True, export_hair=False, export_particles=False,
                                          as_background_job=False)
                if not os.path.exists(tmp):
                    raise LoopInputError(f"Blender's Alembic exporter wrote nothing for {path}")
        finally:
            render.fps_base = fps_base
    return path
