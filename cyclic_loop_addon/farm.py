"""Many loops from one batch file: expand it into bake.py tasks, run them here one after another, or
write the OpenJD job template a farm runs. Plain Python 3.11+ (tomllib), no bpy:

    python cyclic_loop_addon/farm.py list BATCH.toml [--bare]     the tasks and their shell command lines
    python cyclic_loop_addon/farm.py run BATCH.toml [--force]     bake them here, then a summary table
    python cyclic_loop_addon/farm.py openjd BATCH.toml -o T.json [--overwrite]   the OpenJD job template

A task is one (object, variant) of a ``[[scene]]``: one ``bake.py`` run writing
``<output_dir>/<task>.<ext>`` and its JSON report ``<task>.json``. Finished tasks (report newer than
every output) are skipped unless ``--force``. Exit status: 0 every task done, 2 a bad batch file, a bad
template path or a task with bad input, 3 a task failed otherwise.

The template path is guarded like the bake's outputs (``check_template_path``): never the batch file, a
scene of the batch or a task's output, never a link or special file, an existing file only with
``--overwrite``; it is written atomically (files.atomic_path). ``list`` prints each command line
shell-quoted on one line and refuses a name with a line break or another control character.
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

from .jobs import batch as batch_file
from .outputs import files
from .jobs import openjd
from .errors import LoopError
from .jobs.task_files import finished

BAKE_PY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bake.py")
EXIT_STATUS = {0: "done", 2: "failed: bad input", 3: "failed: solver"}
CONVERGED = ("tol", "step_tol", "physics_tol")


def command(task, blender, bake_py=BAKE_PY, force=False):
    """The worker's command line of ``task``: Blender in the background running bake.py."""
    return [blender, "-b", "--factory-startup", "--python-exit-code", "1", task.scene, "--python", bake_py,
            "--", *task.bake_args(skip_existing=not force)]


def command_line(task, blender, force=False):
    """``command`` as one shell line (shlex-quoted); BatchError when an argument holds a line break or
    another control character, which would split the line for a one-command-a-line runner."""
    cmd = command(task, blender, force=force)
    bad = next((arg for arg in cmd if any(ord(c) < 32 or ord(c) == 127 for c in arg)), None)
    if bad is not None:
        raise batch_file.BatchError(f"task {task.name}: {bad!r} holds a line break or another control character, "
                                    "which a one-command-a-line runner would split: rename it (farm.py run "
                                    "passes it safely)")
    return shlex.join(cmd)


def check_template_path(path, batch, batch_path, overwrite=False):
    """The absolute template ``path`` once it may be written; BatchError saying why not: its folder is
    missing or not writable, it is a folder, link or special file, the batch file, a scene or an output of
    the batch, or an existing file without ``overwrite``.

    Parameters
    ----------
    path : str
        The ``-o`` path.
    batch : batch.Batch
        The loaded batch.
    batch_path : str
        The batch file's path.
    overwrite : bool
        An existing (regular) file at ``path`` may be replaced.

    Returns
    -------
    str
        The absolute path.
    """
    try:
        path = files.check_writable(path, "template (-o)")
    except LoopError as exc:
        raise batch_file.BatchError(str(exc)) from None
    protected = [("the batch file", batch_path)] + [("a scene of the batch", s.file) for s in batch.scenes]
    protected += [(f"an output of task {t.name}", p) for t in batch.tasks() for p in (*t.output_paths(), t.report)]
    for what, other in protected:
        if files.same_path(path, other):
            raise batch_file.BatchError(f"-o {path} is {what}: writing the template there would destroy it. "
                                        "Choose another path")
    if os.path.exists(path) and not overwrite:
        raise batch_file.BatchError(f"-o {path} exists: pass --overwrite to replace it, or choose another path")
    return path


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
            cmd.add_argument("--overwrite", action="store_true", help="replace an existing template file")
        if name == "list":
            cmd.add_argument("--bare", action="store_true", help="command lines only, one a line (OpenCue's cuecmd)")
    return p


def main(argv):
    """Run ``farm.py`` with its arguments; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        batch = batch_file.load(args.batch)
        if args.command == "openjd":
            out = check_template_path(args.out, batch, os.path.abspath(args.batch), args.overwrite)
            template = openjd.template(batch, os.path.dirname(out), BAKE_PY, force=args.force)
            with files.atomic_path(out, "template") as tmp, open(tmp, "w") as f:
                json.dump(template, f, indent=2)
                f.write("\n")
            print(f"[farm] wrote {args.out}: {len(batch.tasks())} tasks in {len(template['steps'])} steps")
            return 0
        tasks = batch.tasks()
        if args.command == "list":
            lines = [(task.name, command_line(task, batch.blender, force=args.force)) for task in tasks]
            for name, line in lines:
                print(line if args.bare else f"{name}: {line}")
            return 0
        if os.path.exists(batch.output_dir) and not os.path.isdir(batch.output_dir):
            raise batch_file.BatchError(f"[batch] output_dir {batch.output_dir} is a file; give a folder")
        try:
            os.makedirs(batch.output_dir, exist_ok=True)
        except OSError as exc:
            raise batch_file.BatchError(f"cannot make [batch] output_dir {batch.output_dir}: {exc.strerror}") from None
    except (batch_file.BatchError, LoopError) as exc:
        print(f"[farm] error: {exc}", file=sys.stderr)
        return 2
    rows = [run_task(task, batch.blender, force=args.force) for task in tasks]
    for line in summary(rows):
        print(line)
    return exit_status(rows)
