"""Where Gauss–Newton starts: the starts of an ``init`` and the race between several of them.

``make_loop`` and ``loop_clip`` both take their starts from here (``initial_guess``, ``clip_starts``) and
race them with one routine (``race``): runs one after another, the user's callback seeing one count of
iterations across them, the best run by a ranking, a trailing run dropped once it is clearly behind the
first. The reasoning is in docs/design/starts.md, the tuning values in ``options.StartOptions``
(docs/design/tuning_starts.md).
"""
import time

import numpy as np

from .baselines import crossfade_loop
from .optimize.fast_projection import FastProjectionDiverged, fast_projection
from .physics.forward import SimulationFailed, simulate
from .options import DEFAULTS
from .physics.residual import loss
from .result import CONVERGED, NO_PROGRESS, Result, halts
from .optimize.reversible import reversible, two_sided_guess

INITS = ("fast_projection", "forward", "crossfade")


def on_solver_grid(prob, q):
    """The trajectory ``q`` (n_frames or n_steps, n, 3) on the solver's grid of steps, checked."""
    q = np.asarray(q, dtype=float)
    if q.shape[:1] == (prob.n_frames,) and prob.substeps > 1:
        q = prob.steps_of(q)
    return prob.check_trajectory(q, "initial guess")


def _guesses(guesses, reason="", phase=None):
    """The Result of the initial-guess phase: ``guesses`` and ``fallback_reason`` beside fast projection's
    status, nit, history and seconds (none when it did not run)."""
    phase = phase or Result(status=CONVERGED, nit=0, history=[], seconds=0.0)
    return Result(x=next(iter(guesses.values())), guesses=guesses, fallback_reason=reason, status=phase.status,
                  success=phase.status == CONVERGED, nit=phase.nit, history=phase.history, seconds=phase.seconds)


def initial_guess(prob, init, callback=None, options=None, stage=None):
    """The starts of ``init``: the initial guess, or the guesses Gauss–Newton races.

    Parameters
    ----------
    prob : LoopProblem
        The loop problem.
    init : str or array_like
        One of INITS, or a trajectory (n_frames or n_steps, n, 3).
    callback : callable, optional
        Fast projection's ``callback(info)``; when it ``halts`` the phase returns cancelled.
    options : Options, optional
        ``options.start`` (two_sided, blend) and ``options.fast_projection``; ``DEFAULTS`` when None.
    stage : callable, optional
        Told of the forward simulation's steps (``simulating``).

    Returns
    -------
    Result
        ``guesses``: {start name: q0 on the solver grid}, one, or those Gauss–Newton races: "forward" gives
        the forward clip and ``closed_forward``; "fast_projection", when fast projection fails, the forward
        clip, its crossfade and fast projection's best iterate (when it lowered G), the reason in
        ``fallback_reason``. On reversible dynamics (``StartOptions.two_sided``) "fast_projection" is the
        two-sided guess instead (``reversible.two_sided_guess``; fast projection when a half of it blows
        up). ``status``, ``nit``, ``history`` and ``seconds`` are fast projection's (none when it did not
        run).
    """
    options = options or DEFAULTS
    if not isinstance(init, str):
        return _guesses({"array": on_solver_grid(prob, init)})
    if init not in INITS:
        raise ValueError(f"init must be one of {INITS} or an array, got {init!r}")
    if init == "fast_projection" and options.start.two_sided and reversible(prob):
        try:
            return _guesses({"two_sided": two_sided_guess(prob, options.start.blend)})
        except SimulationFailed:
            pass
    if init == "fast_projection":
        t0 = time.perf_counter()
        try:
            fp = fast_projection(prob, callback=callback, options=options)
            return _guesses({"fast_projection": fp.x}, phase=fp)
        except FastProjectionDiverged as exc:
            phase = Result(status=NO_PROGRESS, nit=exc.nit, history=[], seconds=time.perf_counter() - t0)
            clip = simulate(prob, progress=simulating(stage))
            guesses = {"forward": clip, "crossfade": crossfade_loop(clip)}
            if exc.best is not None:
                guesses["fast_projection"] = exc.best
            return _guesses(guesses, str(exc), phase=phase)
    if init == "forward":
        clip = simulate(prob, progress=simulating(stage))
        return _guesses({"forward": clip, "closed_forward": closed_forward(prob, clip)})
    # The crossfade sits at the clip's middle frame at the wrap; the hard initial conditions are imposed on
    # it afterwards, like on any other guess.
    return _guesses({init: crossfade_loop(simulate(prob, progress=simulating(stage)))})


def closed_forward(prob, clip=None):
    """The forward clip with its closure defect blended in.

    The clip's last step, continued at constant velocity, reaches states that miss (r0, r1) by D0, D1 (a
    velocity defect D1 - D0); step j is moved by -s(j) (D0 + (j - n)(D1 - D0)), s rising smoothly from 0
    at step 1 to 1 at step n, so the guess passes through (r0, r1) without a jump at the wrap. From the
    clip itself Gauss–Newton keeps the clip's own end state and the jump at the wrap
    (docs/design/starts.md: init "forward").

    Parameters
    ----------
    prob : LoopProblem
        The loop problem.
    clip : ndarray, optional
        Its forward simulation (n_steps, n, 3) when already run.

    Returns
    -------
    ndarray
        The guess (n_steps, n, 3).
    """
    clip = simulate(prob) if clip is None else clip
    n = len(clip)
    d0 = 2 * clip[-1] - clip[-2] - prob.r0
    d1 = 3 * clip[-1] - 2 * clip[-2] - prob.r1_step
    j = np.arange(n)
    t = np.clip((j - 1) / (n - 1), 0.0, 1.0)
    s = (t * t * (3 - 2 * t))[:, None, None]
    return clip - s * (d0 + (j - n)[:, None, None] * (d1 - d0))


def simulating(stage):
    """A ``simulate`` progress function that reports the forward simulation to ``stage`` (None: none) about
    fifty times: stage dicts of phase "forward" with ``done`` and ``of`` steps."""
    if stage is None:
        return None

    def progress(done, total):
        if done == 1 or done == total or done % max(total // 50, 1) == 0:
            stage(dict(phase="forward", stage=True, done=done, of=total))

    return progress


def clip_starts(prob, clip, stage=None):
    """The starts of ``loop_clip``'s "cache_or_forward".

    Parameters
    ----------
    prob : LoopProblem
        The loop problem the clip was simulated for.
    clip : ndarray
        The simulated clip (n_frames, n, 3).
    stage : callable, optional
        Told of the forward simulation's steps (``simulating``).

    Returns
    -------
    dict
        {"cache": the clip's crossfade, "forward": the solver's own simulation}, the start of lower loss
        first (the likelier winner); the cache alone when the simulation fails.
    """
    starts = {"cache": crossfade_loop(clip)}
    try:
        starts["forward"] = simulate(prob, progress=simulating(stage))
    except SimulationFailed:
        return starts
    losses = {name: loss(prob, prob.apply_constraints(on_solver_grid(prob, q))) for name, q in starts.items()}
    return {name: starts[name] for name in sorted(starts, key=losses.get)}


def shifted_callback(callback, offset):
    """``callback`` seeing iteration numbers shifted by ``offset`` (None stays None)."""
    if callback is None:
        return None
    return lambda info: callback(dict(info, iteration=info["iteration"] + offset))


def race(starts, run, rank, callback=None, offset=0, behind=np.inf, race_from=0, leads=None, settles=None,
         stage=None):
    """Gauss–Newton from several starts, one run after another, and the best run.

    Parameters
    ----------
    starts : iterable of str
        The starts' names in the order they run; the first is the lead.
    run : callable
        ``run(name, callback)`` runs from the start ``name``, reporting every iteration to ``callback``
        (numbered from 1; None when there is nobody to report to), and returns ``(result, iterations)``:
        its Result (``cancelled``, ``history`` of dicts with "loss") and the iterations it reported.
    rank : callable
        ``rank(result)``: sort key of a run; the lowest ranks first (ties keep the order of ``starts``).
    callback : callable, optional
        The user's ``callback(info)``: every run reports to it, its iterations numbered on from the runs
        before it; a run it cancels (``halts``) ends the race.
    offset : int
        Iterations reported before the race.
    behind : float
        A run after the lead is dropped (stopped through its callback) at its first iteration from
        ``race_from`` on at which its loss exceeds ``behind`` times the lead's at the same iteration (the
        lead's last past its end), if ``leads(lead)``; inf never.
    race_from : int
        The first iteration at which a run may be dropped.
    leads : callable, optional
        ``leads(lead)``: whether the lead's result may drop the runs after it (always when None).
    settles : callable, optional
        ``settles(lead)``: whether the lead's result makes the runs after it needless (never when None).
    stage : callable, optional
        Told when each run begins, before its first iteration: a stage dict of phase "start" with the
        start's ``name``, its ``index`` (from 1) of ``starts`` and the ``offset`` of its iterations.

    Returns
    -------
    Result
        ``ranked``: the names of the runs that count, best first (the cancelled run alone when one was
        cancelled; dropped runs do not count); ``runs``: {name: its result} of every run made;
        ``dropped``: {name: dict(iteration, ratio)} of the dropped runs; ``offset``: iterations reported
        after the race; ``cancelled``; ``settled`` (the lead made the others needless).
    """
    names = list(starts)
    runs, dropped = {}, {}
    for k, name in enumerate(names):
        report = shifted_callback(callback, offset)
        if k and behind < np.inf:
            lead = runs[names[0]]
            report = _dropping(report, [h["loss"] for h in lead.history], leads is None or leads(lead), behind,
                               race_from, dropped, name)
        if stage is not None:
            stage(dict(phase="start", stage=True, name=name, index=k + 1, starts=len(names), offset=offset))
        result, iterations = run(name, report)
        offset += iterations
        runs[name] = result
        if result.cancelled and name not in dropped:
            return Result(ranked=[name], runs=runs, dropped=dropped, offset=offset, cancelled=True, settled=False)
        if k == 0 and settles is not None and settles(result):
            return Result(ranked=[name], runs=runs, dropped=dropped, offset=offset, cancelled=False, settled=True)
    ranked = sorted((name for name in runs if name not in dropped), key=lambda name: rank(runs[name]))
    return Result(ranked=ranked, runs=runs, dropped=dropped, offset=offset, cancelled=False, settled=False)


def _dropping(user, ahead, may_drop, behind, race_from, dropped, name):
    """The callback of a trailing run: the user's ``callback``, then the drop rule against the lead's
    losses ``ahead`` (recorded in ``dropped[name]``)."""

    def judge(info):
        if halts(user, info):
            return True
        i, other = info["iteration"], ahead[min(info["iteration"], len(ahead) - 1)]
        if may_drop and i >= race_from and info["loss"] > behind * other:
            dropped[name] = dict(iteration=i, ratio=info["loss"] / other)
            return True
        return False

    return judge
