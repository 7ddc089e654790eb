"""A loop solve on a worker thread. No bpy here: the gathered problem comes in as numpy, progress goes
out through a queue, and the main thread polls (modal timer) or runs the job inline (background)."""
import queue
import threading
import time

from . import solve
from .solver import sc

METHODS = ("physical", "crossfade")


def crossfade_report(gathered, q, seconds):
    """The report of ``solve.report`` for a crossfade loop q (n_frames, n, 3) of the source cache."""
    prob = gathered.problem
    return dict(source=sc.loop_metrics(prob, prob.steps_of(gathered.source)),
                loop=sc.loop_metrics(prob, prob.steps_of(q)),
                fast_projection_iterations=0, gauss_newton_iterations=0, seconds=seconds,
                init_used="crossfade", fallback_reason="", stop_reason="", model=gathered.model_name,
                objects=list(gathered.object_names), frames=[gathered.frame_start, int(gathered.frames[-1])],
                n_frames=gathered.n_frames, substeps=prob.substeps, n_vertices=prob.n_vertices,
                notes=list(gathered.notes))


def progress_fraction(phase, iteration, max_iters, init):
    """Fraction done (0..1) at ``phase``/``iteration``: fast projection (at most 100 iterations, its
    default) fills the first half when it makes the initial guess, Gauss–Newton the rest."""
    fp_share = 0.5 if init == "fast_projection" else 0.0
    if phase == "fast_projection":
        return fp_share * min(iteration / 100.0, 1.0)
    if phase == "gauss_newton":
        return fp_share + (1.0 - fp_share) * min(iteration / max(max_iters, 1), 1.0)
    return 0.0


class SolveJob:
    """Make the loop of ``gathered`` (scene_io.Gathered) with ``settings`` (scene_io.LoopSettings) by
    ``method``: "physical" (solve.solve) or "crossfade" (the baseline blend of the source cache).

    Afterwards exactly one of ``q`` + ``report`` (success), ``cancelled`` or ``error`` is set.
    """

    def __init__(self, gathered, settings, method="physical"):
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        self.gathered = gathered
        self.settings = settings
        self.method = method
        self.q = None
        self.report = None
        self.cancelled = False
        self.error = None
        self._finished = threading.Event()
        self._cancel = threading.Event()
        self._progress = queue.Queue()
        self._thread = None

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
        """Ask the solver to stop after its current iteration; nothing will be written."""
        self._cancel.set()

    @property
    def cancel_requested(self):
        return self._cancel.is_set()

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
        self._progress.put(dict(phase=info["phase"], iteration=int(info["iteration"]), loss=float(info["loss"])))
        return self._cancel.is_set()

    def _solve(self):
        t0 = time.perf_counter()
        if self.method == "crossfade":
            self._callback(dict(phase="crossfade", iteration=0, loss=float("nan")))
            q = sc.crossfade_loop(self.gathered.source)
            report = crossfade_report(self.gathered, q, time.perf_counter() - t0)
        else:
            result = solve.solve(self.gathered, self.settings, callback=self._callback)
            q, report = result.q, None if result.cancelled else solve.report(self.gathered, result)
        if self._cancel.is_set():
            self.cancelled = True
        else:
            self.q, self.report = q, report
