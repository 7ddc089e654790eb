"""LoopResult -> scene: the loop as cyclic shape keys (meshes) or cyclic location keys (N bodies).

Every write validates first and then changes the scene in one call, so an operator with the UNDO flag
that calls it makes one undo step, and a failed check writes nothing. An earlier run's loop on the same
object is replaced. The physics modifier is disabled, not removed, and an animated body's own action
is kept (with a fake user): ``remove_loop`` restores the simulation.

Keys: loop frame j is played at scene frame ``A + j * step``; every F-curve has keys from A to A + period
(the wrap frame repeats frame A) with linear interpolation and a Cycles modifier, so frame A + period
evaluates exactly like frame A, forever in both directions.

The artist's own shape keys shaped the mesh the simulation started from; the solved loop already holds
their effect. While the loop plays they are muted (and the shape keys mixed relatively, all of them
shown), so each frame evaluates to the solved loop exactly; ``remove_loop`` restores their mute states and
those settings, and ``showing_source`` restores them while the scene is gathered again.
"""
import json
from contextlib import contextmanager

import bpy
import numpy as np

from .. import compat
from ..errors import LoopInputError, LoopSolveError

MARKER = "cyclic_loop"              # custom property on a looped object: what to undo
KEY_PREFIX = "CyclicLoop."          # loop shape keys are CyclicLoop.000, CyclicLoop.001, ...
CACHE_MODIFIER = "CyclicLoop Cache"
_LINEAR = bpy.types.Keyframe.bl_rna.properties["interpolation"].enum_items["LINEAR"].value


def write_back(gathered, q):
    """Write the loop q (N, n, 3), world space on the problem's vertices, onto the gathered objects."""
    if gathered.kind == "mesh":
        return write_shape_keys(gathered, q)
    return write_locations(gathered, q)


def written_loop(gathered, q):
    """World positions (N, n_written, 3) of the object's vertices (or the bodies) in loop q, validated."""
    q = np.asarray(q, dtype=float)
    expected = (gathered.n_frames, gathered.problem.n_vertices, 3)
    if q.shape != expected:
        raise LoopSolveError(f"the loop has shape {q.shape}, expected {expected}")
    if not np.all(np.isfinite(q)):
        raise LoopSolveError("the loop contains NaN or infinite positions (the solver diverged); nothing written")
    return q[:, :gathered.n_written]


def local_loop(gathered, q):
    """The written part of loop q in each object's local (mesh) or parent (bodies) space: (N, n_written, 3)."""
    x = written_loop(gathered, q)
    m = gathered.to_local[0][:, None] if gathered.kind == "mesh" else gathered.to_local.transpose(1, 0, 2, 3)
    return np.einsum("fvij,fvj->fvi", np.broadcast_to(m[..., :3, :3], x.shape + (3,)), x) + m[..., :3, 3]


def _object(name):
    obj = bpy.data.objects.get(name)
    if obj is None:
        raise LoopInputError(f"object {name!r} no longer exists; gather the scene again")
    return obj


def _frames(frame_start, frame_step, n_frames):
    """Key frames of one period plus the wrap frame."""
    return frame_start + frame_step * np.arange(n_frames + 1, dtype=float)


# ------------------------------------------------------------------------------------------------ F-curves


def _fcurves(id_data, action_name):
    """The F-curve collection of ``id_data``'s action (created if needed), legacy or slotted (4.4+)."""
    anim = id_data.animation_data or id_data.animation_data_create()
    if anim.action is None:
        anim.action = bpy.data.actions.new(action_name)
    action = anim.action
    if not hasattr(action, "layers"):                       # Blender 4.2-4.3
        return action.fcurves
    if anim.action_slot is None:
        anim.action_slot = action.slots.new(id_type=id_data.id_type, name=id_data.name)
    layer = action.layers[0] if action.layers else action.layers.new("Layer")
    strip = layer.strips[0] if layer.strips else layer.strips.new(type="KEYFRAME")
    return strip.channelbag(anim.action_slot, ensure=True).fcurves


def _cyclic_fcurve(fcurves, data_path, index, frames, values, cycles=True):
    fc = fcurves.new(data_path, index=index)
    points = fc.keyframe_points
    points.add(len(frames))
    points.foreach_set("co", np.column_stack([frames, values]).astype(np.float32).ravel())
    points.foreach_set("interpolation", [_LINEAR] * len(frames))
    if cycles:
        fc.modifiers.new("CYCLES")
    fc.update()


def _assign_action(obj, action):
    anim = obj.animation_data or obj.animation_data_create()
    anim.action = action
    if hasattr(action, "slots") and anim.action_slot is None and len(action.slots):
        anim.action_slot = action.slots[0]


# ------------------------------------------------------------------------------------------------ meshes


def _loop_keys(obj):
    keys = obj.data.shape_keys
    return [kb for kb in keys.key_blocks if kb.name.startswith(KEY_PREFIX)] if keys else []


def _remove_loop_keys(obj):
    keys = obj.data.shape_keys
    if keys is None:
        return
    if keys.animation_data and keys.animation_data.action:
        fcurves = _fcurves(keys, "")
        for fc in [fc for fc in fcurves if fc.data_path.startswith(f'key_blocks["{KEY_PREFIX}')]:
            fcurves.remove(fc)
    for kb in _loop_keys(obj):
        obj.shape_key_remove(kb)


def add_loop_keys(obj, positions, frame_start, frame_step, wrap=True):
    """Shape keys CyclicLoop.000.. holding ``positions`` (N, n, 3) (object space), keyed cyclically.

    ``wrap=False``: only the N keys of one period (no wrap key, no Cycles modifier), for exporters whose
    player does the wrapping (glTF).
    """
    if obj.data.shape_keys is None:
        obj.shape_key_add(name="Basis", from_mix=False)
    names = []
    for j, co in enumerate(positions):
        kb = obj.shape_key_add(name=f"{KEY_PREFIX}{j:03d}", from_mix=False)
        kb.data.foreach_set("co", co.astype(np.float32).ravel())
        names.append(kb.name)
    fcurves = _fcurves(obj.data.shape_keys, f"CyclicLoop {obj.name}")
    frames = _frames(frame_start, frame_step, len(positions))[:None if wrap else -1]
    index = np.arange(len(frames)) % len(positions)
    for j, name in enumerate(names):
        _cyclic_fcurve(fcurves, f'key_blocks["{name}"].value', 0, frames, (index == j).astype(float), cycles=wrap)


def _user_keys(obj):
    """The artist's shape keys of ``obj``: every key but the reference (basis) key and the loop's own."""
    keys = obj.data.shape_keys
    if keys is None:
        return []
    return [kb for kb in keys.key_blocks[1:] if not kb.name.startswith(KEY_PREFIX)]


def _quiet_user_keys(obj, marker):
    """Mute the artist's shape keys and show the relative mix of all keys, so the loop keys alone shape the
    mesh; returns what to restore: {"muted": names muted here, "show_only": ..., "use_relative": ...} (those
    of an earlier run's ``marker`` kept)."""
    keys = obj.data.shape_keys
    before = json.loads(marker.get("user_keys", "{}")) if marker else {}
    muted = [kb.name for kb in _user_keys(obj) if not kb.mute]
    restore = dict(muted=list(dict.fromkeys(before.get("muted", []) + muted)),
                   show_only=before.get("show_only", obj.show_only_shape_key),
                   use_relative=before.get("use_relative", keys.use_relative if keys else True))
    for kb in _user_keys(obj):
        kb.mute = True
    obj.show_only_shape_key = False
    if keys is not None:
        keys.use_relative = True
    return restore


def _restore_user_keys(obj, restore, undo=None):
    """Put back what ``_quiet_user_keys`` changed (appending (target, attribute, value) to ``undo`` when given,
    for a temporary restore)."""
    keys = obj.data.shape_keys
    changes = [(obj, "show_only_shape_key", restore.get("show_only", obj.show_only_shape_key))]
    if keys is not None:
        changes.append((keys, "use_relative", restore.get("use_relative", keys.use_relative)))
        changes += [(keys.key_blocks[name], "mute", False) for name in restore.get("muted", [])
                    if name in keys.key_blocks]
    for target, attr, value in changes:
        if undo is not None:
            undo.append((target, attr, getattr(target, attr)))
        setattr(target, attr, value)


def write_shape_keys(gathered, q):
    """One shape key per loop frame, keyed to play cyclically; the physics modifier is disabled and the
    artist's own shape keys are muted while the loop plays (see module)."""
    obj = _object(gathered.object_names[0])
    if obj.type != "MESH" or len(obj.data.vertices) != gathered.n_written:
        raise LoopInputError(f"{obj.name!r} no longer has the {gathered.n_written} vertices it was gathered "
                             "with; gather the scene again")
    local = local_loop(gathered, q)
    mod = obj.modifiers.get(gathered.physics_modifier)
    marker = obj.get(MARKER)
    created_basis = bool(marker.get("created_basis")) if marker else obj.data.shape_keys is None

    _remove_loop_keys(obj)
    add_loop_keys(obj, local, gathered.frame_start, gathered.frame_step)
    user_keys = _quiet_user_keys(obj, marker)
    if mod is not None:
        mod.show_viewport = mod.show_render = False
    obj[MARKER] = dict(kind="mesh", modifier=gathered.physics_modifier, frame_start=gathered.frame_start,
                       period=gathered.period, created_basis=created_basis,
                       cache=bool(marker.get("cache")) if marker else False, user_keys=json.dumps(user_keys))
    return obj


def wrap_expression(frame_start, frame_step, n_frames, samples=True):
    """Driver expression of a loop's cyclic time: scene frame -> sample index or scene frame in the first period.

    Parameters
    ----------
    frame_start, frame_step, n_frames : int
        The loop: sample j is scene frame ``frame_start + j * frame_step``; the period lasts
        ``n_frames * frame_step`` scene frames.
    samples : bool
        True: the sample index in [0, n_frames) (the Mesh Cache modifier's ``eval_frame`` in Frame mode);
        False: the scene frame in [frame_start, frame_start + period) (a cache file's ``frame``).

    Returns
    -------
    str
        A simple expression (only ``frame``, arithmetic and ``floor``): Blender evaluates it without
        Python, so it plays with Auto Run Python Scripts off.
    """
    a, s, p = int(frame_start), int(frame_step), int(n_frames) * int(frame_step)
    if s < 1 or p < 1:
        raise LoopInputError(f"a loop needs a frame step and frame count of at least 1, got {frame_step}, {n_frames}")
    if samples:
        return f"(frame - {a}) / {s} - {int(n_frames)} * floor((frame - {a}) / {p})"
    return f"frame - {p} * floor((frame - {a}) / {p})"


def _simple_driver(id_data, data_path, expression):
    """Drive ``id_data``'s ``data_path`` by ``expression``; refuse one Blender would run through Python."""
    id_data.driver_remove(data_path)
    driver = id_data.driver_add(data_path).driver
    driver.type = "SCRIPTED"
    driver.expression = expression
    if not driver.is_simple_expression:
        raise LoopSolveError(f"the driver expression {expression!r} needs Python; it would not play with "
                             "Auto Run Python Scripts off")
    return driver


def wrap_cache_file(cache_file, frame_start, frame_step, n_frames):
    """Play an Alembic cache file as a loop.

    Its frame is overridden and driven by a simple expression that maps every scene frame into the first
    period ``[A, A + P)`` (see ``wrap_expression``), so scene frame A + k * P + t reads frame A + t of the
    file for every whole k.

    Parameters
    ----------
    cache_file : bpy.types.CacheFile
        The cache file of an imported Alembic loop.
    frame_start, frame_step, n_frames : int
        The loop it holds: A, S and N (P = N * S).

    Returns
    -------
    bpy.types.Driver
        The driver of ``cache_file.frame``.
    """
    cache_file.override_frame = True
    return _simple_driver(cache_file, "frame", wrap_expression(frame_start, frame_step, n_frames, samples=False))


def attach_mesh_cache(gathered, filepath):
    """Play a PC2 file (written by ``export.export_pc2``) on the object through a looping Mesh Cache modifier.

    The modifier takes the physics modifier's place in the stack, which is disabled. In Frame mode the
    modifier reads ``eval_frame`` as a sample index (the PC2 header's start frame and sample rate do not
    enter), so ``eval_frame`` is driven by the simple expression ``(frame - A) / S - N * floor((frame - A) /
    P)``: scene frame A + j * S reads sample j, and every period after (and before) plays the same. Blender
    evaluates a simple expression without Python, so the loop plays with Auto Run Python Scripts off.
    Between sample N - 1 and the wrap (S > 1 only) the modifier holds sample N - 1: it does not
    interpolate past the last sample of a file.
    """
    obj = _object(gathered.object_names[0])
    if obj.type != "MESH" or len(obj.data.vertices) != gathered.n_written:
        raise LoopInputError(f"{obj.name!r} no longer has the {gathered.n_written} vertices it was gathered with")
    _remove_mesh_cache(obj)
    mod = obj.modifiers.new(CACHE_MODIFIER, "MESH_CACHE")
    mod.cache_format = "PC2"
    mod.filepath = filepath
    mod.play_mode = "CUSTOM"
    mod.time_mode = "FRAME"
    mod.interpolation = "LINEAR"
    physics = obj.modifiers.get(gathered.physics_modifier)
    if physics is not None:
        compat.move_modifier(obj, mod, list(obj.modifiers).index(physics))
        physics.show_viewport = physics.show_render = False
    _simple_driver(obj, f'modifiers["{CACHE_MODIFIER}"].eval_frame',
                   wrap_expression(gathered.frame_start, gathered.frame_step, gathered.n_frames))
    marker = obj.get(MARKER)
    obj[MARKER] = dict(marker.to_dict() if marker else dict(
        kind="mesh", modifier=gathered.physics_modifier, frame_start=gathered.frame_start,
        period=gathered.period, created_basis=False), cache=True)
    return mod


def _remove_mesh_cache(obj):
    mod = obj.modifiers.get(CACHE_MODIFIER)
    if mod is not None:
        obj.driver_remove(f'modifiers["{CACHE_MODIFIER}"].eval_frame')
        obj.modifiers.remove(mod)


# ------------------------------------------------------------------------------------------------ bodies


def write_locations(gathered, q):
    """Each body gets a loop action with cyclic location keys; its own action is kept for restoring."""
    objects = [_object(name) for name in gathered.object_names]
    local = local_loop(gathered, q)
    frames = _frames(gathered.frame_start, gathered.frame_step, gathered.n_frames)
    wrap = np.arange(len(frames)) % gathered.n_frames
    for b, obj in enumerate(objects):
        marker = obj.get(MARKER)
        anim = obj.animation_data
        source = bpy.data.actions.get(marker["source_action"]) if marker else anim.action if anim else None
        if marker and anim and anim.action is not None and anim.action is not source:
            bpy.data.actions.remove(anim.action)
        action = bpy.data.actions.new(f"CyclicLoop {obj.name}")
        _assign_action(obj, action)
        fcurves = _fcurves(obj, action.name)
        for axis in range(3):
            _cyclic_fcurve(fcurves, "location", axis, frames, local[wrap, b, axis])
        if source is not None:
            source.use_fake_user = True
        obj[MARKER] = dict(kind="bodies", source_action=source.name if source else "")
    return objects


# ------------------------------------------------------------------------------------------------ restoring


def remove_loop(obj):
    """Undo a written loop on ``obj``: remove its keys, cache modifier or loop action, re-enable the physics."""
    marker = obj.get(MARKER)
    if marker is None:
        return False
    if marker["kind"] == "mesh":
        _remove_loop_keys(obj)
        _restore_user_keys(obj, json.loads(marker.get("user_keys", "{}")))
        keys = obj.data.shape_keys
        if marker["created_basis"] and keys is not None and len(keys.key_blocks) == 1:
            obj.shape_key_clear()
        _remove_mesh_cache(obj)
        mod = obj.modifiers.get(marker["modifier"])
        if mod is not None:
            mod.show_viewport = mod.show_render = True
    else:
        loop = obj.animation_data.action if obj.animation_data else None
        source = bpy.data.actions.get(marker["source_action"])
        if source is not None:
            _assign_action(obj, source)
        if loop is not None and loop is not source:
            bpy.data.actions.remove(loop)
    del obj[MARKER]
    return True


@contextmanager
def showing_source(objects):
    """Temporarily show the simulation under any loop written on ``objects`` (to gather it again)."""
    undo = []
    for obj in objects:
        marker = obj.get(MARKER)
        if marker is None:
            continue
        if marker["kind"] == "mesh":
            mods = [(obj.modifiers.get(marker["modifier"]), True), (obj.modifiers.get(CACHE_MODIFIER), False)]
            for mod, show in mods:
                if mod is not None:
                    undo.append((mod, "show_viewport", mod.show_viewport))
                    mod.show_viewport = show
            for kb in _loop_keys(obj):
                undo.append((kb, "mute", kb.mute))
                kb.mute = True
            _restore_user_keys(obj, json.loads(marker.get("user_keys", "{}")), undo)
        else:
            source = bpy.data.actions.get(marker["source_action"])
            if source is not None and obj.animation_data:
                undo.append((obj, None, obj.animation_data.action))
                _assign_action(obj, source)
    try:
        yield
    finally:
        for target, attr, value in reversed(undo):
            if attr is None:
                _assign_action(target, value)
            else:
                setattr(target, attr, value)
