"""A loop solve on a worker thread. No bpy here: the gathered problem comes in as numpy, progress goes
out through a queue, and the main thread polls (modal timer) or runs the job inline (background).

With ``python`` set, the worker thread hands the physical solve to a child Python process (the
solver's command line, see solve_process) and only waits for it, so the heavy numpy / SciPy work does
not hold Blender's GIL and the interface keeps redrawing; Cancel terminates the child. Without a usable
Python the solve runs in the thread itself, and the report's notes say so.
"""
import os
import queue
import shutil
import subprocess
import threading
import time

import numpy as np

from . import advice, files, solve, solve_process
from .errors import LoopInputError, LoopSolveError
from .solver import sc
from .vocabulary import METHODS, names


def crossfade_result(gathered, seconds):
    """The LoopResult of the crossfade baseline of the source cache (no solve)."""
    prob = gathered.problem
    q = sc.crossfade_loop(gathered.source)
    steps = prob.steps_of(q)
    return sc.LoopResult(q=q, q_steps=steps, initial_guess=steps, init_used="crossfade", seconds=seconds,
                         metrics=dict(loop=sc.loop_metrics(prob, steps)))


class SolveJob:
    """Make the loop of ``gathered`` (scene_io.Gathered) with ``settings`` (scene_io.LoopSettings) by
    ``method``: "physical" (solve.solve) or "crossfade" (the baseline blend of the source cache).

    ``python``: where a physical solve runs: None in this process (the calling or worker thread), "auto"
    in a child process of the first usable Python of ``solve_process.find_python`` (else in this process,
    with a note), or the path of the Python to use (probed first, the same way).

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
        self.on_progress = None     # also called with each progress dict (from the solving thread)
        self.folder = None          # the child's job folder while it runs (removed afterwards)
        self.child_pid = None
        self._finished = threading.Event()
        self._cancel = threading.Event()
        self._progress = queue.Queue()
        self._thread = None
        self._child = None          # the running solve_process child (a Popen)
        self._child_lock = threading.Lock()

    def start(self):
        """Run the job on a daemon thread."""
        self._thread = threading.Thread(target=self.run, name="cyclic-loop-solve", daemon=True)
        self._thread.start()

    def run(self):
        """Run the job in the calling thread."""
        try:
            self._solve()
        except Exception as exc:  # handed to the main thread, which reports it
            self.error = exc
        finally:
            self._finished.set()

    def cancel(self):
        """Stop the solve: a child process is terminated at once, a solve in a thread stops after its
        current iteration; nothing will be written."""
        self._cancel.set()
        with self._child_lock:
            if self._child is not None and self._child.poll() is None:
                self._child.terminate()

    @property
    def done(self):
        return self._finished.is_set()

    def wait(self, timeout=None):
        """Block until the job ends (or ``timeout`` seconds pass); True when it ended."""
        return self._finished.wait(timeout)

    def progress(self):
        """Progress dicts (phase, iteration, loss) posted since the last call, oldest first."""
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
        self._progress.put(info)
        if self.on_progress is not None:
            self.on_progress(info)

    def _solve(self):
        t0 = time.perf_counter()
        self.where = "thread"
        if self.method == "crossfade":
            self._callback(dict(phase="crossfade", iteration=0, loss=float("nan")))
            q, report = self._report(crossfade_result(self.gathered, time.perf_counter() - t0))
        else:
            python = self._python()
            q, report = self._solve_in_thread() if python is None else self._solve_in_process(python)
        if self._cancel.is_set() or report is None:
            self.cancelled = True
        else:
            self.q, self.report = q, report

    def _report(self, result):
        """(q, report) of a LoopResult; report None when it was cancelled."""
        return result.q, None if result.cancelled else solve.report(self.gathered, result, self.notes)

    def _solve_in_thread(self):
        """(q, report) of solve.solve in this thread."""
        return self._report(solve.solve(self.gathered, self.settings, callback=self._callback))

    def _python(self):
        """The Python to solve in, or None (solve in this thread; ``notes`` say why when one was wanted)."""
        if self.python is None:
            return None
        if self.python == "auto":
            python, reason = solve_process.find_python()
        else:
            usable, reason = solve_process.probe(self.python)
            python = self.python if usable else None
        if python is None:
            print(f"[cyclic-loop] no separate Python for the solver: {reason}", flush=True)
            self.notes.append(advice.python_note(reason))
        return python

    def _solve_in_process(self, python):
        """(q, report) of ``python -m solver_core loop`` in a child process ((None, None) when cancelled).
        Its errors are raised with their messages (exit 2: LoopInputError, 3: LoopSolveError); a child
        that dies says so."""
        folder = self.folder = files.make_temp_folder()
        paths = {name: os.path.join(folder, name) for name in ("problem.npz", "clip.npy", "result.npz")}
        try:
            try:
                sc.save_problem(paths["problem.npz"], self.gathered.problem)
            except TypeError as exc:
                print(f"[cyclic-loop] the problem cannot be handed to a separate Python: {exc}", flush=True)
                self.notes.append(f"{advice.SOLVED_INSIDE}: this model cannot be handed to a separate process")
                return self._solve_in_thread()
            np.save(paths["clip.npy"], self.gathered.source)
            self.where = "process"
            solve.check(self.settings)
            with self._child_lock:
                if self._cancel.is_set():
                    return None, None
                child = self._child = solve_process.start(
                    python, folder, "loop", paths["problem.npz"], "-o", paths["result.npz"], "--clip",
                    paths["clip.npy"], "--init", self.settings.init, "--max-iters", str(int(self.settings.iterations)),
                    "--tol", repr(float(self.settings.tolerance)),
                    "--physics-tol", repr(float(self.settings.physics_tolerance)), "--stop-with-stdin")
                self.child_pid = child.pid
            output = []
            try:
                for line in child.stdout:
                    info = sc.parse_progress(line)
                    if info is not None:
                        self._post(info)
                    else:
                        output.append(line)
                status = child.wait()
            finally:
                self._stop_child()
            if self._cancel.is_set():
                return None, None
            if status == 0:
                report = dict(solve_process.read_report(output), **solve.about(self.gathered, self.notes))
                return sc.load_result(paths["result.npz"]).q, report
            message = solve_process.error_message(folder)
            if message and status in (2, 3):
                raise (LoopInputError if status == 2 else LoopSolveError)(message)
            raise LoopSolveError(f"the solver process stopped unexpectedly (exit status {status}); "
                                 "see the system console")
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _stop_child(self):
        """Make sure the child has ended (terminate, then kill) and close its pipes."""
        with self._child_lock:
            child, self._child = self._child, None
        if child is None:
            return
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(5)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        for pipe in (child.stdin, child.stdout):
            try:
                pipe.close()
            except OSError:
                pass
