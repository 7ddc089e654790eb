"""The solve in a separate Python process, so that Blender's interface keeps the GIL: the solver's own
command line (``python -m solver_core loop problem.npz -o result.npz --clip clip.npy``) on the solver's own
files. Its one result is result.npz (the LoopResult, ``sc.load_result``), its one progress stream the
progress lines of its stdout (a file in its folder, read with ``Output``), its errors the ``error: ...``
lines of its stderr (``error_message``). No bpy here, and no thread: the caller polls (``Search.poll``,
``Output.lines``, ``Popen.poll``). The reasoning: docs/design/child_solve.md.

The Python is the first of ``sys.executable`` (Blender's bundled Python since 2.91), the Python that
Blender's ``sys.base_prefix`` belongs to (Linux distribution builds of Blender) and the ``pythonX.Y`` on the
PATH that has CHOLMOD (scikit-sparse), else the first usable one; each is probed once per Blender session
(``python -m solver_core versions``): it must have the same Python minor version, numpy and SciPy as
Blender. Its module search path is the solver package's folder and Blender's ``sys.path`` without
Blender's standard library, so it finds the same numpy, SciPy (bundled extension wheels included) and
scikit-sparse.
"""
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time

from ..core import sc

PROBE_TIMEOUT = 120.0       # seconds for a probe (a cold start of SciPy can be slow)
_probed = {}                # python path -> (usable, reason, has CHOLMOD)


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
    Each path is probed once per Blender session."""
    found, reason = Search([python]).wait()
    return found is not None, reason


class Search:
    """The usable Python of ``pythons`` (default ``candidates()``) to solve in, found without blocking: the
    first that has CHOLMOD (scikit-sparse), else the first usable one. Each is probed (``python -m solver_core
    versions``, once per Blender session) in a child process, one at a time, and ``poll()`` advances the
    search. Blender's modal Make Loop polls it from its timer, so no Python thread runs beside Blender's
    drawing. ``cholmod`` says whether the Python found has CHOLMOD."""

    def __init__(self, pythons=None):
        self._todo = list(candidates() if pythons is None else pythons)
        self._reasons = []
        self._usable = []           # usable Pythons without CHOLMOD, in the order of ``pythons``
        self._running = None        # (python, Popen, its stdout and stderr files, when it started)
        self.found = None
        self.cholmod = False

    def poll(self):
        """None while a probe runs, then (python, "") for the Python to use or (None, why none is)."""
        while self.found is None:
            if self._running is not None and not self._ended():
                return None
            if not self._todo:
                self.found = (self._usable[0], "") if self._usable else (
                    None, "; ".join(self._reasons) or "no Python found")
            elif self._todo[0] not in _probed:
                self._start(self._todo[0])
            else:
                python = self._todo.pop(0)
                usable, reason, has_cholmod = _probed[python]
                if usable and has_cholmod:
                    self.found, self.cholmod = (python, ""), True
                elif usable:
                    self._usable.append(python)
                else:
                    self._reasons.append(reason)
        return self.found

    def wait(self, timeout=None):
        """Block until ``poll()`` has its answer and return it (None when ``timeout`` seconds pass first)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = 0.1 if deadline is None else min(0.1, deadline - time.monotonic())
            if left <= 0:
                return None
            try:
                self._running[1].wait(left)
            except subprocess.TimeoutExpired:
                pass
        return self.found

    def stop(self):
        """Kill a running probe (its Python stays unprobed)."""
        if self._running is not None:
            _, proc, outputs, _ = self._running
            self._running = None
            proc.kill()
            proc.wait()
            for fh in outputs:
                fh.close()

    def _start(self, python):
        if not python or not os.path.isfile(python):
            _probed[python] = False, f"no Python at {python!r}", False
            return
        argv, env = command(python, "versions")
        out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        try:
            proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        except (OSError, subprocess.SubprocessError) as exc:
            out.close()
            err.close()
            _probed[python] = False, f"{python} did not run: {exc}", False
            return
        self._running = python, proc, (out, err), time.monotonic()

    def _ended(self):
        """True when the running probe has ended (its verdict recorded in ``_probed``)."""
        python, proc, outputs, started = self._running
        if proc.poll() is None:
            if time.monotonic() - started < PROBE_TIMEOUT:
                return False
            self.stop()
            _probed[python] = False, f"{python} did not answer within {PROBE_TIMEOUT:.0f} s", False
            return True
        self._running = None
        texts = []
        for fh in outputs:
            with fh:
                fh.seek(0)
                texts.append(fh.read().decode("utf-8", "replace"))
        _probed[python] = _verdict(python, proc.returncode, *texts)
        return True


def _verdict(python, status, stdout, stderr):
    """(usable, reason, has CHOLMOD) from a probe's exit status and output."""
    lines = stdout.strip().splitlines()
    try:
        found = json.loads(lines[-1]) if status == 0 and lines else None
    except ValueError:
        found = None
    if not isinstance(found, dict):
        last = (stderr.strip().splitlines() or [f"exit status {status}"])[-1]
        return False, f"{python} cannot run the solver ({last})", False
    has_cholmod = bool(found.pop("cholmod", False))
    wanted = sc.versions()
    if found != wanted:
        return False, f"{python} has {found}, Blender has {wanted}", False
    return True, "", has_cholmod


def cholmod_known():
    """Whether the Python the solve will run in has CHOLMOD: True or False once this session has probed the
    candidates (``Search``), None before."""
    pythons = candidates()
    if any(_probed[p][0] and _probed[p][2] for p in pythons if p in _probed):
        return True
    return None if any(p not in _probed for p in pythons) else False


def candidates():
    """Pythons to try: sys.executable, the interpreter of sys.base_prefix, then the ``pythonX.Y`` of this
    Python's version on the PATH (a virtual environment's or a version manager's, where scikit-sparse may be
    installed; the probe accepts it only with Blender's numpy and SciPy versions)."""
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if os.name == "nt":
        base = [os.path.join(sys.base_prefix, "python.exe"), os.path.join(sys.base_prefix, "bin", "python.exe")]
    else:
        base = [os.path.join(sys.base_prefix, "bin", f"python{version}")]
    found = []
    for path in [sys.executable, *base, shutil.which(f"python{version}")]:
        if path and path not in found:
            found.append(path)
    return found


def find_python():
    """(python, "") for the first usable candidate, or (None, why none is); blocks (``Search`` does not)."""
    return Search().wait()


def start(python, folder, *args):
    """Start ``python -m solver_core ARGS`` in ``folder``: a Popen with its stdout into ``folder``/stdout.txt
    (progress lines: read them with ``Output``), its stderr into ``folder``/stderr.txt, and an open stdin
    pipe (with ``--stop-with-stdin`` the child quits when it closes: Blender has gone)."""
    argv, env = command(python, *args)
    with open(os.path.join(folder, "stdout.txt"), "wb") as out, \
            open(os.path.join(folder, "stderr.txt"), "wb") as err:
        return subprocess.Popen(argv, env=env, cwd=folder, stdin=subprocess.PIPE, stdout=out, stderr=err)


class Output:
    """The lines a child started by ``start`` has written to its stdout, read as they come."""

    def __init__(self, folder):
        self.path, self._offset = os.path.join(folder, "stdout.txt"), 0

    def lines(self, final=False):
        """The complete lines written since the last call (with ``final``, once the child has ended: the
        rest too)."""
        with open(self.path, "rb") as fh:
            fh.seek(self._offset)
            data = fh.read()
        end = len(data) if final else data.rfind(b"\n") + 1
        self._offset += end
        return data[:end].decode("utf-8", "replace").splitlines(keepends=True)


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

