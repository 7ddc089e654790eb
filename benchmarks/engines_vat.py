"""How many vertices of a VAT mesh address the wrong texel once Godot 3 has imported it (UV2 as half floats).

Subdivides the flag sample (``--cuts`` cuts per edge), bakes a short cloth cache, exports the VAT with the
add-on of ``--tree`` (default: this repository; give an older checkout to measure its layout), imports the
mesh in a throwaway headless Godot 3 project (``godot3-server``, the editor's glTF importer with its default
settings) and compares each stored UV2 with its vertex's texel. Prints one line of figures.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def godot_uv2(glb, folder, godot="godot3-server"):
    """(format flags, positions (m, 3), UV2 (m, 2)) of the first surface of ``glb`` as Godot 3 imports it."""
    project = os.path.join(folder, "godot")
    os.mkdir(project)
    shutil.copy(glb, os.path.join(project, "mesh.glb"))
    shutil.copy(os.path.join(ROOT, "tests", "godot", "vat_uv2.gd"), os.path.join(project, "vat_uv2.gd"))
    with open(os.path.join(project, "project.godot"), "w") as f:
        f.write('config_version=4\n\n[application]\nconfig/name="vat"\n')
    env = dict(os.environ, **{k: os.path.join(folder, k.lower()) for k in ("XDG_CONFIG_HOME", "XDG_DATA_HOME",
                                                                          "XDG_CACHE_HOME")})
    out = os.path.join(folder, "uv2.bin")
    for args in (["--editor", "--quit"], ["-s", "vat_uv2.gd", "res://mesh.glb", out]):
        subprocess.run([godot, "--path", project, *args], capture_output=True, timeout=300, env=env)
    if not os.path.exists(out):
        raise SystemExit(f"{godot} wrote no UV2 read-back; is it installed (.ci/setup)?")
    with open(out, "rb") as f:
        data = f.read()
    fmt, m = struct.unpack_from("<II", data, 4)
    values = np.frombuffer(data, "<f4", 5 * m, 12).reshape(m, 5).astype(np.float64)
    return fmt, values[:, :3], values[:, 3:]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks engines_vat", description=__doc__.splitlines()[0])
    parser.add_argument("--tree", default=ROOT, help="checkout whose cyclic_loop_addon exports the VAT")
    parser.add_argument("--cuts", type=int, default=6, help="subdivision cuts per edge of the flag (6: 2,752 vertices)")
    args = parser.parse_args(argv)
    sys.path.insert(0, os.path.abspath(args.tree))
    import bpy
    import bmesh          # importable once bpy is
    from scipy.spatial import cKDTree
    from cyclic_loop_addon.core import sc
    from cyclic_loop_addon.outputs import vat
    from cyclic_loop_addon.pipeline import scene_reader

    bpy.ops.wm.open_mainfile(filepath=os.path.join(args.tree, "sample_scenes", "flag.blend"))
    mesh = bpy.data.objects["Flag"].data
    bm = bmesh.new()
    bm.from_mesh(mesh)
    bmesh.ops.subdivide_edges(bm, edges=bm.edges[:], cuts=args.cuts, use_grid_fill=True)
    bm.to_mesh(mesh)
    bm.free()
    bpy.ops.ptcache.free_bake_all()
    a = bpy.context.scene["loop_frames"][0]
    g = scene_reader.gather(scene_reader.LoopSettings(objects=("Flag",), frame_start=a, frame_end=a + 5,
                                                      bake_missing=True))
    rest = np.array([v.co for v in mesh.vertices])
    with tempfile.TemporaryDirectory() as folder:
        path = vat.export_vat(g, sc.crossfade_loop(g.source), os.path.join(folder, "vat"))
        with open(path) as f:
            info = json.load(f)
        width, height = info["texture_size"]
        fmt, positions, uv2 = godot_uv2(os.path.join(folder, "vat", info["mesh"]), folder)
    _, vertex = cKDTree(rest).query(positions[:, [0, 2, 1]] * [1, -1, 1])
    column, row = np.floor(uv2[:, 0] * width).astype(int), np.floor(uv2[:, 1] * height).astype(int)
    wrong = row * width + column != vertex
    off = np.abs(uv2 * [width, height] - np.floor(uv2 * [width, height]) - 0.5).max(axis=0)
    print(f"texture {width} x {height}, {info['rows_per_frame']} rows per frame; {len(rest)} vertices, "
          f"{len(vertex)} in Godot (UV2 as half: {bool(fmt & 16384)}); wrong texel: {wrong.sum()} Godot vertices, "
          f"{len(set(vertex[wrong]))} mesh vertices, first at column {column[wrong].min() if wrong.any() else '-'}; "
          f"largest distance from the texel centre: {off[0]:.4f} (u), {off[1]:.4f} (v) texels")
