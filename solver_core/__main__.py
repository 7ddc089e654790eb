"""Command line: ``python -m solver_core loop PROBLEM.npz -o RESULT.npz [--clip CLIP.npy]``, ``versions``,
``demo nbody``.

``loop`` is also the add-on's background solve in a child Python (docs/design/child_solve.md). It has one
result channel and one progress stream: the LoopResult goes to RESULT.npz (``save_result``; read it back with
``load_result``, and build its report with ``loop_report``), stdout carries only progress lines
(``progress_line``, one per iteration), and stderr ends with a short summary in words, or carries the
``error: ...`` line of a failure. With ``--clip`` the result's ``metrics["source"]`` holds the metrics of the
clip played as a loop, the report's source column.

Exit statuses: 0 done, 2 bad input (nothing written), 3 the solve failed or ran out of memory, 130
interrupted, 1 the parent went away (``--stop-with-stdin``).
"""
import argparse
import json
import os
import sys
import threading
import time
from dataclasses import replace

import numpy as np

from .clip_loop import CLIP_INITS, LoopFailed, crossfade_clip, loop_clip
from .io import clean_stale_partials, load_problem, save_result
from .optimize.linsolve import BACKENDS
from .optimize.structured_solve import cholmod
from .loop import make_loop
from .metrics import loop_metrics
from .options import DEFAULTS, MAX_ITERS, PHYSICS_TOL, TOL
from .physics.driving import FAMILIES
from .report import progress_line, versions


_stop = threading.Event()      # the parent wrote "stop": end after this iteration and save the best loop so far


def _progress(info):
    print(progress_line(info), flush=True)
    return _stop.is_set()


def _quiet(info):
    return _stop.is_set()


def _quit_with_parent():
    """Exit as soon as stdin closes (the launching program is gone) instead of solving for nobody; a
    "stop" line on stdin ends the solve after its current iteration instead, saving the best loop so far
    (cancelled, as a callback that halts leaves it)."""
    def watch():
        try:
            while True:
                data = os.read(0, 4096)     # a raw read: no lock of sys.stdin held at interpreter shutdown
                if not data:
                    break
                if b"stop" in data:
                    _stop.set()
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
    if os.path.islink(output) or (os.path.exists(output) and not os.path.isfile(output)):
        raise ValueError(f"-o {output} is a link or a special file; give the path of a regular file")
    clean_stale_partials(folder)      # a killed run's temporary results, before any work


def _positive_int(text):
    """argparse type: a whole number of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def _positive_float(text):
    """argparse type: a finite number above 0."""
    value = float(text)
    if not np.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {text}")
    return value


def _fraction(text):
    """argparse type: a finite number of at least 0."""
    value = float(text)
    if not np.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of at least 0, got {text}")
    return value


def cmd_loop(args):
    """Solve (or crossfade) the saved problem, save its LoopResult; progress lines on stdout, a summary on
    stderr."""
    _check_output(args.problem, args.output)
    if args.clip is None and (args.init == "cache" or args.method == "crossfade"):
        what = "--method crossfade blends" if args.method == "crossfade" else "--init cache starts from"
        raise ValueError(f"{what} the clip: give it with --clip CLIP.npy")
    if args.stop_with_stdin:
        _quit_with_parent()
    prob = load_problem(args.problem)
    callback = _quiet if args.quiet else _progress
    stage = None if args.quiet else _progress
    options = dict(init=args.init, max_iters=args.max_iters, tol=args.tol, physics_tol=args.physics_tol,
                   backend=args.backend, callback=callback)
    clip = None if args.clip is None else np.load(args.clip, allow_pickle=False)
    if clip is not None:
        options["options"] = replace(DEFAULTS, motion=replace(DEFAULTS.motion, drive=args.drive,
                                                              keep_speed=args.keep_speed))
    if args.method == "crossfade":
        res = _crossfade(prob, clip, callback)
    else:
        res = make_loop(prob, stage=stage, **options) if clip is None else loop_clip(prob, clip, stage=stage,
                                                                                       **options)
    if clip is not None:
        res.metrics["source"] = source_metrics(prob, clip)
    save_result(args.output, res)
    for line in summary(res, args.output):
        print(line, file=sys.stderr)


def source_metrics(prob, clip):
    """The metrics of a simulated clip played as a loop.

    Parameters
    ----------
    prob : LoopProblem
        The problem taken from the clip.
    clip : ndarray, shape (n_frames, n, 3)
        The simulated clip.

    Returns
    -------
    dict
        ``loop_metrics`` of the clip on the solver's grid: the report's source column, which a result made
        from a clip carries as ``metrics["source"]``.
    """
    return loop_metrics(prob, prob.steps_of(clip))


def summary(res, output):
    """The lines ``loop`` ends with on stderr.

    Parameters
    ----------
    res : LoopResult
        The saved result.
    output : str
        Where it was saved.

    Returns
    -------
    list of str
        The result's message (when it has one), its init and iterations, and where it was saved.
    """
    lines = [res.message] if res.message else []
    lines.append(f"init {res.init_used}; iterations: fast projection {res.fast_projection_iterations}, "
                 f"Gauss-Newton {res.gauss_newton_iterations} ({res.stop_reason or 'done'})")
    lines.append(f"result saved to {output}")
    return lines


def _crossfade(prob, clip, callback):
    """The crossfade baseline's LoopResult, announced as one progress line (loss not measured: nan)."""
    if callback is not None:
        callback(dict(phase="crossfade", iteration=0, loss=float("nan")))
    return crossfade_clip(prob, clip)


def cmd_versions(args):
    """Print the Python, numpy and SciPy versions as JSON (a launcher checks them against its own), with
    ``cholmod``: whether scikit-sparse's CHOLMOD imports here (a launcher prefers a Python that has it)."""
    print(json.dumps(dict(versions(), cholmod=cholmod is not None)))


def cmd_demo(args):
    from .scenes.demo_nbody import run_demo
    run_demo(args.out, n_bodies=args.bodies, seed=args.seed)


def main(argv=None):
    """Run the command line.

    Parameters
    ----------
    argv : list of str, optional
        The arguments after ``python -m solver_core`` (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit status: 0 done, 2 bad input, 3 the solve failed or ran out of memory, 130 interrupted.
    """
    parser = argparse.ArgumentParser(prog="python -m solver_core", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
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
    p.add_argument("--max-iters", type=_positive_int, default=MAX_ITERS)
    p.add_argument("--tol", type=_positive_float, default=TOL)
    p.add_argument("--physics-tol", type=_fraction, default=PHYSICS_TOL,
                   help="a seamless loop whose mean residual force is at most this fraction of the forces at "
                        "play is converged (0: minimize on)")
    p.add_argument("--backend", default="auto", choices=["auto", *BACKENDS])
    p.add_argument("--drive", default=DEFAULTS.motion.drive, choices=FAMILIES,
                   help="with --clip: the driving force designed with the loop (auto: the scene's wind gusting, "
                        "else smooth body forces; none: pure physics)")
    p.add_argument("--keep-speed", type=_fraction, default=DEFAULTS.motion.keep_speed, metavar="WEIGHT",
                   help="with --clip: weight that holds the loop at the clip's speed (0: off)")
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
