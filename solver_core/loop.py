"""make_loop: initial guess, then Gauss–Newton on the loop loss."""
import time

import numpy as np

from .baselines import crossfade_loop
from .fast_projection import FastProjectionDiverged, fast_projection
from .forward import SimulationFailed, simulate
from .gauss_newton import GaussNewton, choose_backend
from .linsolve import make_backend
from .metrics import SEAMLESS_RATIO, loop_metrics, seam_statistics, seamless, unseen
from .options import DEFAULTS
from .residual import loss
from .result import CANCELLED, CONVERGED, CONVERGED_WITH_SEAM, ITERATION_CAP, NO_PROGRESS, Result
from .reversible import reversible, two_sided_guess

INITS = ("fast_projection", "forward", "crossfade")
# On reversible dynamics (N bodies) init "fast_projection" starts from the two-sided guess instead
# (``reversible``): fast projection shoots over the whole period of an unstable motion and leaves
# Gauss–Newton far from the loop. Measured on 3, 4 and 5 bodies, seeds 1-20 (bench nbody): from fast
# projection (or the race after it failed) 4,981 Gauss–Newton iterations, 13 runs at the 200-iteration cap,
# 41 of 60 seamless, losses up to 2,591; from the two-sided guess 10-13 iterations each, all 60 seamless,
# every loss at most that of the old start.
# When fast projection fails, Gauss–Newton runs this many iterations from the forward clip, from its
# crossfade and from fast projection's best iterate, and goes on from the lowest loss (the third contender
# on N bodies, seeds 1-10: 13 -> 14 of 30 seamless, 14 -> 11 at the cap; README, Convergence). Measured
# (loss after 10 / 30 iterations, forward vs crossfade):
# flag (scale 0.25) 238 vs 20.5 / 34.9 vs 5.42, swinging cloth 1,200 vs 323 / 105 vs 12.4, doughnut 4.4e4
# vs 8.7e3, 4 and 5 bodies (seed 2) 1.6e4 vs 5.5e5 and 1.2e4 vs 4.1e5: the order at 10 holds at 30;
# at 5 iterations it picked the wrong one on the swinging cloth.
RACE_ITERATIONS = 10
# ... then the two lowest go on to this many iterations and the lower of them goes on. The swinging cloth
# (scale 0.25) after 10 / 20 / 40 / 100 iterations: from fast projection's best iterate 43 / 19.0 / 8.5 /
# 3.4, from the crossfade 323 / 16.1 / 6.9 / 2.2; from the former Gauss–Newton crawled to 1.47 in 1,000
# iterations (the cloth pushed up 14 cm above its pins and back), from the latter it reaches 0.81 in 300
# (the cloth held near flat).
RACE_FINAL_ITERATIONS = 40
# init="forward" races the forward clip and the clip with its closure defect blended in (closed_forward) for
# this many iterations. Measured (loss after 10 / 20 iterations, clip vs blended, scale 0.25): flag 238 vs
# 296 / 71 vs 11 (the clip goes on to a jump 83x the median at the wrap, loss 8.55; the blended one to a
# seamless 2.24), swinging cloth 1,204 vs 0.86 / 427 vs 0.80, doughnut 4.4e4 vs 5.8e3 / 3.6e4 vs 5.8e3,
# wobbly bar 612 vs 9.1e5 / 194 vs 1.5e5 (blended positions push into the ball); the order at 20 holds at 40.
FORWARD_RACE_ITERATIONS = 20
# Gauss–Newton's default tolerance: a relative loss decrease per iteration below this is convergence (at
# 1e-8 the wobbly bar (scale 0.25) ran into a 300-iteration cap while falling by 1e-7 per iteration).
TOL = 1e-6
MAX_ITERS = 200        # make_loop's default cap on Gauss–Newton iterations
# The physics tolerance of ``loop_clip`` (the add-on's, bake.py's and the CLI's solve; ``make_loop`` minimizes
# on unless given one): a seamless loop whose mean residual force is at most this fraction of the forces at
# play (metrics.relative_residual) is converged, however much loss is left to minimize. Where the
# physics admits no exact loop (a damped cloth in steady wind) the loss levels off above zero and
# Gauss–Newton's tail is linear: the 32 x 32-quad Blender square from its cache's crossfade reached a mean
# residual of 0.034 / 0.017 after 5 / 7 iterations, then 4-10% less loss per iteration (~1 min each).
# 0.01 is a third of the residual of Blender's own cloth cache under the compatible model (0.031;
# README, Blender cloth); Abaqus' default force tolerance is 0.5% of the average force, on its largest
# residual. The paper's scenes (Table 1, scale 0.25) converge at mean residuals of 0.13-6 and never meet it.
PHYSICS_TOL = 0.01
# When Gauss–Newton converges under hard initial conditions but the wrap can still be seen, make_loop goes on
# with soft ones of this eps (eq. 15; the penalty weight m / (eps h^3) is 1/60 of the inertia diagonal of
# the loss): a damped clip driven by periodic forces has a periodic orbit near, but not through, (r0, r1).
# Measured on the flag from the forward clip (scales 0.08 / 0.12 / 0.16, hard: wrap velocity 1.73x / 2.02x /
# 1.82x): eps 1 -> 1.80x / 1.60x / 1.56x, first frame moved 1.1-1.9 mm RMS; eps 10 -> 1.42x / 0.96x / 1.01x,
# 2.5-3.3 mm; eps 100 -> 1.31x / 0.44x / 0.96x, 5.9-7.8 mm. Softening from the start instead lets an
# undriven clip (the swinging cloth) shrink towards rest and crawl (0.08: 300 iterations at eps 0.1-10 vs
# 16 hard).
RELAX_EPS = 10.0


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
                         message="", metrics={}, initial_conditions="hard", first_frame_shift=0.0)
        self.update(fields)
        self.setdefault("seconds", self.fast_projection_seconds + self.gauss_newton_seconds)

    @property
    def x(self):
        return self.q

    @property
    def nit(self):
        return self.fast_projection_iterations + self.gauss_newton_iterations


def _guesses(guesses, reason="", phase=None):
    """The Result of the initial-guess phase: ``guesses`` and ``fallback_reason`` beside fast projection's
    status, nit, history and seconds (none when it did not run)."""
    phase = phase or Result(status=CONVERGED, nit=0, history=[], seconds=0.0)
    return Result(x=next(iter(guesses.values())), guesses=guesses, fallback_reason=reason, status=phase.status,
                  success=phase.status == CONVERGED, nit=phase.nit, history=phase.history, seconds=phase.seconds)


def on_solver_grid(prob, q):
    """The trajectory ``q`` (n_frames or n_steps, n, 3) on the solver's grid of steps, checked."""
    q = np.asarray(q, dtype=float)
    if q.shape[:1] == (prob.n_frames,) and prob.substeps > 1:
        q = prob.steps_of(q)
    return prob.check_trajectory(q, "initial guess")


def _initial_guess(prob, init, callback):
    """The initial guess as a Result whose ``guesses`` are {init used: q0 on the solver grid}: one, or those
    Gauss–Newton races when fast projection failed (the reason in ``fallback_reason``): the forward clip,
    its crossfade and fast projection's best iterate (when it lowered G). On reversible dynamics
    "fast_projection" is the two-sided guess instead (``reversible.two_sided_guess``; fast projection when
    a half of it blows up)."""
    if not isinstance(init, str):
        return _guesses({"array": on_solver_grid(prob, init)})
    if init not in INITS:
        raise ValueError(f"init must be one of {INITS} or an array, got {init!r}")
    if init == "fast_projection" and reversible(prob):
        try:
            return _guesses({"two_sided": two_sided_guess(prob)})
        except SimulationFailed:
            pass
    if init == "fast_projection":
        t0 = time.perf_counter()
        try:
            fp = fast_projection(prob, callback=callback)
            return _guesses({"fast_projection": fp.x}, phase=fp)
        except FastProjectionDiverged as exc:
            phase = Result(status=NO_PROGRESS, nit=exc.nit, history=[], seconds=time.perf_counter() - t0)
            clip = simulate(prob)
            guesses = {"forward": clip, "crossfade": crossfade_loop(clip)}
            if exc.best is not None:
                guesses["fast_projection"] = exc.best
            return _guesses(guesses, str(exc), phase=phase)
    if init == "forward":
        clip = simulate(prob)
        return _guesses({"forward": clip, "closed_forward": closed_forward(prob, clip)})
    # The crossfade sits at the clip's middle frame at the wrap; the hard initial conditions are imposed on
    # it afterwards, like on any other guess.
    return _guesses({init: crossfade_loop(simulate(prob))})


def closed_forward(prob, clip=None):
    """The forward clip with its closure defect blended in: the clip's last step, continued at constant
    velocity, reaches states that miss (r0, r1) by D0, D1 (a velocity defect D1 - D0); step j is moved by
    -s(j) (D0 + (j - n)(D1 - D0)), s rising smoothly from 0 at step 1 to 1 at step n, so the guess passes
    through (r0, r1) without a jump at the wrap. Gauss–Newton from the clip itself kept the clip's own end
    state and jumped at the wrap (the flag at scale 0.25: loss 8.55, position jump 83x the median, one
    vertex beside a pin 86 mm in one step); from this guess it reached loss 2.24 and a seamless wrap.
    ``clip``: the forward simulation when already run."""
    clip = simulate(prob) if clip is None else clip
    n = len(clip)
    d0 = 2 * clip[-1] - clip[-2] - prob.r0
    d1 = 3 * clip[-1] - 2 * clip[-2] - prob.r1_step
    j = np.arange(n)
    t = np.clip((j - 1) / (n - 1), 0.0, 1.0)
    s = (t * t * (3 - 2 * t))[:, None, None]
    return clip - s * (d0 + (j - n)[:, None, None] * (d1 - d0))


def make_loop(prob, init="fast_projection", max_iters=MAX_ITERS, tol=TOL, callback=None, backend="auto",
              relax=RELAX_EPS, physics_tol=0.0, options=None):
    """Solve the loop problem ``prob`` and return a LoopResult.

    ``init``: "fast_projection" (when it fails, the reason is in ``fallback_reason`` and Gauss–Newton
    runs RACE_ITERATIONS from the forward clip, from its crossfade and from fast projection's best
    iterate, the two lowest to RACE_FINAL_ITERATIONS, and goes on from the lowest loss; on reversible
    dynamics, N bodies, the two-sided guess of ``reversible`` instead, ``init_used`` "two_sided"), "forward"
    (FORWARD_RACE_ITERATIONS from the clip and from ``closed_forward``, ``init_used`` says which went
    on), "crossfade", or an array (n_frames or n_steps, n, 3). ``callback(info)`` gets phase, iteration
    and loss after every iteration and cancels when it ``halts`` (result.py): the best iterate so far is
    returned with ``cancelled=True``.
    Gauss–Newton stops when the loss, or the decrease its model still predicts, falls by less than
    ``tol`` relative per iteration, when a linear crawl has settled (``gauss_newton.remaining``), when the
    loop is seamless and physical within ``physics_tol`` (its mean residual force over the forces at play;
    0 never; ``loop_clip``, the add-on's and bake.py's solve, uses PHYSICS_TOL), or at ``max_iters``;
    ``status``, ``success`` and ``message`` say whether the loop converged and whether its wrap can be
    seen. When it converged under hard initial conditions with a visible wrap, Gauss–Newton goes on (within
    ``max_iters``) with soft ones of eps ``relax`` (``RELAX_EPS``; None or 0 keeps them hard):
    ``initial_conditions`` says which held and ``first_frame_shift`` how far (RMS, metres) frame 0 moved
    from r0.
    ``backend``: linear solver ("auto", "cholmod", "scipy" or a backend object). ``options``: the tuning
    values (``solver_core.options.Options``; None: ``DEFAULTS``), passed to every Gauss–Newton.
    """
    try:
        guess = _initial_guess(prob, init, callback)
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
        iterations = FORWARD_RACE_ITERATIONS if init == "forward" else RACE_ITERATIONS
        final = 0 if init == "forward" else min(RACE_FINAL_ITERATIONS, max_iters)
        res.init_used, gn, run = _race(prob, guesses, backend, min(iterations, max_iters), tol, physics_tol, callback,
                                       final, options)
        res.initial_guess, res.initial_loss = guesses[res.init_used], run.history[0]["loss"]
        if run.stop_reason == "max_iters" and max_iters > run.nit:
            run = _run_on(gn, run, max_iters - run.nit, tol, physics_tol, callback)
    else:
        run = GaussNewton(prob, backend, options).run(q0, max_iters=max_iters, tol=tol, callback=callback,
                                             physics_tol=physics_tol)
    res.initial_conditions = "hard" if all(prob.hard()) else "soft"
    if (relax and res.initial_conditions == "hard" and run.stop_reason in ("tol", "step_tol")
            and max_iters > run.nit and not seamless(prob, run.x)
            and not pins_jump(prob, run.x)):   # soft conditions cannot hide the pins' own jump
        run = _run_on(GaussNewton(prob.softened(relax), backend, options), run, max_iters - run.nit, tol, physics_tol, callback)
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
    median frame boundary. Moving free vertices (soft initial conditions) cannot hide such a wrap: on the
    ribbons at scale 0.25 (the handle does not come back) the soft phase ran 717 iterations into the cap
    and left the wrap at 2.93x / 41.4x the median (2.94x / 41.5x before it)."""
    frames = prob.frames_of(q)
    alone = np.zeros_like(frames)
    alone[:, prob.pins] = frames[:, prob.pins]
    pos, vel = seam_statistics(frames, prob.dt)
    pin_pos, pin_vel = seam_statistics(alone, prob.dt)
    ratios = pin_pos[0] / max(np.median(pos), 1e-300), pin_vel[0] / max(np.median(vel), 1e-300)
    return max(ratios) > SEAMLESS_RATIO


def shifted_callback(callback, offset):
    """``callback`` seeing iteration numbers shifted by ``offset`` (None stays None)."""
    if callback is None:
        return None
    return lambda info: callback(dict(info, iteration=info["iteration"] + offset))


def _race(prob, guesses, backend, iterations, tol, physics_tol, callback, final=0, options=None):
    """Gauss–Newton for ``iterations`` from each guess: (name, GaussNewton, its Result) of the lower loss
    (of the first cancelled run, if one is); with ``final`` > ``iterations`` the two lowest go on to
    ``final`` iterations first. A direct solve is shared by the runs: one symbolic analysis (CHOLMOD's
    costs 0.12-0.17 s on 5 bodies, more than 10 of their iterations)."""
    chosen = choose_backend(prob, backend, DEFAULTS if options is None else options)
    if chosen in ("auto", "cholmod", "scipy"):
        backend = make_backend(chosen)
    runs, offset = [], 0
    for name, q0 in guesses.items():
        gn = GaussNewton(prob, backend, options)
        run = gn.run(q0, max_iters=iterations, tol=tol, callback=shifted_callback(callback, offset),
                     physics_tol=physics_tol)
        offset += run.nit
        if run.cancelled:
            return name, gn, run
        runs.append((name, gn, run))
    runs.sort(key=lambda r: r[2].history[-1]["loss"])
    if final > iterations:
        for k, (name, gn, run) in enumerate(runs[:2]):
            if run.stop_reason == "max_iters":
                done = run.nit
                run = _run_on(gn, run, final - done, tol, physics_tol, shifted_callback(callback, offset - done))
                offset += run.nit - done
                if run.cancelled:
                    return name, gn, run
                runs[k] = (name, gn, run)
        runs[:2] = sorted(runs[:2], key=lambda r: r[2].history[-1]["loss"])
    return runs[0]


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
        if seam_unseen:
            res.message = f"converged: seamless, {wrap}"
        elif pins_jump(prob, res.q_steps):
            res.message = (f"converged, but the wrap can still be seen: {wrap}{control}; the pinned vertices' "
                           "prescribed motion jumps at the wrap: make it return to its start")
        else:
            res.message = (f"converged, but the wrap can still be seen: {wrap}{control}; the loop cannot pass "
                           "smoothly through the first two frames: try another frame range"
                           + ("" if res.initial_conditions.startswith("soft") else " or soft initial conditions"))
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
