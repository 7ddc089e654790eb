"""Seconds of the direct solve's Gauss–Newton system (J, J^T B J and the gradient) on the flag, frames 49-72.

    .venv/bin/python -m benchmarks assembly [--repeat 3] [--checkout DIR]

Gathers the flag (frames 49-72) from sample_scenes/flag.blend with the bpy wheel, starts from a crossfade of
its cache and times ``GaussNewton.system`` as Gauss–Newton calls it (the residual given): the first call,
which computes the sparsity pattern, then ``--repeat`` more. ``--checkout DIR``: the solver and add-on of
another checkout (a ``git worktree`` of an earlier commit), to compare the two back to back.
"""
import argparse
import os
import resource
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAG = os.path.join(ROOT, "sample_scenes", "flag.blend")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks assembly", description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--checkout", default=ROOT)
    args = p.parse_args(argv)
    # the checkout's solver_core and cyclic_loop_addon, imported here first (nothing above imports them)
    sys.path.insert(0, os.path.abspath(args.checkout))
    import bpy
    import solver_core as sc
    from cyclic_loop_addon.pipeline import scene_reader
    from solver_core.optimize.gauss_newton import GaussNewton
    from solver_core.physics.residual import residual_steps

    bpy.ops.wm.open_mainfile(filepath=FLAG)
    gathered = scene_reader.gather(scene_reader.LoopSettings(objects=("Flag",), frame_start=49, frame_end=72), None)
    prob = gathered.problem
    q = prob.apply_constraints(prob.steps_of(sc.crossfade_loop(gathered.source)))
    u = residual_steps(prob, q)
    gn = GaussNewton(prob, backend="cholmod")
    seconds = []
    for _ in range(args.repeat + 1):
        t0 = time.perf_counter()
        H, _ = gn.backend.system(q, u)
        seconds.append(time.perf_counter() - t0)
    print(f"{sc.__file__}: {int(prob.free_mask().sum())} unknowns, H nnz {H.nnz}; system: first call "
          f"{seconds[0]:.2f} s, then {' '.join(f'{s:.2f}' for s in seconds[1:])} s; peak "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
