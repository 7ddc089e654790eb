"""Quick preview and final quality: the solver settings of each, for the panel and for bake.py."""
import bpy

from ..pipeline.scene_reader import physics_defaults
from ..vocabulary import ITERATIONS

# substeps None: the model's own default (vocabulary.MODEL_DEFAULTS: one per frame for Blender cloth, the
# physics' steps for thin shells)
PRESETS = {
    "preview": dict(label="Quick Preview", iterations=8, substeps=1,
                    description="A rough loop in a fraction of the time: 8 iterations, one step per frame"),
    "final": dict(label="Final", iterations=ITERATIONS, substeps=None,
                  description=f"The full solve: up to {ITERATIONS} iterations, the model's default steps per "
                  "frame"),
}


def substeps_of(preset, default):
    """The preset's sub-steps where the model's default is ``default`` steps per frame."""
    value = PRESETS[preset]["substeps"]
    return default if value is None else value


def active(obj, settings, scene):
    """The preset ("preview" or "final") whose iterations and sub-steps ``settings`` have, or None."""
    default = physics_defaults([obj], settings.model, scene).substeps
    for key, preset in PRESETS.items():
        if settings.max_iters == preset["iterations"] and settings.substeps == substeps_of(key, default):
            return key
    return None


class CYCLICLOOP_OT_preset(bpy.types.Operator):
    """Set the iterations and sub-steps of a quick preview or of the final loop"""

    bl_idname = "cyclic_loop.preset"
    bl_label = "Loop Preset"
    bl_options = {"REGISTER", "UNDO"}

    preset: bpy.props.EnumProperty(items=[(k, v["label"], v["description"]) for k, v in PRESETS.items()])

    @classmethod
    def description(cls, context, properties):
        return PRESETS[properties.preset]["description"]

    @classmethod
    def poll(cls, context):
        obj = context.active_object
        return obj is not None and not context.scene.cyclic_loop_run.running

    def execute(self, context):
        obj = context.active_object
        settings = obj.cyclic_loop_settings
        default = physics_defaults([obj], settings.model, context.scene).substeps
        settings.max_iters = PRESETS[self.preset]["iterations"]
        settings.substeps = substeps_of(self.preset, default)
        return {"FINISHED"}


CLASSES = (CYCLICLOOP_OT_preset,)

register, unregister = bpy.utils.register_classes_factory(CLASSES)
