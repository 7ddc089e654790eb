"""Make Loop (modal: the solve runs in a child Python process, a timer follows it and copies its progress
into the scene's run state), Cancel, Restore Simulation and Physics Defaults.

Everything that touches bpy data runs here on the main thread: gathering before the solve, writing after
it. Cancel or failure writes nothing; Cancel with Keep (the panel's "Stop, Keep Best") writes the best loop
found so far like a finished one. In the modal run the job (solve or crossfade) runs in a child Python
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

from ..outputs import files, gltf, wind_fields, writeback
from ..pipeline import stages, scene_reader
from . import last_run, selection, timeline
from ..core import sc
from ..errors import LoopError
from ..outputs.catalog import PANEL
from ..pipeline import child_solve
from ..pipeline.scene_reader import physics_defaults
from .properties import fill_from_physics
from ..report.progress import Plan, Progress
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
        softening=settings.softening, density=settings.density, gusts=settings.gusts,
        keep_motion=settings.keep_motion)


def planned_solver(unknowns, steps, model):
    """The linear solve a loop of this size will run: the solver's own rule ("auto": ``auto_structured``) for
    the direct solve the child's Python has (CHOLMOD or SciPy; before the session's probe has said, this
    Python's)."""
    has = child_solve.cholmod_known()
    direct = "cholmod" if (sc.optimize.structured_solve.cholmod is not None if has is None else has) else "scipy"
    velocity = model == "blender_cloth"
    return "structured" if sc.optimize.gauss_newton.auto_structured(unknowns, steps, velocity,
                                                                      direct=direct) else direct


def plan(context, obj, settings):
    """The ``Plan`` of a loop of ``obj`` with its panel settings, from the sizes the scene shows before it
    is read: vertices (N bodies: the selected objects), frames and sub-steps."""
    frames = max((settings.frame_end - settings.frame_start) // max(context.scene.frame_step, 1) + 1, 2)
    if settings.model == "nbody":
        vertices = max(len(context.selected_objects), 1)
        substeps = settings.substeps or 1
    else:
        vertices = len(obj.data.vertices)
        substeps = settings.substeps or physics_defaults([obj], settings.model, context.scene).substeps
    steps = frames * max(substeps, 1)
    unknowns = 3 * vertices * steps
    return Plan(vertices, steps, unknowns, planned_solver(unknowns, steps, settings.model), settings.init,
                settings.max_iters)


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
        obj = context.active_object
        settings = obj.cyclic_loop_settings
        if not settings.initialized:
            fill_from_physics(settings, obj, context.scene)
        estimate = plan(context, obj, settings) if settings.method == "physical" else None
        run, self._writing = context.scene.cyclic_loop_run, False
        self._progress = Progress(settings.max_iters, settings.init, plan=estimate)
        run.solver_text = estimate.solver if estimate is not None else ""
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
            _job.cancel()       # Esc discards; the panel's Stop and Keep keeps the best loop so far
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
        self._wind = settings.write_wind and settings.method == "physical"
        self._glb = {"shading": settings.glb_shading, "storage": settings.glb_storage}
        try:
            loop = loop_settings(obj, settings, context)
            _job = stages.prepare(loop, self._paths, context, settings.method, python)
            if self._wind:
                wind_fields.check(_job.gathered, loop)
        except LoopError as exc:
            _job = None
            self.report({"ERROR"}, str(exc))
            run.message = f"Not started: {exc}"
            return False
        remember(context.scene, TARGETS, [bpy.data.objects[name] for name in _job.gathered.object_names])
        self._method, self._set_range, self._shown = settings.method, settings.set_scene_range, None
        if not hasattr(self, "_progress"):     # execute: no gather phase shown
            self._progress = Progress(settings.max_iters, settings.init)
        problem = _job.gathered.problem
        if self._progress.plan is not None:    # the exact size, now that the scene is read
            unknowns = int(problem.free_mask().sum())
            self._progress.plan = Plan(problem.model.n_vertices, problem.n_steps, unknowns,
                                       planned_solver(unknowns, problem.n_steps, _job.gathered.model_name),
                                       settings.init, settings.max_iters)
            self._progress.solver = run.solver_text = self._progress.plan.solver
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
            if not info.get("stage"):
                run.iteration, run.loss = info["iteration"], info["loss"]
            self._progress.take(info)
        run.solver_text = self._progress.solver
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
        run.stopped = job.stopped
        mesh = job.gathered.kind == "mesh"
        paths = self._paths if mesh else {}     # N bodies are always written as location keys
        try:
            objects = target_objects(context.scene, job.gathered)
            stages.finish(job, paths, keys=not paths, attach=True, context=context, wind=self._wind,
                          glb=self._glb)
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
        if job.stopped:
            run.message = f"Stopped: the best loop so far written as {written}"
        last_run.record(context, run, job.gathered, job.q, rep, self._set_range)
        if "glb" in rep:
            self.report({"INFO"}, gltf.size_line(rep["glb"]))
        self.report({"INFO"}, f"Seam jump {run.seam_before:.3g} -> {run.seam_after:.3g}, residual "
                              f"{run.residual:.3g}, {run.seconds:.1f} s ({run.init_used})")
        return {"FINISHED"}


class CYCLICLOOP_OT_cancel(bpy.types.Operator):
    """Stop the running solve; the scene stays as it was, or with Keep the best loop found so far is
    written like a finished one"""

    bl_idname = "cyclic_loop.cancel"
    bl_label = "Cancel Loop"

    keep: bpy.props.BoolProperty(name="Keep Best", default=False,
                                 description="Write the best loop found so far (its verdict says it was stopped)")

    @classmethod
    def description(cls, context, properties):
        return ("Stop now and write the best loop found so far, like a finished one" if properties.keep
                else "Stop the solve; the scene stays as it was")

    @classmethod
    def poll(cls, context):
        return _job is not None

    def execute(self, context):
        keep = self.keep and _job.iterations > 0
        _job.stop(keep=keep)
        context.scene.cyclic_loop_run.message = "Stopping: keeping the best loop so far..." if keep else "Cancelling..."
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


@bpy.app.handlers.persistent
def _after_undo(scene, *_args):
    """Undo and Redo bring back the run state of another moment: its message ("Cancelled", "Not written")
    told of what happened then, not of the scene now, so it goes (the last run's report stays with the
    loop it describes)."""
    for each in bpy.data.scenes:
        run = each.cyclic_loop_run
        if not run.running and run.message:
            run.message = ""


CLASSES = (CYCLICLOOP_OT_make_loop, CYCLICLOOP_OT_cancel, CYCLICLOOP_OT_restore, CYCLICLOOP_OT_physics_defaults)


def register():
    files.clean_stale_temp()        # folders left by a Blender that was killed during a solve
    for cls in CLASSES:
        bpy.utils.register_class(cls)
    bpy.app.handlers.load_post.append(_reset_after_load)
    bpy.app.handlers.undo_post.append(_after_undo)
    bpy.app.handlers.redo_post.append(_after_undo)


def unregister():
    global _job
    if _job is not None:
        _job.cancel()
        _job = None
    bpy.app.handlers.load_post.remove(_reset_after_load)
    bpy.app.handlers.undo_post.remove(_after_undo)
    bpy.app.handlers.redo_post.remove(_after_undo)
    for cls in reversed(CLASSES):
        bpy.utils.unregister_class(cls)
