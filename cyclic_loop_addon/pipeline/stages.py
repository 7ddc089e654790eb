"""One pipeline for the panel, bake.py and scripts: settings -> gather -> solve -> write -> report.

``prepare`` checks the outputs and gathers the scene into a SolveJob; ``finish`` writes the solved loop
to every output; ``run`` runs the job in the calling thread and finishes it (bake.py, Make Loop from
scripts and in background mode); the modal Make Loop runs the job on its worker thread in between.
``paths`` are ``{name: (path, what)}``: an output of outputs/catalog.py, and what messages call it.
"""
import json
import os

import bpy

from ..outputs import export, files, gltf, guard, preview, vat, web_preview, wind_fields, writeback
from . import scene_reader
from ..outputs.files import atomic_path
from ..outputs.catalog import BY_NAME
from ..report.verdict import verdict
from .solve_job import SolveJob


def prepare(settings, paths, context=None, method="physical", python=None, **guarding):
    """The SolveJob (not started) of ``settings`` after the ``paths`` passed ``guard.check_outputs``
    (``guarding``: its overwrite options); LoopInputError on bad input, before anything is written."""
    if paths:
        guard.check_outputs([(what, path, BY_NAME[name].folder) for name, (path, what) in paths.items()],
                            **guarding)
    return SolveJob(scene_reader.gather(settings, context), settings, method, python=python)


def run(job, paths, keys=False, attach=False, context=None, on_write=None, wind=False, glb=None):
    """Run ``job`` in this thread and ``finish`` it (calling ``on_write()`` in between); raises its error."""
    job.run()
    if job.error is not None:
        raise job.error
    if on_write is not None:
        on_write()
    finish(job, paths, keys, attach, context, wind, glb)


def finish(job, paths, keys=False, attach=False, context=None, wind=False, glb=None):
    """Write the loop of the finished ``job`` to ``paths``, back into the scene with ``keys`` (shape keys,
    or location keys of N bodies), a PC2 with a Mesh Cache modifier playing it with ``attach``, the designed
    gusts as keyed Wind fields with ``wind`` (and Blender's cloth re-simulated in them, measured in the
    report's ``motion["resimulated"]``), and the report to a "json" path. ``glb``: the glTF options
    (``gltf.checked_options``); the glTF file's size against the raw data goes into the report as ``glb``."""
    gathered, q = job.gathered, job.q
    path = {name: p for name, (p, _) in paths.items()}
    if wind:    # before the write-back: Blender's cloth re-simulates the mesh as the scene has it
        wind_fields.write_wind(gathered, job.report)
        job.report["motion"]["resimulated"] = wind_fields.resimulate(gathered, job.report, q)
    if keys:
        writeback.write_back(gathered, q)
    if "abc" in path:
        try:
            export.export_alembic(gathered, q, path["abc"], context)
        except RuntimeError as exc:     # Blender's exporter reports its own failures this way
            raise files.writer_failure(path["abc"], paths["abc"][1], exc) from exc
    if "preview" in path:
        preview.save_preview(gathered, q, path["preview"])
    if "vat" in path:
        vat.export_vat(gathered, q, path["vat"], context)
    if "glb" in path:
        job.report["glb"] = gltf.export_gltf(gathered, q, path["glb"], context, **(glb or {}))
    if "html" in path:
        web_preview.write_page(gathered, q, path["html"], context)
    if "pc2" in path:   # after the Alembic export: the file it plays appears when all outputs do
        export.export_pc2(gathered, q, path["pc2"], attach=attach)
    if "output" in path:
        if "pc2" in path:   # relative to the open file; saving --output remaps it relative to the saved one
            relative = os.path.relpath(os.path.abspath(path["pc2"]), os.path.dirname(bpy.data.filepath))
            bpy.data.objects[gathered.object_names[0]].modifiers[writeback.CACHE_MODIFIER].filepath = "//" + relative
        with atomic_path(path["output"], paths["output"][1], verify=_loadable) as tmp:
            try:
                bpy.ops.wm.save_as_mainfile(filepath=tmp, copy=True, compress=True)
            except RuntimeError as exc:
                raise files.writer_failure(path["output"], paths["output"][1], exc) from exc
    if "json" in path:
        with atomic_path(path["json"], paths["json"][1]) as tmp, open(tmp, "w") as f:
            json.dump(dict(job.report, verdict=verdict(job.report)), f, indent=2)


def _loadable(path):
    """Raise OSError unless Blender can read ``path`` back (it lists the file's data without loading it)."""
    with bpy.data.libraries.load(path) as (data_from, _):
        if not data_from.scenes:
            raise ValueError("the saved file holds no scene")
