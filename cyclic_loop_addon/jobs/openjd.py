"""The OpenJD job template (jobtemplate-2023-09) of a batch: one step per (scene, variant), one task per
object, each task one bake.py run in Blender on the worker. Host memory comes from the solver's own
estimate (solver_core.optimize.memory) on the sizes a Blender probe reads from each scene. No bpy.

Names reach the template as data: OpenJD expands ``{{ ... }}`` in its strings and has no escape for it, so
a name, variant or batch name holding ``{{`` or ``}}`` is refused (``literal``); each task passes its
objects as ``--object={{Task.Param.Object}}``, so a name such as "-b" is a value, never an option; the
Object parameter is split on commas on the worker, so an N-body group with a comma in a name is refused
(loop it with ``farm.py run``).
"""
import json
import math
import os
import subprocess

from .batch import BatchError, Task
from ..core import sc

SPEC = "jobtemplate-2023-09"
PROBE_PY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "probe.py")
MIB = 2 ** 20
MEMORY_ROUND_MIB = 256
EXIT_CODES = ("Exit status of every task: 0 the loop is written (or was already: --skip-existing); "
              "2 bad input (scene, object, settings or output path): do not retry, fix the batch file; "
              "3 the solver failed: re-run with other settings (another variant); anything else: Blender "
              "itself failed, a retry may help. A failed task leaves none of its outputs.")
BLENDER = ["-b", "--factory-startup", "--python-exit-code", "1"]
MKDIR = "import os, sys; os.makedirs(sys.argv[-1], exist_ok=True)"


def literal(text, what):
    """``text`` when OpenJD keeps it as it is; BatchError when it holds ``{{`` or ``}}`` (an expression)."""
    if "{{" in text or "}}" in text:
        raise BatchError(f"{what} {text!r} holds '{{{{' or '}}}}', which OpenJD expands as an expression (there is no "
                         "escape for it in a job template): rename it, or bake this batch with farm.py run")
    return text


def probe(blender, scene, specs):
    """Sizes of ``specs`` (object names, "A,B" for N bodies) in ``scene``, read by probe.py in Blender."""
    cmd = [blender, *BLENDER, scene, "--python", PROBE_PY, "--", *specs]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except FileNotFoundError:
        raise BatchError(f"cannot run Blender {blender!r}: set [batch] blender to its path") from None
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("cyclic-loop-sizes ")]
    if proc.returncode != 0 or not lines:
        raise BatchError(f"Blender could not read {scene}: {(proc.stderr or proc.stdout)[-800:]}")
    found = json.loads(lines[-1].split(" ", 1)[1])
    errors = [size["error"] for size in found["objects"].values() if "error" in size]
    if errors:
        raise BatchError(errors[0])
    return found


def memory_mib(size, frames, options):
    """Estimated peak MiB of one task: ``size`` from the probe, ``options`` the variant's bake.py options."""
    scheme = options.get("scheme", "auto")
    velocity_terms = size["velocity_terms"] and options.get("model", "auto") in ("auto", "blender_cloth")
    if scheme == "auto":
        scheme = size["scheme"] if velocity_terms or not size["velocity_terms"] else "backward"
    own = velocity_terms or not size["velocity_terms"]        # the physics' own model: its defaults' steps
    per_frame = options.get("substeps") or (size["substeps"] if own else size["physics_substeps"])
    explicit = velocity_terms and scheme == "linearized" and per_frame >= size["physics_substeps"]
    soft = options.get("soft", size.get("soft", 0.0) if own else 0.0)
    steps = (frames[1] - frames[0] + 1) * per_frame
    driven = options.get("gusts", True) and size["scheme"] != "symplectic"     # N bodies: pure physics
    mib = sc.optimize.memory.peak_bytes(size["vertices"], steps, scheme, velocity_terms, explicit, soft_frames=soft > 0,
                                        driven=driven) / MIB
    return int(math.ceil(mib / MEMORY_ROUND_MIB) * MEMORY_ROUND_MIB)


def _path(name, kind, flow, path, template_dir, description):
    """A PATH job parameter; its default (relative: OpenJD joins it to the template's folder) only when
    ``path`` is inside ``template_dir``, otherwise it is given at submission (-p NAME=PATH)."""
    param = dict(name=name, type="PATH", objectType=kind, dataFlow=flow, description=description)
    rel = os.path.relpath(path, template_dir)
    if not rel.startswith(os.pardir):
        param["default"] = rel.replace(os.sep, "/")
    return param


def _parameters(batch, template_dir, bake_py):
    params = [
        dict(name="BlenderExe", type="STRING", default=batch.blender,
             description="The Blender executable on the workers (3.4 or later, with NumPy and SciPy)."),
        _path("BakeScript", "FILE", "IN", bake_py, template_dir,
              "cyclic_loop_addon/bake.py of this project, on storage the workers see."),
        _path("OutputDir", "DIRECTORY", "OUT", batch.output_dir, template_dir,
              "Every task writes its loop files and its JSON report <task>.json here."),
    ]
    for i, scene in enumerate(batch.scenes):
        cache = ("baked on the worker when it is not found" if batch.bake else
                 "read from the shared path (baked in the file or in its disk cache)")
        params.append(_path(f"Scene{i + 1}", "FILE", "IN", scene.file, template_dir,
                            f"The scene {os.path.basename(scene.file)}; its physics cache is {cache}."))
    return params


def _step(batch, i, scene, variant, sizes, force):
    tasks = [t for t in batch.tasks() if t.scene == scene.file and t.variant == variant]
    options = batch.variants[variant]
    memory = max(memory_mib(sizes["objects"][t.objects], scene.frames or sizes["objects"][t.objects]["frames"], options)
                  for t in tasks)
    base = "{{Param.OutputDir}}/{{Task.Param.Name}}"
    task = Task(name="{{Task.Param.Name}}", scene=f"{{{{Param.Scene{i + 1}}}}}", objects="{{Task.Param.Object}}",
                frames=scene.frames, variant=variant, options=options, report=base + ".json", bake=batch.bake,
                outputs={kind: base + os.path.splitext(path)[1] for kind, path in tasks[0].outputs.items()})
    args = [*BLENDER, task.scene, "--python", "{{Param.BakeScript}}", "--", *task.bake_args(not force, joined=True)]
    mkdir = dict(command="{{Param.BlenderExe}}", args=[*BLENDER, "--python-expr", MKDIR, "--", "{{Param.OutputDir}}"])
    return dict(
        name=f"{scene.stem}-{variant}"[:64],
        description=f"Loops of {os.path.basename(scene.file)} with the settings variant {variant!r}, one task per "
                    f"object. {EXIT_CODES}",
        parameterSpace=dict(taskParameterDefinitions=[
            dict(name="Object", type="STRING", range=[t.objects for t in tasks]),
            dict(name="Name", type="STRING", range=[t.name for t in tasks])],
            combination="(Object, Name)"),
        hostRequirements=dict(amounts=[dict(name="amount.worker.memory", min=memory)]),
        stepEnvironments=[dict(name="OutputFolder", description="Creates OutputDir on the worker.",
                               script=dict(actions=dict(onEnter=mkdir)))],
        script=dict(actions=dict(onRun=dict(command="{{Param.BlenderExe}}", args=args))),
    )


def template(batch, template_dir, bake_py, force=False):
    """The job template (a dict for JSON) of ``batch``, to be saved in ``template_dir``; ``force`` bakes
    finished tasks again."""
    literal(batch.name, "the batch name")
    for name, options in batch.variants.items():
        literal(name, "the variant")
        for key, value in options.items():
            literal(str(value), f"[variants.{name}] {key}")
    for task in batch.tasks():
        for name in task.names:
            literal(name, "the object name")
        if len(task.names) > 1 and any("," in name for name in task.names):
            raise BatchError(f"task {task.name}: an N-body group with a comma in a name ({task.objects!r}) cannot "
                             "be one OpenJD task parameter (split on commas on the worker): rename the object, "
                             "or bake this batch with farm.py run")
    steps = []
    for i, scene in enumerate(batch.scenes):
        sizes = probe(batch.blender, scene.file, [",".join(names) for names in scene.objects])
        steps += [_step(batch, i, scene, variant, sizes, force) for variant in scene.variants]
    return dict(specificationVersion=SPEC, name=f"Cyclic Loop: {batch.name}"[:128],
                description=f"Physical loops baked by bake.py, one task per (object, variant). {EXIT_CODES}",
                parameterDefinitions=_parameters(batch, template_dir, bake_py), steps=steps)
