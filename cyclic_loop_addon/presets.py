"""Quick preview and final quality: the solver settings of each, for the panel and for bake.py."""
import bpy

from .scene_io import physics_modifier
from .vocabulary import ITERATIONS

# substeps None: from the physics quality (the modifier's own steps per frame)
PRESETS = {
    "preview": dict(label="Quick Preview", iterations=8, substeps=1,
                    description="A rough loop in a fraction of the time: 8 iterations, one step per frame"),
    "final": dict(label="Final", iterations=ITERATIONS, substeps=None,
                  description=f"The full solve: {ITERATIONS} iterations, the physics' own steps per frame"),
}


def substeps_of(preset, quality):
    """The preset's sub-steps for a simulation of ``quality`` steps per frame."""
    value = PRESETS[preset]["substeps"]
    return quality if value is None else value


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
        mod = physics_modifier(obj)
        quality = mod.settings.quality if mod is not None and mod.type == "CLOTH" else 1
        settings.max_iters = PRESETS[self.preset]["iterations"]
        settings.substeps = substeps_of(self.preset, quality)
        return {"FINISHED"}


CLASSES = (CYCLICLOOP_OT_preset,)

register, unregister = bpy.utils.register_classes_factory(CLASSES)
