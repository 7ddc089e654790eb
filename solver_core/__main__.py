"""Command line: ``python -m solver_core loop PROBLEM.npz -o RESULT.npz``, ``demo nbody``, ``bench nbody``, ``bench speed``."""
import argparse
import json
import os
import sys
import time

from .io import load_problem, save_result
from .loop import TOL, make_loop


def _progress(info):
    print(f"[{info['phase']}] iteration {info['iteration']:4d}  loss {info['loss']:.6e}", flush=True)


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
    prob = load_problem(args.problem)
    init = args.init
    res = make_loop(prob, init=init, max_iters=args.max_iters, tol=args.tol, backend=args.backend,
                    callback=None if args.quiet else _progress)
    save_result(args.output, res)
    report = dict(status=res.status, success=res.success, message=res.message,
                  init_used=res.init_used, fallback_reason=res.fallback_reason, stop_reason=res.stop_reason,
                  fast_projection_iterations=res.fast_projection_iterations,
                  gauss_newton_iterations=res.gauss_newton_iterations, seconds=round(res.seconds, 3),
                  initial_loss=res.initial_loss, final_loss=res.final_loss,
                  metrics=res.metrics["loop"], output=args.output)
    print(json.dumps(report, indent=2))


def cmd_demo(args):
    from .scenes.demo_nbody import run_demo
    run_demo(args.out, n_bodies=args.bodies, seed=args.seed)


def cmd_bench(args):
    if args.suite == "nbody":
        from .scenes.bench_nbody import run_benchmark
        run_benchmark(seeds=range(1, args.seeds + 1))
    elif args.suite == "table1":
        from .scenes.bench_table1 import run_benchmark
        run_benchmark(args.scenes, args.scale, args.max_iters, args.backend)
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
    p.add_argument("--init", default="fast_projection", choices=["fast_projection", "forward", "crossfade"])
    p.add_argument("--max-iters", type=int, default=200)
    p.add_argument("--tol", type=float, default=TOL)
    p.add_argument("--backend", default="auto", choices=["auto", "cholmod", "scipy", "structured"])
    p.add_argument("--quiet", action="store_true", help="no per-iteration progress lines")
    p.set_defaults(func=cmd_loop)
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
