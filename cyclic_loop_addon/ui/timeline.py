"""The scene's frame range set to the loop, the status line that says so, and jumps to the loop's ends."""
import bpy


def loop_line(run, fps):
    """"Loop 49–72 · 24 frames · 1.0 s at 24 fps" (the panel breaks it at the second "·")."""
    frames = (run.loop_last - run.loop_first) // max(run.loop_step, 1) + 1
    seconds = frames * max(run.loop_step, 1) / fps
    return f"Loop {run.loop_first}–{run.loop_last} · {frames} frames · {seconds:.1f} s at {fps:g} fps"


def set_range(scene, run):
    """Set the scene's range to the loop (remembering the range it had, for Restore Simulation)."""
    if not run.range_set:
        run.range_before = (scene.frame_start, scene.frame_end)
    scene.frame_start, scene.frame_end = run.loop_first, run.loop_last
    run.range_set = True


def restore_range(scene, run):
    """Give the scene back the range it had before the loop set it."""
    if run.range_set:
        scene.frame_start, scene.frame_end = run.range_before
        run.range_set = False


class CYCLICLOOP_OT_jump(bpy.types.Operator):
    """Go to the first or the last frame of the loop"""

    bl_idname = "cyclic_loop.jump"
    bl_label = "Jump to Loop End"

    end: bpy.props.EnumProperty(items=(("FIRST", "First", "The loop's first frame"),
                                       ("LAST", "Last", "The loop's last frame")))

    @classmethod
    def description(cls, context, properties):
        return "Go to the first frame of the loop" if properties.end == "FIRST" else \
            "Go to the last frame of the loop (the next one is its first again)"

    @classmethod
    def poll(cls, context):
        return context.scene.cyclic_loop_run.has_report

    def execute(self, context):
        run = context.scene.cyclic_loop_run
        context.scene.frame_set(run.loop_first if self.end == "FIRST" else run.loop_last)
        return {"FINISHED"}


CLASSES = (CYCLICLOOP_OT_jump,)

register, unregister = bpy.utils.register_classes_factory(CLASSES)
