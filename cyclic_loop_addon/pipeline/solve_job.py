"""A loop solve that runs while Blender's interface keeps drawing. No bpy here: the gathered problem
comes in as numpy, progress goes out as dicts, the modal operator's timer follows the job
(``progress()``) and a script runs it to the end (``run()``).

With ``python`` set the job (the physical solve or the crossfade) runs in a child Python process (the
solver's command line, see child_solve), which the job follows from the calling thread: it probes the
Python, starts the child, reads its progress lines as ``progress()`` or ``wait()`` are called, and at the
end reloads the LoopResult the child saved. No Python thread runs beside Blender's drawing while the child
works. Without a usable Python it runs on a worker thread in this process, and the report's notes say so.
Either way the LoopResult comes from ``solve.solve`` or ``solve.crossfade`` (in the child: the same
solver_core calls) and the report from ``solve.report``. Why a child process, why no thread: see
docs/design/child_solve.md.
"""
import os
import queue
import shutil
import subprocess
import threading
import time

import numpy as np

from ..report import advice
from ..outputs import files
from . import solve, child_solve
from ..errors import LoopInputError, LoopSolveError
from ..core import sc
from ..vocabulary import METHODS, names

WAIT_SECONDS = 0.1      # ``wait`` looks at the probe and the child's output this often


class SolveJob:
    """Make the loop of ``gathered`` (scene_reader.Gathered) with ``settings`` (scene_reader.LoopSettings) by
    ``method``: "physical" (solve.solve) or "crossfade" (the baseline blend of the source cache).

    ``python``: where the job runs: None in this process (``run`` in the calling thread, ``start``
    on a worker thread), "auto" in a child process of the first usable Python of ``child_solve.Search``
    (else on a worker thread, with a note), or the path of the Python to use (probed first, the same way).
    A job in a child process advances only when ``progress()`` or ``wait()`` is called.

    Afterwards exactly one of ``q`` + ``report`` (success), ``cancelled`` or ``error`` is set;
    ``where`` says where the solve ran ("process" or "thread"), ``notes`` why not in a process.
    """

    def __init__(self, gathered, settings, method="physical", python=None):
        if method not in names(METHODS):
            raise ValueError(f"method must be one of {names(METHODS)}, got {method!r}")
        self.gathered = gathered
        self.settings = settings
        self.method = method
        self.python = python
        self.q = None
        self.report = None
        self.cancelled = False
        self.error = None
        self.where = None
        self.notes = []
        self.on_progress = None     # also called with each progress dict (from the thread that advances the job)
        self.solver = ""            # the linear solve the solver runs ("cholmod", "scipy", "structured"), once said
        self.stopped = False        # stopped by ``stop(keep=True)``: ``q`` and ``report`` are the best loop so far
        self.iterations = 0         # Gauss–Newton iterations reported so far
        self._keep = False
        self.folder = None          # the child's job folder while it runs (removed afterwards)
        self.child_pid = None
        self._finished = threading.Event()
        self._cancel = threading.Event()
        self._progress = queue.Queue()
        self._thread = None
        self._search = None         # child_solve.Search while the Python is probed
        self._child = None          # the running child_solve child (a Popen)
        self._output = None         # its child_solve.Output

    def start(self):
        """Start the job and return: a child process's probe, or a worker thread."""
        if self.python is None:
            self._start_thread()
        else:
            self._search = child_solve.Search(None if self.python == "auto" else [self.python])
            self._advance()

    def run(self):
        """Run the job to its end in the calling thread."""
        if self.python is None:
            self._run_here()
        else:
            self.start()
            self.wait()

    def stop(self, keep=False):
        """Stop the solve; with ``keep`` and once an iteration has been made, keep the best loop so far: the
        solver ends after its current iteration and the job ends as a finished one (``q`` and ``report``, the
        report's status cancelled) with ``stopped`` set. Otherwise as ``cancel``."""
        if not keep or self.iterations == 0 or self.done:
            self.cancel()
            return
        self._keep = True
        if self._child is not None:
            try:
                self._child.stdin.write(b"stop\n")
                self._child.stdin.flush()
            except OSError:
                self.cancel()
        else:
            self._cancel.set()

    def cancel(self):
        """Stop the solve: a probe or child process is ended at once (the job is then over), a solve in a
        thread stops after its current iteration; nothing will be written."""
        self._keep = False
        self._cancel.set()
        if self._search is not None or self._child is not None:
            self._end()

    @property
    def done(self):
        return self._finished.is_set()

    def wait(self, timeout=None):
        """Block until the job ends (or ``timeout`` seconds pass); True when it ended."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.done:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            self._advance()
            step = WAIT_SECONDS if left is None else min(WAIT_SECONDS, left)
            if self._child is not None:
                try:
                    self._child.wait(step)
                except subprocess.TimeoutExpired:
                    pass
            elif self._search is not None:
                self._search.wait(step)
            else:                   # on the worker thread (or not started)
                return self._finished.wait(left)
        return True

    def progress(self):
        """Progress dicts (phase, iteration, loss) posted since the last call, oldest first (a job in a
        child process advances first)."""
        self._advance()
        items = []
        while True:
            try:
                items.append(self._progress.get_nowait())
            except queue.Empty:
                return items

    def _callback(self, info):
        """The solver's callback in the thread: what the child process's progress lines carry (``parse_progress``)."""
        posted = dict(phase=info["phase"], iteration=int(info["iteration"]), loss=float(info["loss"]))
        if "residual" in info:
            posted["residual"] = float(info["residual"])
        self._post(posted)
        return self._cancel.is_set()

    def _post(self, info):
        if info.get("phase") == "setup":
            self.solver = info.get("solver", self.solver)
        elif info.get("phase") == "gauss_newton" and not info.get("stage"):
            self.iterations += 1
        self._progress.put(info)
        if self.on_progress is not None:
            self.on_progress(info)

    def _start_thread(self):
        self._thread = threading.Thread(target=self._run_here, name="cyclic-loop-solve", daemon=True)
        self._thread.start()

    def _run_here(self):
        """The solve in this process (the calling thread or the worker thread)."""
        try:
            self.where = "thread"
            if self.method == "crossfade":
                self._callback(dict(phase="crossfade", iteration=0, loss=float("nan")))
                q, report = self._report(solve.crossfade(self.gathered))
            else:
                q, report = self._report(solve.solve(self.gathered, self.settings, callback=self._callback,
                                                     stage=self._post))
            if (self._cancel.is_set() and not self._keep) or report is None:
                self.cancelled = True
            else:
                self.q, self.report = q, report
        except Exception as exc:  # handed to the main thread, which reports it
            self.error = exc
        finally:
            self._finished.set()

    def _report(self, result):
        """(q, report) of a LoopResult made here or reloaded from the child's result file; report None when
        it was cancelled, unless stopped to keep the best loop so far (``stopped``)."""
        if result.cancelled and self._keep:
            self.stopped = True
            return result.q, solve.report(self.gathered, result, self.notes)
        return result.q, None if result.cancelled else solve.report(self.gathered, result, self.notes)

    def _advance(self):
        """Take a job in a child process as far as it has got: the probe's answer, the child's start, its
        progress lines, its end."""
        if self.done or self._thread is not None:
            return
        try:
            if self._search is not None:
                found = self._search.poll()
                if found is None:
                    return
                self._search = None
                if not self._launch(found):
                    return
            self._read(final=self._child.poll() is not None)
        except Exception as exc:  # handed to the caller, which reports it
            self.error = exc
            self._end()

    def _launch(self, found):
        """Start the child on the Python ``found`` by the probe (True), or the worker thread without one."""
        python, reason = found
        if python is None:
            print(f"[cyclic-loop] no separate Python for the solver: {reason}", flush=True)
            self.notes.append(advice.python_note(reason))
            self._start_thread()
            return False
        folder = self.folder = files.make_temp_folder()
        paths = {name: os.path.join(folder, name) for name in ("problem.npz", "clip.npy", "result.npz")}
        try:
            sc.save_problem(paths["problem.npz"], self.gathered.problem)
        except TypeError as exc:
            print(f"[cyclic-loop] the problem cannot be handed to a separate Python: {exc}", flush=True)
            self.notes.append(f"{advice.SOLVED_INSIDE}: this model cannot be handed to a separate process")
            shutil.rmtree(folder, ignore_errors=True)
            self._start_thread()
            return False
        np.save(paths["clip.npy"], self.gathered.source)
        self.where = "process"
        solve.check(self.settings)
        self._child = child_solve.start(
            python, folder, "loop", paths["problem.npz"], "-o", paths["result.npz"], "--clip", paths["clip.npy"],
            "--method", self.method, "--init", self.settings.init, "--max-iters", str(int(self.settings.iterations)),
            "--tol", repr(float(self.settings.tolerance)),
            "--physics-tol", repr(float(self.settings.physics_tolerance)), *solve.motion_arguments(self.settings),
            "--stop-with-stdin")
        self.child_pid = self._child.pid
        self._output = child_solve.Output(folder)
        return True

    def _read(self, final):
        """Post the child's new progress lines (any other line goes to the console); once it has ended
        (``final``), reload its LoopResult and build the report here, or raise its error."""
        for line in self._output.lines(final):
            info = sc.parse_progress(line)
            if info is not None:
                self._post(info)
            else:
                print(line, end="", flush=True)
        if not final:
            return
        status = self._child.wait()
        if status == 0:
            self.q, self.report = self._report(sc.load_result(os.path.join(self.folder, "result.npz")))
            self._end()
            return
        message = child_solve.error_message(self.folder)
        if message and status in (2, 3):
            raise (LoopInputError if status == 2 else LoopSolveError)(message)
        raise LoopSolveError(f"the solver process stopped unexpectedly (exit status {status}); "
                             "see the system console")

    def _end(self):
        """Over: the probe or child ended (terminate, then kill), its pipe closed, its folder removed."""
        if self._search is not None:
            self._search.stop()
            self._search = None
        child, self._child = self._child, None
        if child is not None:
            if child.poll() is None:
                child.terminate()
                try:
                    child.wait(5)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
            try:
                child.stdin.close()
            except OSError:
                pass
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
        if self._cancel.is_set() and self.error is None:
            self.q, self.report, self.cancelled = None, None, True
        self._finished.set()
