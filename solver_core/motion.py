"""Loops that keep a clip's motion: the loop and a periodic driving force solved together (``keep_motion``).

A damped clip has rest as its only exact periodic motion, so a pure-physics loop drifts calm. Here the loop is
physical under the scene's forces plus a driving force the optimizer designs (a gusting wind, or smooth body
forces: ``physics.driving``), kept at the clip's speed (its kinetic energy), the designed wind within a bound
of the scene's; Levenberg–Marquardt on both (``optimize.driven``). The evidence for this formulation:
docs/design/motion.md.
"""
import time

import numpy as np

from .baselines import closed_clip, crossfade_loop, wrap_gap
from .loop import LoopResult, seam_advice
from .metrics import loop_metrics, rms_speed, unseen
from .optimize import driven
from .options import DEFAULTS
from .physics.driving import choose_drive
from .result import CANCELLED, CONVERGED, CONVERGED_WITH_SEAM, ITERATION_CAP, NO_PROGRESS
from .starts import initial_guess

KEPT_SPEED = 0.85       # a loop slower than this fraction of its clip's speed is called calmer than the clip


def driving_force(prob, res):
    """The driving force (n_steps, n, 3) a LoopResult was solved with: zeros for a pure-physics loop.

    Parameters
    ----------
    prob : LoopProblem
        The problem ``res`` solved.
    res : LoopResult
        The result; its ``drive_family`` and ``drive_parameters`` say which force.

    Returns
    -------
    ndarray, shape (n_steps, n, 3)
    """
    family = res.get("drive_family", "none")
    if family == "none":
        return np.zeros(res.q_steps.shape)
    drive = choose_drive(prob, family, np.asarray(res.drive_parameters).shape[1] // 3)
    return drive.forces(res.q_steps, np.asarray(res.drive_parameters))


def in_phase(prob, q):
    """The loop ``q`` (solver grid) rolled so that its steps 0 and 1 lie nearest the initial conditions r0 and
    r1 (mass-weighted): a crossfade plays the clip's middle at its seam, which the conditions pull elsewhere."""
    m = prob.model.mass[None, :, None]
    far = np.sum(m * (q - prob.r0) ** 2, axis=(1, 2)) + np.sum(m * (np.roll(q, -1, axis=0) - prob.r1_step) ** 2,
                                                              axis=(1, 2))
    return np.roll(q, -int(np.argmin(far)), axis=0)


def _start(prob, clip, init, callback, options, stage=None):
    """(name, start on the solver grid) for "cache" and "cache_or_forward": the clip closed at its wrap when it
    nearly repeats (its gap below ``options.motion.closed_gap`` motions), else its crossfade rolled in phase with
    the initial conditions; the solver's own start for another init."""
    if isinstance(init, str) and init in ("cache", "cache_or_forward"):
        if wrap_gap(clip) < options.motion.closed_gap:
            return "cache", prob.steps_of(closed_clip(clip))
        return "cache", in_phase(prob, prob.steps_of(crossfade_loop(clip)))
    guess = initial_guess(prob, init, callback, options, stage)
    name, q0 = next(iter(guess.guesses.items()))
    return name, q0


def keep_motion(prob, clip, drive, init="cache", max_iters=50, tol=1e-6, callback=None, backend="auto",
                physics_tol=0.01, options=None, stage=None):
    """The loop of ``clip`` and the driving force ``drive`` solved together, at the clip's speed.

    Parameters
    ----------
    prob : LoopProblem
        The loop problem the clip was simulated for; hard initial conditions stay hard.
    clip : ndarray, shape (n_frames, n, 3)
        The simulated clip: its speed is kept.
    drive : WindDrive or ModesDrive
        The driving family (``physics.driving.choose_drive``).
    init : str or array_like
        The start: "cache" or "cache_or_forward" the clip's crossfade; another of ``starts.INITS`` the solver's
        own start; or an array on the solver grid.
    max_iters, tol, callback, backend, physics_tol : optional
        As in ``make_loop``; ``physics_tol`` bounds the mean relative residual outside the driving force.
    options : Options
        ``options.motion`` holds the weights and the stopping rule's bands.
    stage : callable, optional
        Hears of the solver's own forward simulation when the start needs one (``loop_clip``).

    Returns
    -------
    LoopResult
        With ``drive_family``, ``drive_parameters`` (n_steps, p), ``wind`` ((n_frames, 3) the wind each frame
        feels, for the wind family; else None) and ``metrics["motion"]``: the speed over the clip's, the distances
        from it (``distance_figures``), the driving force's peak over gravity's and, for the wind family, the
        wind's peak over the scene's and both winds per frame (``wind``, ``scene_wind``: lists of 3-vectors in the
        scene wind's units, what ``Write Wind`` keys).
    """
    options = options or DEFAULTS
    motion = options.motion
    if isinstance(init, str):
        init_used, q0 = _start(prob, clip, init, callback, options, stage)
    else:
        init_used, q0 = "given", prob.steps_of(np.asarray(init, dtype=float)) \
            if len(init) == prob.n_frames and prob.substeps > 1 else np.asarray(init, dtype=float)
    q0 = prob.apply_constraints(q0)
    clip_steps = prob.steps_of(clip)
    clip_speed = rms_speed(np.asarray(clip, dtype=float), prob.dt)
    t0 = time.perf_counter()
    loss = driven.DrivenLoss(prob, drive, q0, clip_steps, motion)
    x0 = loss.pack(q0, np.zeros((prob.n_steps, loss.per_step)))
    run = driven.solve(loss, x0, clip_speed, max_iters, tol, physics_tol, callback, backend)
    q, theta = loss.split(run.x)
    res = LoopResult(q=prob.frames_of(q), q_steps=q, initial_guess=q0, history=run.history, init_used=init_used,
                     gauss_newton_iterations=run.nit, gauss_newton_seconds=time.perf_counter() - t0,
                     initial_loss=run.history[0]["loss"], final_loss=run.history[-1]["loss"],
                     stop_reason=run.stop_reason, cancelled=run.stop_reason == "cancelled",
                     initial_conditions="hard" if all(prob.hard()) else "soft",
                     first_frame_shift=float(np.sqrt(np.mean(np.sum((q[0] - prob.r0) ** 2, axis=-1)))),
                     drive_family=drive.name, drive_parameters=theta, linear_solver=run.backend)
    f = drive.forces(q, theta)
    res.metrics = dict(initial=loop_metrics(prob, q0), loop=loop_metrics(prob, q, drive=f),
                       motion=_motion_figures(prob, drive, theta, f, q, clip, clip_speed, motion.wind_bound))
    res.wind = prob.frames_of(drive.total_wind(theta)) if drive.name == "wind" else None
    _verdict(prob, res, max_iters)
    return res


def distance_figures(frames, clip):
    """How far a loop's frames lie from the clip's, frame by frame, as fractions of the clip's motion (its RMS
    distance from its mean shape): {"distance": over all frames, "first_frame_distance": frame 0's}."""
    clip = np.asarray(clip, dtype=float)
    motion = max(float(np.sqrt(np.mean(np.sum((clip - clip.mean(axis=0)) ** 2, axis=-1)))), 1e-300)
    far = np.sum((np.asarray(frames) - clip) ** 2, axis=-1)
    return dict(distance=float(np.sqrt(far.mean())) / motion, first_frame_distance=float(np.sqrt(far[0].mean())) / motion)


def budget_forces(prob, drive, clip, wind_bound):
    """The two forces of ``force_budget``: (the clip's, the bounded gusts'), RMS per free vertex in newtons.

    The clip's inertial force M (x_{k+1} - 2 x_k + x_{k-1}) / dt^2 over its inner frames, and the force of a
    wind of the bound's strength (``wind_bound`` times the scene wind's peak) blowing along every triangle's
    own normal at the same frames (``Wind.normal_forces``: more than any one wind vector gives).

    Parameters
    ----------
    prob : LoopProblem
        The loop problem.
    drive : WindDrive, ModesDrive or None
        The driving family.
    clip : ndarray, shape (n_frames, n, 3)
        The simulated clip.
    wind_bound : float
        ``MotionOptions.wind_bound``.

    Returns
    -------
    tuple of float or None
        (clip's force, gusts' force); None for a family other than the wind, no bound, a still scene or a clip
        of under 3 frames.
    """
    clip = np.asarray(clip, dtype=float)
    if drive is None or drive.name != "wind" or wind_bound <= 0 or len(clip) < 3:
        return None
    peak = float(np.linalg.norm(drive.scene, axis=1).max())
    if peak <= 0:
        return None
    free = prob.free_vertices()
    inertia = prob.model.mass[None, :, None] * (clip[2:] - 2 * clip[1:-1] + clip[:-2]) / prob.dt ** 2
    gusts = drive.term.normal_forces(clip[1:-1], wind_bound * peak)
    return tuple(float(np.sqrt(np.mean(np.sum(x[:, free] ** 2, axis=-1)))) for x in (inertia, gusts))


def force_budget(prob, drive, clip, wind_bound):
    """How much more force the clip's motion takes than gusts within the wind bound can give: the ratio of
    ``budget_forces``. Above 1 the bounded gusts cannot keep the loop as lively as the clip: a clip that falls
    under gravity in a light wind (docs/design/motion.md, Limits).

    Parameters
    ----------
    prob, drive, clip, wind_bound
        As in ``budget_forces``.

    Returns
    -------
    float or None
        The clip's force over the gusts'; None where ``budget_forces`` has none.
    """
    forces = budget_forces(prob, drive, clip, wind_bound)
    return None if forces is None or forces[1] <= 0 else forces[0] / forces[1]


def _motion_figures(prob, drive, theta, f, q, clip, clip_speed, wind_bound):
    """Speed over the clip's; distances from it; the wind's peak over the scene wind's peak (wind family); the
    driving force's peak acceleration over gravity's 9.81 m/s^2; ``force_needed``, the clip's inertial force
    over the bounded gusts' (``force_budget``)."""
    free = prob.free_vertices()
    accel = np.linalg.norm(f[:, free], axis=-1) / prob.model.mass[free][None, :]
    figures = dict(family=drive.name, speed_ratio=rms_speed(prob.frames_of(q), prob.dt) / clip_speed,
                   drive_peak_g=float(accel.max() / 9.81), wind_peak_ratio=None,
                   force_needed=force_budget(prob, drive, clip, wind_bound), wind_bound=float(wind_bound),
                   **distance_figures(prob.frames_of(q), clip))
    if drive.name == "wind":
        scene = float(np.linalg.norm(drive.scene, axis=1).max())
        peak = float(np.linalg.norm(drive.total_wind(theta), axis=1).max())
        figures.update(wind_peak=peak, scene_wind_peak=scene, wind_peak_ratio=peak / scene if scene > 0 else None,
                       wind=prob.frames_of(drive.total_wind(theta)).tolist(),
                       scene_wind=prob.frames_of(drive.scene).tolist())
    return figures


def motion_words(figures):
    """What the loop needed, in words: "gusts up to 1.9x the scene's wind" or "body forces up to 0.12 g"."""
    if figures["family"] == "wind":
        if figures["wind_peak_ratio"] is None:
            return f"gusts up to {figures['wind_peak']:.3g} (the scene's wind is still)"
        return f"gusts up to {figures['wind_peak_ratio']:.2g}x the scene's wind"
    return f"body forces up to {figures['drive_peak_g']:.2g} g"


def _verdict(prob, res, max_iters):
    m, motion = res.metrics["loop"], res.metrics["motion"]
    wrap = (f"wrap velocity jump {m['velocity_jump_ratio']:.3g}x and position jump {m['position_jump_ratio']:.3g}x "
            "the median frame boundary")
    kept = (f"moving at {motion['speed_ratio']:.2f}x the clip's speed with {motion_words(motion)}, residual "
            f"outside them {m['residual_rel_mean']:.2g} of the forces at play")
    if res.cancelled:
        res.status, res.message = CANCELLED, f"cancelled after {res.gauss_newton_iterations} iterations"
    elif res.stop_reason == "physics_tol":
        res.status, res.message = CONVERGED, f"converged: seamless and {kept}; {wrap}"
    elif res.stop_reason == "tol":
        res.status = CONVERGED if unseen(m) else CONVERGED_WITH_SEAM
        res.message = (f"converged: seamless, {kept}; {wrap}" if unseen(m) else
                       f"converged, but the wrap can still be seen: {kept}; {wrap}; "
                       + seam_advice(prob, res.q_steps, res.initial_conditions))
    elif res.stop_reason == "max_iters":
        res.status = ITERATION_CAP
        res.message = f"not converged: stopped at the iteration cap ({max_iters}), {kept}; {wrap}"
    else:
        res.status = NO_PROGRESS
        res.message = f"not converged: no step lowers the loss any further, {kept}; {wrap}"
    if motion["speed_ratio"] < KEPT_SPEED and not res.cancelled:
        res.message += f"; calmer than the clip ({motion['speed_ratio']:.0%} of its speed)"
        if (motion.get("force_needed") or 0.0) > 1.0:
            res.message += (f": its motion takes {motion['force_needed']:.2g}x the force of gusts within "
                            f"{motion['wind_bound']:.2g}x the scene's wind (a stronger wind in the scene keeps more)")
    res.success = res.status == CONVERGED
    res.seconds = res.fast_projection_seconds + res.gauss_newton_seconds
