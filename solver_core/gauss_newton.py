"""Gauss–Newton on the loop loss (paper Algorithm 1) with backtracking line search."""
import time

import numpy as np

from .linsolve import DirectBackend, make_backend
from .metrics import relative_residual, within_tolerance
from .residual import inertia_metric, loss, residual_steps
from .result import CANCELLED, CONVERGED, ITERATION_CAP, NO_PROGRESS, Result, halts
from .structured_solve import supports

_MAX_DAMPING_RAISES = 12  # trust-region shrinks (damping raises) per iteration before it gives up
# Levenberg–Marquardt damping, relative to the inertia metric: where it starts, where a rejected undamped step
# restarts it when none was switched off yet, and the value below which it is switched off (plain Gauss–Newton
# steps then converge quadratically on loops that can be exactly physical). Measured against starting undamped:
# a contact cloth (12 frames) converged in 149 vs 285 iterations, the flag (scale 0.25) reached 12.9 vs 13.4 in
# 60 iterations, 3-body loops from fast projection took 10-11 vs 4 iterations.
_DAMPING0, _DAMPING_RESTART, _DAMPING_OFF = 1e-3, 1e-4, 1e-6
# A run of the structured solve given no damping starts at _DAMPING_START times the median of diag(J^T B J) /
# D, at least _DAMPING0 (``starting_damping``): D is a free particle's diagonal, so stiff materials start
# damped in proportion (medians: N bodies 1, the paper's scenes at scale 0.25 80-1,200, the 150-vertex Blender
# flag 6.1e5). From 1e-3 a stiff cloth's first step was rejected 4-5 times while the damping climbed to ~1-30:
# the undamped step predicts the whole loss away but moves soft modes far beyond the linearization (that flag
# from its crossfade: rho -911 at lambda 1e-3, 0.33 at 4, 0.89 at 1,000, where the model still predicts 98% of
# the loss), and each of PCG's trials at a low damping runs long: the 32 x 32-quad Blender square's first
# iteration took 346 s of CPU from 1e-3 and 83 s from here, and its loss was 4.8 after 717 s (10 iterations)
# where from 1e-3 it was 64 after 695 s (7 iterations). The start lies just below the least damping accepted:
# 1e-5 (above it) took the square's first step as well, but its damping then stayed ~10x higher and square16
# (16 x 16 quads, 50 frames) reached loss 2.40 after 30 iterations against 1.51 from 1e-3; 1e-6 reached 1.55.
# The direct solves keep 1e-3: their trials cost a factorization whatever the damping, and on the README's
# 70-vertex flag the scaled start (0.30) led to another loop, of lower loss (1.52 against 3.97) but with its
# wrap seen (velocity jump 2.11x the median against 1.19x).
_DAMPING_START = 1e-6
# An undamped step that is rejected restarts the damping from the value it was switched off at, not from 1e-4
# (_DAMPING_RESTART): on N bodies (4 and 5 bodies, seeds 1-10) the undamped step failed every fifth iteration and
# the restart at 1e-4 (80x the damping that had just worked) cost four iterations of tiny steps each time:
# Gauss–Newton iterations 2,582 -> 1,836, seamless loops 4 -> 5, no final loss higher. A step rejected at a damping
# above zero raises it by the growing factor (x2, x4, ...) from there, without a floor (before: any rejection below
# 1e-4 jumped to 1e-4). The wobbly bar at scale 1 crawled in 4-iteration cycles: lambda fell 1e-4 -> 1.2e-6 by
# thirds with rho ~1, the undamped step was rejected, and the restart's next rejection lifted it to 1e-4 again,
# where steps were 30x shorter; its Gauss–Newton took 125 -> 72 iterations (738 -> 567 s of CPU) to the same loop; 5
# bodies seed 3 (100 frames, from the closed forward clip) 39 -> 32 iterations, loss 7,222 -> 4,234; the doughnut at
# scale 1 80 -> 86 (loss 529.0 -> 526.3).
_ACCEPT = 1e-4            # a step is taken when the loss falls by this fraction of the model's prediction
# A run whose loss falls linearly (a steady crawl: each iteration a fixed fraction of the one before) has
# converged when the rest of that geometric series, estimated from the decreases over the last windows of
# this many iterations (``remaining``), is below FTOL of the loss; a per-iteration tolerance of 1e-6 is
# never met by such a tail. Measured on the swinging cloth from its crossfade (scale 0.25; Gauss–Newton
# without this rule reaches 0.809 / 0.775 / 0.765 after 300 / 426 / 600 iterations, the decrease shrinking
# and growing again): FTOL 1e-2 stops at 337 (loss 0.791), 3e-3 at 426 (0.775), 1e-3 not within 600;
# at scale 0.18, 154 -> 115 iterations (1e-3) for a loss 0.04% higher. A crawl can speed up again, so the
# run stops only if the undamped Gauss–Newton model, at the next linearization, also predicts less than FTOL
# of the loss: 4 bodies seed 4 from fast projection (soft phase) settled at 176 iterations while the model
# still predicted 4.6% (without the rule the loss fell 13% more, to the tolerance's stop at 326, where the
# model predicted 0.001%); the swinging cloth
# at scale 0.18 settled at 113 with the model predicting 0.02% (300 more iterations: 0.06% lower), at 0.25
# at 377 with 0.22% (300 more: 0.21% lower); both stop there as before.
WINDOW, FTOL = 10, 3e-3
# On a model whose laws switch (not ``Model.smooth``: Blender cloth) the run stops when each of the last
# KINK_WINDOW iterations took its step only after a rejected one and together they lowered the loss by less
# than FTOL of it (``at_a_switch``): the trust region is shrinking onto a switch the Gauss–Newton model does not
# see, lambda climbing ~8/3 per iteration. The 150-vertex flag (bench_blender_cloth.py, from its crossfade) went
# on from there for 6 (CHOLMOD) and 8 (structured) iterations to lambda ~1e10, lowering the loss by 0.1-0.2%.
KINK_WINDOW = 3
# Geodesic acceleration (Transtrum & Sethna 2012; GSL's "lmaccel"): the step v + a/2 with
# a = -(J^T B J + lambda D)^-1 J^T B r_vv, r_vv the residual's second directional derivative along v by central
# differences of step ACCEL_H |v|, tried when 2 |a| / |v| (mass norm) <= ACCEL_MAX, and v alone when that is
# rejected or the ratio larger (one more residual, no solve; on contact and ribbons it cut rejections).
ACCEL_MAX, ACCEL_H = 0.75, 0.1
# The acceleration costs two residuals and a solve per trial. After ACCEL_IDLE trials in a row where it was far
# from use (2 |a| / |v| above ACCEL_FAR or below ACCEL_NEGLIGIBLE: a step it would never take, or the same step
# as v's) it is skipped for 2, then 4, 8, ... trials between single tries, until one is near use again: the
# 150-vertex Blender flag never took it (ratio 7.8-361, then ~1e-8 at lambda 1e6-1e10) and spent 34 s of
# its 136 s computing it. Ratios just above ACCEL_MAX and rejected accelerated steps do not count: skipping
# there changed the swinging cloth's path (scale 0.25: 212 -> 821 iterations to the same loss).
ACCEL_IDLE, ACCEL_NEGLIGIBLE, ACCEL_FAR = 3, 1e-3, 5.0
# On a model whose laws switch (not ``Model.smooth``: Blender cloth, whose springs change stiffness and damping
# at their rest length) central differences over 0.1 |v| cross the switches and r_vv is noise; they take
# ACCEL_H_SWITCHING |v|. Square16 (16 x 16-quad Blender square, 50 frames, CHOLMOD) after 5 iterations from
# its cache's crossfade: |r_vv| 70 / 683 / 18.3 / 18.3 at 0.1 / 0.01 / 0.003 / 0.001 |v|; from loss 17.3 the
# step v reached 16.2, v + a/2 260 with a from 0.1 |v| (its accelerated trials were rejected on every
# iteration, as on the 150-vertex flag) and 4.28 with a from 0.001 |v|. There only the structured solve takes
# it: without it the structured solve stalls on small Blender cloths (40 iterations: 4 x 4 quads loss 230 without
# it or with 0.1 |v|, 1.90 with 0.001 |v|; 6 x 6: 17,185 / 8,104 / 4,203), the direct solves do not (1.98 -
# 2.20 and ~11,363 whichever) and there it costs: the 150-vertex flag (CHOLMOD) took 29 iterations and 143 s of
# CPU to loss 311.0 with it, 26 and 106 s to 328.4 (the same loop as before) without.
ACCEL_H_SWITCHING = 1e-3
# An inexact direction counts as failed (Gauss–Newton tightens its solve, then "auto" switches to the direct
# one) when the trust region rejected its first step and the direction itself is suspect: its solve stopped at
# its cap short of its tolerance (``truncated``), or the model predicts no decrease along it (no PCG iterate of
# the damped system can). A first step rejected on a solved direction is Levenberg–Marquardt finding its
# damping, which a tighter solve does not change: square16 from its cache's crossfade (20 iterations, CPU)
# took 197 s to loss 2.098 when any rejected first step tightened it, 120 s to 1.877 with this rule.
# "auto" uses the direct solve while CHOLMOD's factor is estimated to hold at most this many nonzeros (~2 GB with
# its workspace), else the structured solve. The factor of the loop's Gauss–Newton matrix (banded in time, closed
# at the wrap; AMD ordering) holds about FACTOR_FILL x (unknowns) x (unknowns of one step) nonzeros: from the
# measured peaks of the flag post (176 vertices x 100 frames), the doughnut (294 x 60), the swinging cloth (121 x
# 200: 1.17 GB) and the wobbly bar (128 x 250: 1.62 GB), 1.5-2.2 (FACTOR_FILL takes the largest). Whole make_loop
# runs at the paper's size (sessions 14 and 15, both solves side by side or on the same machine), every one faster
# with the direct solve: the doughnut (36,192 free unknowns) 2,247 s and 8 + 160 iterations structured against 510
# s and 8 + 80 with CHOLMOD; the twisting bar (32,928) 280 s and 9 + 72 against 197 s and 9 + 47; the flag at
# scale 0.75 (26,937) at ~540 s of CPU, 21 iterations to loss 5.52 against 208 to 2.07; after the same fast
# projection, a Gauss–Newton iteration of the swinging cloth (72,600) ~70 s of CPU against ~3.5 (loss 7,439 after
# 410 s of CPU against 0.59), of the flag (52,200) 12-48 s against 3.5-4, of the wobbly bar (96,000) ~5-6.5 s
# against ~3.7 (loss 3.30 after 448 s of CPU against 3.13 after 416 s); the ribbons (68,796) from the crossfade:
# 25 iterations in 75 s of CPU to loss 1.26e4 (from 2.0e9) with CHOLMOD, no decrease in 16 iterations (141 s)
# structured. (Before: the structured solve from 40,000 free unknowns; at 15,000, set from the time per step
# alone, before the direct solve's OpenBLAS and AMD ordering.)
FACTOR_FILL = 2.2
AUTO_DIRECT_MAX_FACTOR_NONZEROS = 130e6
# Problems with velocity terms (Blender cloth) take the structured solve from this many unknowns: on the README's
# flag (17,766 unknowns, crossfade start) CHOLMOD reached loss 2.9e4 in 3 steps, the structured solve stalled at
# 6.3e4 after 12 (its 60-iteration PCG cap was reached at every step); at 108k unknowns CHOLMOD needs ~10 GB. At
# 60k CHOLMOD's estimated peak (solver_core.memory) is ~1.2 GB for a 150-vertex cloth. Re-measured with the frame
# blocks (soft first frames) on bench_blender_cloth's 150-vertex flag as bake.py gathers it (20,160 unknowns, from
# the cache's crossfade, CPU seconds): both at loss ~1,000 after 12 steps in 59-64 s, then CHOLMOD converged
# (328.40 after 24 steps, 119 s) while the structured solve's next step alone took 100 s, raising the damping to
# 7,900.
AUTO_STRUCTURED_MIN_UNKNOWNS_VELOCITY = 60_000


# Gauss–Newton's stop reasons as result status codes
STATUS = dict(tol=CONVERGED, step_tol=CONVERGED, physics_tol=CONVERGED, max_iters=ITERATION_CAP,
              no_progress=NO_PROGRESS, cancelled=CANCELLED)


def factor_nonzeros(n_unknowns, n_steps):
    """CHOLMOD's estimated factor nonzeros for a loop of ``n_unknowns`` over ``n_steps`` solver steps."""
    return FACTOR_FILL * n_unknowns * (n_unknowns / max(n_steps, 1))


def auto_structured(n_unknowns, n_steps, velocity_terms=False):
    """Whether "auto" takes the structured solve for a loop of this size: where the direct solve's factor
    is estimated above AUTO_DIRECT_MAX_FACTOR_NONZEROS (with velocity terms, Blender cloth: from
    AUTO_STRUCTURED_MIN_UNKNOWNS_VELOCITY unknowns)."""
    if velocity_terms:
        return n_unknowns >= AUTO_STRUCTURED_MIN_UNKNOWNS_VELOCITY
    return factor_nonzeros(n_unknowns, n_steps) > AUTO_DIRECT_MAX_FACTOR_NONZEROS


def choose_backend(prob, name="auto"):
    """The one place that picks a backend: what "auto" means for ``prob``: "structured" where it applies
    and the direct solve's factor would be large (``auto_structured``), else the direct solve ("auto" of
    ``make_backend``). Other names pass through."""
    if name == "auto" and supports(prob) is None and auto_structured(
            int(prob.free_mask().sum()), prob.n_steps, prob.model.velocity_terms):
        return "structured"
    return name


def model_decrease(g, d, apply_h):
    """The decrease -(g.d + d.Hd / 2) that the Gauss–Newton model predicts for the step d."""
    return -(float(g @ d) + 0.5 * float(d @ apply_h(d)))


def at_a_switch(history, ftol=FTOL, window=KINK_WINDOW):
    """Whether the last ``window`` iterations of ``history`` (Gauss–Newton's per-iteration dicts) each took their
    step after a rejected one and together lowered the loss by at most ``ftol`` of it."""
    if len(history) < window + 1:
        return False
    start, end = history[-window - 1]["loss"], history[-1]["loss"]
    return all(h["rejected"] > 0 for h in history[-window:]) and start - end <= ftol * end


def remaining(losses, window=WINDOW):
    """The loss decrease still to come when the per-iteration decreases shrink geometrically: from the
    decreases d1..d4 over the last four windows of ``window`` iterations, d4 c / (1 - c) with c the largest
    ratio of consecutive ones (the slowest shrinking seen). inf while there are fewer than four windows, a
    window's decrease does not shrink, or the last window still lowered the loss by more than 1% (a fast
    fall that just ended looks like a shrinking series: the swinging cloth from the crossfade fell from 322
    to 26 in 3 iterations and then by 1-2% per iteration)."""
    if len(losses) < 4 * window + 1:
        return np.inf
    ends = np.asarray(losses[-4 * window - 1::window])
    d = ends[:-1] - ends[1:]
    if d[-1] > 0.01 * ends[-1] or not np.all((d[1:] >= 0) & (d[1:] < d[:-1])):
        return np.inf
    c = float(np.max(d[1:] / d[:-1]))
    return d[-1] * c / (1 - c)


class _AccelerationSchedule:
    """When Gauss–Newton computes the geodesic acceleration: at every trial until ACCEL_IDLE trials in a row
    were far from use, then once after skipping 2, 4, 8, ... trials, at every trial again once one is near use."""

    def __init__(self):
        self.idle = 0     # trials in a row in which the acceleration was far from use
        self.wait = 0     # trials still to skip
        self.skip = 1     # half the length of the next skip

    def due(self):
        """Whether this trial computes the acceleration (a skipped one counts down the wait)."""
        if self.wait:
            self.wait -= 1
            return False
        return True

    def record(self, ratio, taken):
        """The computed acceleration's ratio 2 |a| / |v| and whether the step taken was the accelerated one."""
        if taken or ACCEL_NEGLIGIBLE <= ratio <= ACCEL_FAR:
            self.idle, self.skip = 0, 1
            return
        self.idle += 1
        if self.idle >= ACCEL_IDLE:
            self.skip *= 2
            self.wait = self.skip


class GaussNewton:
    """Minimizes ``loss(prob, q)`` over the free unknowns of ``prob`` by Levenberg–Marquardt.

    Each direction solves (J^T B J + lambda D) d = -g, with D the damping metric (``residual.damping_metric``:
    the inertia part of the Gauss–Newton diagonal, 6 m / h^3 per coordinate, isotropic in the mass norm, plus
    the smoothing Laplacian of the model's mesh, which damps rough steps more than smooth ones), and is taken
    when the loss falls by at least a fraction of the quadratic model's prediction. lambda follows the ratio
    rho of actual to predicted decrease (Nielsen's rule: shrunk after good steps, doubled with a growing
    factor after rejected ones), a trust region in that metric. Measured on the flag at scale 0.25
    from its forward simulation (exact solves, 100 iterations): loss 8.56 with the inertia metric, 21.3 with
    Marquardt's diag(H) and 10.8 with the earlier line search and diag(H) damping.

    One instance keeps its backend (linsolve's protocol: direct or structured, and so a symbolic
    factorization) for all its iterations. When an inexact direction stalls, Gauss–Newton asks it to
    ``tighten()``; once it cannot, "auto" switches to the direct solve (``switched`` records the
    iteration). ``run`` returns a ``Result``; ``history`` lists per-iteration dicts with iteration, loss,
    damping, rho, step_norm, grad_norm, rejected (the trial steps rejected before the one taken),
    accel_ratio (2 |a| / |v| of the geodesic acceleration, inf when none), accelerated (the step taken was
    the accelerated one), seconds, backend and, when ``run`` has a ``physics_tol``, residual (the mean
    relative residual, ``metrics.relative_residual``).

    ``accelerate``: each trial step is the geodesic-accelerated v + a/2 (``ACCEL_MAX``) before v alone,
    skipped for a while where it is far from use (``ACCEL_IDLE``); on a model that is not ``smooth`` only
    by the structured solve (ACCEL_H_SWITCHING).
    """

    def __init__(self, prob, backend="auto", accelerate=True, options=None):
        self.prob = prob
        self.options = options      # stored only: the Gauss–Newton owner's change reads it
        self.auto = backend == "auto"
        self.accelerate = accelerate
        self.metric = inertia_metric(prob)
        self._use(make_backend(choose_backend(prob, backend)))
        self.history = []
        self.switched = None

    def _use(self, backend):
        self.backend = backend
        backend.bind(self.prob)

    @property
    def accelerating(self):
        """Whether trial steps try the geodesic acceleration now: asked for, and on a model that is not
        ``smooth`` only with the structured solve (ACCEL_H_SWITCHING)."""
        return self.accelerate and (self.prob.model.smooth or self.problem_aware)

    @property
    def problem_aware(self):
        """True when the backend never assembles the Gauss–Newton matrix (the structured solve)."""
        return not isinstance(self.backend, DirectBackend)

    def _recover(self, iteration, switch):
        """After an inexact direction converged or failed: True if the inexact solve was tightened
        or, with ``switch`` (the direction failed), "auto" switched to the direct solve."""
        if not self.backend.inexact:
            return False
        if self.backend.tighten():
            return True
        if switch and self.auto:
            self._use(make_backend("auto"))
            self.switched = iteration
            return True
        return False

    @property
    def jac(self):
        """The direct backend's residual Jacobian."""
        return self.backend.jac

    def system(self, q):
        """(H, g) of the direct backend at q (see ``DirectBackend.system``)."""
        return self.backend.system(q)

    def direction(self, H, g, damping=0.0):
        """The direct backend's step for (H, g) (see ``DirectBackend.solve_system``)."""
        return self.backend.solve_system(H, g, damping)

    def starting_damping(self):
        """The damping a run of the structured solve starts at when given none, at the backend's first
        linearization: _DAMPING_START times the median of diag(J^T B J) against the inertia metric, at least
        _DAMPING0."""
        return max(_DAMPING0, _DAMPING_START * float(np.median(self.backend.diagonal() / self.metric)))

    def _moved(self, q, d, free):
        """q with d added to its free unknowns."""
        moved = q.ravel().copy()
        moved[free] += d
        return moved.reshape(q.shape)

    def acceleration(self, q, u, v, damping, free):
        """The geodesic acceleration a = -(J^T B J + damping D)^-1 J^T B r_vv along the velocity v (the step
        at q, residual u, on the ``free`` flat unknowns), r_vv by central differences; None where a shifted
        residual is not finite."""
        h = ACCEL_H if self.prob.model.smooth else ACCEL_H_SWITCHING
        sides = [self._moved(q, s * h * v, free) for s in (1, -1)]
        if not all(np.all(np.isfinite(x)) for x in sides):
            return None
        u_vv = (residual_steps(self.prob, sides[0]) - 2 * u + residual_steps(self.prob, sides[1])) / h ** 2
        if not np.all(np.isfinite(u_vv)):
            return None
        backend = self.backend   # a solve for another right-hand side says nothing of the direction's own
        flags = backend.inexact, backend.truncated
        a = backend.direction(backend.residual_gradient(u_vv), damping)
        backend.inexact, backend.truncated = flags
        return a

    def _trial(self, q, d, free):
        """(trial iterate, its loss, its residual (None if not finite)); the residual of an accepted trial is
        the next linearization's."""
        trial = self._moved(q, d, free)
        if not np.all(np.isfinite(trial)):
            return trial, np.inf, None
        u = residual_steps(self.prob, trial)
        return trial, loss(self.prob, trial, u=u), u

    def run(self, q0, max_iters=100, tol=1e-8, step_tol=1e-12, callback=None, phase="gauss_newton",
            damping=None, ftol=FTOL, physics_tol=0.0):
        """Iterate from ``q0`` (n_steps, n, 3) until the relative loss decrease, or the decrease the
        undamped model still predicts, is below ``tol``; the decrease still to come (``remaining``) and then
        the undamped model's prediction are below ``ftol`` of the loss; the step is below ``step_tol``
        relative to |q|; the iterate (``q0`` too) is seamless with a mean relative residual at most
        ``physics_tol`` (``metrics.within_tolerance``; 0 never); or ``max_iters``. ``stop_reason`` says
        which ("tol", "step_tol", "physics_tol", "max_iters", "no_progress", "cancelled"). Returns a
        ``Result`` whose ``x`` is the best iterate (the last one: the loss never increases). A
        ``callback(info)`` that ``halts`` stops after that iteration. ``damping``: lambda at the start (a
        run that goes on from another's iterate passes that run's last; None: ``starting_damping`` for the
        structured solve, _DAMPING0 for the direct ones)."""
        prob = self.prob
        q = prob.apply_constraints(prob.check_trajectory(q0, "initial guess"))
        free = np.flatnonzero(prob.free_mask())
        u = residual_steps(prob, q)
        current = loss(prob, q, u=u)
        self.history = [dict(iteration=0, loss=current, damping=0.0, rho=0.0, step_norm=0.0,
                             seconds=0.0, phase=phase)]
        self.stop_reason = "max_iters"
        self.cancelled = False
        t0 = time.perf_counter()
        lam, grow = damping, 2.0
        schedule = _AccelerationSchedule()
        restart = _DAMPING_RESTART   # the damping after a rejected undamped step (none switched off yet)
        since = 0                # the history entry from which ``remaining`` looks (after the last tightening)
        settled = False          # the last iteration settled: the undamped model decides at this linearization
        if physics_tol and within_tolerance(prob, q, physics_tol, u):
            self.stop_reason = "physics_tol"
            return self._result(q, 0.0)
        for it in range(1, max_iters + 1):
            g = self.backend.linearize(q, u)
            solve, apply_h = self.backend.direction, self.backend.apply
            if lam is None:
                lam = self.starting_damping() if self.problem_aware else _DAMPING0
            if settled:
                settled = False
                if model_decrease(g, solve(g, 0.0), apply_h) <= ftol * current:
                    self.stop_reason = "tol"
                    break
            accepted, raises, smallest_gain, suspect = None, 0, np.inf, False
            for raises in range(_MAX_DAMPING_RAISES):
                v = solve(g, lam)
                predicted = model_decrease(g, v, apply_h)
                if raises == 0:
                    suspect = predicted <= 0 or self.backend.truncated
                steps, ratio = [v], np.inf
                if self.accelerating and schedule.due():
                    a = self.acceleration(q, u, v, lam, free)
                    if a is not None:
                        ratio = 2 * np.sqrt(self.metric @ a ** 2 / max(self.metric @ v ** 2, 1e-300))
                        if ACCEL_NEGLIGIBLE <= ratio <= ACCEL_MAX:
                            steps = [v + 0.5 * a, v]
                smallest_gain = min(smallest_gain, predicted)
                for d in steps:
                    trial, value, trial_u = self._trial(q, d, free)
                    rho = (current - value) / predicted if predicted > 0 else -np.inf
                    if rho > _ACCEPT:
                        break
                if ratio < np.inf:
                    schedule.record(ratio, taken=rho > _ACCEPT and d is not v)
                if rho > _ACCEPT:
                    accepted = (trial, value, trial_u)
                    lam, grow = lam * max(1 / 3, 1 - (2 * rho - 1) ** 3), 2.0
                    if lam < _DAMPING_OFF:
                        restart, lam = (lam or restart), 0.0
                    break
                if 0 <= predicted <= tol * current:   # the model itself has nothing left to gain
                    break
                lam, grow = (lam * grow if lam else restart), 2 * grow
            if accepted is None:
                if self._recover(it, switch=True):
                    lam, grow = None, 2.0   # as at the start of a run
                    continue
                self.stop_reason = "tol" if 0 <= smallest_gain <= tol * current else "no_progress"
                break
            step_norm = float(np.linalg.norm(d))
            flat = q.ravel()
            previous, (q, current, u) = current, accepted
            self.history.append(dict(iteration=it, loss=current, damping=lam, rho=rho, step_norm=step_norm,
                                     grad_norm=float(np.linalg.norm(g)), rejected=raises, accel_ratio=ratio,
                                     accelerated=d is not v,
                                     seconds=time.perf_counter() - t0, phase=phase, backend=self.backend.name))
            if physics_tol:   # the progress bar's estimate reads it
                self.history[-1]["residual"] = float(relative_residual(prob, q, u).mean())
            if halts(callback, dict(self.history[-1])):
                self.cancelled = True
                self.stop_reason = "cancelled"
                break
            if physics_tol and within_tolerance(prob, q, physics_tol, residual=self.history[-1]["residual"]):
                self.stop_reason = "physics_tol"
                break
            failed = raises > 0 and suspect   # the trust region rejected a suspect direction at first
            small = previous - current <= tol * previous
            # "auto" leaves a stalled inexact solve for the direct one: from the flag's forward clip with its
            # closure blended in (scale 0.16) PCG hit its cap on directions holding 3e-7 of the model decrease
            if (failed or small) and self._recover(it, switch=True):
                since = len(self.history) - 1
                continue
            settled = remaining([h["loss"] for h in self.history[since:]]) <= ftol * current
            if settled and self._recover(it, switch=False):   # an inexact solve may crawl: tighten it first
                since, settled = len(self.history) - 1, False
                continue
            if small or (not prob.model.smooth and at_a_switch(self.history[since:], ftol)):
                self.stop_reason = "tol"
                break
            if step_norm <= step_tol * max(np.linalg.norm(flat), 1e-300):
                self.stop_reason = "step_tol"
                break
        return self._result(q, time.perf_counter() - t0)

    def _result(self, q, seconds):
        """The Result of the run that ended at q."""
        status = STATUS[self.stop_reason]
        return Result(x=q, status=status, success=status == CONVERGED, message=self.stop_reason,
                      nit=len(self.history) - 1, history=list(self.history), seconds=seconds,
                      stop_reason=self.stop_reason, cancelled=self.cancelled, switched=self.switched)
