"""The "Loop" tab of the 3D viewport sidebar: Make Loop and its progress, the settings (the solver's own in a
closed "Solver (advanced)" subpanel), the last run's verdict, seam picture and loop range; and the running
job in Blender's status bar with its own cancel button."""
import json
import textwrap

import bpy

from . import farm_operator, operators, presets, last_run, selection, timeline
from ..report.progress import SOLVER_WORDS, about

VERDICT_ICONS = {"good": "CHECKMARK", "warn": "ERROR", "bad": "CANCEL"}
CHAR_WIDTH = 7.5        # px of an average character of the UI font at scale 1, when blf cannot tell
LABEL_MARGIN = 60       # px of a label's row taken by the panel's margins, its box and an icon (scale 1)
LONG_LOOP = 120.0       # s: a loop expected to take longer is offered the Quick Preview first


def _progress_bar(layout, run):
    """The phase and percentage on a progress bar (``layout.progress`` from Blender 4.0; before, the phase
    as a label over a read-only percentage slider)."""
    if hasattr(layout, "progress"):
        layout.progress(factor=run.progress, type="BAR", text=run.status_text)
    else:
        layout.label(text=run.status_text.rsplit(" ", 1)[0])
        row = layout.row()
        row.enabled = False
        row.prop(run, "percent", text="", slider=True)


def _char_width(context):
    """The width in px of an average character of the interface's font (blf measures a sentence of the
    verdict's words; CHAR_WIDTH times the scale when it cannot)."""
    prefs = context.preferences
    scale = prefs.system.ui_scale
    try:
        import blf
        points = prefs.ui_styles[0].widget.points * scale
        try:
            blf.size(0, points)
        except TypeError:               # Blender 3.x: size(fontid, size, dpi)
            blf.size(0, points, 72)
        sample = "6.8× smoother than cache, residual 0.03 vs 0.9"
        width = blf.dimensions(0, sample)[0] / len(sample)
    except (ImportError, AttributeError, ValueError):
        width = 0.0
    return max(width, CHAR_WIDTH * scale * 0.8) or CHAR_WIDTH * scale


def _chars(context, region=None):
    """How many characters of label text (with an icon before it) fit across the sidebar (``region``, default
    the context's)."""
    scale = context.preferences.system.ui_scale
    width = (region or context.region).width
    return max(int((width - LABEL_MARGIN * scale) / _char_width(context)), 12)


def verdict_rows(verdicts, width):
    """The verdicts as the panel's rows: [(text, icon)], headline and detail wrapped at ``width`` characters
    (never cut, whatever the sidebar's width), the verdict's icon on its first row."""
    rows = []
    for v in verdicts:
        lines = textwrap.wrap(v["headline"], width) + textwrap.wrap(v["detail"], width)
        rows += [(line, VERDICT_ICONS[v["kind"]] if i == 0 else "BLANK1") for i, line in enumerate(lines)]
    return rows


def _wrapped_label(layout, context, text, icon="NONE"):
    """``text`` as as many labels as the sidebar's width needs."""
    col = layout.column(align=True)
    for i, line in enumerate(textwrap.wrap(text, _chars(context))):
        col.label(text=line, icon=icon if i == 0 else "NONE")


def solver_line(solver):
    """"Linear solver: CHOLMOD" (empty before it is known)."""
    return f"Linear solver: {SOLVER_WORDS.get(solver, solver)}" if solver else ""


def _draw_running(layout, run):
    box = layout.box()
    _progress_bar(box, run)
    col = box.column(align=True)
    for i, part in enumerate(run.time_text.split(" · ")):
        col.label(text=part, icon="TIME" if i == 0 else "BLANK1")
    if run.solver_text:
        col.label(text=solver_line(run.solver_text), icon="ERROR" if run.solver_text == "scipy" else "BLANK1")
    row = box.row(align=True)
    row.scale_y = 1.5
    row.operator(operators.CYCLICLOOP_OT_cancel.bl_idname, text="Stop, Keep Best", icon="CHECKMARK").keep = True
    row.operator(operators.CYCLICLOOP_OT_cancel.bl_idname, text="Cancel (Esc)", icon="CANCEL").keep = False


def before_run(context, obj, settings):
    """What the panel says before a run: [(text, icon)]: how long the loop should take and with which linear
    solve, a warning when it would factorize without CHOLMOD, the Quick Preview offered for a long one."""
    if settings.method != "physical":
        return []
    plan = operators.plan(context, obj, settings)
    lines = [(f"Expected: {plan.words()}", "TIME")]
    if plan.solver == "scipy":
        lines.append(("No CHOLMOD (scikit-sparse) for the solver's Python: SciPy factorizes, slower and "
                      "with more memory", "ERROR"))
    if plan.seconds > LONG_LOOP and presets.active(obj, settings, context.scene) != "preview":
        lines.append((f"A long loop: try the Quick Preview first ({about(_preview_seconds(context, obj, settings))})",
                      "INFO"))
    return lines


def _preview_seconds(context, obj, settings):
    """Seconds of the loop with the Quick Preview's iterations and sub-steps."""
    saved = settings.max_iters, settings.substeps
    try:
        settings.max_iters, settings.substeps = presets.PRESETS["preview"]["iterations"], 1
        return operators.plan(context, obj, settings).seconds
    finally:
        settings.max_iters, settings.substeps = saved


def output_note(settings):
    """Why the chosen output cannot be written by this Blender, said before a run ("" when it can)."""
    if settings.output == "ALEMBIC" and "alembic_export" not in dir(bpy.ops.wm):
        return "This Blender has no Alembic exporter (built without it): choose PC2, glTF or shape keys"
    return ""


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
    physical.prop(settings, "max_iters")
    physical.prop(settings, "gusts")
    keep = physical.column()
    keep.active = settings.gusts
    keep.prop(settings, "keep_motion")
    keep.prop(settings, "write_wind")
    col.prop(settings, "output")
    note = output_note(settings)
    if note:
        col.label(text=note, icon="ERROR")
    if settings.output != "SHAPE_KEYS":
        col.prop(settings, "filepath")
    if settings.output == "GLTF":
        col.prop(settings, "glb_shading")
        col.prop(settings, "glb_storage")
    col.prop(settings, "set_scene_range", text="Set Range")
    layout.operator(operators.CYCLICLOOP_OT_physics_defaults.bl_idname, icon="PHYSICS")


class _LoopTab:
    """Where the panels live: the Loop tab of the 3D viewport's sidebar."""

    bl_space_type = "VIEW_3D"
    bl_region_type = "UI"
    bl_category = "Loop"


class VIEW3D_PT_cyclic_loop(_LoopTab, bpy.types.Panel):
    """Make Loop, its progress while it runs, why it cannot run, the settings of the active object."""

    bl_label = "Cyclic Loop"

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
        reason = None if run.running else selection.problem(context)
        if reason:
            _wrapped_label(layout, context, reason, icon="ERROR")
        if run.message:
            _wrapped_label(layout, context, run.message)
        if obj is None or obj.type != "MESH" or reason:
            return
        settings = obj.cyclic_loop_settings
        if not run.running:
            for text, icon in before_run(context, obj, settings):
                _wrapped_label(layout, context, text, icon=icon)
        settings_box = layout.column()
        settings_box.enabled = not run.running
        row = settings_box.row(align=True)
        on = presets.active(obj, settings, context.scene)
        for key in presets.PRESETS:
            row.operator(presets.CYCLICLOOP_OT_preset.bl_idname, text=presets.PRESETS[key]["label"],
                         depress=key == on).preset = key
        _draw_settings(settings_box, obj, settings)
        settings_box.operator(farm_operator.CYCLICLOOP_OT_bake_on_farm.bl_idname, icon="NETWORK_DRIVE")


class VIEW3D_PT_cyclic_loop_solver(_LoopTab, bpy.types.Panel):
    """The solver's own settings, closed by default."""

    bl_label = "Solver (advanced)"
    bl_parent_id = "VIEW3D_PT_cyclic_loop"
    bl_options = {"DEFAULT_CLOSED"}

    @classmethod
    def poll(cls, context):
        obj = context.active_object
        return obj is not None and obj.type == "MESH"

    def draw(self, context):
        settings = context.active_object.cyclic_loop_settings
        col = self.layout.column()
        col.use_property_split = True
        col.use_property_decorate = False
        col.enabled = not context.scene.cyclic_loop_run.running
        col.active = settings.method == "physical"
        col.prop(settings, "scheme")
        col.prop(settings, "init")
        col.prop(settings, "hard_initial")
        soft = col.column()
        soft.active = not settings.hard_initial
        soft.prop(settings, "soft_weight")
        col.prop(settings, "substeps")


class VIEW3D_PT_cyclic_loop_result(_LoopTab, bpy.types.Panel):
    """The last run: verdicts, loop range with jumps to its ends, seam picture, notes, figures."""

    bl_label = "Last Run"
    bl_parent_id = "VIEW3D_PT_cyclic_loop"

    @classmethod
    def poll(cls, context):
        run = context.scene.cyclic_loop_run
        return run.has_report and not run.running

    def draw(self, context):
        layout, run = self.layout, context.scene.cyclic_loop_run
        col = layout.column(align=True)
        for text, icon in verdict_rows(json.loads(run.verdict or "[]"), _chars(context)):
            col.label(text=text, icon=icon)
        box = layout.box()
        col = box.column(align=True)
        line = timeline.loop_line(run, context.scene.render.fps / context.scene.render.fps_base).split(" · ")
        col.label(text=" · ".join(line[:2]), icon="PREVIEW_RANGE")
        col.label(text=line[2], icon="BLANK1")
        row = box.row(align=True)
        row.operator(timeline.CYCLICLOOP_OT_jump.bl_idname, text="First", icon="REW").end = "FIRST"
        row.operator(timeline.CYCLICLOOP_OT_jump.bl_idname, text="Last", icon="FF").end = "LAST"
        icon = last_run.seam_icon()
        if icon:
            scale = context.preferences.system.ui_scale
            layout.template_icon(icon_value=icon, scale=max((context.region.width - 30 * scale) / (20 * scale), 4))
        for note in filter(None, run.notes.split("\n")):
            _wrapped_label(layout, context, "Note: " + note, icon="INFO")
        box = layout.box()
        box.prop(run, "show_details", icon="TRIA_DOWN" if run.show_details else "TRIA_RIGHT", emboss=False)
        if run.show_details:
            for line in run.details.split("\n"):
                _wrapped_label(box, context, line)
        layout.operator(operators.CYCLICLOOP_OT_restore.bl_idname, icon="LOOP_BACK")


def draw_status_bar(self, context):
    """The running loop in Blender's status bar, with its own cancel button."""
    run = context.scene.cyclic_loop_run
    if not run.running:
        return
    row = self.layout.row(align=True)
    text = f"Cyclic Loop: {run.status_text} · {run.time_text}"
    if hasattr(row, "progress"):
        row.progress(factor=run.progress, type="BAR", text=text)
    else:
        row.label(text=text, icon="TIME")
    row.operator(operators.CYCLICLOOP_OT_cancel.bl_idname, text="", icon="X")


CLASSES = (VIEW3D_PT_cyclic_loop, VIEW3D_PT_cyclic_loop_solver, VIEW3D_PT_cyclic_loop_result)


def register():
    for cls in CLASSES:
        bpy.utils.register_class(cls)
    bpy.types.STATUSBAR_HT_header.append(draw_status_bar)


def unregister():
    bpy.types.STATUSBAR_HT_header.remove(draw_status_bar)
    for cls in reversed(CLASSES):
        bpy.utils.unregister_class(cls)
    last_run.unregister()
