"""Settings (per object) and run state (per scene), stored in the .blend as PropertyGroups."""
import bpy
from bpy.props import (BoolProperty, EnumProperty, FloatProperty, IntProperty, IntVectorProperty, PointerProperty,
                       StringProperty)

from .outputs import PANEL_OUTPUTS
from .scene_io import physics_modifier
from .vocabulary import INITS, ITERATIONS, METHODS, MODELS, SCHEMES


class CyclicLoopSettings(bpy.types.PropertyGroup):
    """Loop settings of one object; ``initialized`` once filled from its physics modifier."""

    initialized: BoolProperty(default=False, options={"HIDDEN"})
    method: EnumProperty(name="Method", items=METHODS, default="physical")
    frame_start: IntProperty(name="Start", default=1, min=0, description="First frame of the loop")
    frame_end: IntProperty(name="End", default=100, min=1, description="Last frame of the loop")
    model: EnumProperty(name="Model", items=MODELS, default="auto")
    pin_group: StringProperty(name="Pin Group", description="Vertex group of pinned vertices "
                              "(empty: the physics modifier's own)")
    colliders: PointerProperty(name="Colliders", type=bpy.types.Collection,
                               description="Collection of collider objects (empty: the objects with a "
                               "Collision modifier that the simulation sees)")
    bake_missing: BoolProperty(name="Bake Missing Cache", default=False,
                               description="Bake the physics cache first when it is not baked")
    scheme: EnumProperty(name="Scheme", items=SCHEMES, default="auto",
                         description="How the solver judges whether the motion obeys physics")
    substeps: IntProperty(name="Sub-steps", default=0, min=0, max=64,
                          description="Solver steps per frame: more is more accurate and slower "
                          "(0: the physics quality steps)")
    init: EnumProperty(name="Initial Guess", items=INITS, default="fast_projection",
                       description="The rough loop the solver starts from")
    hard_initial: BoolProperty(name="Hard Initial Conditions", default=True,
                               description="Start with the first two frames of the loop exactly as simulated; if the "
                               "loop then still shows its wrap, they may move a few millimetres to hide it (the "
                               "report says how far). Off: they may move from the start, by Softness")
    soft_weight: FloatProperty(name="Softness", default=1e-3, min=1e-9, soft_max=1.0, precision=6,
                               description="How far the first two frames may move when not kept exactly "
                               "(larger: freer)")
    max_iters: IntProperty(name="Iterations", default=ITERATIONS, min=1, max=10000,
                           description="At most this many optimizing steps: more is closer to physics "
                           "and slower")
    set_scene_range: BoolProperty(name="Set Scene Range", default=True,
                                  description="Set the scene's frame range to the loop when it is written, so "
                                  "that playback loops")
    gravitational_constant: FloatProperty(name="G", default=1.0, min=0.0,
                                          description="Gravitational constant of N bodies")
    softening: FloatProperty(name="Softening", default=0.0, min=0.0, description="N-body softening length")
    density: FloatProperty(name="Density", default=1000.0, min=1e-6,
                           description="N-body density: mass = density x mesh volume")
    output: EnumProperty(name="Output", items=[out[:3] for out in PANEL_OUTPUTS], default="SHAPE_KEYS")
    filepath: StringProperty(name="File", subtype="FILE_PATH", default="//loop",
                             description="Output file (extension added) or, for a vertex animation texture, folder")


class CyclicLoopRun(bpy.types.PropertyGroup):
    """Progress of the running solve and the report of the last one (scene-wide: one solve at a time)."""

    running: BoolProperty(default=False)
    phase: StringProperty(default="")
    iteration: IntProperty(default=0)
    loss: FloatProperty(default=0.0)
    progress: FloatProperty(name="Progress", default=0.0, min=0.0, max=1.0, subtype="FACTOR")
    percent: IntProperty(name="Progress", default=0, min=0, max=100, subtype="PERCENTAGE",
                         description="The progress in percent (the bar of Blender 3.x)")
    redraws: IntProperty(default=0, description="Timer ticks that redrew the panel during the run")
    message: StringProperty(default="")
    has_report: BoolProperty(default=False)
    object_name: StringProperty(default="")
    method: StringProperty(default="")
    init_used: StringProperty(default="")
    fallback_reason: StringProperty(default="")
    seam_before: FloatProperty(default=0.0)
    seam_after: FloatProperty(default=0.0)
    residual: FloatProperty(default=0.0)
    seconds: FloatProperty(default=0.0)
    iterations: IntProperty(default=0)
    status_text: StringProperty(default="", description="The phase and percentage, in words")
    time_text: StringProperty(default="", description="Time elapsed and left, in words")
    verdict: StringProperty(default="[]", description="The last run's verdicts (JSON of solver_core.verdict)")
    details: StringProperty(default="", description="The last run's figures, one per line")
    notes: StringProperty(default="", description="Settings approximated or ignored, one per line")
    show_details: BoolProperty(name="Details", default=False, description="Show the figures of the last run")
    loop_first: IntProperty(default=0)
    loop_last: IntProperty(default=0)
    loop_step: IntProperty(default=1)
    range_before: IntVectorProperty(size=2, default=(0, 0), description="The scene range before the loop set it")
    range_set: BoolProperty(default=False)


# The first part of a physics cache is its settle from rest (a flag starts flat and still): not part of a
# motion that can loop. The default loop range skips this fraction of the cache.
SETTLE_FRACTION = 1 / 3


def loop_range(first, last):
    """The default loop frames of a cache of frames first..last: its end, without the settle from rest."""
    return first + int((last - first + 1) * SETTLE_FRACTION), last


def fill_from_physics(settings, obj, scene):
    """Defaults from the object's physics modifier: frame range of its cache (without the settle from
    rest, ``loop_range``), model, pin group, substeps (cloth quality steps), collider collection and, for
    cloth, Blender's own cache as the initial guess; the scheme stays "auto" (the model's own)."""
    settings.frame_start, settings.frame_end = scene.frame_start, scene.frame_end
    mod = physics_modifier(obj)
    if mod is not None:
        cache = mod.point_cache
        settings.frame_start, settings.frame_end = loop_range(cache.frame_start, cache.frame_end)
        if mod.type == "CLOTH":
            settings.init = "cache"
            settings.model = "blender_cloth"
            settings.pin_group = mod.settings.vertex_group_mass
            settings.substeps = mod.settings.quality
            settings.colliders = mod.collision_settings.collection
        else:
            settings.model = "soft_body"
            settings.pin_group = mod.settings.vertex_group_goal
            settings.substeps = 1
    settings.initialized = True


CLASSES = (CyclicLoopSettings, CyclicLoopRun)


def register():
    for cls in CLASSES:
        bpy.utils.register_class(cls)
    bpy.types.Object.cyclic_loop_settings = PointerProperty(type=CyclicLoopSettings)
    bpy.types.Scene.cyclic_loop_run = PointerProperty(type=CyclicLoopRun)


def unregister():
    del bpy.types.Scene.cyclic_loop_run
    del bpy.types.Object.cyclic_loop_settings
    for cls in reversed(CLASSES):
        bpy.utils.unregister_class(cls)
