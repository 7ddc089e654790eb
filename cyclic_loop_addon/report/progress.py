"""Progress of one Make Loop or bake in words: the phase, a percentage that only moves forward and never
jumps, the time elapsed and an estimate of the time left. No bpy: the panel, the status bar and bake.py
print the same figures. The solver's own counts (fast projection's cap, the race's iterations, Gauss–Newton's
stopping rule) come from ``solver_core.options.DEFAULTS``; the fractions and the expectations below are the
bar's own (docs/design/report.md: progress).
"""
import math
import time

import numpy as np

from ..core import sc

_SOLVER = sc.DEFAULTS       # the solver's default options: the counts the bar expects
# the solver's callback phases (and the add-on's own steps around the solve) in words
PHASE_WORDS = {"gather": "Reading the simulation", "": "Starting the solver", "fast_projection": "Initial guess",
               "forward": "Simulating", "start": "Starting", "crossfade": "Crossfade", "gauss_newton": "Optimizing",
               "write": "Writing the loop"}
START_WORDS = {"cache": "from the cache", "forward": "from the simulation", "crossfade": "from a crossfade",
               "fast_projection": "from the quick loop", "closed_forward": "from the closed simulation"}
# The linear solve the child runs (its "setup" stage), in words
SOLVER_WORDS = {"cholmod": "CHOLMOD", "scipy": "SciPy (no CHOLMOD)", "structured": "structured (PCG)"}
FP_ITERATIONS = _SOLVER.fast_projection.max_iters     # fast projection's iteration cap
FTOL, KINK_WINDOW = _SOLVER.gauss_newton.ftol, _SOLVER.gauss_newton.kink_window    # Gauss–Newton's settle test
RACE_ITERATIONS = _SOLVER.start.race_iterations       # after a failed fast projection: iterations per start
RACE_FROM = _SOLVER.start.race_from                   # "cache_or_forward": the trailing run may drop from here
STARTED = 0.03          # the fraction once the simulation is read
GUESS_END = 0.35        # fast projection fills up to this fraction (it may stop early: optimizing goes on from there)
SOLVED = 0.97           # the fraction when the solve is done; writing fills the rest
MAX_MOVE = 0.1          # the most the bar moves between two looks before writing (a loaded machine looks
                        # seldom while iterations may be fast)
RATE_WINDOW = 3         # iterations over which the residual's rate towards the physics tolerance is measured
# Where the loss is known, a Gauss–Newton run is expected to take TYPICAL_ITERATIONS (the defaults' runs on
# Blender cloth take about as many) until its tail shows: once an iteration lowers the loss by less than TAIL of
# it, the run is expected to stop where that decrease, shrinking by SHRINK per iteration, falls below
# STOP_DECREASE (Gauss–Newton's own stops: FTOL over KINK_WINDOW iterations). In "cache_or_forward" the second
# run is expected to be dropped after RACE_FROM iterations (docs/design/report.md: time left).
TYPICAL_ITERATIONS = 20
TAIL, SHRINK = 0.05, 0.3
STOP_DECREASE = FTOL / KINK_WINDOW

# What a run costs before it starts, from the problem's size; the evidence for each constant is in
# benchmarks/results/panel_estimates.md.
CHILD_START = 1.5               # s: the child Python's start, its imports and reading the problem
FORWARD_STEP = 8e-5             # s per vertex x step of the solver's own simulation (Blender cloth)
DIRECT_ITERATION = {"cholmod": 4e-9, "scipy": 1.2e-8}  # s per unknown x (unknowns per step)^2 of a direct solve
STRUCTURED_ITERATION = 6e-4     # s per vertex x step of a structured (PCG) iteration (grows with the loop)
# a start's first iteration (the symbolic analysis, the set-up) costs this many iterations
FIRST_ITERATION = {"cholmod": 2.0, "scipy": 1.4, "structured": 1.2}
FAST_PROJECTION_ITERATION = 0.1  # a fast projection iteration costs this share of a Gauss–Newton one
MIN_ITERATION = 0.05            # s: the least an iteration costs (the residual, the metrics, the line search)
PRE_SHARE = 0.8                 # the most of the bar the phases before the first iteration fill
CREEP = 0.9                     # a phase measured by its time alone fills this share of itself at its estimate


def iteration_seconds(solver, unknowns, steps, vertices):
    """Estimated seconds of one Gauss–Newton iteration.

    Parameters
    ----------
    solver : str
        The linear solve: "cholmod", "scipy" or "structured".
    unknowns, steps, vertices : int
        The problem's size: its unknowns, solver steps and vertices.

    Returns
    -------
    float
        A direct solve's factorization grows with unknowns x (unknowns per step)^2 (the matrix is banded in
        time); the structured solve with vertices x steps.
    """
    if solver == "structured":
        cost = STRUCTURED_ITERATION * vertices * steps
    else:
        cost = DIRECT_ITERATION.get(solver, DIRECT_ITERATION["scipy"]) * unknowns * (unknowns / max(steps, 1)) ** 2
    return max(cost, MIN_ITERATION)


class Plan:
    """The phases of one run and the seconds each is expected to take, from the problem's size, before it
    starts: the child's start, the solver's own simulation (starts that need it), each start's first
    iteration and the iterations expected (a run's TYPICAL_ITERATIONS, a race's trailing run dropped after
    RACE_FROM; at most ``max_iters`` each).

    Parameters
    ----------
    vertices, steps, unknowns : int
        The problem's size (``unknowns`` 0: three per vertex and step).
    solver : str
        The linear solve ("cholmod", "scipy", "structured").
    init : str
        The initial guess (``solver_core.CLIP_INITS``).
    max_iters : int
        The iteration cap of each run.
    """

    def __init__(self, vertices, steps, unknowns, solver, init, max_iters):
        self.vertices, self.steps, self.solver, self.init = int(vertices), int(steps), solver, init
        self.unknowns = int(unknowns) or 3 * self.vertices * self.steps
        self.max_iters = max(int(max_iters), 1)
        self.iteration = iteration_seconds(solver, self.unknowns, self.steps, self.vertices)
        forward = FORWARD_STEP * self.vertices * self.steps
        lead = min(self.max_iters, TYPICAL_ITERATIONS)
        first = FIRST_ITERATION.get(solver, 1.0) * self.iteration
        pre = [("", CHILD_START)]
        if init in ("cache_or_forward", "forward", "crossfade"):
            pre.append(("forward", forward))
        if init == "fast_projection":
            pre.append(("fast_projection", FP_ITERATIONS * FAST_PROJECTION_ITERATION * self.iteration))
        pre.append(("start", first))
        self.pre = pre
        # after the first: the lead's other iterations and a race's trailing run (its start's analysis is shared)
        self.iterations = lead - 1 + (min(self.max_iters, RACE_FROM) if init == "cache_or_forward" else 0)

    @property
    def pre_seconds(self):
        """Seconds before the first iteration has been made."""
        return sum(seconds for _, seconds in self.pre)

    @property
    def seconds(self):
        """Seconds of the whole run."""
        return self.pre_seconds + self.iterations * self.iteration

    def words(self):
        """"about 4 min with CHOLMOD" (the panel's line before a run)."""
        return f"{about(self.seconds)} with {SOLVER_WORDS.get(self.solver, self.solver)}"


def words(phase):
    """The phase's name for an artist."""
    return PHASE_WORDS.get(phase, phase.replace("_", " ").capitalize())


def duration(seconds):
    """12 s, 3 min 05 s, 1 h 02 min."""
    seconds = int(round(max(seconds, 0.0)))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def about(seconds):
    """A rounded estimate: under a minute, about 3 min, about 1 h 10 min."""
    if seconds < 60:
        return "under a minute"
    if seconds < 3600:
        return f"about {int(round(seconds / 60))} min"
    return f"about {int(seconds // 3600)} h {int(round(seconds % 3600 / 60)):02d} min"


class Progress:
    """The progress of one run with up to ``max_iters`` optimizing iterations after an initial guess (fast
    projection counts up to FP_ITERATIONS iterations; the other guesses are instant). After fast
    projection the optimizing budget includes the race of make_loop's fallback (RACE_ITERATIONS from a
    second guess), whose iterations the solver counts on. ``init`` "cache_or_forward" makes two runs
    (``solver_core.clip_loop.runs``), counted on as one.

    ``update(phase, iteration, residual)`` after each solver callback. Each phase fills its own share from
    where the previous one stopped, so a fast projection that gives up early moves on without a jump, and
    between callbacks ``shown`` moves on at the iterations' own pace; the time left is that pace times
    the iterations ``expected`` still (the budget's, or fewer where the residual is on course to
    ``physics_tol``: Gauss–Newton stops there)."""

    def __init__(self, max_iters, init="", clock=time.monotonic, physics_tol=sc.PHYSICS_TOL, plan=None):
        self.plan = plan                            # Plan: the phases' seconds before they start (None: not known)
        self.scale = 1.0                            # measured over estimated seconds of the phases done so far
        self.solver = plan.solver if plan is not None else ""   # the linear solve (the child's "setup" says)
        self.start = None                           # (start name, index, starts) of the race's run that is on
        self._pre = {}                              # pre-iteration phase -> (began at, estimate, share done or None)
        self._pre_done = 0.0                        # estimated seconds of the pre-iteration phases done
        self._iterating = False                     # the first Gauss–Newton iteration has come
        self._started_at_iteration = 0              # the iteration after which the race's current run began
        self.runs = sc.clip_loop.runs(init)
        self.max_iters = max(int(max_iters), 1) * self.runs
        self.physics_tol = float(physics_tol)
        self._residuals = []                        # (iteration, mean relative residual) of the current run
        self._losses = []                           # (iteration, loss) of the current run
        self._run = (0, 0)                          # (runs started before the current one, iteration it began after)
        self.clock = clock
        self.started = clock()
        self.phase = "gather"
        self.iteration = 0
        self.fraction = 0.0
        self._phase_start = (self.started, 0.0)     # (time, fraction) when the phase began
        self._first_iteration = None                # (time, iteration) of the phase's first callback
        self._last = (self.started, 0.0)            # (time, fraction) of the last callback
        self._shown = 0.0
        self._shown_at = (self.started, None)      # (time, the phase's start) when ``shown`` was last asked
        self.budget = self.max_iters                # optimizing iterations at most (``expected``: as foreseen)

    def update(self, phase, iteration=0, residual=None, loss=None):
        """Record the solver's (or the add-on's) phase, iteration and, while optimizing, the loop's mean
        relative residual and loss (a loss above the last one starts the next Gauss–Newton run: a run's loss
        never rises); returns the fraction done."""
        now = self.clock()
        if phase == "gauss_newton" and not self._iterating:
            self._iterating = True
            self._measure_first(now)
        if phase != self.phase:
            if self.phase == "fast_projection":
                self.budget = self.max_iters + min(RACE_ITERATIONS, self.max_iters)
            if self.plan is not None and (not self._iterating or self._pre):
                self._pre_step(phase, now)
                self.fraction = max(self.fraction, self._shown)     # the next phase goes on from what was shown
            self.phase = phase
            self._phase_start, self._first_iteration = (now, self.fraction), None
        self.iteration = int(iteration)
        if self._first_iteration is None and phase in ("fast_projection", "gauss_newton"):
            self._first_iteration = (now, self.iteration)
        lo = self._phase_start[1]
        if phase == "fast_projection" and self.plan is not None:
            self._pre[phase] = (*self._pre[phase][:2], min(self.iteration / FP_ITERATIONS, 1.0))
            target = self._pre_fraction(now)
        elif phase == "fast_projection":
            share = min(self.iteration / FP_ITERATIONS, 1.0)
            target = lo + (max(GUESS_END, lo) - lo) * share
        elif phase == "gauss_newton":
            if loss is not None:
                if self._losses and loss > self._losses[-1][1]:
                    self._run, self._losses, self._residuals = (self._run[0] + 1, self._losses[-1][0]), [], []
                self._losses.append((self.iteration, float(loss)))
            if residual is not None:
                self._residuals.append((self.iteration, float(residual)))
            target = lo + (max(SOLVED, lo) - lo) * min(self.iteration / self.expected, 1.0)
        elif phase == "write":
            target = max(SOLVED, lo)
        elif phase == "gather":
            target = 0.0
        elif self.plan is not None and not self._iterating:
            target = max(STARTED, self._pre_fraction(now))
        else:
            target = max(STARTED, lo)
        self.fraction = min(max(self.fraction, target), 1.0)
        self._last = (now, self.fraction)
        return self.fraction

    def take(self, info):
        """``update`` from a solver callback's dict (phase, iteration, and residual and loss where given), or
        ``stage`` from a stage's (``solver_core.loop_clip``: the work before the iterations)."""
        if info.get("stage"):
            return self.stage(info)
        return self.update(info["phase"], info["iteration"], info.get("residual"), info.get("loss"))

    def stage(self, info):
        """Record a stage of the solver before (or between) its iterations: "setup" (the linear solve and the
        problem's exact size: the plan is made again from them), "forward" (``done`` of ``of`` steps of its own
        simulation) or "start" (a race's run begins: ``name``, ``index`` of ``starts``); returns the fraction
        done."""
        now, phase = self.clock(), info["phase"]
        if phase == "setup":
            self.solver = info.get("solver", self.solver)
            if self.plan is not None and "unknowns" in info:
                self.plan = Plan(info["vertices"], info["steps"], info["unknowns"], self.solver, self.plan.init,
                                 self.plan.max_iters)
            return self.update("", self.iteration)
        if phase == "start":
            self.start = (info["name"], int(info["index"]), int(info["starts"]))
            self._started_at_iteration = self.iteration
            if self._iterating:         # a later run of the race: the iterations' own count goes on
                return self.fraction
            return self.update("start", self.iteration)
        if phase == "forward":
            if self.phase != "forward":
                self.update("forward", self.iteration)
            if self.plan is not None:
                began, estimate, _ = self._pre["forward"]
                share = float(info["done"]) / max(float(info["of"]), 1.0)
                self._pre["forward"] = (began, estimate, share)
                if share >= 1.0 and estimate > 0:
                    self._rescale(now - began, estimate)
            return self.update("forward", self.iteration)
        return self.update(phase, self.iteration)

    def _estimates(self):
        """{pre-iteration phase: its estimated seconds} of the plan."""
        return dict(self.plan.pre)

    def _pre_step(self, phase, now):
        """The pre-iteration phase before ``phase`` is over; ``phase`` (when it is one) begins."""
        estimates = self._estimates()
        if self.phase in self._pre:
            self._pre_done += estimates.get(self.phase, 0.0)
            del self._pre[self.phase]
        if phase in estimates:
            self._pre[phase] = (now, estimates[phase], None)

    def _rescale(self, seconds, estimate):
        """Refine the estimates by a phase that took ``seconds`` where ``estimate`` was expected."""
        self.scale = min(max(seconds / estimate, 0.25), 4.0)

    def _measure_first(self, now):
        """The first iteration has come: the time since its run's start refines the iterations' estimate."""
        if self.plan is not None and "start" in self._pre:
            self._rescale(now - self._pre["start"][0], self._estimates()["start"])

    def _pre_share(self, now):
        """The share of the pre-iteration work done by ``now`` (estimated seconds done over all of them):
        a phase with a measure of its work (the simulation's steps, fast projection's iterations) by it, the
        others by their time against their estimate, at most CREEP of it."""
        total = self.plan.pre_seconds
        done = self._pre_done
        for began, estimate, share in self._pre.values():
            if share is None:   # by time: towards CREEP of the phase at its estimate, on after it, never to the end
                share = 1.0 - math.exp(-(now - began) / max(estimate * self.scale, 1e-9) * -math.log(1.0 - CREEP))
            done += share * estimate
        return min(done / max(total, 1e-9), 1.0)

    def _pre_fraction(self, now):
        """Where the bar stands in the pre-iteration phases by ``now``."""
        end = STARTED + (SOLVED - STARTED) * min(self.plan.pre_seconds / max(self.plan.seconds, 1e-9), PRE_SHARE)
        return STARTED + (end - STARTED) * self._pre_share(now)

    @property
    def expected(self):
        """Optimizing iterations expected in all: the budget, or fewer where the run's own figures say where it
        stops: its loss (``_end_by_loss``; TYPICAL_ITERATIONS until its tail shows, then the tail's length, and
        RACE_FROM more for the dropped second run of "cache_or_forward"), or its residual falling towards the
        physics tolerance or within it (``_end_by_residual``; the solver stops there when the wrap cannot be
        seen: at most one more)."""
        known = [end for end in (self._end_by_loss(), self._end_by_residual()) if end is not None]
        if not known:
            return self.budget
        return min(self.budget, max(min(known), self.iteration + 1))

    def _end_by_loss(self):
        """The iteration at which the losses say the runs end (None without a loss)."""
        if not self._losses:
            return None
        runs_before, start = self._run
        i, now = self._losses[-1]
        end = start + (TYPICAL_ITERATIONS if runs_before == 0 else RACE_FROM)
        if len(self._losses) > 1:
            decrease = (self._losses[-2][1] - now) / max(now, 1e-300)
            left = 1 if decrease <= STOP_DECREASE else math.ceil(math.log(STOP_DECREASE / decrease) / math.log(SHRINK))
            end = i + left if decrease < TAIL else max(i + left, end)
        if runs_before + 1 < self.runs:
            end += RACE_FROM
        return end

    def _end_by_residual(self):
        """The iteration at which the residual reaches the physics tolerance at the slowest of its rates over the
        last RATE_WINDOW iterations (it slows down as it levels off); None when it does not tell (no tolerance, too
        few iterations, not falling, or within the tolerance while the run goes on: its wrap is seen)."""
        if not self.physics_tol or len(self._residuals) <= RATE_WINDOW:
            return None
        window = np.array(self._residuals[-1 - RATE_WINDOW:])
        i1, r1 = window[-1]
        if r1 <= self.physics_tol:
            return int(i1) + 1 if window[0, 1] > self.physics_tol else None
        rate = np.max((window[1:, 1] / window[:-1, 1]) ** (1.0 / np.diff(window[:, 0])))
        if not rate < 1:
            return None
        return int(i1) + max(math.ceil(math.log(self.physics_tol / r1) / math.log(rate)), 1)

    @property
    def step(self):
        """The fraction one iteration of the current phase adds."""
        lo = self._phase_start[1]
        if self.phase == "gauss_newton":
            return (max(SOLVED, lo) - lo) / self.expected
        if self.phase == "fast_projection":
            return (max(GUESS_END, lo) - lo) / FP_ITERATIONS
        return 0.0

    @property
    def pace(self):
        """Seconds per iteration of the current phase so far (None before two callbacks)."""
        if self._first_iteration is None:
            return None
        t0, i0 = self._first_iteration
        return (self._last[0] - t0) / (self.iteration - i0) if self.iteration > i0 else None

    @property
    def _planned_pace(self):
        """Before the iterations of a run have a pace: the plan's seconds per iteration (scaled by what was
        measured), FIRST_ITERATION of them for a race's run that has just begun; None without a plan."""
        if self.plan is None or not self._iterating or self.phase != "gauss_newton":
            return None
        seconds = self.plan.iteration * self.scale
        if self.start is not None and self.start[1] > 1 and self._started_at_iteration == self.iteration:
            seconds *= FIRST_ITERATION.get(self.plan.solver, 1.0)
        return seconds

    @property
    def shown(self):
        """The fraction the last ``look()`` showed (0 before the first)."""
        return self._shown

    def look(self):
        """Move the bar on and return the fraction to show now (call once per refresh of what is shown):
        the last callback's, moved on at the iterations' pace (at most to the next iteration's), never
        less than shown before. Within a phase, iterations faster than its pace so far are caught up at that
        pace rather than in a jump: since the last look the bar moves at most one step per ``pace``
        seconds; before writing, at most MAX_MOVE between two looks."""
        now, pace, (t, fraction) = self.clock(), self.pace or self._planned_pace, self._last
        if self.plan is not None and not self._iterating and self.phase not in ("gather", "write"):
            fraction = max(fraction, self._pre_fraction(now))
        if pace:
            fraction += self.step * min((now - t) / pace, 0.9)
            shown_at, phase_start = self._shown_at
            if phase_start == self._phase_start:
                fraction = min(fraction, self._shown + self.step * (now - shown_at) / pace)
        if self.phase != "write":
            fraction = min(fraction, self._shown + MAX_MOVE)
        self._shown, self._shown_at = max(self._shown, min(fraction, 1.0)), (now, self._phase_start)
        return self._shown

    @property
    def elapsed(self):
        return self.clock() - self.started

    @property
    def seconds_left(self):
        """Estimated seconds to the iterations ``expected`` while optimizing at their pace; before the pace is
        known, the plan's (scaled by what the phases so far measured), else None."""
        pace = self.pace
        if self.phase == "gauss_newton" and pace is not None:
            return max(pace * (self.expected - self.iteration) - (self.clock() - self._last[0]), 0.0)
        if self.plan is None or self.phase == "write":
            return None
        now, plan = self.clock(), self.plan
        if self._iterating:
            return max(plan.iteration * self.scale * (self.expected - self.iteration) - (now - self._last[0]), 0.0)
        pre_left = plan.pre_seconds * (1.0 - self._pre_share(now))
        return (pre_left + plan.iterations * plan.iteration) * self.scale

    def words(self):
        """The phase's name, the race's start when it has several ("Starting from the cache (1 of 2)")."""
        text = words(self.phase)
        if self.start is not None and self.start[2] > 1 and self.phase in ("start", "gauss_newton"):
            name, index, starts = self.start
            text += f" {START_WORDS.get(name, name)} ({index} of {starts})" if self.phase == "start" \
                else f" ({index} of {starts})"
        return text

    def time_text(self):
        """"1 min 05 s elapsed · about 2 min left" (before the pace is known: "time left: estimating")."""
        left = self.seconds_left
        if self.phase == "write":
            tail = "almost done"
        elif left is None:
            tail = "time left: estimating"
        else:
            tail = f"{about(left)} left"
        return f"{duration(self.elapsed)} elapsed · {tail}"

    def headline(self):
        """"Optimizing 45%" (the percentage of the last look)."""
        return f"{self.words()} {self.shown:.0%}"

    def line(self, loss=None):
        """One line for a console (a look): phase, percentage, iteration, loss, elapsed and time left."""
        self.look()
        detail = f" · iteration {self.iteration}" if self.phase in ("fast_projection", "gauss_newton") else ""
        if loss is not None and loss == loss:
            detail += f" · loss {loss:.6g}"
        return f"{self.headline()}{detail} · {self.time_text()}"
