"""Headless bake: gather, solve, write back and export in one synchronous run.

    blender -b scene.blend --python cyclic_loop_addon/bake.py -- --object Flag --frames 25 48 \\
        --output out/flag_loop.blend --abc out/flag_loop.abc [--pc2 F.pc2] [--preview F.png] [options]
    python cyclic_loop_addon/bake.py scene.blend -- --object Flag --frames 25 48 --output ...   (bpy module)

Prints progress lines and a final report (seam jumps and residuals of the source cache and of the loop,
iterations, seconds, the initial guess used and why it fell back). Exit status, under Blender's
executable as under Python: 0 done, 2 bad input (nothing written), 3 the solver or a write failed
(nothing written), 130 interrupted (Ctrl-C). Errors are one line; ``--debug`` adds the traceback.
A .blend Blender cannot read stops Blender itself (status 1) before this script runs when it is
given before ``--python``; given after ``--`` (``blender -b --python bake.py -- scene.blend ...``) it is
opened here and refused with status 2.
Every output is checked before any work starts (guard.check_outputs): none may be the input .blend
(unless ``--overwrite`` for --output), a source cache file or another output.
"""
import os
import sys

if __name__ == "__main__":  # run as a script by Blender or Python: import the package, run, exit
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from cyclic_loop_addon.bake import leave, main
    leave(main(sys.argv))

import argparse
import signal
import traceback

import bpy

from .outputs import files, gltf, wind_fields
from . import limits
from .pipeline import scene_reader, solve, stages
from .jobs import task_files
from .jobs.batch import object_names
from .ui.presets import PRESETS
from .report.progress import Progress
from .errors import LoopInputError, LoopSolveError, LoopWriteError
from .core import sc
from .outputs.catalog import OUTPUTS
from .report.verdict import verdict_lines
from .vocabulary import ITERATIONS, MODEL_DEFAULTS, MODELS, SCHEMES, names


def _by_model(key):
    """The models' defaults of ``key`` in words, for the options' help."""
    return ", ".join(f"{model} {value if isinstance(value, str) else format(value, 'g')}"
                     for model, value in ((m, d[key]) for m, d in MODEL_DEFAULTS.items()))


def _parser():
    p = argparse.ArgumentParser(prog="bake.py", description="Make a physical loop of a simulation, headless.")
    p.add_argument("blend", nargs="?", help="scene .blend (when run with the bpy module)")
    p.add_argument("--object", action="append", default=[], metavar="NAME",
                   help="the simulated mesh; repeat (or comma-separate) for N bodies")
    p.add_argument("--frames", nargs=2, type=int, metavar=("A", "B"),
                   help="loop frames A..B (default: the scene's loop_frames property, else the physics cache "
                        "without its first third, the settle from rest; N bodies: the scene range)")
    for out in OUTPUTS:
        p.add_argument(f"--{out.name}", metavar=out.metavar, help=out.help)
    p.add_argument("--glb-shading", choices=gltf.SHADINGS, default=gltf.DEFAULTS["shading"],
                   help="--glb: " + "; ".join(f"{name}: {text}" for name, _, text in gltf.SHADING_ITEMS))
    p.add_argument("--glb-storage", choices=gltf.STORAGES, default=gltf.DEFAULTS["storage"],
                   help="--glb: " + "; ".join(f"{name}: {text}" for name, _, text in gltf.STORAGE_ITEMS))
    p.add_argument("--model", choices=names(MODELS), default="auto")
    p.add_argument("--init", choices=sc.CLIP_INITS, default=None,
                   help=f"the initial guess (default: the model's: {_by_model('init')})")
    p.add_argument("--scheme", choices=names(SCHEMES), default="auto",
                   help="residual scheme (auto: linearized for Blender cloth, backward for shells and soft "
                        "bodies, symplectic for N bodies)")
    p.add_argument("--preset", choices=tuple(PRESETS),
                   help=f"preview: {PRESETS['preview']['iterations']} iterations, 1 sub-step; final (the default): "
                        f"{PRESETS['final']['iterations']} iterations, the model's sub-steps (--iterations and "
                        "--substeps override it)")
    p.add_argument("--substeps", type=int, default=None,
                   help=f"solver steps per frame, 0: the physics quality (default: the model's: "
                        f"{_by_model('substeps')})")
    p.add_argument("--iterations", type=int, default=None,
                   help=f"maximum Gauss-Newton iterations (default {ITERATIONS})")
    p.add_argument("--tol", type=float, default=sc.TOL,
                   help="Gauss-Newton tolerance: relative loss decrease per iteration that counts as converged")
    p.add_argument("--physics-tol", type=float, default=sc.PHYSICS_TOL,
                   help="physics tolerance: a seamless loop whose mean residual force is at most this fraction of "
                        "the forces at play is converged (0: minimize on)")
    p.add_argument("--soft", type=float, default=None, metavar="EPS",
                   help="soft first two frames with this eps, larger is freer (the panel's Softness; 0: hard, "
                        "they stay where the cache has them; the report says how far frame 0 moved; default: "
                        f"the model's: {_by_model('soft')})")
    p.add_argument("--gusts", action=argparse.BooleanOptionalAction, default=True,
                   help="design a gusting wind with the loop (with no wind in the scene: gentle body forces) that "
                        "keeps it moving; --no-gusts: pure physics, which loops a damped cloth by calming it")
    p.add_argument("--keep-motion", action=argparse.BooleanOptionalAction, default=True,
                   help="hold the loop at the cache's speed (with --gusts)")
    p.add_argument("--write-wind", action="store_true",
                   help="add the designed gusts to the saved scene as keyed Wind fields (collection Loop Wind)")
    p.add_argument("--pin-group", default="", help="vertex group of pinned vertices (default: the modifier's)")
    p.add_argument("--colliders", default="", metavar="COLLECTION", help="collection of collider objects")
    p.add_argument("--gravitational-constant", type=float, default=1.0, help="G for N bodies")
    p.add_argument("--bake", action="store_true", help="bake an unbaked physics cache first (in memory)")
    p.add_argument("--overwrite", action="store_true", help="allow --output to be the input .blend")
    p.add_argument("--debug", action="store_true", help="print the traceback of an unexpected error")
    p.add_argument("--skip-existing", action="store_true",
                   help="exit 0 at once when the --json report is newer than every output (a finished farm task)")
    return p


def parse_args(argv):
    """Options from a full ``sys.argv``: Blender's (options after ``--``) or Python's (script, blend, ...)."""
    if bpy.app.binary_path and "--" in argv:
        args = argv[argv.index("--") + 1:]
    elif bpy.app.binary_path:
        args = []
    else:
        args = [a for a in argv[1:] if a != "--"]
    args = _parser().parse_args(args)
    preset = PRESETS[args.preset or "final"]
    if args.iterations is None:
        args.iterations = preset["iterations"]
    if args.substeps is None:
        args.substeps = preset["substeps"]          # None: the model's default (``_settings``)
    return args


def _say(text):
    print(f"[cyclic-loop] {text}", flush=True)


def _settings(args):
    """The LoopSettings of ``args`` in the open scene, the options not given from the model's defaults
    (``scene_reader.with_defaults``: the same as the panel's selection)."""
    names = object_names(args.object, bpy.data.objects)
    a, b = args.frames if args.frames else (None, None)
    return scene_reader.with_defaults(scene_reader.LoopSettings(
        objects=names, frame_start=a, frame_end=b, model=args.model, init=args.init, scheme=args.scheme,
        substeps=args.substeps, iterations=args.iterations, tolerance=args.tol, physics_tolerance=args.physics_tol,
        soft=args.soft, gusts=args.gusts, keep_motion=args.keep_motion,
        pin_group=args.pin_group, collider_collection=args.colliders, bake_missing=args.bake,
        gravitational_constant=args.gravitational_constant))


def _check_outputs(args):
    """Refuse a bake with nothing to write, or with an output this Blender cannot write (the guard against
    outputs that would destroy an input or each other is ``pipeline.prepare``'s)."""
    if not any(getattr(args, out.name) for out in OUTPUTS if out.product):
        raise LoopInputError("nothing to write: give " + ", ".join(f"--{o.name}" for o in OUTPUTS if o.product))
    if args.abc and "alembic_export" not in dir(bpy.ops.wm):
        raise LoopInputError("this Blender has no Alembic exporter (it was built without Alembic): leave out "
                             "--abc (--pc2 writes the same loop) or use a Blender from blender.org")
    if args.glb:
        gltf.checked_path(args.glb)


def scripted_drivers():
    """How many drivers of the open file run Python expressions (Blender's simple expressions do not)."""
    ids = [*bpy.data.objects, *bpy.data.meshes, *bpy.data.shape_keys, *bpy.data.scenes]
    return sum(1 for block in ids if block.animation_data for fc in block.animation_data.drivers
               if fc.driver.type == "SCRIPTED" and not getattr(fc.driver, "is_simple_expression", False))


def leave(status):
    """End the process with ``status``. Under the bpy module the interpreter's own exit can wait forever in
    the module's teardown (a scene with scripted drivers leaves its Python threads to it): flush and leave at
    once, saying so when scripted drivers were there. Under Blender's executable ``sys.exit``."""
    if bpy.app.binary_path:
        sys.exit(status)
    if scripted_drivers():
        _say(f"leaving without the bpy module's teardown: the scene has {scripted_drivers()} scripted drivers")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _check_objects(args):
    if args.object and object_names(args.object, bpy.data.objects):
        return
    if args.object:
        raise LoopInputError("--object needs an object name")
    simulated = [ob.name for ob in bpy.data.objects if scene_reader.physics_modifier(ob) is not None]
    raise LoopInputError("give the simulated object with --object NAME (repeat it for N bodies); objects with "
                         f"Cloth or Soft Body in this file: {', '.join(simulated) or 'none'}")


def _open(args):
    """Open the scene given on the command line (bpy module) or check the one Blender opened."""
    if args.blend:
        if not os.path.isfile(args.blend):
            raise LoopInputError(f"no such .blend file: {args.blend}")
        try:
            bpy.ops.wm.open_mainfile(filepath=os.path.abspath(args.blend))
        except RuntimeError as exc:
            raise LoopInputError(f"cannot open {args.blend}: it is not a complete .blend file (truncated, or "
                                 "another kind of file); give the .blend saved by Blender") from exc
    if not bpy.data.filepath:
        raise LoopInputError("no scene: give the .blend file (blender -b scene.blend --python bake.py -- ... "
                             "or python bake.py scene.blend -- ...)")
    return bpy.data.filepath


def _progress(progress):
    def callback(info):
        progress.take(info)
        if not info.get("stage") or info["phase"] != "forward" or info["done"] == info["of"]:
            _say(progress.line(info.get("loss")))
        return False
    return callback


def run(args):
    """Gather, solve, write and export as ``args`` say (pipeline/stages.py); returns the report dict."""
    source = _open(args)
    _check_outputs(args)
    _check_objects(args)
    if scripted_drivers():
        _say(f"note: the scene has {scripted_drivers()} scripted drivers; their Python runs only where Blender's "
             "Auto Run Python Scripts allows it, and the loop is solved from the simulation as cached")
    settings = _settings(args)
    progress = Progress(settings.iterations, settings.init, physics_tol=settings.physics_tolerance)
    paths = {out.name: (getattr(args, out.name), f"--{out.name}") for out in OUTPUTS if getattr(args, out.name)}
    _say(f"{progress.line()} ({source})")
    job = stages.prepare(settings, paths, overwrite=args.overwrite, may_replace_input=("--output",))
    gathered = job.gathered
    prob = gathered.problem
    need = limits.estimate_bytes(prob.n_frames, prob.substeps, prob.n_vertices, prob.scheme,
                                 gathered.model_name == "blender_cloth", soft_frames=prob.eps0 > 0 or prob.eps1 > 0,
                                 driven=sc.choose_drive(prob, solve.motion_options(settings).motion.drive) is not None)
    _say(f"gathered {', '.join(gathered.object_names)}: model {gathered.model_name}, {prob.n_vertices} vertices, "
         f"{prob.n_frames} frames ({gathered.frame_start}..{int(gathered.frames[-1])}), "
         f"{prob.substeps} substeps, dt {prob.dt:g}, {len(prob.pins)} pins; memory estimate "
         f"{need / limits.GB:.2f} GB")
    if gathered.kind == "bodies" and (args.abc or args.pc2 or args.vat or args.glb):
        raise LoopInputError("--abc, --pc2, --vat and --glb hold mesh vertices; N bodies are written as location "
                             "keys (--output)")
    if args.write_wind:
        wind_fields.check(gathered, settings)
    for note in gathered.notes:
        _say(f"note: {note}")
    _say(f"solving (init {settings.init}, scheme {gathered.problem.scheme}, up to {settings.iterations} iterations)")
    progress.update("")
    _say(progress.line())
    job.on_progress = _progress(progress)

    def writing():
        progress.update("write")
        _say(progress.line())

    with files.all_or_nothing():        # every output complete, or none of them
        stages.run(job, paths, keys=bool(args.output), attach=bool(args.output), on_write=writing,
                   wind=args.write_wind, glb={"shading": args.glb_shading, "storage": args.glb_storage})
    _say("wrote " + ", ".join(getattr(args, o.name) for o in OUTPUTS if getattr(args, o.name)))
    if "glb" in job.report:
        _say(gltf.size_line(job.report["glb"]))
    for line in verdict_lines(job.report) + sc.format_report(job.report):
        _say(line)
    return job.report


def _fail(message, status, exc=None, debug=False):
    if debug and exc is not None:
        traceback.print_exception(type(exc), exc, exc.__traceback__)
    print(f"[cyclic-loop] {message}", file=sys.stderr, flush=True)
    return status


def main(argv):
    """Run with a full ``sys.argv``; returns the exit status (see the module docstring). Every error is
    caught here, so the status holds whichever host runs the script."""
    debug = "--debug" in argv
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)   # Blender's own handler only warns
    try:
        args = parse_args(argv)
        files.clean_stale_temp()
        if task_files.check_skip_existing(args):
            _say(f"already done: {args.json} is newer than every output (--skip-existing)")
            return 0
        with files.all_or_nothing(task_files.outputs(args), args.json, keep=args.blend or bpy.data.filepath):
            run(args)
    except SystemExit as exc:       # argparse: --help (0) or a usage error (2, already printed); SIGTERM: 143
        return exc.code if isinstance(exc.code, int) else 2
    except LoopInputError as exc:
        return _fail(f"error: {exc}", 2, exc, debug)
    except (LoopSolveError, LoopWriteError) as exc:
        return _fail(f"{'write' if isinstance(exc, LoopWriteError) else 'solver'} error: {exc}", 3, exc, debug)
    except KeyboardInterrupt as exc:
        return _fail("interrupted: nothing was written", 130, exc, debug)
    except MemoryError as exc:
        return _fail("error: out of memory: shorten the frame range or lower --substeps", 3, exc, debug)
    except Exception as exc:    # an unexpected error still ends with status 3 and one line
        return _fail(f"unexpected error: {type(exc).__name__}: {exc} (run with --debug for the details)", 3,
                     exc, debug)
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)
        sys.stdout.flush()
    return 0
