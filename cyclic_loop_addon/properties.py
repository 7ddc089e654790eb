"""Settings (per object) and run state (per scene), stored in the .blend as PropertyGroups."""
import bpy
from bpy.props import (BoolProperty, EnumProperty, FloatProperty, IntProperty, IntVectorProperty, PointerProperty,
                       StringProperty)

MODELS = (
    ("auto", "From Physics", "The model of the object's physics: Blender cloth springs, soft body, "
     "or N bodies when several objects are selected"),
    ("blender_cloth", "Cloth (Blender springs)", "Blender's cloth spring model with its settings"),
    ("shell", "Cloth (thin shell)", "FEM membrane and discrete-shell bending (cotton)"),
    ("soft_body", "Soft Body", "Tetrahedral FEM from the Soft Body settings"),
    ("nbody", "N Bodies", "The selected objects are bodies under mutual gravity"),
)
SCHEMES = (
    ("auto", "From Physics", "The physics the object already has decides (recommended)"),
    ("linearized", "Linearized (Blender)", "Judge the loop by the same steps as Blender's cloth: it keeps the "
     "look of the cloth cache"),
    ("backward", "Backward Euler", "A stable, slightly damped judge of the motion (thin shells, soft bodies)"),
    ("symplectic", "Symplectic Euler", "An undamped judge of the motion (planets, N bodies)"),
)
INITS = (
    ("fast_projection", "Fast Projection", "Start from a quick physical loop (the paper's method)"),
    ("forward", "Forward Simulation", "Start from the solver's own simulation"),
    ("crossfade", "Crossfade", "Start from a blend of the solver's own simulation"),
    ("cache", "Blender Cache", "Start from a blend of Blender's cached simulation (safest for cloth)"),
)
METHODS = (
    ("physical", "Physical Loop", "Minimize the residual force around the loop (the paper's method)"),
    ("crossfade", "Crossfade (baseline)", "Plain crossfade of the simulation, for comparison"),
)
OUTPUTS = (
    ("SHAPE_KEYS", "Shape Keys", "Shape keys keyed to play the loop cyclically"),
    ("ALEMBIC", "Alembic", "An .abc cache (Unreal Geometry Cache, Unity Alembic)"),
    ("PC2", "PC2", "A .pc2 point cache read by a Mesh Cache modifier"),
    ("VAT", "Vertex Animation Texture", "A folder with position and normal textures (16-bit PNG and half EXR), "
     "their JSON and the mesh with a VAT UV map (Unreal, Unity, Godot, three.js shaders)"),
    ("GLTF", "glTF (GLB)", "A .glb with the loop as morph-target animation (three.js, Babylon.js, Godot, "
     "Unity, Unreal)"),
    ("WEB", "Web Preview", "A self-contained .html page playing the loop beside the cache (three.js)"),
)


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
                               description="Keep the first two frames of the loop exactly as simulated "
                               "(off: they may move a little, which can hide a visible wrap)")
    soft_weight: FloatProperty(name="Softness", default=1e-3, min=1e-9, soft_max=1.0, precision=6,
                               description="How far the first two frames may move when not kept exactly "
                               "(larger: freer)")
    max_iters: IntProperty(name="Iterations", default=50, min=1, max=10000,
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
    output: EnumProperty(name="Output", items=OUTPUTS, default="SHAPE_KEYS")
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


def physics_modifier(obj):
    """The object's Cloth or Soft Body modifier, or None."""
    for mod in getattr(obj, "modifiers", ()):
        if mod.type in {"CLOTH", "SOFT_BODY"}:
            return mod
    return None


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
