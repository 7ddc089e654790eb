"""The physical solve in a separate Python process, so that Blender's interface keeps the GIL: the
solver's own command line (``python -m solver_core loop problem.npz -o result.npz --clip clip.npy``)
on the solver's own files, its progress lines read from its stdout. No bpy here.

The Python is ``sys.executable`` (Blender's bundled Python since 2.91), else the Python that Blender's
``sys.base_prefix`` belongs to (Linux distribution builds of Blender); each is probed once per session
(``python -m solver_core versions``): it must have the same Python minor version, numpy and SciPy as
Blender. Its module search path is the solver package's folder and Blender's ``sys.path`` without
Blender's standard library, so it finds the same numpy, SciPy (bundled extension wheels included) and
scikit-sparse.
"""
import json
import os
import subprocess
import sys
import sysconfig
import threading

from .solver import sc

PROBE_TIMEOUT = 120.0       # seconds for a probe (a cold start of SciPy can be slow)
_probed = {}                # python path -> (usable, reason)
_probe_lock = threading.Lock()


def _is_stdlib(entry, stdlib):
    """True for an entry of sys.path that is part of this Python's standard library (its folders, the
    zipped library, lib-dynload) rather than a folder of installed packages."""
    real = os.path.normcase(os.path.realpath(entry))
    if "site-packages" in real or "dist-packages" in real:
        return False
    if real.endswith(".zip") and os.path.basename(real).startswith("python"):
        return True
    return any(real == d or real.startswith(d + os.sep) for d in stdlib)


def command(python, *args):
    """(argv, environment) to run ``python -m solver_core ARGS`` on this solver package."""
    paths = sysconfig.get_paths()
    stdlib = {os.path.normcase(os.path.realpath(paths[k])) for k in ("stdlib", "platstdlib") if k in paths}
    search = [os.path.dirname(os.path.dirname(os.path.abspath(sc.__file__)))]
    search += [p for p in sys.path if p and os.path.isdir(p) and not _is_stdlib(p, stdlib) and p not in search]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(search))
    env.pop("PYTHONHOME", None)
    return [python, "-m", "solver_core", *args], env


def probe(python):
    """(usable, reason): can ``python`` run the solver, with this Python's minor version, numpy and SciPy?
    Each path is probed once per session."""
    with _probe_lock:
        if python not in _probed:
            _probed[python] = _probe(python)
        return _probed[python]


def _probe(python):
    if not python or not os.path.isfile(python):
        return False, f"no Python at {python!r}"
    argv, env = command(python, "versions")
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
    wanted = sc.versions()
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


def start(python, folder, *args):
    """Start ``python -m solver_core ARGS`` in ``folder``: a Popen with line-buffered text stdout
    (progress lines), stderr into ``folder``/stderr.txt, and an open stdin pipe (with
    ``--stop-with-stdin`` the child quits when it closes: Blender has gone)."""
    argv, env = command(python, *args)
    with open(os.path.join(folder, "stderr.txt"), "w", encoding="utf-8") as err:
        return subprocess.Popen(argv, env=env, cwd=folder, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=err, text=True, errors="replace", bufsize=1)


def error_message(folder):
    """The child's last ``error: ...`` line on stderr without the prefix, or "" (the rest goes to the console)."""
    try:
        with open(os.path.join(folder, "stderr.txt"), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return ""
    errors = [line[len("error: "):] for line in text.splitlines() if line.startswith("error: ")]
    if text.strip() and not errors:
        print(text, end="", file=sys.stderr)
    return errors[-1] if errors else ""


def read_report(lines):
    """The report the child printed last (a JSON object from a line "{" on) among its other ``lines`` of
    stdout, which go to the console."""
    start = max(i for i, line in enumerate(lines) if line.rstrip("\n") == "{")
    print("".join(lines[:start]), end="")
    return json.loads("".join(lines[start:]))
