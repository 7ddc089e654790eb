"""The "Loop" tab of the 3D viewport sidebar."""
import textwrap

import bpy

from . import farm_operator, operators

PHASES = {"fast_projection": "Fast projection", "gauss_newton": "Gauss-Newton", "crossfade": "Crossfade",
          "gather": "Reading the simulation", "": "Starting"}
METHOD_NAMES = {"physical": "Physical loop", "crossfade": "Crossfade (baseline)"}


def _progress_bar(layout, run):
    """A progress bar (``layout.progress`` from Blender 4.0; a read-only slider before)."""
    phase = PHASES.get(run.phase, run.phase)
    if hasattr(layout, "progress"):
        layout.progress(factor=run.progress, type="BAR", text=f"{phase} {run.progress:.0%}")
    else:
        row = layout.row()
        row.enabled = False
        row.prop(run, "progress", text=phase, slider=True)


def _wrapped_label(layout, context, text, icon="NONE"):
    """``text`` as as many labels as the sidebar's width needs."""
    scale = context.preferences.system.ui_scale
    chars = max(int((context.region.width - 50 * scale) / (6.5 * scale)), 16)
    col = layout.column(align=True)
    for i, line in enumerate(textwrap.wrap(text, chars)):
        col.label(text=line, icon=icon if i == 0 else "NONE")


def _draw_running(layout, run):
    box = layout.box()
    _progress_bar(box, run)
    col = box.column(align=True)
    col.label(text=f"Phase: {PHASES.get(run.phase, run.phase)}")
    col.label(text=f"Iteration: {run.iteration}")
    col.label(text=f"Loss: {run.loss:.4g}")
    where = getattr(operators._job, "where", None)
    if where is not None:
        col.label(text="In a separate Python process" if where == "process" else "Inside Blender")
    row = box.row()
    row.scale_y = 1.5
    row.operator(operators.CYCLICLOOP_OT_cancel.bl_idname, text="Cancel (Esc)", icon="CANCEL")


def _draw_settings(layout, obj, settings):
    col = layout.column()
    col.use_property_split = True
    col.use_property_decorate = False
    col.prop(settings, "method")
    sub = col.column(align=True)
    sub.prop(settings, "frame_start", text="Frames")
    sub.prop(settings, "frame_end", text="End")
    col.prop(settings, "model")
    col.prop_search(settings, "pin_group", obj, "vertex_groups")
    col.prop(settings, "colliders")
    physical = col.column()
    physical.active = settings.method == "physical"
    physical.prop(settings, "scheme")
    physical.prop(settings, "substeps")
    physical.prop(settings, "init")
    physical.prop(settings, "hard_initial")
    soft = physical.column()
    soft.active = not settings.hard_initial
    soft.prop(settings, "soft_weight")
    physical.prop(settings, "max_iters")
    col.prop(settings, "output")
    if settings.output != "SHAPE_KEYS":
        col.prop(settings, "filepath")
    layout.operator(operators.CYCLICLOOP_OT_physics_defaults.bl_idname, icon="PHYSICS")


def _draw_report(layout, context, run):
    box = layout.box()
    box.label(text="Last run", icon="INFO")
    col = box.column(align=True)
    col.label(text=f"{METHOD_NAMES.get(run.method, run.method)} on {run.object_name}")
    col.label(text=f"Seam jump: {run.seam_before:.3g} -> {run.seam_after:.3g}")
    col.label(text=f"Residual: {run.residual:.3g}")
    col.label(text=f"Time: {run.seconds:.2f} s, {run.iterations} iterations")
    col.label(text=f"Initial guess: {run.init_used}")
    if run.fallback_reason:
        _wrapped_label(box, context, f"Fell back: {run.fallback_reason}", icon="ERROR")
    box.operator(operators.CYCLICLOOP_OT_restore.bl_idname, icon="LOOP_BACK")


class VIEW3D_PT_cyclic_loop(bpy.types.Panel):
    """Make Loop, its progress while it runs, the settings of the active object, the last report."""

    bl_label = "Cyclic Loop"
    bl_space_type = "VIEW_3D"
    bl_region_type = "UI"
    bl_category = "Loop"

    def draw(self, context):
        layout = self.layout
        run = context.scene.cyclic_loop_run
        obj = context.active_object
        if run.running:
            _draw_running(layout, run)
        else:
            row = layout.row()
            row.scale_y = 2.0
            row.operator(operators.CYCLICLOOP_OT_make_loop.bl_idname, icon="FILE_REFRESH")
        if run.message:
            _wrapped_label(layout, context, run.message)
        if obj is None or obj.type != "MESH":
            layout.label(text="Select a simulated mesh", icon="ERROR")
        else:
            settings = obj.cyclic_loop_settings
            if not settings.initialized:
                _wrapped_label(layout, context, "Make Loop first reads the defaults from the physics modifier",
                               icon="PHYSICS")
            settings_box = layout.column()
            settings_box.enabled = not run.running
            _draw_settings(settings_box, obj, settings)
            settings_box.operator(farm_operator.CYCLICLOOP_OT_bake_on_farm.bl_idname, icon="NETWORK_DRIVE")
        if run.has_report and not run.running:
            _draw_report(layout, context, run)


CLASSES = (VIEW3D_PT_cyclic_loop,)


def register():
    for cls in CLASSES:
        bpy.utils.register_class(cls)


def unregister():
    for cls in reversed(CLASSES):
        bpy.utils.unregister_class(cls)
