"""A bake task's files on a farm: finished when its JSON report is newer than every output (bake.py
writes the report last); a failed run leaves none of the outputs it wrote. No bpy."""
import os
import signal
import threading
from contextlib import contextmanager

from .errors import LoopInputError

OUTPUT_OPTIONS = ("output", "abc", "pc2", "preview")


def outputs(args):
    """The output paths a bake.py ``args`` names (absolute), the JSON report excluded."""
    return [os.path.abspath(p) for p in (getattr(args, name) for name in OUTPUT_OPTIONS) if p]


def finished(output_paths, report):
    """True when ``report`` exists, every output exists and none is newer than the report."""
    if not report or not os.path.isfile(report):
        return False
    written = os.stat(report).st_mtime_ns
    return all(os.path.isfile(p) and os.stat(p).st_mtime_ns <= written for p in output_paths)


def check_skip_existing(args):
    """True when ``args.skip_existing`` and the task ``args`` describes has finished before."""
    if not args.skip_existing:
        return False
    if not args.json:
        raise LoopInputError("--skip-existing needs --json: the report marks a finished task")
    return finished(outputs(args), args.json)


def _stamp(path):
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


@contextmanager
def outputs_or_none(output_paths, report, keep=None):
    """On an exception, remove the outputs this run created or replaced, and then the (older) report.

    ``keep`` (the input .blend) is never removed. Files that did not change are left alone, so bad
    input found before writing anything leaves every file as it was. A farm cancelling the task with
    SIGTERM gets the same clean-up (exit status 128 + 15) when this runs on the main thread."""
    paths = [p for p in output_paths if not keep or os.path.abspath(p) != os.path.abspath(keep)]
    before = {p: _stamp(p) for p in paths}
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if main else None
    try:
        yield
    except BaseException:
        removed = [p for p in paths if _stamp(p) not in (None, before[p])]
        for p in removed:
            os.remove(p)
        if removed and report and os.path.isfile(report):
            os.remove(report)
        raise
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
