"""Make Loop on Blender cloth scenes of increasing size, end to end with bake.py's defaults (bpy module).

    .venv/bin/python -m benchmarks blender_cloth [--cases flag square ...] [--sweep] [--keep DIR] [-- BAKE OPTIONS]

Per case: builds the scene with the bpy module, bakes Blender's cloth cache (timed), saves the .blend, runs
``cyclic_loop_addon/bake.py`` on it in a child process with its defaults except ``--frames`` (the loop's
frames, after the settle-from-rest start) and any BAKE OPTIONS given after ``--``, and prints one row: the
route (gusts, or pure physics beyond the driven solve's size), vertices, loop frames, sub-steps per frame, free
unknowns, the bake's wall seconds and peak resident memory, Blender's own bake time of the same frames (the
cache's bake time times loop frames / cached frames), the loop's time in units of that bake and of one forward
simulation of the same problem (``solver_core.simulate``), the wrap's velocity- and position-jump ratios, the
RMS speed over the cache's and the mean relative residual under the solver's model, for the loop and the
cache. A case bake.py refuses before solving (its memory estimate above what the machine has: exit status 2)
prints the refusal instead of figures. ``--sweep`` runs the size sweep (flag, square, square48, square64,
square250) and ends with the growth exponents of wall time and peak memory against vertices x frames, fitted
over the cases that ran on the same route (gusts or pure physics).

Cases: ``flag``: 14 x 9 quads (150 vertices), left edge pinned, in a Wind field, quality 5, frames 30-77;
``square``: 32 x 32 quads (1,089 vertices) pinned at two corners, in wind, quality 5, frames 31-130;
``square16``: its reduced version for scaling, 16 x 16 quads (289 vertices), frames 16-65; ``square48`` and
``square64``: 48 x 48 and 64 x 64 quads (2,401 and 4,225 vertices), frames 31-130; ``square250``: the square
over 250 frames (31-280).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import bpy
import numpy as np

import solver_core as sc
from cyclic_loop_addon import bake
from cyclic_loop_addon.errors import LoopInputError
from cyclic_loop_addon.pipeline import scene_reader

from .blender_cloth_residual import _quiet

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "sample_scenes"))
import build_samples as bs  # noqa: E402  (the bundled samples' builder, a script in sample_scenes/)

# (quads x, quads y, size x, size y, pinned: "edge" or "corners", quality, loop frames)
CASES = {"flag": (14, 9, 1.5, 0.9, "edge", 5, (30, 77)),
         "square": (32, 32, 2.0, 2.0, "corners", 5, (31, 130)),
         "square16": (16, 16, 2.0, 2.0, "corners", 5, (16, 65)),
         "square48": (48, 48, 2.0, 2.0, "corners", 5, (31, 130)),
         "square64": (64, 64, 2.0, 2.0, "corners", 5, (31, 130)),
         "square250": (32, 32, 2.0, 2.0, "corners", 5, (31, 280))}
SWEEP = ("flag", "square", "square48", "square64", "square250")



def run_measured(cmd):
    """Run ``cmd``; (exit status, stdout, stderr, peak resident GB of that child alone, from ``os.wait4``: bake.py
    leaves the bpy module with ``os._exit``, so the child cannot report its own)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        return child.returncode, out.read(), err.read(), usage.ru_maxrss / 2 ** 20


def build(name):
    """Build and bake case ``name``; returns (object, cache bake seconds, cached frames)."""
    nx, ny, sx, sy, pinned, quality, (_, last) = CASES[name]
    bs._empty_scene(last)
    obj, verts = bs._grid("Cloth", nx + 1, ny + 1, sx, sy)
    verts = verts[:, [0, 2, 1]] + [sx / 2, 0.0, 2.0]          # vertical, in the XZ plane, left edge at x = 0
    bs._set_vertices(obj, verts)
    if pinned == "edge":
        pins = np.flatnonzero(verts[:, 0] < 1e-6)
    else:
        top = np.flatnonzero(np.isclose(verts[:, 2], verts[:, 2].max()))
        pins = top[[np.argmin(verts[top, 0]), np.argmax(verts[top, 0])]]
    bs._pin_group(obj, pins)
    mod = bs._cloth(obj, "Pin", last, quality=quality, mass=0.15, air_damping=1.0)
    bpy.ops.object.effector_add(type="WIND", location=(-1.0, 0.0, 2.0), rotation=(0.0, math.pi / 2, 0.6))
    bpy.context.active_object.field.strength = 10.0
    t0 = time.perf_counter()
    with _quiet():
        bs._bake(obj, mod)
    return obj, time.perf_counter() - t0, last


def forward_seconds(obj, frames, options=()):
    """Seconds of one forward simulation of the loop problem bake.py solves (its defaults and ``options``)."""
    argv = ["bake.py", "--", "--object", obj.name, "--frames", str(frames[0]), str(frames[1]), *options]
    prob = scene_reader.gather(bake._settings(bake.parse_args(argv))).problem
    t0 = time.perf_counter()
    sc.simulate(prob)
    return time.perf_counter() - t0, prob


def run_case(name, folder, options=()):
    """Build, bake, loop with bake.py's defaults; returns the printed figures as a dict (``refused``: bake.py's
    message when it refuses the loop before solving)."""
    obj, bake_s, cached = build(name)
    frames = CASES[name][-1]
    path = os.path.join(folder, f"{name}.blend")
    bpy.ops.wm.save_as_mainfile(filepath=path)
    n_loop = frames[1] - frames[0] + 1
    blender_s = bake_s * n_loop / cached
    try:
        forward_s, prob = forward_seconds(obj, frames, options)
    except LoopInputError as e:     # the refusal bake.py gives, before any array of the solve
        return dict(case=name, vertices=len(obj.data.vertices), frames=n_loop, blender_s=blender_s, refused=str(e))
    report = os.path.join(folder, f"{name}.json")
    cmd = [sys.executable, os.path.join(ROOT, "cyclic_loop_addon", "bake.py"), path, "--",
           "--object", obj.name, "--frames", str(frames[0]), str(frames[1]),
           "--output", os.path.join(folder, f"{name}_loop.blend"), "--json", report, *options]
    t0 = time.perf_counter()
    status, stdout, stderr, peak_gb = run_measured(cmd)
    seconds = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"bake.py failed on {name} (exit {status}):\n{stdout}\n{stderr}")
    with open(report) as f:
        rep = json.load(f)
    loop, source = rep["loop"], rep["source"]
    route = "pure physics" if (rep.get("motion") or {}).get("family", "none") == "none" else "gusts"
    return dict(case=name, route=route, vertices=prob.n_vertices, frames=n_loop, substeps=prob.substeps,
                unknowns=int(prob.free_mask().sum()), seconds=seconds, peak_gb=peak_gb, blender_s=blender_s,
                vs_blender=seconds / blender_s, vs_forward=seconds / forward_s, forward_s=forward_s,
                iterations=rep["gauss_newton_iterations"], init=rep["init_used"],
                jump_loop=loop["velocity_jump_ratio"], jump_cache=source["velocity_jump_ratio"],
                pjump_loop=loop["position_jump_ratio"], speed=loop["speed"] / source["speed"],
                res_loop=loop["residual_rel_mean"], res_cache=source["residual_rel_mean"], refused=None)


HEADER = ("case", "route", "verts", "frames", "sub", "unknowns", "s", "peak GB", "Blender s", "x Blender",
          "x forward", "GN it", "init", "wrap v", "wrap p", "v-jump cache", "speed", "resid loop", "resid cache")


def row(r):
    if r["refused"]:
        return (r["case"], "refused: " + r["refused"], r["vertices"], r["frames"], "", "", "", "",
                f"{r['blender_s']:.2f}")
    return (r["case"], r["route"], r["vertices"], r["frames"], r["substeps"], r["unknowns"], f"{r['seconds']:.1f}",
            f"{r['peak_gb']:.2f}", f"{r['blender_s']:.2f}", f"{r['vs_blender']:.0f}", f"{r['vs_forward']:.0f}",
            r["iterations"], r["init"], f"{r['jump_loop']:.2f}", f"{r['pjump_loop']:.2f}", f"{r['jump_cache']:.2f}",
            f"{r['speed']:.2f}", f"{r['res_loop']:.3f}", f"{r['res_cache']:.3f}")


def growth_exponents(rows):
    """{route: {"time": e, "memory": e}}: per route (gusts, pure physics) with at least two sizes, the
    least-squares slopes of log seconds and log peak GB against log(vertices x frames) over its rows that ran."""
    out = {}
    for route in sorted({r["route"] for r in rows if not r["refused"]}):
        ran = [r for r in rows if not r["refused"] and r["route"] == route]
        size = np.log([r["vertices"] * r["frames"] for r in ran])
        if len(set(size)) >= 2:
            out[route] = {key: float(np.polyfit(size, np.log([r[field] for r in ran]), 1)[0])
                          for key, field in (("time", "seconds"), ("memory", "peak_gb"))}
    return out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog="python -m benchmarks blender_cloth", description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="*", default=["flag", "square"], choices=list(CASES))
    parser.add_argument("--sweep", action="store_true", help=f"the size sweep: {', '.join(SWEEP)}")
    parser.add_argument("--keep", metavar="DIR", help="keep the scenes, loops and reports in DIR")
    options = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or tmp
        os.makedirs(folder, exist_ok=True)
        print(" | ".join(HEADER), flush=True)
        rows = []
        for name in SWEEP if args.sweep else args.cases:
            rows.append(run_case(name, folder, options))
            print(" | ".join(str(v) for v in row(rows[-1])), flush=True)
        if args.sweep:
            for route, exps in growth_exponents(rows).items():
                print(f"growth exponents against vertices x frames ({route}): time {exps['time']:.2f}, "
                      f"memory {exps['memory']:.2f}", flush=True)
