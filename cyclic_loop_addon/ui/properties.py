"""Settings (per object) and run state (per scene), stored in the .blend as PropertyGroups."""
import bpy
from bpy.props import (BoolProperty, EnumProperty, FloatProperty, IntProperty, IntVectorProperty, PointerProperty,
                       StringProperty)

from ..outputs.catalog import PANEL_OUTPUTS
from ..outputs.gltf import DEFAULTS as GLTF_DEFAULTS, SHADING_ITEMS, STORAGE_ITEMS
from ..pipeline.scene_reader import physics_defaults, physics_modifier
from ..vocabulary import INITS, ITERATIONS, METHODS, MODELS, SCHEMES, SOFTNESS


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
                               "report says how far). Off: they may move from the start, by Softness "
                               "(off by default for Blender cloth)")
    soft_weight: FloatProperty(name="Softness", default=SOFTNESS, min=1e-9, soft_max=1e5, precision=3,
                               description="How far the first two frames may move when not kept exactly "
                               f"(larger: freer; {SOFTNESS:g} lets a cloth find a motion that closes)")
    max_iters: IntProperty(name="Iterations", default=ITERATIONS, min=1, max=10000,
                           description="At most this many optimizing steps: more is closer to physics "
                           "and slower")
    gusts: BoolProperty(name="Allow Gusts", default=True,
                        description="Let the loop design a gusting wind of its own (with no wind in the scene: gentle "
                        "pushes) that keeps the cloth moving. Off: pure physics, where a damped cloth can only "
                        "loop by calming down")
    keep_motion: BoolProperty(name="Keep Motion", default=True,
                              description="Keep the loop moving as fast as your simulation (needs Allow Gusts)")
    write_wind: BoolProperty(name="Write Wind", default=False,
                             description="Add the designed gusts to the scene as keyed Wind fields (a Loop Wind "
                             "collection), so re-simulating the cloth falls into the loop")
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
    glb_shading: EnumProperty(name="Shading", items=SHADING_ITEMS, default=GLTF_DEFAULTS["shading"],
                              description="How the glTF file's faces are shaded")
    glb_storage: EnumProperty(name="Storage", items=STORAGE_ITEMS, default=GLTF_DEFAULTS["storage"],
                              description="How the glTF file stores the morph targets and their weights")


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
    verdict: StringProperty(default="[]", description="The last run's verdicts (JSON of verdict.verdict)")
    details: StringProperty(default="", description="The last run's figures, one per line")
    notes: StringProperty(default="", description="Settings approximated or ignored, one per line")
    show_details: BoolProperty(name="Details", default=False, description="Show the figures of the last run")
    loop_first: IntProperty(default=0)
    loop_last: IntProperty(default=0)
    loop_step: IntProperty(default=1)
    range_before: IntVectorProperty(size=2, default=(0, 0), description="The scene range before the loop set it")
    range_set: BoolProperty(default=False)
    solver_text: StringProperty(default="", description="The linear solve of the running loop (cholmod, scipy, "
                                "structured)")
    stopped: BoolProperty(default=False, description="The last loop was stopped early: the best found so far")


def fill_from_physics(settings, obj, scene):
    """Defaults from the object's physics (``scene_reader.physics_defaults``, the one table of each model's
    defaults): the cache's frames without the settle from rest, model, pin group and collider collection
    of its modifier, initial guess, sub-steps and initial conditions; the scheme stays "auto"."""
    mod = physics_modifier(obj)
    defaults = physics_defaults([obj], settings.model if mod is None else "auto", scene)
    settings.frame_start, settings.frame_end = defaults.frame_start, defaults.frame_end
    if mod is not None:
        settings.model = defaults.model
        if mod.type == "CLOTH":
            settings.pin_group = mod.settings.vertex_group_mass
            settings.colliders = mod.collision_settings.collection
        else:
            settings.pin_group = mod.settings.vertex_group_goal
    settings.init, settings.substeps = defaults.init, defaults.substeps
    settings.hard_initial = defaults.soft == 0
    settings.soft_weight = defaults.soft or SOFTNESS
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
