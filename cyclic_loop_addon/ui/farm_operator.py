"""Bake on Farm: write the batch file (batch.py) for the selected objects with their panel settings, for
farm.py to run here or to turn into an OpenJD job; the .blend itself is left as it is."""
import os

import bpy
from bpy.props import StringProperty

from ..jobs import batch
from ..errors import LoopInputError
from ..outputs.files import atomic_path
from .properties import fill_from_physics

OUTPUT_KINDS = {"SHAPE_KEYS": "blend", "ALEMBIC": "abc", "PC2": "pc2"}


def _number(value):
    """A float property's value as the user typed it (single precision: 7 digits)."""
    return float(f"{value:.7g}")


def variant_options(settings):
    """bake.py options (batch variant keys) of one object's panel settings."""
    options = dict(model=settings.model, init=settings.init, scheme=settings.scheme, substeps=settings.substeps,
                   iterations=settings.max_iters, soft=0.0 if settings.hard_initial else _number(settings.soft_weight),
                   pin_group=settings.pin_group, colliders=settings.colliders.name if settings.colliders else "",
                   gusts=settings.gusts, keep_motion=settings.keep_motion)
    if settings.model == "nbody":
        options["gravitational_constant"] = _number(settings.gravitational_constant)
    return options


def batch_text(context, path, output_dir):
    """TOML of a batch with the selected objects (N bodies: one task of all of them) as panel settings say."""
    scene, blend = context.scene, bpy.data.filepath
    if not blend:
        raise LoopInputError("save the .blend first: the batch file names it and the farm reads it")
    obj = context.active_object
    if obj is not None and obj.type == "MESH" and obj.cyclic_loop_settings.model == "nbody":
        groups = [(obj, [ob.name for ob in context.selected_objects] or [obj.name])]
    else:   # a name with a comma stays one object as a one-name list
        groups = [(ob, [ob.name] if "," in ob.name else ob.name) for ob in context.selected_objects
                  if ob.type == "MESH"]
    if not groups:
        raise LoopInputError("select the simulated meshes to bake on the farm")
    variants, scenes, outputs, bake = {}, {}, [], False
    for ob, objects in groups:
        settings = ob.cyclic_loop_settings
        if not settings.initialized:
            fill_from_physics(settings, ob, scene)
        options = variant_options(settings)
        name = next((n for n, o in variants.items() if o == options), f"panel{len(variants) + 1}")
        variants[name] = options
        frames = [settings.frame_start, settings.frame_end]
        scenes.setdefault((name, tuple(frames)), []).append(objects)
        outputs.append(OUTPUT_KINDS[settings.output])
        bake = bake or settings.bake_missing
    folder = os.path.dirname(os.path.abspath(path))
    head = dict(name=os.path.splitext(os.path.basename(blend))[0], output_dir=output_dir,
                outputs=list(dict.fromkeys(outputs)), blender=bpy.app.binary_path or "blender", bake=bake)
    entries = [dict(file=os.path.relpath(blend, folder).replace(os.sep, "/"), objects=objects, frames=list(frames),
                    variants=[name]) for (name, frames), objects in scenes.items()]
    return batch.dumps(head, variants, entries), sum(len(e["objects"]) for e in entries)


class CYCLICLOOP_OT_bake_on_farm(bpy.types.Operator):
    """Write a batch file for the selected objects with their loop settings: farm.py runs it here or
    writes the OpenJD job for the farm (the Flamenco job type takes the same settings)"""

    bl_idname = "cyclic_loop.bake_on_farm"
    bl_label = "Bake on Farm"
    bl_options = {"REGISTER"}

    filepath: StringProperty(subtype="FILE_PATH", options={"SKIP_SAVE"})
    filter_glob: StringProperty(default="*.toml", options={"HIDDEN"})
    output_dir: StringProperty(name="Output Folder", default="loops",
                               description="Where the farm writes the loops, relative to the batch file")

    def invoke(self, context, event):
        if not self.filepath and bpy.data.filepath:
            self.filepath = os.path.splitext(bpy.data.filepath)[0] + "_farm.toml"
        context.window_manager.fileselect_add(self)
        return {"RUNNING_MODAL"}

    def execute(self, context):
        try:
            if not self.filepath:
                raise LoopInputError("give the batch file to write (filepath)")
            path = bpy.path.abspath(self.filepath)
            text, n_tasks = batch_text(context, path, self.output_dir)
            with atomic_path(path, "batch file") as tmp, open(tmp, "w") as f:
                f.write(text)
        except LoopInputError as exc:
            self.report({"ERROR"}, str(exc))
            return {"CANCELLED"}
        if bpy.data.is_dirty:
            self.report({"WARNING"}, "The farm bakes the saved .blend: save your changes before running the batch")
        self.report({"INFO"}, f"Wrote {n_tasks} farm task(s) to {path}: python farm.py run (here) or openjd (farm)")
        return {"FINISHED"}


CLASSES = (CYCLICLOOP_OT_bake_on_farm,)
register, unregister = bpy.utils.register_classes_factory(CLASSES)
