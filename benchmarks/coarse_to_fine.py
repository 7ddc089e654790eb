"""Coarse-to-fine against solving on the sub-step grid directly, on the flag's frames 49-72 (bpy module).

    .venv/bin/python -m benchmarks coarse_to_fine [--iterations K]

Gathers the flag sample (frames 49-72, 4 sub-steps per frame) as ``bake.py`` does and, from a crossfade
of Blender's cache, prints seconds, mean relative residual, the wrap's velocity-jump ratio and the loss
(all on the sub-step grid) of: the loop solved on the frame grid (20 iterations) and interpolated with
``prob.steps_of``; that loop refined by K iterations on the sub-step grid; and K iterations on the
sub-step grid directly. ``make_loop``'s defaults otherwise (backend "auto").
"""
import argparse
import os
import time

import bpy

import solver_core as sc
from cyclic_loop_addon.pipeline import scene_reader

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

COARSE_ITERATIONS = 20


def _row(label, seconds, prob, q_steps):
    m = sc.loop_metrics(prob, q_steps)
    print(f"{label:34s} {seconds:7.1f} s  residual {m['residual_rel_mean']:.3f}  "
          f"velocity-jump ratio {m['velocity_jump_ratio']:.2f}  loss {m['loss']:.4g}", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks coarse_to_fine", description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=12)
    args = parser.parse_args(argv)
    bpy.ops.wm.open_mainfile(filepath=os.path.join(ROOT, "sample_scenes", "flag.blend"))
    gathered = scene_reader.gather(scene_reader.LoopSettings(objects=("Flag",), frame_start=49, frame_end=72))
    prob, init = gathered.problem, sc.crossfade_loop(gathered.source)
    _row("cache (crossfade)", 0.0, prob, prob.steps_of(init))
    coarse = sc.LoopProblem(prob.model, prob.n_frames, prob.dt, prob.r0, prob.r1, scheme=prob.scheme,
                            pins=prob.pins, pin_positions=prob.pin_positions, substeps=1)
    t0 = time.perf_counter()
    frames = sc.make_loop(coarse, init=init, max_iters=COARSE_ITERATIONS).q
    t_coarse = time.perf_counter() - t0
    _row(f"frame grid ({COARSE_ITERATIONS} it), interpolated", t_coarse, prob, prob.steps_of(frames))
    t0 = time.perf_counter()
    fine = sc.make_loop(prob, init=prob.steps_of(frames), max_iters=args.iterations)
    _row(f"coarse-to-fine (+{args.iterations} it)", t_coarse + time.perf_counter() - t0, prob, fine.q_steps)
    t0 = time.perf_counter()
    direct = sc.make_loop(prob, init=init, max_iters=args.iterations)
    _row(f"sub-step grid directly ({args.iterations} it)", time.perf_counter() - t0, prob, direct.q_steps)
