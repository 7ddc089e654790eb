"""Make Loop (modal: the solve runs in a child Python process, a timer follows it and copies its progress
into the scene's run state), Cancel, Restore Simulation and Physics Defaults.

Everything that touches bpy data runs here on the main thread: gathering before the solve, writing after
it. Cancel or failure writes nothing. In the modal run the job (solve or crossfade) runs in a child Python
process (worker.SolveJob, child_solve) so that the solver's numpy / SciPy work does not hold the GIL the
interface needs, and the timer reads its progress and result: no Python thread runs beside Blender's
drawing. Without a usable Python it solves on a worker thread (the message says so).
From scripts and in background mode (no event loop, timers never fire; nothing to keep responsive)
``execute`` runs the same job inline, in this process.

The scene stays usable during a modal solve. The objects being looped are remembered by identity (ID
pointers in a scene property, which follow renames and undo), and at write-back a deleted object, one in
Edit Mode or one whose mesh changed is reported and nothing is written. Restore Simulation finds the
object of the last run the same way.
"""
import os

import bpy

from ..outputs import files, gltf, writeback
from ..pipeline import stages, scene_reader
from . import last_run, selection, timeline
from ..errors import LoopError
from ..outputs.catalog import PANEL
from .properties import fill_from_physics
from ..report.progress import Progress
from ..pipeline.targets import LOOPED, TARGETS, remember, remembered, target_objects

TIMER_SECONDS = 0.1
STATUS_HINT = "Making a loop: Esc cancels"    # the status bar's left side while the loop is made
_job = None     # the running SolveJob: one solve at a time
_starting = False   # a Make Loop is about to read the simulation (its first timer tick does)


def loop_settings(obj, settings, context):
    """scene_reader.LoopSettings for ``obj`` from its panel settings (N bodies: the selected objects)."""
    if settings.model == "nbody":
        objects = tuple(ob.name for ob in context.selected_objects) or (obj.name,)
    else:
        objects = (obj.name,)
    return scene_reader.LoopSettings(
        objects=objects, frame_start=settings.frame_start, frame_end=settings.frame_end, model=settings.model,
        scheme=settings.scheme, init=settings.init, substeps=settings.substeps, iterations=settings.max_iters,
        soft=0.0 if settings.hard_initial else settings.soft_weight, pin_group=settings.pin_group,
        collider_collection=settings.colliders.name if settings.colliders else "",
        bake_missing=settings.bake_missing, gravitational_constant=settings.gravitational_constant,
        softening=settings.softening, density=settings.density)


def output_paths(settings):
    """The panel's file output as pipeline paths: {name: (absolute path with its extension, what)}; {} for
    shape keys."""
    out, what = PANEL[settings.output]
    if out is None:
        return {}
    path = bpy.path.abspath(settings.filepath)
    return {out.name: (path if path.lower().endswith(out.extension) else path + out.extension, what)}


def _tag_redraw(context, sidebar_only=False):
    """Redraw the 3D viewports, or only their sidebars (the progress: nothing in the viewport changes
    during a solve, and redrawing a whole viewport ten times a second is wasted work)."""
    for window in context.window_manager.windows:
        for area in window.screen.areas:
            if area.type != "VIEW_3D":
                continue
            if not sidebar_only:
                area.tag_redraw()
                continue
            for region in area.regions:
                if region.type == "UI":
                    region.tag_redraw()


class CYCLICLOOP_OT_make_loop(bpy.types.Operator):
    """Make the active object's simulation loop seamlessly (in the background; Esc cancels)"""

    bl_idname = "cyclic_loop.make_loop"
    bl_label = "Make Loop"
    bl_options = {"REGISTER", "UNDO"}

    @classmethod
    def poll(cls, context):
        reason = selection.problem(context)
        if reason and hasattr(cls, "poll_message_set"):
            cls.poll_message_set(reason)
        return reason is None

    def invoke(self, context, event):
        """Show "Reading the simulation" at once; the first timer tick reads it and starts the solve."""
        global _starting
        if _job is not None or _starting:
            self.report({"WARNING"}, "A loop is already being made; wait for it or cancel it")
            return {"CANCELLED"}
        settings = context.active_object.cyclic_loop_settings
        run, self._progress, self._writing = context.scene.cyclic_loop_run, Progress(settings.max_iters, settings.init), False
        run.running, run.phase, run.progress, run.percent, run.message = True, "gather", 0.0, 0, ""
        run.status_text, run.time_text = self._progress.headline(), self._progress.time_text()
        context.workspace.status_text_set(STATUS_HINT)
        _starting = True
        _tag_redraw(context)
        wm = context.window_manager
        self._timer = wm.event_timer_add(TIMER_SECONDS, window=context.window)
        wm.modal_handler_add(self)
        return {"RUNNING_MODAL"}

    def execute(self, context):
        if not self._start(context):
            return {"CANCELLED"}
        _job.run()
        return self._finish(context)

    def modal(self, context, event):
        global _starting
        if event.type == "ESC" and event.value == "PRESS" and _job is not None:
            _job.cancel()
            context.scene.cyclic_loop_run.message = "Cancelling..."
            return {"RUNNING_MODAL"}
        if event.type == "TIMER" and _starting:
            _starting = False
            if not self._start(context, python="auto"):
                context.window_manager.event_timer_remove(self._timer)
                context.workspace.status_text_set(None)
                context.scene.cyclic_loop_run.running = False
                _tag_redraw(context)
                return {"CANCELLED"}
            _job.start()
        elif event.type == "TIMER":
            self._sync(context)
            if _job.done and _job.q is not None and not self._writing:
                self._writing = True        # show "Writing the loop" for a tick, then write
                self._progress.update("write")
                self._sync(context)
            elif _job.done:
                context.window_manager.event_timer_remove(self._timer)
                context.workspace.status_text_set(None)
                return self._finish(context)
        return {"PASS_THROUGH"}

    def cancel(self, context):
        """Blender stops the operator (file load, window closed): stop the solve, write nothing."""
        global _job, _starting
        context.window_manager.event_timer_remove(self._timer)
        context.workspace.status_text_set(None)
        _starting = False
        if _job is not None:
            _job.cancel()
            _job = None
        context.scene.cyclic_loop_run.running = False
        context.scene.pop(TARGETS, None)

    def _start(self, context, python=None):
        """Gather the scene and create the job (solving in ``python``, see solve_job.SolveJob); False (with a
        report) when refused or invalid."""
        global _job
        run = context.scene.cyclic_loop_run
        if _job is not None:
            self.report({"WARNING"}, "A loop is already being made; wait for it or cancel it")
            return False
        obj = context.active_object
        settings = obj.cyclic_loop_settings
        if not settings.initialized:
            fill_from_physics(settings, obj, context.scene)
        self._paths = output_paths(settings)
        self._glb = {"shading": settings.glb_shading, "storage": settings.glb_storage}
        try:
            _job = stages.prepare(loop_settings(obj, settings, context), self._paths, context, settings.method,
                                    python)
        except LoopError as exc:
            self.report({"ERROR"}, str(exc))
            run.message = f"Not started: {exc}"
            return False
        remember(context.scene, TARGETS, [bpy.data.objects[name] for name in _job.gathered.object_names])
        self._method, self._set_range, self._shown = settings.method, settings.set_scene_range, None
        if not hasattr(self, "_progress"):     # execute: no gather phase shown
            self._progress = Progress(settings.max_iters, settings.init)
        self._progress.update("")
        run.running, run.phase, run.iteration, run.loss, run.progress = True, "", 0, 0.0, self._progress.look()
        run.percent = round(100 * run.progress)
        run.status_text, run.time_text = self._progress.headline(), self._progress.time_text()
        run.redraws, run.message = 0, ""
        return True

    def _sync(self, context):
        """Copy the job's latest progress into the run state; redraw the sidebars when it changed."""
        run = context.scene.cyclic_loop_run
        if _job.notes and not run.message:
            run.message = "Note: " + "; ".join(_job.notes)
        for info in _job.progress():
            run.iteration, run.loss = info["iteration"], info["loss"]
            self._progress.take(info)
        run.phase, run.progress = self._progress.phase, self._progress.look()     # one look per refresh
        run.status_text, run.time_text = self._progress.headline(), self._progress.time_text()
        run.percent = round(100 * run.progress)
        shown = (run.status_text, run.time_text, run.iteration, run.message, _job.where)
        if shown != self._shown:
            self._shown = shown
            run.redraws += 1
            _tag_redraw(context, sidebar_only=True)
            context.workspace.status_text_set(STATUS_HINT)   # redraws the status bar (not an area of the screen)

    def _finish(self, context):
        """Main thread, job done: write the loop and the report, or report why not."""
        global _job
        job, _job = _job, None
        run = context.scene.cyclic_loop_run
        try:
            return self._write(context, job, run)
        finally:
            context.scene.pop(TARGETS, None)

    def _write(self, context, job, run):
        run.running = False
        _tag_redraw(context)
        if job.error is not None:
            run.message = f"Failed: {job.error}"
            self.report({"ERROR"}, run.message)
            return {"CANCELLED"}
        if job.cancelled:
            run.message = "Cancelled: the scene is unchanged"
            self.report({"INFO"}, run.message)
            return {"CANCELLED"}
        mesh = job.gathered.kind == "mesh"
        paths = self._paths if mesh else {}     # N bodies are always written as location keys
        try:
            objects = target_objects(context.scene, job.gathered)
            stages.finish(job, paths, keys=not paths, attach=True, context=context, glb=self._glb)
        except LoopError as exc:
            run.message = f"Not written: {exc}"
            self.report({"ERROR"}, run.message)
            return {"CANCELLED"}
        remember(context.scene, LOOPED, objects[:1])
        rep = job.report
        run.has_report, run.object_name, run.method = True, objects[0].name, self._method
        run.seam_before, run.seam_after = rep["source"]["position_jump"], rep["loop"]["position_jump"]
        run.residual, run.seconds = rep["loop"]["residual_rel_mean"], rep["seconds"]
        run.init_used, run.fallback_reason = rep["init_used"], rep["fallback_reason"]
        run.iterations = rep["fast_projection_iterations"] + rep["gauss_newton_iterations"]
        written = os.path.basename(next(iter(paths.values()))[0]) if paths else ("shape keys" if mesh else
                                                                                 "location keys")
        run.progress, run.message = 1.0, f"Loop written as {written}"
        last_run.record(context, run, job.gathered, job.q, rep, self._set_range)
        if "glb" in rep:
            self.report({"INFO"}, gltf.size_line(rep["glb"]))
        self.report({"INFO"}, f"Seam jump {run.seam_before:.3g} -> {run.seam_after:.3g}, residual "
                              f"{run.residual:.3g}, {run.seconds:.1f} s ({run.init_used})")
        return {"FINISHED"}


class CYCLICLOOP_OT_cancel(bpy.types.Operator):
    """Stop the running solve; the scene stays as it was"""

    bl_idname = "cyclic_loop.cancel"
    bl_label = "Cancel Loop"

    @classmethod
    def poll(cls, context):
        return _job is not None

    def execute(self, context):
        _job.cancel()
        context.scene.cyclic_loop_run.message = "Cancelling..."
        return {"FINISHED"}


class CYCLICLOOP_OT_restore(bpy.types.Operator):
    """Remove the loop from the object of the last run and show its original simulation again"""

    bl_idname = "cyclic_loop.restore"
    bl_label = "Restore Simulation"
    bl_options = {"REGISTER", "UNDO"}

    @staticmethod
    def _object(context):
        looped = remembered(context.scene, LOOPED)
        obj = looped[0] if looped else bpy.data.objects.get(context.scene.cyclic_loop_run.object_name)
        return obj if obj is not None and context.scene.objects.get(obj.name) is obj else None

    @classmethod
    def poll(cls, context):
        obj = cls._object(context)
        return _job is None and obj is not None and writeback.MARKER in obj

    def execute(self, context):
        run, obj = context.scene.cyclic_loop_run, self._object(context)
        if obj.mode == "EDIT":
            self.report({"ERROR"}, f"{obj.name} is in Edit Mode: leave Edit Mode (Tab) and restore again")
            return {"CANCELLED"}
        writeback.remove_loop(obj)
        timeline.restore_range(context.scene, run)
        run.has_report, run.object_name, run.message = False, obj.name, f"Restored the simulation of {obj.name}"
        return {"FINISHED"}


class CYCLICLOOP_OT_physics_defaults(bpy.types.Operator):
    """Set the loop settings from the active object's physics modifier"""

    bl_idname = "cyclic_loop.physics_defaults"
    bl_label = "Physics Defaults"
    bl_options = {"REGISTER", "UNDO"}

    @classmethod
    def poll(cls, context):
        return _job is None and context.active_object is not None

    def execute(self, context):
        fill_from_physics(context.active_object.cyclic_loop_settings, context.active_object, context.scene)
        return {"FINISHED"}


@bpy.app.handlers.persistent
def _reset_after_load(_dummy):
    """A solve never survives loading a file: clear a saved ``running`` flag."""
    for scene in bpy.data.scenes:
        scene.cyclic_loop_run.running = False


CLASSES = (CYCLICLOOP_OT_make_loop, CYCLICLOOP_OT_cancel, CYCLICLOOP_OT_restore, CYCLICLOOP_OT_physics_defaults)


def register():
    files.clean_stale_temp()        # folders left by a Blender that was killed during a solve
    for cls in CLASSES:
        bpy.utils.register_class(cls)
    bpy.app.handlers.load_post.append(_reset_after_load)


def unregister():
    global _job
    if _job is not None:
        _job.cancel()
        _job = None
    bpy.app.handlers.load_post.remove(_reset_after_load)
    for cls in reversed(CLASSES):
        bpy.utils.unregister_class(cls)
