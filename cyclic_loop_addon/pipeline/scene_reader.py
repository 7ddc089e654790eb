"""Scene -> LoopProblem: read the cached forward simulation and the physics settings of the scene.

``gather(settings)`` is the one entry point. It reads the evaluated mesh of the chosen object once per
frame over the frame range (world space), its rest shape and topology, hard pins with their per-frame
positions, colliders per frame, gravity and wind, and maps the Cloth / Soft Body modifier settings to a
solver model. Several selected objects without mesh physics are N bodies. The scene is left as it was
(the current frame is restored); only ``settings.bake_missing`` bakes an unbaked cache first.

This module only reads: it turns the scene into plain records (``sc.MeshScene``, ``sc.BodiesScene``) and
refuses, in the user's terms, what cannot be looped. ``solver_core/blender_scene.py`` maps the records to
models and the LoopProblem (in seconds: Blender's cloth and soft body integrate in frames, times their
speed setting, with gravity scaled by 0.001; their mapped models reproduce that).
"""
from dataclasses import dataclass, field, replace

import bpy
import numpy as np

from .. import limits
from ..outputs import writeback
from ..errors import LoopInputError
from ..blender_mesh import mesh_arrays
from ..core import sc
from ..vocabulary import ITERATIONS, MODEL_DEFAULTS, MODELS, SCHEME_OF_MODEL, loop_range, names

PIN_WEIGHT = 0.999      # Blender's SOFTGOALSNAP: goal weights from here on pin a vertex exactly
EXPLODED = 1000.0           # a cache spreading over this many times the rest size has blown up


@dataclass
class LoopSettings:
    """What to loop and how. Empty ``objects`` means the selected objects; frames None mean the scene range.

    ``scheme`` "auto" takes the model's (``SCHEME_OF_MODEL``); ``substeps`` 0 takes them from the physics
    settings (Cloth quality); ``pin_group`` "" takes the
    modifier's own pin / goal group; ``collider_collection`` "" takes the objects with a Collision
    modifier that the simulation sees. ``soft`` > 0 makes the first two frames soft constraints. ``gusts``
    lets the solver design a periodic driving force (the scene's wind gusting, else gentle body forces) and
    ``keep_motion`` holds the loop at the cache's speed (``solver_core.MotionOptions``).
    ``with_defaults`` fills ``init``, ``substeps``, ``soft`` and the frames, when None, with the model's
    defaults (``physics_defaults``), as bake.py and the panel's selection do.
    """
    objects: tuple = ()
    frame_start: int = None
    frame_end: int = None
    model: str = "auto"
    scheme: str = "auto"
    init: str = "fast_projection"
    substeps: int = 0
    iterations: int = ITERATIONS
    tolerance: float = sc.TOL
    physics_tolerance: float = sc.PHYSICS_TOL
    soft: float = 0.0
    pin_group: str = ""
    collider_collection: str = ""
    bake_missing: bool = False
    gravitational_constant: float = 1.0
    softening: float = 0.0
    density: float = 1000.0
    gusts: bool = True
    keep_motion: bool = True


@dataclass
class Gathered:
    """A LoopProblem and what write-back and exports need to map the loop back onto the scene.

    ``source``: the forward cache (N, n, 3) in world space on the problem's vertices (a soft body's
    interior filled in); ``n_written``: how many leading vertices are the object's mesh vertices;
    ``to_local``: (objects, N, 4, 4) world -> object (mesh) or parent (bodies) space per frame.
    """
    problem: object
    kind: str                       # "mesh" or "bodies"
    model_name: str
    object_names: list
    frames: np.ndarray
    frame_step: int
    source: np.ndarray
    n_written: int
    to_local: np.ndarray
    edges: np.ndarray = None
    physics_modifier: str = ""
    notes: list = field(default_factory=list)

    @property
    def n_frames(self):
        return len(self.frames)

    @property
    def frame_start(self):
        return int(self.frames[0])

    @property
    def period(self):
        """Length of the loop in scene frames."""
        return self.n_frames * self.frame_step


def gather(settings, context=None):
    """Read the scene into a ``Gathered`` (``.problem`` is the LoopProblem); raise LoopInputError on bad input."""
    context = context or bpy.context
    scene = context.scene
    if settings.model not in names(MODELS):
        raise LoopInputError(f"unknown model {settings.model!r}; choose one of {', '.join(names(MODELS))}")
    limits.check_numbers(int(settings.iterations), int(settings.substeps), float(settings.soft),
                         float(settings.tolerance), float(settings.physics_tolerance))
    objects = _chosen_objects(settings, context)
    editing = [ob.name for ob in objects if ob.mode == "EDIT"]
    if editing:
        raise LoopInputError(f"{', '.join(map(repr, editing))} is in Edit Mode: leave Edit Mode (Tab) and make "
                             "the loop again")
    frames = _frame_range(settings, scene, objects)
    current = scene.frame_current
    try:
        with writeback.showing_source(objects):
            if len(objects) > 1 or settings.model == "nbody":
                return _gather_bodies(objects, frames, settings, context)
            return _gather_mesh(objects[0], frames, settings, context)
    finally:
        scene.frame_set(current)


# ------------------------------------------------------------------------------------------------ choosing


def _chosen_objects(settings, context):
    if settings.objects:
        missing = [name for name in settings.objects if name not in bpy.data.objects]
        if missing:
            raise LoopInputError(f"no object named {', '.join(map(repr, missing))} in the file")
        return [bpy.data.objects[name] for name in settings.objects]
    objects = list(context.selected_objects) or ([context.active_object] if context.active_object else [])
    if not objects:
        raise LoopInputError("nothing selected: select the simulated mesh (or several objects for N bodies)")
    return objects


def _frame_range(settings, scene, objects):
    """The loop's scene frames, after checking the range against the cache and the memory it needs."""
    start = scene.frame_start if settings.frame_start is None else int(settings.frame_start)
    end = scene.frame_end if settings.frame_end is None else int(settings.frame_end)
    step = max(scene.frame_step, 1)
    count = limits.check_frames(start, end, step)
    mod = physics_modifier(objects[0]) if len(objects) == 1 and settings.model != "nbody" else None
    n, substeps, model, explicit = len(objects), int(settings.substeps) or 1, "nbody", False
    if mod is not None and objects[0].type == "MESH":
        _check_cache_range(objects[0], mod, start, end)
        n = len(objects[0].data.vertices) * (1 if mod.type == "CLOTH" else 2)   # a soft body's interior
        model = settings.model if settings.model != "auto" else "blender_cloth" if mod.type == "CLOTH" else "soft_body"
        if mod.type == "CLOTH":
            own = step * max(int(mod.settings.quality), 1)
            substeps = int(settings.substeps) or own
            explicit = substeps >= own     # Blender's sub-steps: its hinges taken explicitly
    scheme = SCHEME_OF_MODEL.get(model, "backward") if settings.scheme == "auto" else settings.scheme
    limits.check_memory(count, substeps, n, scheme, velocity_terms=model == "blender_cloth",
                        explicit_terms=explicit and model == "blender_cloth" and scheme == "linearized",
                        soft_frames=bool(settings.soft), driven=settings.gusts and model != "nbody")
    return np.arange(start, end + 1, step)


@dataclass
class Defaults:
    """A loop's defaults from its objects' physics: the model, loop frames and ``MODEL_DEFAULTS``' solver
    settings (``substeps`` counted: 0 turned into the physics' own steps per frame)."""
    model: str
    frame_start: int
    frame_end: int
    init: str
    substeps: int
    soft: float


LOOP_FRAMES = "loop_frames"     # scene ID property: the frames the scene's author meant to loop (first, last)


def physics_defaults(objects, model="auto", scene=None):
    """The ``Defaults`` of a loop of ``objects`` (bpy objects) as ``model`` ("auto": their physics'): the
    scene's own loop range (its ``loop_frames`` property, within the cache) or the cache's frames without
    the settle from rest (``loop_range``; no physics modifier: the scene range)."""
    scene = scene or bpy.context.scene
    mod = physics_modifier(objects[0]) if len(objects) == 1 else None
    if model == "auto":
        model = "nbody" if mod is None else "blender_cloth" if mod.type == "CLOTH" else "soft_body"
    first, last = scene.frame_start, scene.frame_end
    if mod is not None:
        first, last = loop_range(mod.point_cache.frame_start, mod.point_cache.frame_end)
    own = scene.get(LOOP_FRAMES)
    if own is not None and len(own) == 2 and (mod is None or mod.point_cache.frame_start <= own[0] < own[1]
                                              <= mod.point_cache.frame_end):
        first, last = int(own[0]), int(own[1])    # the scene's own loop range (the samples have one)
    own = 1
    if mod is not None and mod.type == "CLOTH":
        own = max(scene.frame_step, 1) * max(int(mod.settings.quality), 1)
    table = MODEL_DEFAULTS[model]
    return Defaults(model, first, last, table["init"], table["substeps"] or own, table["soft"])


def with_defaults(settings, context=None):
    """``settings`` with its None frames, ``init``, ``substeps`` and ``soft`` from ``physics_defaults``
    of its objects; LoopInputError for objects that are not in the file or a model that is not known."""
    context = context or bpy.context
    if settings.model not in names(MODELS):
        raise LoopInputError(f"unknown model {settings.model!r}; choose one of {', '.join(names(MODELS))}")
    defaults = physics_defaults(_chosen_objects(settings, context), settings.model, context.scene)
    values = {key: getattr(defaults, key) for key in ("init", "substeps", "soft") if getattr(settings, key) is None}
    if settings.frame_start is None and settings.frame_end is None:
        values.update(frame_start=defaults.frame_start, frame_end=defaults.frame_end)
    return replace(settings, **values)


def physics_modifier(obj):
    """The object's Cloth or Soft Body modifier, or None."""
    for mod in getattr(obj, "modifiers", ()):
        if mod.type in {"CLOTH", "SOFT_BODY"}:
            return mod
    return None


# ------------------------------------------------------------------------------------------------ reading


def _world(points, matrix):
    return points @ matrix[:3, :3].T + matrix[:3, 3]


def evaluated_positions(obj, depsgraph):
    """World-space vertex positions (n, 3) of the evaluated object and its world matrix (4, 4)."""
    ob = obj.evaluated_get(depsgraph)
    mesh = ob.data
    co = np.empty(len(mesh.vertices) * 3)
    mesh.vertices.foreach_get("co", co)
    matrix = np.array(ob.matrix_world)
    return _world(co.reshape(-1, 3), matrix), matrix


def _frames_of(frames, context, read):
    """``read(depsgraph, frame)`` at every frame, in order."""
    out = []
    for frame in frames:
        context.scene.frame_set(int(frame))
        out.append(read(context.evaluated_depsgraph_get(), int(frame)))
    return out


def _group_weights(obj, name):
    """Weights (n,) of vertex group ``name`` (0 where unassigned); read once, Blender has no bulk read of them."""
    index = obj.vertex_groups[name].index
    weights = np.zeros(len(obj.data.vertices))
    for v in obj.data.vertices:
        for g in v.groups:
            if g.group == index:
                weights[v.index] = g.weight
    return weights


def _pins(obj, group, chosen, notes):
    """Hard-pinned vertex indices from vertex group ``group`` (or none when no group is set)."""
    if not group:
        return np.zeros(0, np.int64)
    where = "the pin group you chose" if chosen else "the pin group of the physics modifier"
    if group not in obj.vertex_groups:
        raise LoopInputError(f"{where}, {group!r}, is not a vertex group of {obj.name!r}; "
                             f"groups: {', '.join(g.name for g in obj.vertex_groups) or 'none'}")
    weights = _group_weights(obj, group)
    pins = np.flatnonzero(weights >= PIN_WEIGHT)
    if pins.size == 0:
        raise LoopInputError(f"{where}, {group!r}, pins no vertex of {obj.name!r}: assign vertices with "
                             f"weight 1 (weights below {PIN_WEIGHT} are soft goals, not pins)")
    partial = np.count_nonzero((weights > 0) & (weights < PIN_WEIGHT))
    if partial:
        notes.append(f"{partial} vertices of pin group {group!r} have weights below 1 and are treated as free")
    return pins


# ------------------------------------------------------------------------------------------------ environment


def _gravity(scene, weights):
    """Scene gravity as the simulation feels it (m/s^2)."""
    if not scene.use_gravity:
        return np.zeros(3)
    return np.array(scene.gravity) * weights.gravity


def _winds(scene, weights, notes):
    """Wind field objects the simulation sees (its effector collection, else the whole scene)."""
    pool = weights.collection.all_objects if weights.collection else scene.objects
    winds = []
    for ob in pool:
        if ob.field and ob.field.type == "WIND":
            winds.append(ob)
            if ob.field.noise or ob.field.falloff_type != "NONE" or ob.field.shape != "PLANE":
                notes.append(f"wind {ob.name!r}: noise, falloff and shape are ignored (uniform wind)")
        elif ob.field and ob.field.type not in ("NONE", "WIND"):
            notes.append(f"force field {ob.name!r} ({ob.field.type.lower()}) is not modeled and is ignored")
    return winds


def _wind_flow(winds, weights):
    """The winds' summed Flow as Blender's cloth feels it (times the effector weights): how much of the
    cloth's own velocity its wind subtracts."""
    return float(sum(ob.field.flow for ob in winds)) * weights.wind * weights.all


def _wind_vector(ob, depsgraph, weights):
    ev = ob.evaluated_get(depsgraph)
    axis = np.array(ev.matrix_world)[:3, 2]
    return ev.field.strength * axis / np.linalg.norm(axis) * weights.wind * weights.all


def _colliders(obj, scene, settings, own_collection):
    """Collider objects: the chosen collection, else the simulation's collision collection or scene."""
    if settings.collider_collection:
        if settings.collider_collection not in bpy.data.collections:
            raise LoopInputError(f"no collection named {settings.collider_collection!r} for the colliders")
        pool = bpy.data.collections[settings.collider_collection].all_objects
        chosen = [ob for ob in pool if ob is not obj]
    else:
        pool = own_collection.all_objects if own_collection else scene.objects
        chosen = [ob for ob in pool if ob is not obj and any(m.type == "COLLISION" for m in ob.modifiers)]
    for ob in chosen:
        if ob.type != "MESH" or len(ob.data.polygons) == 0:
            raise LoopInputError(f"collider {ob.name!r} has no faces to collide with; give it a mesh with "
                                 "faces or remove its Collision modifier / take it out of the collection")
    return chosen


def _collider_frame(ob, depsgraph):
    ev = ob.evaluated_get(depsgraph)
    co, _, tris, _ = mesh_arrays(ev.data)
    return _world(co, np.array(ev.matrix_world)), tris


def _collider_records(colliders, collider_frames):
    """``sc.Collider`` records of the colliders from their (world vertices, tris) per frame."""
    records = []
    for ob, frames_of_ob in zip(colliders, collider_frames):
        if len({(len(x), len(t)) for x, t in frames_of_ob}) > 1:
            raise LoopInputError(f"collider {ob.name!r} changes topology over the range")
        thickness = ob.collision.thickness_outer if ob.collision else 0.02
        records.append(sc.Collider(np.array([x for x, _ in frames_of_ob]), frames_of_ob[0][1], thickness))
    return records


# ------------------------------------------------------------------------------------------------ meshes


def _check_cache_range(obj, mod, lo, hi):
    cache = mod.point_cache
    if lo < cache.frame_start or hi > cache.frame_end:
        raise LoopInputError(f"frames {lo}..{hi} are outside the {mod.name} cache of {obj.name!r} "
                             f"({cache.frame_start}..{cache.frame_end}); pick a range inside it")


def _check_cache(obj, mod, frames, bake_missing, context):
    cache = mod.point_cache
    _check_cache_range(obj, mod, int(frames[0]), int(frames[-1]))
    if not cache.is_baked:
        if not bake_missing:
            raise LoopInputError(f"the {mod.name} cache of {obj.name!r} is not baked; bake it "
                                 "(Physics > Cache > Bake, or bake.py --bake) and try again")
        bake_cache(obj, mod, context)


def bake_cache(obj, mod, context=None):
    """Bake the point cache of physics modifier ``mod`` (works in background mode, unlike frame stepping)."""
    context = context or bpy.context
    with context.temp_override(scene=context.scene, active_object=obj, object=obj, point_cache=mod.point_cache):
        bpy.ops.ptcache.bake(bake=True)
    if not mod.point_cache.is_baked:
        raise LoopInputError(f"baking the {mod.name} cache of {obj.name!r} failed")


def _mesh_modifier(obj, settings):
    """The physics modifier of ``obj`` and the model name it maps to, refusing what does not fit."""
    if obj.type != "MESH":
        raise LoopInputError(f"{obj.name!r} is a {obj.type.lower()}, not a mesh: select the simulated mesh")
    mod = physics_modifier(obj)
    if mod is None:
        raise LoopInputError(f"{obj.name!r} has no Cloth or Soft Body modifier (select several objects "
                             "to loop them as N bodies)")
    model = settings.model
    if model == "auto":
        model = "blender_cloth" if mod.type == "CLOTH" else "soft_body"
    if (model == "soft_body") != (mod.type == "SOFT_BODY"):
        raise LoopInputError(f"model {model!r} does not fit the {mod.type.replace('_', ' ').title()} "
                             f"modifier of {obj.name!r}")
    if not mod.show_viewport:
        raise LoopInputError(f"the {mod.name} modifier of {obj.name!r} is disabled in the viewport, so the "
                             "simulation does not play; enable it")
    return mod, model


def _gather_mesh(obj, frames, settings, context):
    mod, model = _mesh_modifier(obj, settings)
    scene = context.scene
    notes = []
    _check_cache(obj, mod, frames, settings.bake_missing, context)
    cloth = mod.type == "CLOTH"
    physics = mod.settings if cloth else obj.soft_body
    weights = physics.effector_weights
    group = settings.pin_group or (physics.vertex_group_mass if cloth else
                                   (physics.vertex_group_goal if physics.use_goal else ""))
    pins = _pins(obj, group, bool(settings.pin_group), notes)
    if not cloth and physics.use_goal and not physics.vertex_group_goal:
        notes.append("soft body goal without a vertex group (a soft pull on every vertex) is ignored")
    if cloth:
        collisions = mod.collision_settings
        colliders = _colliders(obj, scene, settings, collisions.collection) if collisions.use_collision else []
        winds = _winds(scene, weights, notes)
        if collisions.use_self_collision:
            notes.append("self collision is not modeled")
        if model != "blender_cloth" and max(physics.tension_damping, physics.compression_damping,
                                            physics.shear_damping) > 0:
            notes.append("spring damping (tension, compression, shear) is not modeled by the thin-shell model")
    else:
        colliders = _colliders(obj, scene, settings, physics.collision_collection)
        winds = []
        if _winds(scene, weights, []):
            notes.append("wind is not modeled for soft bodies and is ignored")

    rest_local, faces, tris, edges = mesh_arrays(obj.data)
    if cloth and mod.settings.rest_shape_key:
        co = np.empty(rest_local.size)
        mod.settings.rest_shape_key.data.foreach_get("co", co)
        rest_local = co.reshape(-1, 3)
    n = len(rest_local)

    def read(depsgraph, frame):
        x, matrix = evaluated_positions(obj, depsgraph)
        if len(x) != n:
            raise LoopInputError(_topology_message(obj, mod, len(x), n, frame))
        return (x, matrix, [_collider_frame(ob, depsgraph) for ob in colliders],
                [_wind_vector(ob, depsgraph, weights) for ob in winds])

    if cloth:
        _check_cloth_mesh(obj, rest_local, faces, edges)
    per_frame = _frames_of(frames, context, read)
    source = np.array([p[0] for p in per_frame])
    _check_source(obj, mod, source, rest_local, frames)
    matrices = np.array([p[1] for p in per_frame])
    collider_records = _collider_records(colliders, [[p[2][i] for p in per_frame] for i in range(len(colliders))])
    wind = np.array([np.sum(p[3], axis=0) for p in per_frame]) if winds else None
    rest = _world(rest_local, matrices[0])
    step = max(scene.frame_step, 1)
    if not cloth:
        _check_closed(obj, rest, tris)
    keys = sc.CLOTH_SETTINGS_DEFAULTS if cloth else sc.SOFT_BODY_SETTINGS
    parts = sc.mesh_parts(sc.MeshScene(
        model=model, physics={key: getattr(physics, key) for key in keys}, rest=rest, faces=faces, tris=tris,
        edges=edges, source=source, fps=_fps(scene), frame_step=step, gravity=_gravity(scene, weights), wind=wind,
        colliders=collider_records, collision_distance=mod.collision_settings.distance_min if cloth else 0.0,
        pins=pins, wind_flow=_wind_flow(winds, weights)))
    problem = _problem(parts, settings, model)
    _check_periodic_transform(obj, matrices, frames, step, context, notes)
    return Gathered(problem=problem, kind="mesh", model_name=model, object_names=[obj.name], frames=frames,
                    frame_step=step, source=parts.source, n_written=n,
                    to_local=np.linalg.inv(matrices)[None], edges=edges, physics_modifier=mod.name, notes=notes)


def _topology_message(obj, mod, count, n, frame):
    """Why the evaluated mesh of ``obj`` has ``count`` vertices instead of its mesh's ``n``."""
    enabled = [m for m in obj.modifiers if m.show_viewport]
    at = enabled.index(mod) if mod in enabled else len(enabled)
    before, after = [m.name for m in enabled[:at]], [m.name for m in enabled[at + 1:]]
    head = f"{obj.name!r} has {count} vertices at frame {frame} but its mesh has {n}"
    if before:
        return (f"{head}: the modifier(s) {', '.join(before)} before the {mod.name} modifier change the mesh "
                f"it simulates; apply them (Object > Apply) and bake again, so the cloth is the mesh itself")
    if after:
        return (f"{head}: the topology changes because the modifier(s) {', '.join(after)} after the {mod.name} "
                "modifier add or remove vertices; disable them in the viewport while making the loop")
    return f"{head}: the mesh changes over the frame range; loop a range where it keeps its vertices"


def _check_cloth_mesh(obj, rest, faces, edges):
    """Refuse meshes the cloth models cannot take: no faces, loose vertices or edges, degenerate faces."""
    if not faces:
        kind = "an edges-only mesh such as a rope" if len(edges) else "only loose vertices"
        raise LoopInputError(f"{obj.name!r} has no faces ({kind}): Cyclic Loop models cloth as a surface and "
                             "does not support ropes or point clouds; give it faces (e.g. extrude the rope "
                             "into a thin strip) and bake again")
    on_face = np.zeros(len(rest), bool)
    on_face[np.concatenate(faces)] = True
    if not on_face.all():
        loose = np.flatnonzero(~on_face)
        raise LoopInputError(f"{obj.name!r} has {len(loose)} vertices on no face (loose vertices or edges, e.g. "
                             f"vertex {loose[0]}): Cyclic Loop models cloth as a surface; delete them (Select > "
                             "Select All by Trait > Loose Geometry, then Delete) and bake again")
    size = np.ptp(rest, axis=0).max() or 1.0
    lengths = np.linalg.norm(rest[edges[:, 0]] - rest[edges[:, 1]], axis=1)
    short = np.flatnonzero(lengths <= 1e-9 * size)
    if short.size:
        raise LoopInputError(f"{obj.name!r} has {short.size} edges of zero length (e.g. between vertices "
                             f"{edges[short[0], 0]} and {edges[short[0], 1]}), so some faces have no area: "
                             "merge them (Mesh > Clean Up > Merge by Distance) and bake again")


def _check_source(obj, mod, source, rest, frames):
    """Refuse a mesh or cache with invalid positions, or a cache that has blown up."""
    broken = np.flatnonzero(~np.isfinite(rest).all(axis=1))
    if broken.size:
        raise LoopInputError(f"the mesh of {obj.name!r} has {broken.size} vertices with invalid (NaN or infinite) "
                             f"coordinates (e.g. vertex {broken[0]}): fix or delete them and bake again")
    bad = ~np.isfinite(source).all(axis=(1, 2))
    if bad.any():
        frame = int(frames[np.argmax(bad)])
        raise LoopInputError(f"the {mod.name} cache of {obj.name!r} has invalid (NaN or infinite) positions at "
                             f"frame {frame}: the simulation blew up there. Bake it again (more quality steps) "
                             "or loop frames before it")
    rest_size = np.ptp(rest, axis=0).max() or 1.0
    extent = np.ptp(source.reshape(-1, 3), axis=0).max()
    if extent > EXPLODED * rest_size:
        raise LoopInputError(f"the {mod.name} cache of {obj.name!r} spreads over {extent:.3g} m, "
                             f"{extent / rest_size:.0f} times the size of the mesh: the simulation exploded. "
                             "Bake it again (more quality steps, smaller time step) before looping it")


def _fps(scene):
    """Frames per second of the scene."""
    return scene.render.fps / scene.render.fps_base


def _check_closed(obj, rest, tris):
    """Refuse a soft body whose surface is not closed: it has no volume to fill."""
    try:
        sc.physics.tetmesh.check_closed_manifold(rest, tris)
    except ValueError as exc:
        raise LoopInputError(f"{obj.name!r} is not a closed surface, so it has no volume for a soft body "
                             f"model ({exc}); close the mesh or use cloth") from exc


def _problem(parts, settings, model_name):
    """The LoopProblem of ``parts`` (solver_core.blender_scene.LoopParts) with the settings' scheme, soft
    constraints and sub-steps."""
    scheme = SCHEME_OF_MODEL[model_name] if settings.scheme == "auto" else settings.scheme
    try:
        return sc.problem_from_parts(parts, scheme, settings.soft, int(settings.substeps))
    except ValueError as exc:
        raise LoopInputError(f"the loop problem is invalid: {exc}") from exc


def _check_periodic_transform(obj, matrices, frames, step, context, notes):
    """Note when the object's own transform does not repeat after one period (the loop would jump)."""
    context.scene.frame_set(int(frames[-1]) + step)
    after = np.array(obj.evaluated_get(context.evaluated_depsgraph_get()).matrix_world)
    if np.abs(after - matrices[0]).max() > 1e-4 * max(1.0, np.abs(matrices[0]).max()):
        notes.append(f"the transform of {obj.name!r} at frame {int(frames[-1]) + step} differs from frame "
                     f"{int(frames[0])}: make its animation repeat every {len(frames) * step} frames")


# ------------------------------------------------------------------------------------------------ N bodies


def _body_mass(ob, density):
    if "mass" in ob:
        mass = float(ob["mass"])
        if not mass > 0:
            raise LoopInputError(f"body {ob.name!r} has mass {mass}; the 'mass' property must be positive")
        return mass
    if ob.type != "MESH":
        raise LoopInputError(f"body {ob.name!r} has no 'mass' custom property and no mesh to take a volume from")
    co, _, tris, _ = mesh_arrays(ob.data)
    volume = abs(sc.physics.tetmesh.enclosed_volume(co, tris)) * abs(np.linalg.det(np.array(ob.matrix_world)[:3, :3]))
    if not volume > 0:
        raise LoopInputError(f"body {ob.name!r} has no 'mass' custom property and encloses no volume")
    return density * volume


def _check_animated(ob, frames):
    action = ob.animation_data.action if ob.animation_data else None
    if action is None:
        raise LoopInputError(f"body {ob.name!r} is not animated: bake or keyframe its motion first")
    lo, hi = action.frame_range
    if frames[0] < lo or frames[-1] > hi:
        raise LoopInputError(f"frames {int(frames[0])}..{int(frames[-1])} are outside the animation of "
                             f"{ob.name!r} ({lo:g}..{hi:g}); pick a range inside it")


def _parent_matrix(ev):
    if ev.parent is None:
        return np.eye(4)
    return np.array(ev.parent.matrix_world) @ np.array(ev.matrix_parent_inverse)


def _gather_bodies(objects, frames, settings, context):
    for ob in objects:
        if physics_modifier(ob) is not None:
            raise LoopInputError(f"{ob.name!r} has mesh physics: select one simulated mesh, or several "
                                 "objects without Cloth / Soft Body for N bodies")
        _check_animated(ob, frames)
    masses = np.array([_body_mass(ob, settings.density) for ob in objects])
    scene = context.scene

    def read(depsgraph, frame):
        evs = [ob.evaluated_get(depsgraph) for ob in objects]
        return np.array([np.array(ev.matrix_world)[:3, 3] for ev in evs]), np.array([_parent_matrix(ev) for ev in evs])

    per_frame = _frames_of(frames, context, read)
    source = np.array([p[0] for p in per_frame])
    parents = np.array([p[1] for p in per_frame])            # (N, bodies, 4, 4)
    step = max(scene.frame_step, 1)
    bodies = sc.BodiesScene(masses, source, _fps(scene), step, G=settings.gravitational_constant,
                            softening=settings.softening)
    problem = _problem(sc.bodies_parts(bodies), settings, "nbody")
    return Gathered(problem=problem, kind="bodies", model_name="nbody", object_names=[ob.name for ob in objects],
                    frames=frames, frame_step=step, source=source, n_written=len(objects),
                    to_local=np.linalg.inv(parents).transpose(1, 0, 2, 3))

