"""Many loops from one batch file: expand it into bake.py tasks, run them here one after another, or
write the OpenJD job template a farm runs. Plain Python 3.11+ (tomllib), no bpy:

    python cyclic_loop_addon/farm.py list BATCH.toml [--bare]     the tasks and their shell command lines
    python cyclic_loop_addon/farm.py run BATCH.toml [--force]     bake them here, then a summary table
    python cyclic_loop_addon/farm.py openjd BATCH.toml -o T.json  the OpenJD job template (farm/openjd/)

A task is one (object, variant) of a ``[[scene]]``: one ``bake.py`` run writing
``<output_dir>/<task>.<ext>`` and its JSON report ``<task>.json``. Finished tasks (report newer than
every output) are skipped unless ``--force``. Exit status: 0 every task done, 2 a bad batch file or a
task with bad input, 3 a task failed otherwise.
"""
import os
import sys

if __name__ == "__main__":  # run as a script: import the package, run, exit
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from cyclic_loop_addon.farm import main
    sys.exit(main(sys.argv[1:]))

import argparse
import json
import shlex
import subprocess
import time

from . import batch as batch_file
from . import openjd
from .task_files import finished

BAKE_PY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bake.py")
EXIT_STATUS = {0: "done", 2: "failed: bad input", 3: "failed: solver"}
CONVERGED = ("tol", "step_tol", "physics_tol")


def command(task, blender, bake_py=BAKE_PY, force=False):
    """The worker's command line of ``task``: Blender in the background running bake.py."""
    return [blender, "-b", "--factory-startup", "--python-exit-code", "1", task.scene, "--python", bake_py,
            "--", *task.bake_args(skip_existing=not force)]


def _status(code, report):
    """'done', 'not converged', or why it failed, from the exit status and the JSON report."""
    if code != 0:
        return EXIT_STATUS.get(code, f"failed: exit {code}")
    return "done" if report.get("stop_reason") in CONVERGED else "not converged"


def run_task(task, blender, force=False):
    """Run one task here; returns a summary row (dict)."""
    if not force and finished(task.output_paths(), task.report):
        with open(task.report) as f:
            report = json.load(f)
        return dict(task=task.name, status="skipped (done before)", seconds=0.0, report=report)
    print(f"[farm] {task.name}: {shlex.join(command(task, blender, force=force))}", flush=True)
    start = time.perf_counter()
    code = subprocess.run(command(task, blender, force=force)).returncode
    seconds = time.perf_counter() - start
    report = {}
    if code == 0:
        with open(task.report) as f:
            report = json.load(f)
    return dict(task=task.name, status=_status(code, report), seconds=seconds, report=report, code=code)


def summary(rows):
    """The summary table as text lines: status, wall time, iterations, seam jumps before -> after."""
    head = f"{'task':32} {'status':24} {'seconds':>8} {'GN it':>6} {'position jump':>22} {'velocity jump':>22}"
    lines = [head, "-" * len(head)]
    for row in rows:
        rep = row["report"]
        if rep:
            src, loop = rep["source"], rep["loop"]
            jumps = (f"{src['position_jump']:9.3g} -> {loop['position_jump']:<9.3g}",
                     f"{src['velocity_jump']:9.3g} -> {loop['velocity_jump']:<9.3g}")
            iters = rep["gauss_newton_iterations"]
        else:
            jumps, iters = ("-", "-"), "-"
        lines.append(f"{row['task']:32} {row['status']:24} {row['seconds']:8.1f} {iters:>6} "
                     f"{jumps[0]:>22} {jumps[1]:>22}")
    counts = {}
    for row in rows:
        key = row["status"].split(":")[0].split(" (")[0]
        counts[key] = counts.get(key, 0) + 1
    lines.append(", ".join(f"{n} {status}" for status, n in sorted(counts.items())))
    return lines


def exit_status(rows):
    """0 when no task failed; 2 when one had bad input; 3 when one failed otherwise."""
    codes = {row.get("code", 0) for row in rows} - {0}
    return 0 if not codes else 2 if 2 in codes else 3


def _parser():
    p = argparse.ArgumentParser(prog="farm.py", description="Bake many loops from one batch file.")
    sub = p.add_subparsers(dest="command", required=True)
    for name, text in (("list", "print the tasks and their command lines"),
                       ("run", "run the tasks here, one after another, and print a summary"),
                       ("openjd", "write the OpenJD job template (jobtemplate-2023-09, JSON)")):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("batch", help="the batch file (TOML)")
        cmd.add_argument("--force", action="store_true", help="bake finished tasks again")
        if name == "openjd":
            cmd.add_argument("-o", "--out", required=True, metavar="TEMPLATE.json")
        if name == "list":
            cmd.add_argument("--bare", action="store_true", help="command lines only, one a line (OpenCue's cuecmd)")
    return p


def main(argv):
    """Run ``farm.py`` with its arguments; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        batch = batch_file.load(args.batch)
        if args.command == "openjd":
            template = openjd.template(batch, os.path.dirname(os.path.abspath(args.out)), BAKE_PY, force=args.force)
            with open(args.out, "w") as f:
                json.dump(template, f, indent=2)
                f.write("\n")
            print(f"[farm] wrote {args.out}: {len(batch.tasks())} tasks in {len(template['steps'])} steps")
            return 0
    except batch_file.BatchError as exc:
        print(f"[farm] error: {exc}", file=sys.stderr)
        return 2
    tasks = batch.tasks()
    if args.command == "list":
        for task in tasks:
            line = shlex.join(command(task, batch.blender, force=args.force))
            print(line if args.bare else f"{task.name}: {line}")
        return 0
    os.makedirs(batch.output_dir, exist_ok=True)
    rows = [run_task(task, batch.blender, force=args.force) for task in tasks]
    for line in summary(rows):
        print(line)
    return exit_status(rows)
