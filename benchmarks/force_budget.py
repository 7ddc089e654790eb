"""The wind's force budget: how much force a clip's motion takes against gusts within the wind bound.

    .venv/bin/python -m benchmarks force_budget [--cases readme gusts flag square16 square ...] [--gusts]

Per case the scene is gathered as bake.py gathers it (``benchmarks.motion.bake_job``: a sample, or a
``blender_cloth`` scene built and baked here) and one row is printed, forces as RMS per free vertex in
newtons: gravity, the scene wind's force, a wind at the bound (``MotionOptions.wind_bound`` times the scene
wind's peak) blowing along every triangle's own normal (``Wind.normal_forces``), the clip's inertial force
M (x_{k+1} - 2 x_k + x_{k-1}) / dt^2, and their ratio ``solver_core.motion.force_budget``: above 1 the bounded
gusts cannot keep the loop as lively as the clip.

``--gusts`` also simulates the model forward from the clip's first two frames for five loop periods under a
sinusoidal gust along the scene wind, W(t) = W0 (1 + a sin(2 pi c t / T)) (T the loop's length, c gusts per
loop), and prints the last period's RMS speed over the clip's and its distance from the period before (in
motions: the clip's RMS distance from its mean shape). Results: benchmarks/results/motion.md.
"""
import argparse
import os
import tempfile

import numpy as np

import solver_core as sc
from cyclic_loop_addon.errors import LoopInputError
from solver_core.options import DEFAULTS
from solver_core.physics.driving import choose_drive
from solver_core.physics.models.base import Model
from solver_core.physics.models.external import Gravity, Wind

from .blender_cloth import CASES as SCENES
from .motion import bake_job

CASES = ("readme", "gusts", *SCENES)
DEFAULT_CASES = ("readme", "gusts", "flag", "square16", "square")
PERIODS = 5
GAINS = (1.0, 2.5, 5.0, 10.0)
GUSTS_PER_LOOP = (1, 2, 4)


def gather(name, folder):
    """(LoopProblem, clip) of case ``name`` as bake.py's defaults gather it."""
    from cyclic_loop_addon import bake
    from cyclic_loop_addon.pipeline import scene_reader

    blend, options = bake_job(name, folder)
    args = bake.parse_args(["bake.py", blend, "--", *options])
    bake._open(args)
    gathered = scene_reader.gather(bake._settings(args))
    return gathered.problem, np.asarray(gathered.source, dtype=float)


def _rms(forces, free):
    return float(np.sqrt(np.mean(np.sum(forces[:, free] ** 2, axis=-1))))


def budget_row(prob, clip, wind_bound):
    """The forces of the budget (RMS per free vertex) and ``force_budget``'s ratio, as a dict."""
    drive = choose_drive(prob)
    free, t = prob.free_vertices(), np.arange(len(clip), dtype=float)
    gravity = sum(term.forces(clip, t) for term in prob.model.terms if isinstance(term, Gravity))
    inertia, bound = sc.motion.budget_forces(prob, drive, clip, wind_bound)
    return dict(gravity=_rms(gravity, free), wind=_rms(drive.term.forces(clip, t), free), bound=bound,
                inertia=inertia, needed=sc.motion.force_budget(prob, drive, clip, wind_bound))


def gust_sweep(prob, clip):
    """{(a, c): (speed over the clip's, last period's distance from the one before)} of the forward gusts."""
    wind = next(term for term in prob.model.terms if isinstance(term, Wind))
    n = prob.n_frames
    scene = wind._wind_at(np.arange(n, dtype=float), n)
    peak = float(np.linalg.norm(scene, axis=1).max())
    along = scene.mean(axis=0) / np.linalg.norm(scene.mean(axis=0))
    motion = np.sqrt(np.mean(np.sum((clip - clip.mean(axis=0)) ** 2, axis=-1)))
    clip_speed = sc.metrics.rms_speed(clip, prob.dt)
    out = {}
    for gain in GAINS:
        for cycles in GUSTS_PER_LOOP:
            phase = 2 * np.pi * cycles * np.arange(n) / n
            gusts = peak * along[None] * (1 + gain * np.sin(phase))[:, None]
            terms = [Wind(term.n_vertices, term.triangles, gusts, term.coefficient) if term is wind else term
                     for term in prob.model.terms]
            model = Model(prob.model.mass, terms, prob.model.damping, prob.model.velocity_terms)
            run = sc.LoopProblem(model, n, prob.dt, prob.r0, prob.r1, scheme=prob.scheme, pins=prob.pins,
                                 pin_positions=prob.pin_positions, substeps=prob.substeps)
            frames = sc.simulate(run, n_states=PERIODS * n * prob.substeps)[::prob.substeps]
            last, before = frames[-n:], frames[-2 * n:-n]
            out[gain, cycles] = (sc.metrics.rms_speed(last, prob.dt) / clip_speed,
                                 float(np.sqrt(np.mean(np.sum((last - before) ** 2, axis=-1))) / motion))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks force_budget", description=__doc__.splitlines()[0])
    p.add_argument("--cases", nargs="*", default=list(DEFAULT_CASES), choices=CASES)
    p.add_argument("--gusts", action="store_true", help="also the forward simulations under sinusoidal gusts")
    p.add_argument("--wind-bound", type=float, default=DEFAULTS.motion.wind_bound)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        print("case | verts x frames | gravity | scene wind | gusts at the bound | clip inertia | force needed",
              flush=True)
        problems = {}
        for name in args.cases:
            try:
                prob, clip = problems[name] = gather(name, folder)
            except LoopInputError as exc:       # bake.py's memory check refuses it before any array
                print(f"{name} | refused: {exc}", flush=True)
                continue
            r = budget_row(prob, clip, args.wind_bound)
            print(f"{name} | {prob.model.n_vertices} x {prob.n_frames} | {r['gravity']:.3f} | {r['wind']:.3f} | "
                  f"{r['bound']:.3f} | {r['inertia']:.3f} | {r['needed']:.2f}", flush=True)
        if args.gusts:
            print("case | peak (1 + a) | speed, repeats at c = " + ", ".join(map(str, GUSTS_PER_LOOP)), flush=True)
            for name, (prob, clip) in problems.items():
                sweep = gust_sweep(prob, clip)
                for gain in GAINS:
                    cells = " | ".join(f"{sweep[gain, c][0]:.2f}, {sweep[gain, c][1]:.2f}" for c in GUSTS_PER_LOOP)
                    print(f"{name} | {1 + gain:g}x | {cells}", flush=True)


if __name__ == "__main__":
    main()
