"""make_loop: the initial guess (``starts``), then Gauss–Newton on the loop loss, and the verdict in words."""
import time

import numpy as np

from .physics.forward import SimulationFailed
from .optimize.gauss_newton import GaussNewton, choose_backend
from .optimize.linsolve import make_backend
from .metrics import SEAMLESS_RATIO, loop_metrics, seam_statistics, seamless, unseen
from .options import DEFAULTS, MAX_ITERS, TOL
from .options import PHYSICS_TOL  # noqa: F401  (the package's name for it)
from .physics.residual import loss
from .result import CANCELLED, CONVERGED, CONVERGED_WITH_SEAM, ITERATION_CAP, NO_PROGRESS, Result
from .starts import initial_guess, race, shifted_callback
from .starts import INITS, closed_forward, on_solver_grid  # noqa: F401  (the package's names for them)

# The default of ``StartOptions.race_iterations``, read by the panel's iteration budget (cyclic_loop_addon).
RACE_ITERATIONS = DEFAULTS.start.race_iterations


class LoopResult(Result):
    """The loop and how it was found: a ``Result`` whose ``x`` is ``q``, ``nit`` the iterations of both
    phases and ``seconds`` their time (the sum of ``fast_projection_seconds`` and ``gauss_newton_seconds``).

    q: (n_frames, n, 3) the loop at the frame rate; q_steps: (n_steps, n, 3) on the solver grid;
    initial_guess: (n_steps, n, 3) where Gauss–Newton started; history: per-iteration dicts (phase,
    iteration, loss, seconds; Gauss–Newton also damping, rho, step_norm; fast projection's loss is G).
    ``status`` (CONVERGED, CONVERGED_WITH_SEAM, ITERATION_CAP, NO_PROGRESS, CANCELLED), ``success``
    (converged to a seamless loop) and ``message`` in words; ``metrics``: ``loop_metrics`` of the initial
    guess and of the loop (wrap jump ratios, relative residual); init_used, fallback_reason, cancelled,
    stop_reason, fast_projection_ and gauss_newton_ iterations and seconds, initial_loss, final_loss (the
    loss of the problem as given: without the penalty when make_loop softened its initial conditions);
    initial_conditions ("hard", "soft" or how make_loop softened them) and first_frame_shift (RMS metres of
    frame 0 from r0).
    """

    def __init__(self, q, q_steps, initial_guess, **fields):
        super().__init__(q=q, q_steps=q_steps, initial_guess=initial_guess, history=[], init_used="",
                         fallback_reason="", cancelled=False, stop_reason="", fast_projection_iterations=0,
                         gauss_newton_iterations=0, fast_projection_seconds=0.0, gauss_newton_seconds=0.0,
                         initial_loss=float("nan"), final_loss=float("nan"), status=NO_PROGRESS, success=False,
                         message="", metrics={}, initial_conditions="hard", first_frame_shift=0.0,
                         drive_family="none", drive_parameters=np.zeros((len(q_steps), 0)), wind=None)
        self.update(fields)
        self.setdefault("seconds", self.fast_projection_seconds + self.gauss_newton_seconds)

    @property
    def x(self):
        return self.q

    @property
    def nit(self):
        return self.fast_projection_iterations + self.gauss_newton_iterations


def make_loop(prob, init="fast_projection", max_iters=MAX_ITERS, tol=TOL, callback=None, backend="auto",
              physics_tol=0.0, options=None, stage=None):
    """Solve the loop problem ``prob``: an initial guess, then Gauss–Newton on the loop loss.

    Gauss–Newton stops when the loss, or the decrease its model still predicts, falls by less than ``tol``
    relative per iteration, when a linear crawl has settled (``gauss_newton.remaining``), when the loop is
    seamless and physical within ``physics_tol``, or at ``max_iters``. Hard initial conditions stay hard
    unless the caller asks otherwise: with ``options.start.relax_eps`` > 0, a loop that converged under hard
    ones with a visible wrap goes on (within ``max_iters``) with soft ones of that eps, and
    ``initial_conditions`` says so.

    Parameters
    ----------
    prob : LoopProblem
        The loop problem.
    init : str or array_like
        "fast_projection" (when it fails, the reason is in ``fallback_reason`` and Gauss–Newton races
        ``race_iterations`` from the forward clip, from its crossfade and from fast projection's best
        iterate, the two lowest on to ``race_final_iterations``, and goes on from the lowest loss; on
        reversible dynamics, N bodies, the two-sided guess of ``reversible`` instead, ``init_used``
        "two_sided", unless ``two_sided`` is off), "forward" (``forward_race_iterations`` from the clip and
        from ``closed_forward``, ``init_used`` says which went on), "crossfade", or an array (n_frames or
        n_steps, n, 3). The iteration counts are fields of ``options.start`` (``starts``).
    max_iters : int
        Cap on Gauss–Newton iterations (the race's included).
    tol : float
        Relative loss decrease per iteration below which Gauss–Newton has converged.
    callback : callable, optional
        ``callback(info)`` gets phase, iteration and loss after every iteration and cancels when it
        ``halts`` (result.py): the best iterate so far is returned with ``cancelled=True``.
    backend : str or object
        Linear solver: "auto", "cholmod", "scipy" or a backend object.
    physics_tol : float
        Converged when the loop is seamless and its mean residual force is at most this fraction of the
        forces at play; 0 never (``loop_clip``, the add-on's and bake.py's solve, uses PHYSICS_TOL).
    options : Options, optional
        Tuning values (``options.py``); ``DEFAULTS`` when None.
    stage : callable, optional
        Hears of the forward simulation's steps and of the starts of a race (``clip_loop.loop_clip``).

    Returns
    -------
    LoopResult
        ``status``, ``success`` and ``message`` say whether the loop converged and whether its wrap can be
        seen; ``initial_conditions`` says which held and ``first_frame_shift`` how far (RMS, metres) frame
        0 moved from r0.
    """
    options = options or DEFAULTS
    start = options.start
    try:
        guess = initial_guess(prob, init, callback, options, stage)
    except SimulationFailed as exc:
        raise SimulationFailed(f"the forward simulation for the initial guess failed: {exc}") from exc
    guesses = {name: prob.apply_constraints(q) for name, q in guess.guesses.items()}
    init_used, q0 = next(iter(guesses.items()))
    res = LoopResult(q=prob.frames_of(q0), q_steps=q0, initial_guess=q0, history=list(guess.history),
                     init_used=init_used, fallback_reason=guess.fallback_reason, initial_loss=loss(prob, q0),
                     fast_projection_iterations=guess.nit, fast_projection_seconds=guess.seconds)
    if guess.status == CANCELLED:
        res.update(cancelled=True, stop_reason="cancelled", final_loss=res.initial_loss)
        _verdict(prob, res, [], max_iters)
        return res
    t0 = time.perf_counter()
    if len(guesses) > 1:
        iterations = start.forward_race_iterations if init == "forward" else start.race_iterations
        final = 0 if init == "forward" else min(start.race_final_iterations, max_iters)
        res.init_used, gn, run = _race(prob, guesses, backend, min(iterations, max_iters), tol, physics_tol, callback,
                                       final, options, stage)
        res.initial_guess, res.initial_loss = guesses[res.init_used], run.history[0]["loss"]
        if run.stop_reason == "max_iters" and max_iters > run.nit:
            run = _run_on(gn, run, max_iters - run.nit, tol, physics_tol, callback)
    else:
        run = GaussNewton(prob, backend, options=options).run(q0, max_iters=max_iters, tol=tol, callback=callback,
                                                              physics_tol=physics_tol)
    res.initial_conditions = "hard" if all(prob.hard()) else "soft"
    relax = start.relax_eps
    if (relax and res.initial_conditions == "hard" and run.stop_reason in ("tol", "step_tol")
            and max_iters > run.nit and not seamless(prob, run.x)
            and not pins_jump(prob, run.x)):   # soft conditions cannot hide the pins' own jump
        run = _run_on(GaussNewton(prob.softened(relax), backend, options=options), run, max_iters - run.nit, tol,
                      physics_tol, callback)
        res.initial_conditions = f"soft (eps {relax:g}) after hard ones left a visible wrap"
    free = prob.free_vertices()
    res.update(gauss_newton_seconds=time.perf_counter() - t0, history=res.history + run.history, q_steps=run.x,
               q=prob.frames_of(run.x), gauss_newton_iterations=run.nit, cancelled=run.cancelled,
               stop_reason=run.stop_reason, final_loss=loss(prob, run.x),
               first_frame_shift=float(np.sqrt(np.mean(np.sum((run.x[0, free] - prob.r0[free]) ** 2, axis=-1)))))
    _verdict(prob, res, run.history, max_iters)
    return res


def pins_jump(prob, q):
    """True when the pinned vertices' prescribed motion alone makes the wrap of the loop ``q`` (solver grid)
    visible: its jumps at the wrap, with every free vertex still, exceed SEAMLESS_RATIO times the loop's
    median frame boundary. Moving free vertices (soft initial conditions) cannot hide such a wrap
    (docs/design/tuning_starts.md: relax_eps)."""
    frames = prob.frames_of(q)
    alone = np.zeros_like(frames)
    alone[:, prob.pins] = frames[:, prob.pins]
    pos, vel = seam_statistics(frames, prob.dt)
    pin_pos, pin_vel = seam_statistics(alone, prob.dt)
    ratios = pin_pos[0] / max(np.median(pos), 1e-300), pin_vel[0] / max(np.median(vel), 1e-300)
    return max(ratios) > SEAMLESS_RATIO


def seam_advice(prob, q_steps, initial_conditions):
    """Why a converged loop's wrap can still be seen, and what to change: the pins' prescribed motion jumps at
    the wrap, or the loop cannot pass smoothly through the first two frames."""
    if pins_jump(prob, q_steps):
        return "the pinned vertices' prescribed motion jumps at the wrap: make it return to its start"
    return ("the loop cannot pass smoothly through the first two frames: try another frame range"
            + ("" if initial_conditions.startswith("soft") else " or soft initial conditions"))


def _race(prob, guesses, backend, iterations, tol, physics_tol, callback, final, options, stage=None):
    """Gauss–Newton for ``iterations`` from each guess (``starts.race``): (name, GaussNewton, its Result)
    of the lowest loss (of the first cancelled run, if one is); with ``final`` > ``iterations`` the two
    lowest go on to ``final`` iterations first, and the lower of them wins. The runs share one direct
    solve: one symbolic analysis (docs/design/starts.md)."""
    if choose_backend(prob, backend, options) in ("auto", "cholmod", "scipy"):
        backend = make_backend(choose_backend(prob, backend, options))
    solvers = {}

    def last_loss(run):
        return run.history[-1]["loss"]

    def first(name, report):
        gn = solvers[name] = GaussNewton(prob, backend, options=options)
        run = gn.run(guesses[name], max_iters=iterations, tol=tol, callback=report, physics_tol=physics_tol)
        return run, run.nit

    out = heats = race(guesses, first, last_loss, callback, stage=stage)
    if not heats.cancelled and final > iterations:
        def on(name, report):
            run = heats.runs[name]
            if run.stop_reason != "max_iters":
                return run, 0
            done = run.nit
            more = _run_on(solvers[name], run, final - done, tol, physics_tol, shifted_callback(report, -done))
            return more, more.nit - done

        out = race(heats.ranked[:2], on, last_loss, callback, offset=heats.offset)
    name = out.ranked[0]
    return name, solvers[name], out.runs[name]


def _run_on(gn, run, iterations, tol, physics_tol, callback):
    """Continue ``gn`` from its Result ``run`` for up to ``iterations`` more: the Result of both as one run."""
    done, seconds = run.history[-1]["iteration"], run.history[-1]["seconds"]
    more = gn.run(run.x, max_iters=iterations, tol=tol, callback=shifted_callback(callback, done),
                  damping=run.history[-1]["damping"], physics_tol=physics_tol)   # as if it had never stopped
    more.history = run.history + [dict(h, iteration=h["iteration"] + done, seconds=h["seconds"] + seconds)
                                  for h in more.history[1:]]
    more.nit = len(more.history) - 1
    return more


def _verdict(prob, res, history, max_iters):
    """Set ``metrics``, ``seconds``, ``status``, ``success`` and ``message`` of a finished (or cancelled) run."""
    res.seconds = res.fast_projection_seconds + res.gauss_newton_seconds
    res.metrics = dict(initial=loop_metrics(prob, res.initial_guess), loop=loop_metrics(prob, res.q_steps))
    before, after = res.metrics["initial"], res.metrics["loop"]
    wrap = (f"wrap velocity jump {after['velocity_jump_ratio']:.3g}x and position jump "
            f"{after['position_jump_ratio']:.3g}x the median frame boundary (initial guess: "
            f"{before['velocity_jump_ratio']:.3g}x, {before['position_jump_ratio']:.3g}x)")
    control = (f"; the loop needs control forces {after['residual_rel_mean']:.2g} times the physical forces"
               if after["residual_rel_mean"] > 0.1 else "")
    seam_unseen = unseen(after)
    if res.initial_conditions.startswith("soft"):
        wrap += (f"; {res.initial_conditions}: the first frame moved {1e3 * res.first_frame_shift:.3g} mm RMS "
                 "from the clip's")
    gn = [h["loss"] for h in history]
    if res.cancelled:
        res.status, res.message = CANCELLED, f"cancelled after {res.gauss_newton_iterations} Gauss–Newton iterations"
    elif res.stop_reason == "physics_tol":
        res.status = CONVERGED
        res.message = (f"converged: seamless and physical within the tolerance, residual force "
                       f"{after['residual_rel_mean']:.2g} of the forces at play; {wrap}")
    elif res.stop_reason in ("tol", "step_tol"):
        res.status = CONVERGED if seam_unseen else CONVERGED_WITH_SEAM
        res.message = (f"converged: seamless, {wrap}" if seam_unseen else
                       f"converged, but the wrap can still be seen: {wrap}{control}; "
                       + seam_advice(prob, res.q_steps, res.initial_conditions))
    elif res.stop_reason == "max_iters":
        window = gn[-min(len(gn), 6):]
        rate = (window[0] - window[-1]) / max(window[0], 1e-300) / max(len(window) - 1, 1)
        res.status = ITERATION_CAP
        res.message = (f"not converged: stopped at the iteration cap ({max_iters}) with the loss still falling "
                       f"{100 * rate:.2g}% per iteration; {wrap}{control}; more iterations recommended")
    else:
        res.status = NO_PROGRESS
        res.message = f"not converged: no step reduces the loss any further; {wrap}{control}"
    res.success = res.status == CONVERGED
