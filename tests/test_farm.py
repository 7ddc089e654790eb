"""The farm side without Blender: the batch file, its tasks and command lines, the summary table and exit
status, a task's files (finished / outputs or none), and the solver's memory estimate."""
import os
import shlex
import subprocess
import sys
import tomllib

import numpy as np
import pytest

from cyclic_loop_addon.jobs import batch as batch_file
from cyclic_loop_addon import farm
from cyclic_loop_addon.outputs import files
from cyclic_loop_addon.jobs import openjd, task_files
from cyclic_loop_addon.errors import LoopInputError
import solver_core as sc
from derivatives import quad_grid
from solver_core.optimize import memory
from solver_core.optimize.gauss_newton import auto_structured
from solver_core.optimize.structured_solve import LoopOperator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FARM_PY = os.path.join(ROOT, "cyclic_loop_addon", "farm.py")

BATCH = """
[batch]
name = "props"
output_dir = "out"
outputs = ["abc", "preview"]
blender = "/opt/blender/blender"
bake = true

[variants.draft]
init = "cache"
iterations = 4

[variants.final]
iterations = 60
soft = 1e-3

[[scene]]
file = "props.blend"
objects = ["Flag", "Sun,Planet"]
frames = [10, 40]

[[scene]]
file = "props.blend"
objects = ["Banner 2"]
variants = ["final"]
"""


@pytest.fixture
def batch_path(tmp_path):
    (tmp_path / "props.blend").write_bytes(b"BLENDER")
    path = tmp_path / "batch.toml"
    path.write_text(BATCH)
    return path


def test_every_object_and_variant_is_one_task(batch_path, tmp_path):
    tasks = batch_file.load(batch_path).tasks()
    assert [t.name for t in tasks] == ["props-Flag-draft", "props-Sun+Planet-draft", "props-Flag-final",
                                       "props-Sun+Planet-final", "props-Banner_2-final"]
    flag = tasks[0]
    assert flag.scene == str(tmp_path / "props.blend")
    assert flag.bake_args() == [
        "--object", "Flag", "--frames", "10", "40",
        "--abc", str(tmp_path / "out" / "props-Flag-draft.abc"),
        "--preview", str(tmp_path / "out" / "props-Flag-draft.png"),
        "--json", str(tmp_path / "out" / "props-Flag-draft.json"),
        "--init", "cache", "--iterations", "4", "--bake", "--skip-existing"]
    assert tasks[3].objects == "Sun,Planet" and tasks[3].bake_args()[-4:-2] == ["--soft", "0.001"]
    assert "--frames" not in tasks[4].bake_args()   # no frames: bake.py takes its default range


def test_command_runs_bake_py_in_background_blender(batch_path):
    task = batch_file.load(batch_path).tasks()[0]
    cmd = farm.command(task, "/opt/blender/blender")
    assert cmd[:8] == ["/opt/blender/blender", "-b", "--factory-startup", "--python-exit-code", "1", task.scene,
                       "--python", farm.BAKE_PY]
    assert cmd[8] == "--" and cmd[9:] == task.bake_args()
    assert "--skip-existing" not in farm.command(task, "blender", force=True)


def test_list_prints_one_command_line_per_task(batch_path):
    proc = subprocess.run([sys.executable, FARM_PY, "list", str(batch_path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 5 and lines[0].startswith("props-Flag-draft: /opt/blender/blender -b --factory-startup")
    bare = subprocess.run([sys.executable, FARM_PY, "list", "--bare", str(batch_path)], capture_output=True, text=True)
    tasks = batch_file.load(batch_path).tasks()
    assert [shlex.split(line) for line in bare.stdout.splitlines()] == [
        farm.command(t, "/opt/blender/blender") for t in tasks]               # quoted for a shell: "Banner 2"


@pytest.mark.parametrize("change, message", [
    (("frames = [10, 40]", "frames = [40, 10]"), "frames should be [first, last]"),
    (('variants = ["final"]', 'variants = ["nope"]'), "no [variants.nope] table"),
    (("soft = 1e-3", "softness = 1e-3"), "unknown setting softness"),
    (("iterations = 4", 'iterations = "4"'), "iterations should be an integer"),
    (('outputs = ["abc", "preview"]', 'outputs = ["fbx"]'), "outputs should be some of"),
    (('file = "props.blend"\nobjects = ["Banner 2"]', 'file = "gone.blend"\nobjects = ["Banner 2"]'),
     "no such .blend file"),
    (('objects = ["Banner 2"]', 'objects = ["Flag"]\nframes = [10, 40]'), "two tasks are named props-Flag-final"),
    (("[batch]", "[batch"), "is not valid TOML"),
])
def test_bad_batch_files_say_what_to_change(batch_path, change, message):
    batch_path.write_text(BATCH.replace(*change))
    with pytest.raises(batch_file.BatchError, match=message.replace("[", r"\[")):
        batch_file.load(batch_path)


def test_a_bad_batch_file_exits_2_before_any_task(batch_path):
    batch_path.write_text(BATCH.replace("frames = [10, 40]", "frames = [40, 10]"))
    proc = subprocess.run([sys.executable, FARM_PY, "run", str(batch_path)], capture_output=True, text=True)
    assert proc.returncode == 2 and "error: [[scene]] 1: frames" in proc.stderr
    assert not os.path.exists(batch_path.parent / "out")


def test_dumps_writes_what_load_reads(tmp_path):
    (tmp_path / 'we"ird.blend').write_bytes(b"BLENDER")
    text = batch_file.dumps(dict(name="from Blender", output_dir="loops", outputs=["pc2"], bake=False),
                            {"draft one": dict(init="cache", iterations=3, tol=1e-6, colliders="")},
                            [dict(file='we"ird.blend', objects=["Flag", "A,B"], frames=[1, 24])])
    assert tomllib.loads(text)["variants"]["draft one"]["tol"] == 1e-6
    (tmp_path / "b.toml").write_text(text)
    batch = batch_file.load(tmp_path / "b.toml")
    assert [t.name for t in batch.tasks()] == ["we_ird-Flag-draft_one", "we_ird-A+B-draft_one"]
    assert batch.tasks()[1].bake_args(skip_existing=False)[-8:] == [
        "--init", "cache", "--iterations", "3", "--tol", "1e-06", "--colliders", ""]


def _row(name, code, stop_reason=None, seconds=1.0):
    report = {} if stop_reason is None else dict(
        stop_reason=stop_reason, gauss_newton_iterations=7,
        source=dict(position_jump=0.5, velocity_jump=2.0), loop=dict(position_jump=0.01, velocity_jump=0.2))
    return dict(task=name, status=farm._status(code, report), seconds=seconds, report=report, code=code)


def test_summary_table_and_exit_status():
    rows = [_row("a", 0, "tol"), _row("b", 0, "max_iters"), _row("c", 3), _row("d", 2)]
    assert [r["status"] for r in rows] == ["done", "not converged", "failed: solver", "failed: bad input"]
    assert _row("e", 0, "physics_tol")["status"] == "done"      # converged within the physics tolerance
    lines = farm.summary(rows)
    assert "0.5 -> 0.01" in lines[2] and "2 -> 0.2" in lines[2] and " 7 " in lines[2]
    assert lines[-1] == "1 done, 2 failed, 1 not converged"
    assert farm.exit_status(rows) == 2 and farm.exit_status(rows[:3]) == 3 and farm.exit_status(rows[:2]) == 0


def test_finished_means_report_newer_than_every_output(tmp_path):
    out, report = tmp_path / "a.pc2", tmp_path / "a.json"
    out.write_text("pc2")
    assert not task_files.finished([str(out)], str(report))
    report.write_text("{}")
    os.utime(out, ns=(1, 1))
    assert task_files.finished([str(out)], str(report))
    os.utime(out, ns=(os.stat(report).st_mtime_ns + 10**9,) * 2)   # an output rewritten after the report
    assert not task_files.finished([str(out)], str(report))
    assert not task_files.finished([str(tmp_path / "missing.abc")], str(report))


def test_skip_existing_needs_the_report():
    class Args:
        skip_existing, json, output, abc, pc2, preview = True, None, "a.blend", None, None, None
    with pytest.raises(LoopInputError, match="--skip-existing needs --json"):
        task_files.check_skip_existing(Args)


def test_a_failed_run_leaves_none_of_its_outputs(tmp_path):
    kept, new, scene = tmp_path / "kept.png", tmp_path / "new.pc2", tmp_path / "scene.blend"
    report = tmp_path / "r.json"
    for path in (kept, scene, report):
        path.write_text("before")
    paths = [str(kept), str(new), str(scene)]
    with pytest.raises(RuntimeError):
        with files.all_or_nothing(paths, str(report), keep=str(scene)):
            new.write_text("written by this run")
            scene.write_text("saved over the input")
            raise RuntimeError("export failed")
    assert not new.exists() and not report.exists()       # the old report no longer matches the outputs
    assert kept.read_text() == "before" and scene.read_text() == "saved over the input"
    with pytest.raises(LoopInputError):                  # bad input before writing: every file as it was
        with files.all_or_nothing([str(kept)], str(scene)):
            raise LoopInputError("no such object")
    assert kept.read_text() == "before" and scene.exists()


def test_a_task_cancelled_with_sigterm_leaves_none_of_its_outputs(tmp_path):
    """A farm cancels a task with SIGTERM: the outputs written so far go, the exit status says why."""
    out = tmp_path / "a.pc2"
    script = (f"import os, signal, sys; sys.path.insert(0, {ROOT!r})\n"
              "from cyclic_loop_addon.outputs.files import all_or_nothing\n"
              f"with all_or_nothing([{str(out)!r}], None):\n"
              f"    open({str(out)!r}, 'w').write('pc2')\n"
              "    os.kill(os.getpid(), signal.SIGTERM)\n"
              "    signal.pause()\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 128 + 15, proc.stderr
    assert not out.exists()


def test_memory_estimate_matches_the_measured_peaks():
    """Measured peaks (benchmarks/results/speed.md, blender_cloth.md, motion.md): structured 16.3 GB (2,000 x
    1,000 steps); CHOLMOD 1.04-1.39 GB at 51k unknowns (the flag post and the doughnut), 1.17 GB (the swinging
    cloth, 121 x 200) and 1.62 GB (the wobbly bar, 128 x 250); the driven solve (bake.py with gusts) 0.47 GB
    (the README flag, 70 x 24), 0.63 GB (the gusts flag, 70 x 48), 1.27 GB (the 150-vertex flag, 150 x 48),
    2.71 GB (the 289-vertex square, 289 x 50). The estimate stays within 40 % above and never below by more
    than 10 %."""
    driven = ("linearized", True, False, True, True)
    for measured, args in ((16.3e9, (2000, 1000, "backward")), (1.04e9, (176, 100, "linearized", True)),
                           (1.39e9, (294, 60, "linearized", True)), (1.17e9, (121, 200, "backward")),
                           (1.62e9, (128, 250, "backward")), (0.47e9, (70, 24, *driven)),
                           (0.63e9, (70, 48, *driven)), (1.27e9, (150, 48, *driven)),
                           (2.71e9, (289, 50, *driven))):
        assert 0.9 * measured <= memory.peak_bytes(*args) <= 1.4 * measured, args
    with pytest.raises(ValueError, match="at least one vertex"):
        memory.peak_bytes(0, 10, "backward")


def test_auto_takes_the_direct_solve_while_its_factor_is_small():
    """Every paper scene at scale 1 (up to the wobbly bar's 96,000 unknowns) takes CHOLMOD; a loop with
    large steps (a 1,000-vertex soft body over 13 frames: 39,000 unknowns) or a long large one the
    structured solve; Blender cloth (velocity terms) by its unknowns."""
    for vertices, steps in ((176, 100), (208, 60), (121, 200), (243, 100), (128, 250)):
        assert not auto_structured(3 * vertices * steps, steps), (vertices, steps)
    assert auto_structured(3 * 1000 * 13, 13) and auto_structured(3 * 2000 * 1000, 1000)
    assert not auto_structured(51_156, 100, velocity_terms=True) and auto_structured(60_000, 400, velocity_terms=True)


def test_step_memory_follows_the_variant_model_and_substeps():
    """Small Blender cloth stays on CHOLMOD; large cloth in pure physics, as Blender cloth (velocity terms) or as
    a thin shell (backward Euler), takes the structured solve, linear in the unknowns: 2,000 x 300 steps is
    1.8 M unknowns, 5.3 GB. The designed gusts (the default) factor a loop at once up to the direct solve's
    size, and larger loops are pure physics."""
    flag = dict(vertices=70, substeps=4, physics_substeps=4, scheme="linearized", velocity_terms=True)
    assert openjd.memory_mib(flag, (49, 60), {}) == 768      # the driven solve: its factor and its Jacobian
    big = dict(flag, vertices=2000)
    shell = openjd.memory_mib(big, (1, 300), {"model": "shell", "substeps": 1, "gusts": False})
    # as Blender cloth the operator also stores the linearized scheme's offset-0 values: 1.1 kB per unknown more
    assert shell == 5120 and openjd.memory_mib(big, (1, 300), {"substeps": 1, "gusts": False}) == 7168
    # beyond the driven solve's size the designed gusts give way to pure physics: the same estimate
    assert openjd.memory_mib(big, (1, 300), {"substeps": 1}) == 7168
    assert openjd.memory_mib(flag, (49, 60), {"gusts": False}) <= openjd.memory_mib(flag, (49, 60), {})


def test_sparse_offsets_are_the_structured_operators():
    """``memory.sparse_offsets`` counts the time offsets ``LoopOperator`` stores values for: Blender cloth on
    the frame grid (0, +1), on its own sub-steps (the explicit hinges add -1), a shell under backward Euler."""
    rest, faces = quad_grid(2, 2)
    model, dt, substeps = sc.blender_cloth_problem_parts(rest, faces, sc.CLOTH_SETTINGS_DEFAULTS, fps=24)
    for steps, explicit in ((1, False), (substeps, True)):
        prob = sc.LoopProblem(model, 4, dt, rest, rest, scheme="linearized", substeps=steps)
        assert len(LoopOperator(prob).offsets) == memory.sparse_offsets("linearized", True, explicit) == 2 + explicit
    quads = np.asarray(faces)
    tris = np.concatenate([quads[:, :3], quads[:, [0, 2, 3]]])
    shell = sc.LoopProblem(sc.Cloth(rest, tris, youngs_modulus=1e4), 4, dt, rest, rest, scheme="backward")
    assert len(LoopOperator(shell).offsets) == memory.sparse_offsets("backward") == 1


def test_cloth_memory_takes_the_default_frame_grid_and_loop_frames():
    """A Blender cloth task in pure physics: the probe's default steps per frame (1) over its default loop
    frames, not the quality over the scene range; the default soft first frames count the structured solve's
    frame blocks: the 32 x 32-quad square over 100 frames peaked at 6.81 GB (pure physics,
    benchmarks/results/blender_cloth.md); its Blender sub-steps (substeps 5) count the explicit terms. Too large
    for the designed gusts' direct solve, it is estimated as pure physics without options too."""
    square = dict(vertices=1089, substeps=1, physics_substeps=5, scheme="linearized", velocity_terms=True,
                  soft=1000.0, frames=[44, 130])
    pure = {"gusts": False}
    grid = openjd.memory_mib(square, square["frames"], pure)
    assert 0.9 * 6.81e9 <= openjd.memory_mib(square, (31, 130), pure) * openjd.MIB <= 1.4 * 6.81e9
    assert openjd.memory_mib(square, square["frames"], {**pure, "soft": 0.0}) < grid / 3      # the sweep: no blocks
    assert openjd.memory_mib(square, (1, 130), {**pure, "substeps": 5}) > 4 * grid
    assert openjd.memory_mib(square, (31, 130), {}) == openjd.memory_mib(square, (31, 130), pure)


def test_every_bake_output_counts_for_a_finished_task_and_can_be_batched(batch_path, tmp_path):
    import argparse
    from cyclic_loop_addon.outputs.catalog import PRODUCTS
    vat = tmp_path / "loop_vat"
    args = argparse.Namespace(**{out.name: None for out in PRODUCTS}, json=str(tmp_path / "r.json"), skip_existing=True)
    args.vat, args.glb = str(vat), str(tmp_path / "loop.glb")
    assert task_files.outputs(args) == [str(vat), str(tmp_path / "loop.glb")]
    (tmp_path / "r.json").write_text("{}")
    assert not task_files.check_skip_existing(args)      # the VAT folder and the GLB were never written
    vat.mkdir()
    (tmp_path / "loop.glb").write_bytes(b"glTF")
    for path in (vat, tmp_path / "loop.glb"):
        os.utime(path, ns=(1, 1))
    assert task_files.check_skip_existing(args)
    batch_path.write_text(BATCH.replace('outputs = ["abc", "preview"]', 'outputs = ["vat", "glb", "html"]'))
    flag = batch_file.load(batch_path).tasks()[0]
    out = tmp_path / "out" / "props-Flag-draft"
    assert flag.bake_args()[5:11] == ["--vat", str(out), "--glb", f"{out}.glb", "--html", f"{out}.html"]
