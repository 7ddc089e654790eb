"""GLB size against the raw data for every glTF shading and storage, on a sample's loop, and where its bytes go.

``python -m benchmarks glb_sizes [--sample flag] [--frames A B]`` gathers the sample with the bpy module
(bake.py's reader), takes the crossfade of its cache as the loop (the size does not depend on how the loop was
solved), writes it through ``gltf.export_gltf`` with each shading and storage into a temporary folder, and
prints bytes, the ratio to the raw data (vertices x frames x 3 float32), the quantization step, the largest
quantization error, the normal basis (morph targets, largest angle at a key), then the bytes of each file by
part: the GLB's headers, its JSON chunk, and the binary chunk by what each bufferView holds. Results:
benchmarks/results/engines.md.
"""
import argparse
import os
import struct
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PARTS = ("headers", "JSON", "base POSITION", "base NORMAL", "indices", "other attributes", "target POSITION",
         "target NORMAL", "animation input", "animation output", "padding")


def sizes(folder, options, sample="flag", obj="Flag", frames=(49, 72)):
    """``gltf.export_gltf`` of a sample's loop with each of ``options`` (dicts of shading and storage).

    Parameters
    ----------
    folder : str
        Where the files are written.
    options : list of dict
        ``shading`` and ``storage`` of each file.
    sample, obj : str
        The sample of sample_scenes/ and its object.
    frames : (int, int)
        The loop's first and last frame.

    Returns
    -------
    list of dict
        The figures of ``export_gltf`` for each of ``options``, with ``vertices`` and ``frames``.
    """
    import bpy
    sys.path.insert(0, ROOT)
    from cyclic_loop_addon.core import sc
    from cyclic_loop_addon.outputs import gltf
    from cyclic_loop_addon.pipeline import scene_reader
    bpy.ops.wm.open_mainfile(filepath=os.path.join(ROOT, "sample_scenes", f"{sample}.blend"))
    gathered = scene_reader.gather(scene_reader.with_defaults(scene_reader.LoopSettings(
        objects=(obj,), frame_start=frames[0], frame_end=frames[1])))
    q = sc.crossfade_loop(gathered.source)
    return [dict(gltf.export_gltf(gathered, q, os.path.join(folder, f"{o['shading']}_{o['storage']}.glb"), **o),
                 vertices=gathered.n_written, frames=gathered.n_frames) for o in options]


def breakdown(data):
    """Bytes of a GLB by part.

    Parameters
    ----------
    data : bytes
        The GLB.

    Returns
    -------
    dict
        Bytes of each of ``PARTS``: the GLB's and its chunks' headers, the JSON chunk (with its padding), each
        bufferView of the binary chunk once under what its accessors hold, and the rest of the binary chunk
        (alignment) as padding.
    """
    from cyclic_loop_addon.outputs import glb_loop
    doc, blob = glb_loop.read_glb(data)
    json_length = struct.unpack_from("<I", data, 12)[0]
    kind = {}                       # accessor -> part
    for mesh in doc.get("meshes", []):
        for prim in mesh["primitives"]:
            for name, index in prim["attributes"].items():
                kind[index] = f"base {name}" if name in ("POSITION", "NORMAL") else "other attributes"
            if "indices" in prim:
                kind[prim["indices"]] = "indices"
            for target in prim.get("targets", []):
                for name, index in target.items():
                    kind[index] = f"target {name}" if name in ("POSITION", "NORMAL") else "other attributes"
    for animation in doc.get("animations", []):
        for sampler in animation["samplers"]:
            kind[sampler["input"]], kind[sampler["output"]] = "animation input", "animation output"
    views = {}                      # bufferView -> part
    for index, acc in enumerate(doc.get("accessors", [])):
        part = kind.get(index, "other attributes")
        for view in [acc.get("bufferView")] + [acc["sparse"][k]["bufferView"] for k in ("indices", "values")
                                               if "sparse" in acc]:
            if view is not None:
                views.setdefault(view, part)
    parts = dict.fromkeys(PARTS, 0)
    parts["headers"] = len(data) - json_length - len(blob)
    parts["JSON"] = json_length
    for view, part in views.items():
        parts[part] += doc["bufferViews"][view]["byteLength"]
    parts["padding"] = len(blob) - sum(parts[p] for p in PARTS[2:-1])
    return parts


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks glb_sizes", description=__doc__.splitlines()[0])
    p.add_argument("--sample", default="flag", help="a sample of sample_scenes/ (default flag)")
    p.add_argument("--object", default="Flag")
    p.add_argument("--frames", nargs=2, type=int, default=(49, 72), metavar=("A", "B"))
    args = p.parse_args(argv)
    sys.path.insert(0, ROOT)
    from cyclic_loop_addon.outputs import gltf
    options = [{"shading": shading, "storage": storage} for shading in gltf.SHADINGS for storage in gltf.STORAGES]
    with tempfile.TemporaryDirectory() as folder:
        figures = sizes(folder, options, args.sample, args.object, tuple(args.frames))
        parts = [breakdown(open(f["path"], "rb").read()) for f in figures]
    print(f"{args.sample}: {figures[0]['vertices']} vertices, {figures[0]['frames']} frames")
    print("| shading | storage | GLB bytes | raw bytes | GLB / raw | position step (m) | largest error (m) | "
          "normal targets | largest normal angle (deg) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for f in figures:
        default = " (default)" if {k: f[k] for k in gltf.DEFAULTS} == gltf.DEFAULTS else ""
        print(f"| {f['shading']} | {f['storage']}{default} | {f['glb_bytes']} | {f['raw_bytes']} | {f['ratio']:.2f} | "
              f"{f['position_step']:.3g} | {f['max_quantization_error']:.3g} | {f['normal_targets']} | "
              f"{f['normal_error']:.2f} |")
    print()
    print("| bytes | " + " | ".join(f"{f['shading']} {f['storage']}" for f in figures) + " |")
    print("|---|" + "---|" * len(figures))
    for part in PARTS:
        print(f"| {part} | " + " | ".join(str(p[part]) for p in parts) + " |")
