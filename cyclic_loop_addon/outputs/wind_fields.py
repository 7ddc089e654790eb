"""The designed gusts written into the scene, and Blender's own cloth re-simulated in them.

``write_wind`` adds a collection "Loop Wind" of three Wind fields pointing along world X, Y and Z whose
strengths are keyed per loop frame with the designed wind minus the scene's own (the pressure law is linear in
the wind vector, so three axis fields add up to any direction exactly), closed at the period by a key equal to
the first and repeated by a Cycles modifier: the scene's own winds stay as they are and the gusts ride on
them. ``resimulate`` runs Blender's cloth in a copy of the object through three periods of that wind and
measures how far its last period lies from the loop. Both need a loop solved with the wind family
(``solver_core.motion``).
"""
import math

import bpy
import numpy as np

from .. import compat
from ..core import sc
from ..errors import LoopInputError
from ..pipeline.scene_reader import evaluated_positions, physics_modifier

COLLECTION = "Loop Wind"
AXES = (("X", (0.0, math.pi / 2, 0.0)), ("Y", (-math.pi / 2, 0.0, 0.0)), ("Z", (0.0, 0.0, 0.0)))
PERIODS = 3         # periods ``resimulate`` runs


def check(gathered, settings):
    """LoopInputError, before a solve, when Write Wind cannot write: no gusts asked for, or no wind to gust.

    Parameters
    ----------
    gathered : scene_reader.Gathered
        The gathered problem.
    settings : scene_reader.LoopSettings
        Its settings (``gusts``).
    """
    if not settings.gusts:
        raise LoopInputError("Write Wind writes the designed gusts: turn on Allow Gusts (bake.py: drop --no-gusts)")
    drive = sc.choose_drive(gathered.problem, sc.DEFAULTS.motion.drive)
    if gathered.kind != "mesh" or drive is None or drive.name != "wind":
        raise LoopInputError("Write Wind needs a Wind force field acting on the cloth: the scene has none, so the "
                             "loop keeps its motion with gentle body forces instead (nothing to key on a wind)")
    _wind_scale(bpy.data.objects[gathered.object_names[0]])


def designed_gusts(report):
    """The designed wind minus the scene's per loop frame (N, 3), in the scene wind's units, from a report.

    Raises
    ------
    LoopInputError
        When the loop was made without a designed wind.
    """
    figures = report.get("motion") or {}
    if figures.get("family") != "wind":
        raise LoopInputError("this loop has no designed wind to write: it was made without gusts (Allow Gusts "
                             "off) or in a scene without a Wind field")
    return np.asarray(figures["wind"], dtype=float) - np.asarray(figures["scene_wind"], dtype=float)


def _wind_scale(obj):
    """How much of a wind field the cloth of ``obj`` feels: its effector weights' Wind times All."""
    weights = physics_modifier(obj).settings.effector_weights
    scale = weights.wind * weights.all
    if scale == 0:
        raise LoopInputError(f"the cloth of {obj.name} ignores wind (its Field Weights' Wind or All is 0): "
                             "the designed gusts cannot be written")
    return scale


def _wind_object(name, collection):
    """A new Wind field empty named ``name`` in ``collection`` only (a force field's settings exist only on
    objects Blender's operator made fields)."""
    active = bpy.context.view_layer.objects.active
    bpy.ops.object.effector_add(type="WIND")
    field = bpy.context.view_layer.objects.active
    for owner in list(field.users_collection):
        owner.objects.unlink(field)
    collection.objects.link(field)
    field.name = name
    bpy.context.view_layer.objects.active = active
    return field


def write_wind(gathered, report):
    """Key the designed gusts on three new Wind fields in a new "Loop Wind" collection of the scene.

    Parameters
    ----------
    gathered : scene_reader.Gathered
        The looped cloth: its object, loop frames and frame step.
    report : dict
        The loop's report; ``report["motion"]`` holds the winds per frame.

    Returns
    -------
    bpy.types.Collection
        The new collection (named "Loop Wind", or "Loop Wind.001" ... when one exists).
    """
    gusts = designed_gusts(report)
    obj = bpy.data.objects[gathered.object_names[0]]
    strengths = gusts / _wind_scale(obj)
    frames = np.asarray(gathered.frames, dtype=float)
    period = len(frames) * gathered.frame_step
    scene = bpy.context.scene
    collection = bpy.data.collections.new(COLLECTION)
    scene.collection.children.link(collection)
    for axis, (name, rotation) in enumerate(AXES):
        field = _wind_object(f"{COLLECTION} {name}", collection)
        field.location = obj.matrix_world.translation
        field.rotation_euler = rotation
        field.field.shape = "POINT"
        field.field.flow = 0.0
        field.field.noise = 0.0
        for frame, value in zip(np.r_[frames, frames[0] + period], np.r_[strengths[:, axis], strengths[0, axis]]):
            field.field.strength = float(value)
            field.keyframe_insert("field.strength", frame=float(frame))
        curve = field.animation_data.action.fcurves.find("field.strength")
        for key in curve.keyframe_points:
            key.interpolation = "LINEAR"
        curve.modifiers.new("CYCLES")
    return collection


def _copy_properties(source, target):
    """Copy the writable plain properties of one RNA struct to another of its type, and of its nested settings
    structs (a cloth's effector weights), never ID pointers."""
    for prop in source.bl_rna.properties:
        name = prop.identifier
        if name == "rna_type":
            continue
        if prop.type == "POINTER":
            value = getattr(source, name)
            if value is not None and not isinstance(value, bpy.types.ID) and not prop.is_readonly is False \
                    and getattr(target, name, None) is not None and not isinstance(value, bpy.types.ShapeKey):
                _copy_properties(value, getattr(target, name))
            elif isinstance(value, bpy.types.Collection) and not prop.is_readonly:
                setattr(target, name, value)
        elif not prop.is_readonly:
            try:
                setattr(target, name, getattr(source, name))
            except (AttributeError, TypeError, ValueError):   # read-only while baked, or out of this build's range
                pass


def _fresh_cloth(copy, mod):
    """Replace the copied cloth modifier of ``copy`` by a new one with ``mod``'s settings: a new modifier has its
    own cache in memory, where the copied one shares the original's baked frames and disk files."""
    index = list(copy.modifiers).index(copy.modifiers[mod.name])
    copy.modifiers.remove(copy.modifiers[mod.name])
    cloth = copy.modifiers.new(mod.name, "CLOTH")
    _copy_properties(mod.settings, cloth.settings)
    _copy_properties(mod.collision_settings, cloth.collision_settings)
    compat.move_modifier(copy, cloth, index)
    return cloth


def resimulate(gathered, report, loop):
    """Blender's cloth in the written wind: how far its last of PERIODS periods lies from the loop.

    A copy of the object (its own mesh, a new cloth modifier with the original's settings and its cache in
    memory only, so the original's cache and files are untouched) simulates from its cache's first frame
    through PERIODS periods after the loop's first frame; the copy is removed afterwards. Run it before the
    loop is written back: the copy simulates the mesh as it is.

    Parameters
    ----------
    gathered : scene_reader.Gathered
        The looped cloth.
    report : dict
        The loop's report (its ``motion`` figures).
    loop : ndarray, shape (N, n, 3)
        The loop in world space.

    Returns
    -------
    dict
        ``periods``: per period, the RMS distance of the copy's frames from the loop's, as a fraction of the
        cache's motion (RMS distance from its mean shape); ``last``: the last period's; ``repeats``: the last
        period's distance from the one before (how periodic Blender's own motion has become); ``speed_ratio``:
        the last period's RMS speed over the cache's.
    """
    scene = bpy.context.scene
    obj = bpy.data.objects[gathered.object_names[0]]
    mod = physics_modifier(obj)
    n_frames, step = len(gathered.frames), gathered.frame_step
    first = int(gathered.frames[0])
    last = first + PERIODS * n_frames * step
    copy = obj.copy()
    copy.data = obj.data.copy()
    key = copy.data.shape_keys      # the mesh's own shape keys, copied with it and removed with it
    scene.collection.objects.link(copy)
    cloth = _fresh_cloth(copy, mod)
    cache = cloth.point_cache
    cache.frame_start = mod.point_cache.frame_start
    cache.frame_end = max(mod.point_cache.frame_end, last)
    current = scene.frame_current
    frames = []
    try:
        for frame in range(cache.frame_start, last):
            scene.frame_set(frame)
            if frame >= first and (frame - first) % step == 0:
                frames.append(evaluated_positions(copy, bpy.context.evaluated_depsgraph_get())[0])
    finally:
        scene.frame_set(current)
        mesh = copy.data
        bpy.data.objects.remove(copy)
        bpy.data.meshes.remove(mesh)
        if key is not None and key in bpy.data.shape_keys.values():
            bpy.data.batch_remove(ids=(key,))
    frames = np.array(frames)[:PERIODS * n_frames].reshape(PERIODS, n_frames, -1, 3)
    source = gathered.source[:, :gathered.n_written]
    motion = max(float(np.sqrt(np.mean(np.sum((source - source.mean(axis=0)) ** 2, axis=-1)))), 1e-300)
    target = np.asarray(loop)[:, :gathered.n_written]
    def far(a, b):
        return float(np.sqrt(np.mean(np.sum((a - b) ** 2, axis=-1)))) / motion

    periods = [far(p, target) for p in frames]
    speed = np.sqrt(np.mean(np.sum(np.diff(frames[-1], axis=0) ** 2, axis=-1)))
    cache_speed = np.sqrt(np.mean(np.sum(np.diff(source, axis=0) ** 2, axis=-1)))
    return dict(periods=periods, last=periods[-1], repeats=far(frames[-1], frames[-2]),
                speed_ratio=float(speed / max(cache_speed, 1e-300)))
