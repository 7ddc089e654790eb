"""Loops that keep the cache's motion: the motion targets on Blender scenes, end to end with bake.py (bpy module).

    .venv/bin/python -m benchmarks motion [--cases readme gusts flag square] [--pure] [--paper] [--keep DIR]

Per case, ``cyclic_loop_addon/bake.py`` runs in a child process (its peak resident memory read as
``blender_cloth`` does) with ``--json`` and ``--write-wind`` (the designed gusts keyed into the scene and
Blender's cloth re-simulated in them for three periods), and one row is printed from its report: vertices,
frames, wall seconds, peak GB, Gauss–Newton iterations and why they stopped, the wrap's velocity and position
jump ratios, the loop's RMS speed over the cache's, its RMS distance from the cache over the frames and at frame
0 (fractions of the cache's motion), the mean relative residual outside the driving force and the cache's,
the designed wind's peak over the scene wind's, the clip's inertial force over the force of gusts at the bound
(``motion.force_budget``: above 1 the bounded gusts cannot keep the clip's speed), and the re-simulation: its
last period's distance from the loop and from the period before (the same units).

Cases: ``readme``: the README's main job (flag.blend, frames 49-72, its options); ``gusts``: flag_gusts.blend
with bake.py's defaults; ``flag`` and ``square``: ``blender_cloth``'s 150-vertex flag and 1,089-vertex square,
built and baked here, with bake.py's defaults on their loop frames. ``--pure`` adds each case with
``--no-gusts`` (pure physics, the paper's formulation); ``--paper`` loops the paper's flag post and swinging
cloth (``solver_core.scenes.speed_problems``, scale 1) from their forward simulations with the driving force
allowed. Results: benchmarks/results/motion.md; the formulation: docs/design/motion.md.
"""
import argparse
import json
import os
import sys
import tempfile
import time

import bpy

import solver_core as sc
from solver_core.scenes import speed_problems

from .blender_cloth import CASES, ROOT, build, run_measured

README_JOB = ["sample_scenes/flag.blend", "--object", "Flag", "--frames", "49", "72", "--init", "cache",
              "--substeps", "1", "--soft", "1000", "--iterations", "20"]
GUSTS_JOB = ["sample_scenes/flag_gusts.blend", "--object", "Flag"]
HEADER = ("case", "verts", "frames", "s", "peak GB", "GN it", "stop", "wrap v", "wrap p", "speed", "dist",
          "dist0", "resid", "resid cache", "wind", "force need", "resim", "resim repeats")


def bake_job(name, folder):
    """(blend, bake.py options) of case ``name``: a sample, or a ``blender_cloth`` scene built and baked here."""
    if name == "readme":
        return os.path.join(ROOT, README_JOB[0]), README_JOB[1:]
    if name == "gusts":
        return os.path.join(ROOT, GUSTS_JOB[0]), GUSTS_JOB[1:]
    obj, _, _ = build(name)
    path = os.path.join(folder, f"{name}.blend")
    bpy.ops.wm.save_as_mainfile(filepath=path)
    first, last = CASES[name][-1]
    return path, ["--object", obj.name, "--frames", str(first), str(last)]


def run_case(name, folder, pure=False):
    """bake.py on case ``name`` (``pure``: with --no-gusts); the row's figures as a dict."""
    blend, options = bake_job(name, folder)
    label = name + (" (no gusts)" if pure else "")
    stem = os.path.join(folder, label.replace(" ", "_").replace("(", "").replace(")", ""))
    extra = ["--no-gusts"] if pure else ["--write-wind"]
    cmd = [sys.executable, os.path.join(ROOT, "cyclic_loop_addon", "bake.py"), blend, "--", *options,
           "--output", stem + "_loop.blend", "--json", stem + ".json", *extra]
    t0 = time.perf_counter()
    status, stdout, stderr, peak_gb = run_measured(cmd)
    seconds = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"bake.py failed on {label} (exit {status}):\n{stdout}\n{stderr}")
    with open(stem + ".json") as f:
        rep = json.load(f)
    motion = rep["motion"]
    again = motion.get("resimulated") or {}
    return dict(case=label, vertices=rep["n_vertices"], frames=rep["n_frames"], seconds=seconds,
                peak_gb=peak_gb,
                iterations=rep["gauss_newton_iterations"], stop=rep["stop_reason"],
                wrap_v=rep["loop"]["velocity_jump_ratio"], wrap_p=rep["loop"]["position_jump_ratio"],
                speed=motion["speed_ratio"], dist=motion["distance"], dist0=motion["first_frame_distance"],
                resid=rep["loop"]["residual_rel_mean"], resid_cache=rep["source"]["residual_rel_mean"],
                wind=motion.get("wind_peak_ratio"), force=motion.get("force_needed"), resim=again.get("last"),
                repeats=again.get("repeats"))


def paper_case(name):
    """The paper scene ``name`` at scale 1 looped from its forward simulation with the driving force allowed."""
    prob = speed_problems.PROBLEMS[name]()
    clip = sc.simulate(prob)
    t0 = time.perf_counter()
    res = sc.loop_clip(prob, clip, init="cache", max_iters=50)
    m, motion = res.metrics["loop"], res.metrics["motion"]
    return dict(case=f"paper {name} ({motion['family']})", vertices=prob.n_vertices, frames=prob.n_frames,
                seconds=time.perf_counter() - t0, peak_gb=float("nan"), iterations=res.gauss_newton_iterations,
                stop=res.stop_reason, wrap_v=m["velocity_jump_ratio"], wrap_p=m["position_jump_ratio"],
                speed=motion["speed_ratio"], dist=motion["distance"], dist0=motion["first_frame_distance"],
                resid=m["residual_rel_mean"], resid_cache=sc.loop_metrics(prob, clip)["residual_rel_mean"],
                wind=motion.get("wind_peak_ratio"), force=motion.get("force_needed"), resim=None, repeats=None)


def _cell(value, digits=2):
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def row(r):
    return (r["case"], r["vertices"], r["frames"], f"{r['seconds']:.1f}", _cell(r["peak_gb"]), r["iterations"],
            r["stop"], _cell(r["wrap_v"]), _cell(r["wrap_p"]), _cell(r["speed"]), _cell(r["dist"]),
            _cell(r["dist0"]), _cell(r["resid"], 4), _cell(r["resid_cache"], 3), _cell(r["wind"]), _cell(r["force"]),
            _cell(r["resim"]), _cell(r["repeats"]))


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks motion", description=__doc__.splitlines()[0])
    p.add_argument("--cases", nargs="*", default=["readme", "gusts", "flag", "square"],
                   choices=["readme", "gusts", *CASES])
    p.add_argument("--pure", action="store_true", help="also run each case with --no-gusts")
    p.add_argument("--paper", action="store_true", help="also loop the paper's flag post and swinging cloth")
    p.add_argument("--keep", metavar="DIR", help="keep the scenes, loops and reports in DIR")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or tmp
        os.makedirs(folder, exist_ok=True)
        print(" | ".join(HEADER), flush=True)
        for name in args.cases:
            for pure in ((False, True) if args.pure else (False,)):
                print(" | ".join(str(v) for v in row(run_case(name, folder, pure))), flush=True)
        if args.paper:
            for name in ("flag post", "swinging cloth"):
                print(" | ".join(str(v) for v in row(paper_case(name))), flush=True)
