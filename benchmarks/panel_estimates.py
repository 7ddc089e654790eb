"""The panel's phase costs before a run: the child solve's stage and iteration lines, time-stamped.

    python -m benchmarks panel_estimates gather --out DIR            # the flag at several sizes (bpy module)
    python -m benchmarks panel_estimates timeline DIR/flag_25_72_4 --backend auto --max-iters 2

``gather`` saves the flag sample's problem as the panel gathers it (``scene_reader.gather``; cache_or_forward,
Softness 1000) for frames 49-72 x 1 and 25-72 x 1, 2, 4 and 8 sub-steps, with its source cache; ``timeline``
runs the child's command line (``python -m solver_core loop``) on one of them and prints every stdout line
(stage lines, iterations) with the seconds since the start. Results: benchmarks/results/panel_estimates.md.
"""
import argparse
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = ((49, 72, 1), (25, 72, 1), (25, 72, 2), (25, 72, 4), (25, 72, 8))


def gather(out):
    """Save the flag's problems and source caches of SIZES in ``out`` as flag_FIRST_LAST_SUBSTEPS(.npz,
    _clip.npy)."""
    import bpy
    import numpy as np
    sys.path.insert(0, ROOT)
    import solver_core as sc
    from cyclic_loop_addon.pipeline import scene_reader
    bpy.ops.wm.open_mainfile(filepath=os.path.join(ROOT, "sample_scenes", "flag.blend"))
    obj = next(ob for ob in bpy.context.scene.objects if any(m.type == "CLOTH" for m in ob.modifiers))
    os.makedirs(out, exist_ok=True)
    for first, last, substeps in SIZES:
        settings = scene_reader.LoopSettings(objects=(obj.name,), frame_start=first, frame_end=last,
                                             model="blender_cloth", init="cache_or_forward", substeps=substeps,
                                             iterations=2, soft=1000.0)
        gathered = scene_reader.gather(settings)
        name = os.path.join(out, f"flag_{first}_{last}_{substeps}")
        sc.save_problem(name + ".npz", gathered.problem)
        np.save(name + "_clip.npy", gathered.source)
        print(name, gathered.problem.n_steps, int(gathered.problem.free_mask().sum()), flush=True)


def timeline(name, backend, max_iters):
    """Run the child solve on ``name``.npz and print its stdout lines time-stamped; its exit status."""
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "solver_core", "loop", name + ".npz", "-o", name + "_result.npz",
                             "--clip", name + "_clip.npy", "--init", "cache_or_forward", "--max-iters", str(max_iters),
                             "--backend", backend], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:
        print(f"{time.monotonic() - t0:8.2f} {line.rstrip()}", flush=True)
    status = proc.wait()
    print(f"{time.monotonic() - t0:8.2f} exit {status}", flush=True)
    return status


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks panel_estimates", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("gather")
    p.add_argument("--out", required=True)
    p = sub.add_parser("timeline")
    p.add_argument("name", help="a saved problem without .npz")
    p.add_argument("--backend", default="auto", choices=["auto", "cholmod", "scipy", "structured"])
    p.add_argument("--max-iters", type=int, default=2)
    args = parser.parse_args(argv)
    if args.command == "gather":
        gather(args.out)
        return 0
    return timeline(args.name, args.backend, args.max_iters)


if __name__ == "__main__":
    sys.exit(main())
