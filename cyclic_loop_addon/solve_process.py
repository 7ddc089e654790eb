"""The physical solve in a separate Python process, so that Blender's interface keeps the GIL.

No bpy here. The parent (the worker thread of worker.SolveJob) writes the job into a temporary folder
(``write_job``: the LoopProblem with solver_core.io, the rest of the gathered data and the loop settings
as arrays and JSON), then runs this module's ``child_main`` in a child Python (``start``). The child
runs the very same ``solve.solve`` and ``solve.report`` as the in-thread solve, prints one progress
line per iteration (``parse_progress``) and leaves the loop and its report in the folder
(``read_result``), or an error (``read_error``) that the parent raises again with the same message.

The child imports this add-on under the parent's own module names (``bl_ext.<repo>.cyclic_loop...``
for an extension, ``cyclic_loop...`` for a legacy add-on): the enclosing packages are set up as plain
namespace modules pointing at the same folders, so the add-on's root ``__init__`` (which is for
Blender) is not run, and the force model class names stored in the problem file resolve to the same
classes. Its module search path is the parent's ``sys.path`` without the parent's standard library,
so it finds the same numpy, SciPy (bundled extension wheels included) and scikit-sparse.

The Python is ``sys.executable`` (Blender's bundled Python since 2.91), else the Python that Blender's
``sys.base_prefix`` belongs to (Linux distribution builds of Blender); each is probed once per
session (``find_python``): it must start, import the add-on, numpy and SciPy, and have the same
Python minor version, numpy and SciPy as Blender. Without one, worker.SolveJob solves in its thread.
"""
import dataclasses
import importlib
import inspect
import json
import os
import subprocess
import sys
import sysconfig
import threading
import traceback
import types

import numpy as np

from . import errors, files, solve
from .solver import sc

PROGRESS = "@cyclic-loop-progress "     # prefix of the child's progress lines on stdout
PROBE_TIMEOUT = 120.0                   # seconds for a probe (a cold start of SciPy can be slow)
ERROR_EXIT = 3                          # the child's exit status after writing error.json

# The child's first statements: set up the enclosing packages of the add-on, run ``child_main``.
BOOTSTRAP = """\
import importlib, json, sys, types
spec = json.loads(sys.argv[1])
for name, path in spec["packages"]:
    package = types.ModuleType(name)
    package.__path__, package.__package__ = list(path), name
    sys.modules[name] = package
sys.exit(importlib.import_module(spec["module"]).child_main(sys.argv[2:]))
"""

_probed = {}                # python path -> (usable, reason)
_probe_lock = threading.Lock()


# ------------------------------------------------------------------------------------------------ the Python


def _stdlib_dirs():
    paths = sysconfig.get_paths()
    return {os.path.normcase(os.path.realpath(paths[key])) for key in ("stdlib", "platstdlib") if key in paths}


def _is_stdlib(entry, stdlib):
    """True for an entry of sys.path that is part of this Python's standard library (its folders, the
    zipped library, lib-dynload) rather than a folder of installed packages."""
    real = os.path.normcase(os.path.realpath(entry))
    if "site-packages" in real or "dist-packages" in real:
        return False
    if real.endswith(".zip") and os.path.basename(real).startswith("python"):
        return True
    return any(real == d or real.startswith(d + os.sep) for d in stdlib)


def child_command(python, *args):
    """(argv, environment) to run ``child_main(args)`` in ``python``."""
    package = __name__.rpartition(".")[0]           # this add-on package under the parent's name
    parts = package.split(".")
    enclosing = [".".join(parts[:i]) for i in range(1, len(parts))]
    # (Blender's ``bl_ext`` junction module has no __path__ of its own; its repositories have.)
    spec = dict(packages=[(name, list(getattr(sys.modules[name], "__path__", []))) for name in enclosing],
                module=__name__)
    stdlib = _stdlib_dirs()
    paths = [] if enclosing else [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    paths += [p for p in sys.path if p and os.path.isdir(p) and not _is_stdlib(p, stdlib) and p not in paths]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    env.pop("PYTHONHOME", None)
    return [python, "-c", BOOTSTRAP, json.dumps(spec), *args], env


def _versions():
    scipy = sys.modules.get("scipy") or importlib.import_module("scipy")
    return dict(python=list(sys.version_info[:2]), numpy=np.__version__, scipy=scipy.__version__)


def probe(python):
    """(usable, reason): can ``python`` run the child, with this Python's minor version, numpy and SciPy?
    Each path is probed once per session."""
    with _probe_lock:
        if python not in _probed:
            _probed[python] = _probe(python)
        return _probed[python]


def _probe(python):
    if not python or not os.path.isfile(python):
        return False, f"no Python at {python!r}"
    argv, env = child_command(python, "--probe")
    try:
        proc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"{python} did not run: {exc}"
    lines = proc.stdout.strip().splitlines()
    try:
        found = json.loads(lines[-1]) if proc.returncode == 0 and lines else None
    except ValueError:
        found = None
    if not isinstance(found, dict):
        last = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        return False, f"{python} cannot run the solver ({last})"
    wanted = _versions()
    if found != wanted:
        return False, f"{python} has {found}, Blender has {wanted}"
    return True, ""


def candidates():
    """Pythons to try: sys.executable, then the interpreter of sys.base_prefix."""
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if os.name == "nt":
        base = [os.path.join(sys.base_prefix, "python.exe"), os.path.join(sys.base_prefix, "bin", "python.exe")]
    else:
        base = [os.path.join(sys.base_prefix, "bin", f"python{version}")]
    found = []
    for path in [sys.executable, *base]:
        if path and path not in found:
            found.append(path)
    return found


def find_python():
    """(python, "") for the first usable candidate, or (None, why none is)."""
    reasons = []
    for python in candidates():
        usable, reason = probe(python)
        if usable:
            return python, ""
        reasons.append(reason)
    return None, "; ".join(reasons) or "no Python found"


# ------------------------------------------------------------------------------------------------ the job folder


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"cannot hand a {type(value).__name__} to the solver process")


def _fields(obj):
    """name -> value of a dataclass's fields and its class's properties (or an object's attributes)."""
    if dataclasses.is_dataclass(obj):
        values = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    else:
        values = dict(vars(obj))
    for name, member in inspect.getmembers(type(obj)):
        if isinstance(member, property) and not name.startswith("_"):
            values[name] = getattr(obj, name)
    return values


def write_job(folder, gathered, settings):
    """Write the solve of ``gathered`` with ``settings`` into ``folder``; TypeError when something in them
    cannot be written (then solve in the thread)."""
    arrays, plain = {}, {}
    for name, value in _fields(gathered).items():
        if name == "problem":
            continue
        if isinstance(value, np.ndarray):
            arrays[name] = value
        else:
            plain[name] = value
    meta = dict(gathered=plain, settings=_fields(settings))
    arrays["meta"] = np.array(json.dumps(meta, default=_json_default))
    sc.save_problem(os.path.join(folder, "problem.npz"), gathered.problem)
    np.savez(os.path.join(folder, "gathered.npz"), **arrays)


def read_job(folder):
    """(gathered, settings) of a job folder, as namespaces with the fields solve.solve / solve.report read."""
    with np.load(os.path.join(folder, "gathered.npz"), allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    meta = json.loads(str(arrays.pop("meta")))
    gathered = types.SimpleNamespace(problem=sc.load_problem(os.path.join(folder, "problem.npz")),
                                     **meta["gathered"], **arrays)
    return gathered, types.SimpleNamespace(**meta["settings"])


def write_result(folder, q, report):
    with files.atomic_path(os.path.join(folder, "result.npz"), "solver result") as tmp:
        np.savez(tmp, q=q, report=np.array(json.dumps(report, default=_json_default)))


def read_result(folder):
    """(q, report) the child left in ``folder``."""
    with np.load(os.path.join(folder, "result.npz"), allow_pickle=False) as data:
        return data["q"], json.loads(str(data["report"]))


def write_error(folder, exc):
    text = json.dumps(dict(kind=type(exc).__name__, message=str(exc)))
    with files.atomic_path(os.path.join(folder, "error.json"), "solver error") as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)


def read_error(folder):
    """The exception the child reported (a LoopError class of errors.py by name, with the same message),
    or None when it reported none."""
    try:
        with open(os.path.join(folder, "error.json"), encoding="utf-8") as fh:
            info = json.load(fh)
    except (OSError, ValueError):
        return None
    cls = getattr(errors, info.get("kind", ""), None)
    if not (isinstance(cls, type) and issubclass(cls, errors.LoopError)):
        cls = errors.LoopSolveError
    return cls(info.get("message", "the solver process failed"))


# ------------------------------------------------------------------------------------------------ parent side


def start(python, folder):
    """Start the child on the job in ``folder``: a Popen with line-buffered text stdout (progress
    lines) and an open stdin pipe (the child quits when it closes: Blender has gone)."""
    argv, env = child_command(python, folder)
    return subprocess.Popen(argv, env=env, cwd=folder, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=None, text=True, errors="replace", bufsize=1)


def parse_progress(line):
    """The progress dict (phase, iteration, loss) of a child's stdout line, or None for other output."""
    if not line.startswith(PROGRESS):
        return None
    info = json.loads(line[len(PROGRESS):])
    return dict(phase=str(info["phase"]), iteration=int(info["iteration"]), loss=float(info["loss"]))


# ------------------------------------------------------------------------------------------------ child side


def _progress(info):
    print(PROGRESS + json.dumps(dict(phase=info["phase"], iteration=int(info["iteration"]),
                                     loss=float(info["loss"]))), flush=True)
    return False


def _quit_with_parent():
    """Exit as soon as stdin closes (the parent process is gone) instead of solving for nobody."""
    def watch():
        try:
            while os.read(0, 4096):     # a raw read: no lock of sys.stdin held at interpreter shutdown
                pass
        finally:
            os._exit(1)
    threading.Thread(target=watch, name="cyclic-loop-parent-watch", daemon=True).start()


def child_main(args):
    """The child: ``--probe`` prints its versions; ``FOLDER`` solves the job there. Exit 0: result.npz
    written; ERROR_EXIT: error.json written (the traceback of an unexpected error goes to stderr)."""
    if args == ["--probe"]:
        print(json.dumps(_versions()))
        return 0
    folder = args[0]
    _quit_with_parent()
    try:
        gathered, settings = read_job(folder)
        result = solve.solve(gathered, settings, callback=_progress)
        write_result(folder, result.q, solve.report(gathered, result))
    except Exception as exc:
        if not isinstance(exc, errors.LoopError):
            traceback.print_exc()
        write_error(folder, exc)
        return ERROR_EXIT
    return 0
