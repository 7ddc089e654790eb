"""Loop -> files: Alembic (one period, for game engines) and PC2 (for the Mesh Cache modifier).

Files are written under a temporary name in the target folder and renamed into place, so an interrupted
export never leaves a half-written file. Exports read only the gathered data and the loop, not the
scene's current state, and leave the scene as it was (except ``export_pc2(attach=True)``).

Both files hold sample j of the loop at scene frame A + j * S (A the loop's first frame, S the scene's
frame step): the PC2 header says start frame A and sample rate S, the Alembic samples sit at A + j * S
frames of the scene's frame rate. ``import_alembic`` and ``export_pc2(attach=True)`` play them in Blender
as a loop past the period.
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
    """Write point samples as a PC2 file (atomically).

    Parameters
    ----------
    path : str
        The file to write.
    points : array_like, shape (samples, n, 3)
        The points of every sample.
    start_frame : float
        Scene frame of the first sample (the header's startFrame).
    sample_rate : float
        Scene frames between samples (the header's sampleRate), > 0.

    Returns
    -------
    str
        ``path``.
    """
    points = np.asarray(points, dtype="<f4")
    if points.ndim != 3 or points.shape[2] != 3 or 0 in points.shape:
        raise ValueError(f"PC2 points must have shape (samples, n, 3) with samples, n > 0, got {points.shape}")
    if not (np.isfinite(start_frame) and sample_rate > 0):
        raise ValueError(f"a PC2 start frame must be finite and its sample rate > 0, got {start_frame}, {sample_rate}")
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
    """Write one period of the loop in object space as PC2: N samples, start frame A, sample rate S.

    ``attach`` also plays it on the object through a Mesh Cache modifier driven to wrap (see
    ``writeback.attach_mesh_cache``).
    """
    if gathered.kind != "mesh":
        raise LoopInputError("PC2 holds mesh vertices; N bodies are written as location keyframes")
    write_pc2(path, writeback.local_loop(gathered, q), float(gathered.frame_start), float(gathered.frame_step))
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


def alembic_sampling(frame_start, frame_step):
    """Where Blender's Alembic exporter must sample so that sample j lands at scene frame A + j * S.

    The exporter writes one sample per frame from its start frame on, at time (frame + shutter open) /
    exporting fps. With the frame rate divided by S while exporting, sample j of start frame F and shutter
    open O is at scene frame (F + O + j) * S, which is A + j * S for F = A // S and O = (A mod S) / S.

    Parameters
    ----------
    frame_start, frame_step : int
        A and S (S >= 1).

    Returns
    -------
    (first, shutter_open) : (int, float)
        The export's start frame F and shutter open O in [0, 1); the loop is keyed at F + O + j.
    """
    if frame_step < 1:
        raise LoopInputError(f"the frame step must be at least 1, got {frame_step}")
    first, offset = divmod(int(frame_start), int(frame_step))
    return first, offset / frame_step


def export_alembic(gathered, q, path, context=None):
    """Alembic of exactly one period: N samples, one per loop frame, world space, via Blender's exporter.

    The loop is put as cyclic shape keys on a temporary copy of the mesh (object named after the source
    plus "_loop", no modifiers, identity transform), exported alone and removed again. Blender's exporter
    writes every frame from start to end, so with a scene frame step S > 1 the copy is keyed one frame per
    sample, the scene's frame rate is divided by S while exporting and the shutter opens at (A mod S) / S
    (``alembic_sampling``): the N samples sit at scene frames A + j * S for any A and S.
    """
    if gathered.kind != "mesh":
        raise LoopInputError("Alembic export is for meshes; N bodies are written as location keyframes")
    world = writeback.written_loop(gathered, q)
    check_writable(path, "Alembic file")
    step, render = gathered.frame_step, (context or bpy.context).scene.render
    first, shutter = alembic_sampling(gathered.frame_start, step)
    with temporary_copy(gathered, context) as (temp, _):
        writeback.add_loop_keys(temp, world, first + shutter, 1)
        fps_base = render.fps_base
        render.fps_base = fps_base * step
        try:
            with atomic_path(path, "Alembic file") as tmp:
                bpy.ops.wm.alembic_export(filepath=tmp, start=first, end=first + gathered.n_frames - 1,
                                          sh_open=shutter, sh_close=1.0, gsamples=1, xsamples=1,
                                          selected=True, flatten=True, export_hair=False, export_particles=False,
                                          as_background_job=False)
                if not os.path.exists(tmp):
                    raise LoopInputError(f"Blender's Alembic exporter wrote nothing for {path}")
        finally:
            render.fps_base = fps_base
    return path


def import_alembic(path, frame_start, frame_step, n_frames, context=None):
    """Import an Alembic loop (``export_alembic``) with Blender's importer, set up to play as a loop.

    The importer's Mesh Sequence Cache holds its last sample after the file's time range; here the cache
    file's frame is overridden by a simple-expression driver (``writeback.wrap_cache_file``), so scene frame
    A + k * P + t reads frame A + t of the file for every whole k, with Auto Run Python Scripts on or off.
    The scene's frame range is left as it was.

    Parameters
    ----------
    path : str
        The Alembic file.
    frame_start, frame_step, n_frames : int
        The loop it holds: A, S and N (the period P = N * S scene frames).
    context : bpy.types.Context, optional

    Returns
    -------
    list of bpy.types.Object
        The imported objects.
    """
    if "alembic_import" not in dir(bpy.ops.wm):
        raise LoopInputError("this Blender has no Alembic importer (it was built without Alembic)")
    if not os.path.isfile(path):
        raise LoopInputError(f"no Alembic file at {path}")
    objects, caches = set(bpy.data.objects), set(bpy.data.cache_files)
    bpy.ops.wm.alembic_import(filepath=path, as_background_job=False, set_frame_range=False)
    new_caches = [c for c in bpy.data.cache_files if c not in caches]
    if not new_caches:
        raise LoopInputError(f"Blender's Alembic importer read nothing from {path}")
    for cache_file in new_caches:
        writeback.wrap_cache_file(cache_file, frame_start, frame_step, n_frames)
    return [ob for ob in bpy.data.objects if ob not in objects]
