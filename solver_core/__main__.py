"""Command line: ``python -m solver_core loop PROBLEM.npz -o RESULT.npz``, ``versions``, ``demo nbody``,
``bench nbody``, ``bench speed``. The add-on's background solve is ``loop`` in a child Python."""
import argparse
import json
import os
import sys
import threading
import time

import numpy as np

from .clip_loop import CLIP_INITS, LoopFailed, crossfade_clip, loop_clip
from .io import load_problem, save_result
from .linsolve import BACKENDS
from .loop import MAX_ITERS, PHYSICS_TOL, TOL, make_loop
from .report import loop_report, progress_line, versions


def _progress(info):
    print(progress_line(info), flush=True)


def _quit_with_parent():
    """Exit as soon as stdin closes (the launching program is gone) instead of solving for nobody."""
    def watch():
        try:
            while os.read(0, 4096):     # a raw read: no lock of sys.stdin held at interpreter shutdown
                pass
        finally:
            os._exit(1)
    threading.Thread(target=watch, name="solver-parent-watch", daemon=True).start()


def _check_output(problem, output):
    """Refuse an output that is the problem file or cannot be written, before any work."""
    if not os.path.isfile(problem):
        raise ValueError(f"no such problem file: {problem}")
    folder = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(folder):
        raise ValueError(f"cannot write -o {output}: folder {folder} does not exist; create it first")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"cannot write -o {output}: no write permission in {folder}")
    if os.path.isdir(output):
        raise ValueError(f"-o {output} is a folder; give a file name such as {os.path.join(output, 'result.npz')}")
    same = os.path.exists(output) and os.path.samefile(problem, output)
    if same or os.path.realpath(problem) == os.path.realpath(output):
        raise ValueError(f"-o {output} is the problem file itself; give the result its own file name")


def cmd_loop(args):
    _check_output(args.problem, args.output)
    if args.clip is None and (args.init == "cache" or args.method == "crossfade"):
        what = "--method crossfade blends" if args.method == "crossfade" else "--init cache starts from"
        raise ValueError(f"{what} the clip: give it with --clip CLIP.npy")
    if args.stop_with_stdin:
        _quit_with_parent()
    prob = load_problem(args.problem)
    callback = None if args.quiet else _progress
    options = dict(init=args.init, max_iters=args.max_iters, tol=args.tol, physics_tol=args.physics_tol,
                   backend=args.backend, callback=callback)
    clip = None if args.clip is None else np.load(args.clip, allow_pickle=False)
    if args.method == "crossfade":
        res = _crossfade(prob, clip, callback)
    else:
        res = make_loop(prob, **options) if clip is None else loop_clip(prob, clip, **options)
    save_result(args.output, res)
    print(json.dumps(loop_report(prob, res, clip), indent=2))


def _crossfade(prob, clip, callback):
    """The crossfade baseline's LoopResult, announced as one progress line (loss not measured: nan)."""
    if callback is not None:
        callback(dict(phase="crossfade", iteration=0, loss=float("nan")))
    return crossfade_clip(prob, clip)


def cmd_versions(args):
    """Print the Python, numpy and SciPy versions as JSON (a launcher checks them against its own)."""
    print(json.dumps(versions()))


def cmd_demo(args):
    from .scenes.demo_nbody import run_demo
    run_demo(args.out, n_bodies=args.bodies, seed=args.seed)


def cmd_bench(args):
    if args.suite == "nbody":
        from .scenes.bench_nbody import run_benchmark
        run_benchmark(seeds=range(1, args.seeds + 1))
    elif args.suite == "table1":
        from .scenes.bench_table1 import run_benchmark
        run_benchmark(args.scenes, args.scale, args.max_iters, args.backend, args.budget)
    elif args.suite == "speed":
        from .scenes.bench_speed import run_benchmark
        run_benchmark(args.steps, args.scenes, scaling=not args.no_scaling, big=not args.no_big, big_only=args.big_only)


def cmd_figures(args):
    from .scenes.figures import make_figures
    make_figures(args.out, args.scale, args.max_iters, args.backend)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m solver_core", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("loop", help="solve a saved LoopProblem and save the LoopResult")
    p.add_argument("problem")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--clip", metavar="CLIP.npy",
                   help="the simulated clip (n_frames, n, 3) the problem was taken from: the start when the "
                        "forward simulation fails, and the report's source column")
    p.add_argument("--method", default="physical", choices=["physical", "crossfade"],
                   help="physical: solve the loop; crossfade: the baseline blend of --clip, no solve")
    p.add_argument("--init", default="fast_projection", choices=CLIP_INITS,
                   help="initial guess (cache: a crossfade of --clip)")
    p.add_argument("--max-iters", type=int, default=MAX_ITERS)
    p.add_argument("--tol", type=float, default=TOL)
    p.add_argument("--physics-tol", type=float, default=PHYSICS_TOL,
                   help="a seamless loop whose mean residual force is at most this fraction of the forces at "
                        "play is converged (0: minimize on)")
    p.add_argument("--backend", default="auto", choices=["auto", *BACKENDS])
    p.add_argument("--quiet", action="store_true", help="no per-iteration progress lines")
    p.add_argument("--stop-with-stdin", action="store_true", help="exit when standard input closes")
    p.set_defaults(func=cmd_loop)
    p = sub.add_parser("versions", help="print the Python, numpy and SciPy versions as JSON")
    p.set_defaults(func=cmd_versions)
    p = sub.add_parser("demo", help="run a demo scene and save its plot")
    p.add_argument("scene", choices=["nbody"])
    p.add_argument("--out", default="out")
    p.add_argument("--bodies", type=int, default=5)
    p.add_argument("--seed", type=int, default=1)
    p.set_defaults(func=cmd_demo)
    p = sub.add_parser("bench", help="print benchmark figures")
    p.add_argument("suite", choices=["nbody", "table1", "speed"])
    p.add_argument("--steps", type=int, default=4, help="speed: Gauss-Newton steps per solve (with --big-only: steps of the big case)")
    p.add_argument("--no-scaling", action="store_true", help="speed: skip the scaling table")
    p.add_argument("--no-big", action="store_true", help="speed: skip the 2000-vertex x 1000-frame case")
    p.add_argument("--big-only", action="store_true", help="speed: only the 2000-vertex x 1000-frame case")
    p.add_argument("--seeds", type=int, default=20, help="nbody: seeds 1..S of each of 3, 4 and 5 bodies")
    p.add_argument("--scenes", nargs="*", help="table1: scenes to run (default all)")
    p.add_argument("--scale", type=float, default=1.0, help="table1: mesh and frame scale (1 = paper size)")
    p.add_argument("--max-iters", type=int, default=1000)
    p.add_argument("--backend", default="auto")
    p.add_argument("--budget", type=float, help="table1: cancel a scene's make_loop after this many seconds and "
                                                "measure its best loop so far")
    p.set_defaults(func=cmd_bench)
    p = sub.add_parser("figures", help="save the flag's seam, and the paper's Fig. 9 and Fig. 11d for our implementation")
    p.add_argument("--out", default="out")
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--max-iters", type=int, default=1000)
    p.add_argument("--backend", default="auto")
    p.set_defaults(func=cmd_figures)
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    try:
        args.func(args)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except LoopFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("interrupted: nothing was written", file=sys.stderr)
        return 130
    except MemoryError:
        print("error: out of memory: the problem is too large for this machine", file=sys.stderr)
        return 3
    print(f"done in {time.perf_counter() - t0:.2f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
