"""A bake task's files on a farm: finished when its JSON report is newer than every output (bake.py
writes the report last; a failed run leaves none of the outputs it wrote: files.all_or_nothing). No bpy."""
import os

from ..errors import LoopInputError
from ..outputs.catalog import PRODUCTS


def outputs(args):
    """The output paths a bake.py ``args`` names (absolute), the JSON report excluded."""
    return [os.path.abspath(p) for p in (getattr(args, out.name) for out in PRODUCTS) if p]


def finished(output_paths, report):
    """True when ``report`` exists, every output exists and none is newer than the report."""
    if not report or not os.path.isfile(report):
        return False
    written = os.stat(report).st_mtime_ns
    return all(os.path.exists(p) and os.stat(p).st_mtime_ns <= written for p in output_paths)


def check_skip_existing(args):
    """True when ``args.skip_existing`` and the task ``args`` describes has finished before."""
    if not args.skip_existing:
        return False
    if not args.json:
        raise LoopInputError("--skip-existing needs --json: the report marks a finished task")
    return finished(outputs(args), args.json)
