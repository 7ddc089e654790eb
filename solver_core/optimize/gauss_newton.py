"""Gauss–Newton on the loop loss (paper Algorithm 1) as Levenberg–Marquardt with a trust region.

Every tuning value (damping, step acceptance, stopping rules, geodesic acceleration, the choice of linear
solve) comes from ``solver_core.options``: ``GaussNewtonOptions`` and ``LinearSolveOptions``; the evidence for
each is in docs/design/tuning.md under the field's name.
"""
import time

import numpy as np

from .linsolve import DirectBackend, make_backend
from ..metrics import relative_residual, within_tolerance
from ..options import DEFAULTS
from ..physics.residual import inertia_metric, loss, residual_steps
from ..result import CANCELLED, CONVERGED, ITERATION_CAP, NO_PROGRESS, Result, halts
from .structured_solve import cholmod, supports

# Gauss–Newton's stop reasons as result status codes
STATUS = dict(tol=CONVERGED, step_tol=CONVERGED, physics_tol=CONVERGED, max_iters=ITERATION_CAP,
              no_progress=NO_PROGRESS, cancelled=CANCELLED)


def factor_nonzeros(n_unknowns, n_steps, options=DEFAULTS):
    """CHOLMOD's estimated factor nonzeros for a loop of ``n_unknowns`` over ``n_steps`` solver steps.

    The loop's Gauss–Newton matrix is banded in time and closed at the wrap, so its factor (AMD ordering) holds
    about ``factor_fill`` x (unknowns) x (unknowns of one step) nonzeros (docs/design/tuning.md: factor_fill).
    """
    return options.linear_solve.factor_fill * n_unknowns * (n_unknowns / max(n_steps, 1))


def auto_structured(n_unknowns, n_steps, velocity_terms=False, options=DEFAULTS, direct="cholmod"):
    """Whether "auto" takes the structured solve for a loop of this size: where the ``direct`` solve's factor
    is estimated above its cap (``auto_direct_max_factor_nonzeros`` for CHOLMOD, the lower
    ``auto_direct_max_factor_nonzeros_scipy`` for SciPy's LU, which is slower per nonzero:
    benchmarks/results/panel_estimates.md), and with velocity terms (Blender cloth) also from
    ``auto_structured_min_unknowns_velocity`` unknowns on (``options.linear_solve``). A wide mesh over few frames
    thus never factorizes what a longer loop of it would not."""
    linear = options.linear_solve
    cap = linear.auto_direct_max_factor_nonzeros if direct == "cholmod" else linear.auto_direct_max_factor_nonzeros_scipy
    large = factor_nonzeros(n_unknowns, n_steps, options) > cap
    if velocity_terms:
        return large or n_unknowns >= linear.auto_structured_min_unknowns_velocity
    return large


def choose_backend(prob, name="auto", options=DEFAULTS):
    """The one place that picks a backend: what "auto" means for ``prob``: "structured" where it applies
    and the direct solve's factor would be large (``auto_structured`` with ``options``, for the direct solve
    this Python has: CHOLMOD or SciPy), else the direct solve ("auto" of ``make_backend``). Other names pass
    through."""
    direct = "cholmod" if cholmod is not None else "scipy"
    if name == "auto" and supports(prob) is None and auto_structured(
            int(prob.free_mask().sum()), prob.n_steps, prob.model.velocity_terms, options, direct):
        return "structured"
    return name


def solver_route(prob, name="auto", options=DEFAULTS):
    """The linear solve ``name`` runs on ``prob`` in this Python: "structured", "cholmod" or "scipy" (the
    names of ``choose_backend`` with "auto"'s direct solve resolved; another backend object: its name)."""
    name = choose_backend(prob, name, options)
    if name == "auto":
        return "cholmod" if cholmod is not None else "scipy"
    return name if isinstance(name, str) else getattr(name, "name", type(name).__name__)


def model_decrease(g, d, apply_h):
    """The decrease -(g.d + d.Hd / 2) that the Gauss–Newton model predicts for the step d."""
    return -(float(g @ d) + 0.5 * float(d @ apply_h(d)))


def at_a_switch(history, ftol=DEFAULTS.gauss_newton.ftol, window=DEFAULTS.gauss_newton.kink_window):
    """Whether the last ``window`` iterations of ``history`` (Gauss–Newton's per-iteration dicts) each took their
    step after a rejected one and together lowered the loss by at most ``ftol`` of it: on a model whose laws
    switch, the trust region is then shrinking onto a switch the Gauss–Newton model does not see."""
    if len(history) < window + 1:
        return False
    start, end = history[-window - 1]["loss"], history[-1]["loss"]
    return all(h["rejected"] > 0 for h in history[-window:]) and start - end <= ftol * end


def remaining(losses, window=DEFAULTS.gauss_newton.window):
    """The loss decrease still to come when the per-iteration decreases shrink geometrically: from the
    decreases d1..d4 over the last four windows of ``window`` iterations, d4 c / (1 - c) with c the largest
    ratio of consecutive ones (the slowest shrinking seen). inf while there are fewer than four windows, a
    window's decrease does not shrink, or the last window still lowered the loss by more than 1% (a fast
    fall that just ended looks like a shrinking series; docs/design/tuning.md: window)."""
    if len(losses) < 4 * window + 1:
        return np.inf
    ends = np.asarray(losses[-4 * window - 1::window])
    d = ends[:-1] - ends[1:]
    if d[-1] > 0.01 * ends[-1] or not np.all((d[1:] >= 0) & (d[1:] < d[:-1])):
        return np.inf
    c = float(np.max(d[1:] / d[:-1]))
    return d[-1] * c / (1 - c)


class _AccelerationSchedule:
    """When Gauss–Newton computes the geodesic acceleration: at every trial until ``accel_idle`` trials in a row
    were far from use, then once after skipping 2, 4, 8, ... trials, at every trial again once one is near use.
    Far from use: a ratio 2 |a| / |v| above ``accel_far`` (a step never taken) or below ``accel_negligible``
    (the same step as v's); ratios just above ``accel_max`` and rejected accelerated steps do not count."""

    def __init__(self, options):
        self.options = options   # GaussNewtonOptions
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
        options = self.options
        if taken or options.accel_negligible <= ratio <= options.accel_far:
            self.idle, self.skip = 0, 1
            return
        self.idle += 1
        if self.idle >= options.accel_idle:
            self.skip *= 2
            self.wait = self.skip


class GaussNewton:
    """Minimizes ``loss(prob, q)`` over the free unknowns of ``prob`` by Levenberg–Marquardt.

    Each direction solves (J^T B J + lambda D) d = -g, with D the damping metric (``residual.damping_metric``:
    the inertia part of the Gauss–Newton diagonal, 6 m / h^3 per coordinate, isotropic in the mass norm, plus
    ``smoothing`` times the graph Laplacian of the model's mesh, which damps rough steps more than smooth ones),
    and is taken when the loss falls by at least ``accept`` of the quadratic model's prediction. lambda follows
    the ratio rho of actual to predicted decrease (Nielsen's rule: shrunk after good steps, doubled with a
    growing factor after rejected ones), a trust region in that metric (docs/design/tuning.md: damping0).

    One instance keeps its backend (linsolve's protocol: direct or structured, and so a symbolic
    factorization) for all its iterations. When an inexact direction stalls, Gauss–Newton asks it to
    ``tighten()``; once it cannot, "auto" switches to the direct solve (``switched`` records the
    iteration). With ``options.gauss_newton.accelerate`` each trial step is the geodesic-accelerated v + a/2
    before v alone, skipped for a while where it is far from use; on a model that is not ``smooth`` only with
    the structured solve.

    Parameters
    ----------
    prob : LoopProblem
        The problem whose loss is minimized.
    backend : str or backend object, optional
        "auto" (``choose_backend``: the structured solve where the direct factor would be large, else the
        direct solve, and a switch to the direct solve when inexact directions fail), "cholmod", "scipy",
        "structured", or a backend object (``linsolve``'s protocol) used as it is.
    options : solver_core.options.Options, optional
        The tuning values; None means ``DEFAULTS``. Gauss–Newton reads ``options.gauss_newton``, its linear
        solves ``options.linear_solve``.

    Attributes
    ----------
    history : list of dict
        Per iteration: iteration, loss, damping, rho, step_norm, grad_norm, rejected (the trial steps rejected
        before the one taken), accel_ratio (2 |a| / |v| of the geodesic acceleration, inf when none),
        accelerated (the step taken was the accelerated one), seconds, phase, backend and, when ``run`` has a
        ``physics_tol``, residual (the mean relative residual, ``metrics.relative_residual``).
    switched : int or None
        The iteration at which "auto" switched to the direct solve.
    """

    def __init__(self, prob, backend="auto", options=None):
        self.prob = prob
        self.options = DEFAULTS if options is None else options
        self.auto = backend == "auto"
        self.metric = inertia_metric(prob)
        self._use(make_backend(choose_backend(prob, backend, self.options)))
        self.history = []
        self.switched = None

    def _use(self, backend):
        self.backend = backend
        backend.bind(self.prob, self.options)

    @property
    def accelerating(self):
        """Whether trial steps try the geodesic acceleration now: asked for, and on a model that is not
        ``smooth`` only with the structured solve (docs/design/tuning.md: accel_h_switching)."""
        return self.options.gauss_newton.accelerate and (self.prob.model.smooth or self.problem_aware)

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
        linearization: ``damping_start`` times the median of diag(J^T B J) against the inertia metric, at least
        ``damping0``: stiff materials start damped in proportion to their stiffness."""
        options = self.options.gauss_newton
        return max(options.damping0, options.damping_start * float(np.median(self.backend.diagonal() / self.metric)))

    def _moved(self, q, d, free):
        """q with d added to its free unknowns."""
        moved = q.ravel().copy()
        moved[free] += d
        return moved.reshape(q.shape)

    def acceleration(self, q, u, v, damping, free):
        """The geodesic acceleration a = -(J^T B J + damping D)^-1 J^T B r_vv along the velocity v (the step
        at q, residual u, on the ``free`` flat unknowns), r_vv by central differences of step ``accel_h`` |v|
        (``accel_h_switching`` |v| on a model whose laws switch, where wider differences cross the switches);
        None where a shifted residual is not finite."""
        options = self.options.gauss_newton
        h = options.accel_h if self.prob.model.smooth else options.accel_h_switching
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
            damping=None, ftol=None, physics_tol=0.0):
        """Iterate Levenberg–Marquardt from ``q0`` until one of the stopping rules holds.

        Parameters
        ----------
        q0 : ndarray, shape (n_steps, n, 3)
            The initial guess on the solver grid (its constrained frames are set from the problem).
        max_iters : int, optional
            Cap on the iterations (stop reason "max_iters").
        tol : float, optional
            Stop ("tol") when the relative loss decrease of an iteration, or the decrease the model still
            predicts, is below this.
        step_tol : float, optional
            Stop ("step_tol") when the step is below this relative to |q|.
        callback : callable, optional
            Called with a copy of each iteration's history dict; one that ``halts`` stops the run after that
            iteration ("cancelled").
        phase : str, optional
            The ``phase`` written into the history.
        damping : float, optional
            lambda at the start (a run that goes on from another's iterate passes that run's last). None:
            ``starting_damping`` for the structured solve, ``damping0`` for the direct ones.
        ftol : float, optional
            Stop ("tol") when the decrease still to come (``remaining``) and then the undamped model's
            prediction are below this fraction of the loss, and (models whose laws switch) when ``at_a_switch``.
            None: ``options.gauss_newton.ftol``; 0 turns these rules off.
        physics_tol : float, optional
            Stop ("physics_tol") when the iterate (``q0`` too) is seamless with a mean relative residual at
            most this (``metrics.within_tolerance``); 0 never.

        Returns
        -------
        Result
            ``x`` is the best iterate (the last one: the loss never increases); ``stop_reason`` (also set on the
            instance) is one of "tol", "step_tol", "physics_tol", "max_iters", "no_progress", "cancelled".
        """
        options = self.options.gauss_newton
        ftol = options.ftol if ftol is None else ftol
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
        schedule = _AccelerationSchedule(options)
        restart = options.damping_restart   # the damping after a rejected undamped step (none switched off yet)
        since = 0                # the history entry from which ``remaining`` looks (after the last tightening)
        settled = False          # the last iteration settled: the undamped model decides at this linearization
        if physics_tol and within_tolerance(prob, q, physics_tol, u):
            self.stop_reason = "physics_tol"
            return self._result(q, 0.0)
        for it in range(1, max_iters + 1):
            g = self.backend.linearize(q, u)
            solve, apply_h = self.backend.direction, self.backend.apply
            if lam is None:
                lam = self.starting_damping() if self.problem_aware else options.damping0
            if settled:
                settled = False
                if model_decrease(g, solve(g, 0.0), apply_h) <= ftol * current:
                    self.stop_reason = "tol"
                    break
            accepted, raises, smallest_gain, suspect = None, 0, np.inf, False
            for raises in range(options.max_damping_raises):
                v = solve(g, lam)
                predicted = model_decrease(g, v, apply_h)
                if raises == 0:
                    suspect = predicted <= 0 or self.backend.truncated
                steps, ratio = [v], np.inf
                if self.accelerating and schedule.due():
                    a = self.acceleration(q, u, v, lam, free)
                    if a is not None:
                        ratio = 2 * np.sqrt(self.metric @ a ** 2 / max(self.metric @ v ** 2, 1e-300))
                        if options.accel_negligible <= ratio <= options.accel_max:
                            steps = [v + 0.5 * a, v]
                smallest_gain = min(smallest_gain, predicted)
                for d in steps:
                    trial, value, trial_u = self._trial(q, d, free)
                    rho = (current - value) / predicted if predicted > 0 else -np.inf
                    if rho > options.accept:
                        break
                if ratio < np.inf:
                    schedule.record(ratio, taken=rho > options.accept and d is not v)
                if rho > options.accept:
                    accepted = (trial, value, trial_u)
                    lam, grow = lam * max(1 / 3, 1 - (2 * rho - 1) ** 3), 2.0
                    if lam < options.damping_off:
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
            # a stalled inexact solve is tightened, then "auto" leaves it for the direct one
            if (failed or small) and self._recover(it, switch=True):
                since = len(self.history) - 1
                continue
            settled = remaining([h["loss"] for h in self.history[since:]], options.window) <= ftol * current
            if settled and self._recover(it, switch=False):   # an inexact solve may crawl: tighten it first
                since, settled = len(self.history) - 1, False
                continue
            if small or (not prob.model.smooth and at_a_switch(self.history[since:], ftol, options.kink_window)):
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
