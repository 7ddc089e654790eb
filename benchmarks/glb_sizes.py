"""GLB size against the raw data for every glTF shading and storage, on a sample's loop.

``python -m benchmarks glb_sizes [--sample flag] [--frames A B]`` gathers the sample with the bpy module
(bake.py's reader), takes the crossfade of its cache as the loop (the size does not depend on how the loop was
solved), writes it through ``gltf.export_gltf`` with each shading and storage into a temporary folder, and
prints bytes, the ratio to the raw data (vertices x frames x 3 float32), the quantization step and the
largest quantization error. Results: benchmarks/results/engines.md.
"""
import argparse
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks glb_sizes", description=__doc__.splitlines()[0])
    p.add_argument("--sample", default="flag", help="a sample of sample_scenes/ (default flag)")
    p.add_argument("--object", default="Flag")
    p.add_argument("--frames", nargs=2, type=int, default=(49, 72), metavar=("A", "B"))
    args = p.parse_args(argv)
    import bpy
    sys.path.insert(0, ROOT)
    from cyclic_loop_addon.core import sc
    from cyclic_loop_addon.outputs import gltf
    from cyclic_loop_addon.pipeline import scene_reader
    bpy.ops.wm.open_mainfile(filepath=os.path.join(ROOT, "sample_scenes", f"{args.sample}.blend"))
    gathered = scene_reader.gather(scene_reader.with_defaults(scene_reader.LoopSettings(
        objects=(args.object,), frame_start=args.frames[0], frame_end=args.frames[1])))
    q = sc.crossfade_loop(gathered.source)
    print(f"{args.sample}: {gathered.n_written} vertices, {gathered.n_frames} frames")
    print("| shading | storage | GLB bytes | raw bytes | GLB / raw | position step (m) | largest error (m) |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for shading in gltf.SHADINGS:
            for storage in gltf.STORAGES:
                f = gltf.export_gltf(gathered, q, os.path.join(folder, f"{shading}_{storage}.glb"),
                                     shading=shading, storage=storage)
                print(f"| {shading} | {storage} | {f['glb_bytes']} | {f['raw_bytes']} | {f['ratio']:.2f} | "
                      f"{f['position_step']:.3g} | {f['max_quantization_error']:.3g} |")
