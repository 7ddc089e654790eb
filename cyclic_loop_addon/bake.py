"""Headless bake: gather, solve, write back and export in one synchronous run.

    blender -b scene.blend --python cyclic_loop_addon/bake.py -- --object Flag --frames 25 48 \\
        --output out/flag_loop.blend --abc out/flag_loop.abc [--pc2 F.pc2] [--preview F.png] [options]
    python cyclic_loop_addon/bake.py scene.blend -- --object Flag --frames 25 48 --output ...   (bpy module)

Prints progress lines and a final report (seam jumps and residuals of the source cache and of the loop,
iterations, seconds, the initial guess used and why it fell back). Exit status: 0 done, 2 bad input
(nothing written), 3 the solver failed (nothing written). The input .blend is never written; --output
may name it only with --overwrite.
"""
import os
import sys

if __name__ == "__main__":  # run as a script by Blender or Python: import the package, run, exit
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from cyclic_loop_addon.bake import main
    sys.exit(main(sys.argv))

import argparse
import json
import time

import bpy

from . import export, gltf, preview, scene_io, solve, task_files, vat, web_preview, writeback
from .errors import LoopInputError, LoopSolveError
from .files import atomic_path, check_writable


def _parser():
    p = argparse.ArgumentParser(prog="bake.py", description="Make a physical loop of a simulation, headless.")
    p.add_argument("blend", nargs="?", help="scene .blend (when run with the bpy module)")
    p.add_argument("--object", action="append", default=[], metavar="NAME",
                   help="the simulated mesh; repeat (or comma-separate) for N bodies")
    p.add_argument("--frames", nargs=2, type=int, metavar=("A", "B"), help="loop frames A..B (default: scene range)")
    p.add_argument("--output", metavar="OUT.blend", help="save the scene with the loop written back")
    p.add_argument("--abc", metavar="OUT.abc", help="Alembic of one period")
    p.add_argument("--pc2", metavar="OUT.pc2", help="PC2 of one period (played by a Mesh Cache modifier in --output)")
    p.add_argument("--preview", metavar="OUT.png", help="strip of frames around the wrap, cache above, loop below")
    p.add_argument("--vat", metavar="DIR", help="vertex animation textures (PNG and EXR), JSON and mesh into DIR")
    p.add_argument("--glb", metavar="OUT.glb", help="glTF binary of one period as morph-target animation")
    p.add_argument("--html", metavar="OUT.html", help="self-contained web page playing the loop beside the cache")
    p.add_argument("--json", metavar="OUT.json", help="the report as JSON")
    p.add_argument("--model", choices=scene_io.MODELS, default="auto")
    p.add_argument("--init", choices=solve.INITS, default="fast_projection")
    p.add_argument("--scheme", choices=scene_io.SCHEMES, default="auto",
                   help="residual scheme (auto: linearized for Blender cloth, backward for shells and soft "
                        "bodies, symplectic for N bodies)")
    p.add_argument("--substeps", type=int, default=0, help="solver steps per frame (0: from the physics quality)")
    p.add_argument("--iterations", type=int, default=50, help="maximum Gauss-Newton iterations")
    p.add_argument("--tol", type=float, default=1e-8, help="Gauss-Newton tolerance")
    p.add_argument("--soft", type=float, default=0.0, metavar="EPS",
                   help="soft first two frames with this weight (0: hard constraints)")
    p.add_argument("--pin-group", default="", help="vertex group of pinned vertices (default: the modifier's)")
    p.add_argument("--colliders", default="", metavar="COLLECTION", help="collection of collider objects")
    p.add_argument("--gravitational-constant", type=float, default=1.0, help="G for N bodies")
    p.add_argument("--bake", action="store_true", help="bake an unbaked physics cache first (in memory)")
    p.add_argument("--overwrite", action="store_true", help="allow --output to be the input .blend")
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
    return _parser().parse_args(args)


def _say(text):
    print(f"[cyclic-loop] {text}", flush=True)


def _settings(args):
    names = tuple(n for arg in args.object for n in arg.split(",") if n)
    a, b = args.frames if args.frames else (None, None)
    return scene_io.LoopSettings(objects=names, frame_start=a, frame_end=b, model=args.model, init=args.init,
                                 scheme=args.scheme, substeps=args.substeps, iterations=args.iterations,
                                 tolerance=args.tol, soft=args.soft, pin_group=args.pin_group,
                                 collider_collection=args.colliders, bake_missing=args.bake,
                                 gravitational_constant=args.gravitational_constant)


def _check_outputs(args, source):
    outputs = {"output": args.output, "abc": args.abc, "pc2": args.pc2, "preview": args.preview,
               "vat": args.vat and vat.probe_path(args.vat), "glb": args.glb and gltf.checked_path(args.glb),
               "html": args.html}
    if not any(outputs.values()):
        raise LoopInputError("nothing to write: give --output, --abc, --pc2, --preview, --vat, --glb and/or --html")
    for what, path in {**outputs, "json": args.json}.items():
        if path:
            check_writable(path, f"--{what}")
    if args.output and source and os.path.abspath(args.output) == os.path.abspath(source) and not args.overwrite:
        raise LoopInputError(f"--output {args.output} is the input file; choose another path or pass --overwrite")


def _open(args):
    """Open the scene given on the command line (bpy module) or check the one Blender opened."""
    if args.blend:
        if not os.path.isfile(args.blend):
            raise LoopInputError(f"no such .blend file: {args.blend}")
        bpy.ops.wm.open_mainfile(filepath=os.path.abspath(args.blend))
    if not bpy.data.filepath:
        raise LoopInputError("no scene: give the .blend file (blender -b scene.blend --python bake.py -- ... "
                             "or python bake.py scene.blend -- ...)")
    return bpy.data.filepath


def _progress(start):
    def callback(info):
        _say(f"{info['phase']} iteration {info['iteration']}: loss {info['loss']:.6g} "
             f"({time.perf_counter() - start:.1f} s)")
        return False
    return callback


def run(args):
    """Gather, solve, write and export as ``args`` say; returns the report dict."""
    source = _open(args)
    _check_outputs(args, source)
    settings = _settings(args)
    _say(f"gathering from {source}")
    gathered = scene_io.gather(settings)
    prob = gathered.problem
    _say(f"gathered {', '.join(gathered.object_names)}: model {gathered.model_name}, {prob.n_vertices} vertices, "
         f"{prob.n_frames} frames ({gathered.frame_start}..{int(gathered.frames[-1])}), "
         f"{prob.substeps} substeps, dt {prob.dt:g}, {len(prob.pins)} pins")
    if gathered.kind == "bodies" and (args.abc or args.pc2 or args.vat or args.glb):
        raise LoopInputError("--abc, --pc2, --vat and --glb hold mesh vertices; N bodies are written as location "
                             "keys (--output)")
    for note in gathered.notes:
        _say(f"note: {note}")
    _say(f"solving (init {settings.init}, scheme {gathered.problem.scheme}, up to {settings.iterations} iterations)")
    result = solve.solve(gathered, settings, callback=_progress(time.perf_counter()))
    q = result.q
    if args.output:
        writeback.write_back(gathered, q)
        _say(f"wrote the loop onto {', '.join(gathered.object_names)}")
    if args.pc2:
        export.export_pc2(gathered, q, args.pc2, attach=bool(args.output))
        if args.output:  # relative to the open file; saving --output remaps it relative to the saved one
            relative = os.path.relpath(os.path.abspath(args.pc2), os.path.dirname(bpy.data.filepath))
            bpy.data.objects[gathered.object_names[0]].modifiers[writeback.CACHE_MODIFIER].filepath = "//" + relative
        _say(f"wrote {args.pc2}")
    if args.abc:
        export.export_alembic(gathered, q, args.abc)
        _say(f"wrote {args.abc}")
    if args.preview:
        preview.save_preview(gathered, q, args.preview)
        _say(f"wrote {args.preview}")
    for path, write in ((args.vat, vat.export_vat), (args.glb, gltf.export_gltf), (args.html, web_preview.write_page)):
        if path:
            write(gathered, q, path)
            _say(f"wrote {path}")
    if args.output:
        with atomic_path(args.output, "--output") as tmp:
            bpy.ops.wm.save_as_mainfile(filepath=tmp, copy=True, compress=True)
        _say(f"wrote {args.output}")
    rep = solve.report(gathered, result)
    for line in solve.format_report(rep):
        _say(line)
    if args.json:
        with atomic_path(args.json, "--json") as tmp, open(tmp, "w") as f:
            json.dump(rep, f, indent=2)
    return rep


def main(argv):
    """Run with a full ``sys.argv``; returns the exit status."""
    try:
        args = parse_args(argv)
    except SystemExit as exc:
        return exc.code
    try:
        if task_files.check_skip_existing(args):
            _say(f"already done: {args.json} is newer than every output (--skip-existing)")
            return 0
        with task_files.outputs_or_none(task_files.outputs(args), args.json, keep=args.blend or bpy.data.filepath):
            run(args)
    except LoopInputError as exc:
        print(f"[cyclic-loop] error: {exc}", file=sys.stderr, flush=True)
        return 2
    except LoopSolveError as exc:
        print(f"[cyclic-loop] solver error: {exc}", file=sys.stderr, flush=True)
        return 3
    return 0
