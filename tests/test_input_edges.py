"""Input at the edges (docs/output_safety.md): the solver's command line refuses bad numbers and a link as its
output before any work; bake.py takes an object whose name has a comma, refuses an empty --object, and leaves
the bpy module once its outputs are written even when the scene has scripted drivers."""
import os
import subprocess
import sys

import bpy
import pytest

from blender_helpers import ROOT, open_sample

import solver_core as sc
from cyclic_loop_addon import bake  # noqa: E402  (after bpy)
from solver_core.scenes.nbody import nbody_problem

BAKE = os.path.join(ROOT, "cyclic_loop_addon", "bake.py")
QUICK = ["--frames", "49", "60", "--init", "cache", "--iterations", "1", "--substeps", "1"]


def _cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "solver_core", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


@pytest.fixture(scope="module")
def problem_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "p.npz"
    sc.save_problem(path, nbody_problem(3, seed=1, n_frames=12))
    return path


@pytest.mark.parametrize("option, value, words", [
    ("--max-iters", "0", "must be at least 1"), ("--max-iters", "-5", "must be at least 1"),
    ("--tol", "nan", "finite number above 0"), ("--tol", "0", "finite number above 0"),
    ("--physics-tol", "-1", "at least 0"),
])
def test_the_cli_refuses_bad_numbers(problem_file, tmp_path, option, value, words):
    proc = _cli("loop", str(problem_file), "-o", str(tmp_path / "r.npz"), option, value)
    assert proc.returncode == 2 and words in proc.stderr, proc.stderr
    assert not (tmp_path / "r.npz").exists()


def test_the_cli_refuses_a_link_as_its_output_before_solving(problem_file, tmp_path):
    target = tmp_path / "elsewhere.npz"
    target.write_bytes(b"keep")
    (tmp_path / "r.npz").symlink_to(target)
    proc = _cli("loop", str(problem_file), "-o", str(tmp_path / "r.npz"))
    assert proc.returncode == 2 and "link or a special file" in proc.stderr, proc.stderr
    assert "[" not in proc.stdout        # no progress line: nothing was solved
    assert target.read_bytes() == b"keep" and os.path.islink(tmp_path / "r.npz")


def test_an_object_whose_name_has_a_comma_is_one_object(tmp_path, capsys):
    path = open_sample("flag", tmp_path)
    bpy.data.objects["Flag"].name = "Flag,left"
    bpy.ops.wm.save_mainfile(filepath=path)
    assert bake.object_names(["Flag,left"], bpy.data.objects) == ("Flag,left",)
    assert bake.object_names(["Sun,Planet"], bpy.data.objects) == ("Sun", "Planet")
    status = bake.main(["bake.py", path, "--", "--object", "Flag,left", *QUICK, "--pc2", str(tmp_path / "r.pc2")])
    assert status == 0, capsys.readouterr().err
    assert (tmp_path / "r.pc2").exists()


def test_the_farm_probe_reads_an_object_whose_name_has_a_comma_as_one_object(tmp_path):
    """jobs/probe.py reads object specs as bake.py reads --object (batch.object_names): the size of
    "Flag,left" is that object's, "Sun,Planet" still names two objects."""
    from cyclic_loop_addon.jobs import probe
    open_sample("flag", tmp_path)
    bpy.data.objects["Flag"].name = "Flag,left"
    found = probe.sizes(["Flag,left", "Flag,Planet"])
    assert found["Flag,left"]["vertices"] == len(bpy.data.objects["Flag,left"].data.vertices)
    assert found["Flag,Planet"] == {"error": f"no object 'Flag' in {bpy.data.filepath}"}


@pytest.mark.parametrize("tol", ["inf", "nan", "0"])
def test_bake_refuses_a_tolerance_that_is_not_finite(tmp_path, capsys, tol):
    path = open_sample("flag", tmp_path)
    status = bake.main(["bake.py", path, "--", "--object", "Flag", *QUICK, "--tol", tol,
                        "--pc2", str(tmp_path / "r.pc2")])
    assert status == 2 and "finite positive number" in capsys.readouterr().err
    assert not (tmp_path / "r.pc2").exists()


def test_an_empty_object_name_is_refused(tmp_path, capsys):
    path = open_sample("flag", tmp_path)
    status = bake.main(["bake.py", path, "--", "--object", "", *QUICK, "--pc2", str(tmp_path / "r.pc2")])
    assert status == 2 and "--object needs an object name" in capsys.readouterr().err
    assert not (tmp_path / "r.pc2").exists()


def test_bake_leaves_a_scene_with_scripted_drivers(tmp_path):
    path = open_sample("flag", tmp_path)
    flag = bpy.data.objects["Flag"]
    flag["drive"] = 0.0
    driver = flag.driver_add('["drive"]').driver
    driver.type = "SCRIPTED"
    driver.expression = "__import__('math').sin(frame) * 0.0"
    assert not driver.is_simple_expression
    bpy.ops.wm.save_mainfile(filepath=path)
    assert bake.scripted_drivers() == 1
    proc = subprocess.run([sys.executable, BAKE, path, "--", "--object", "Flag", *QUICK,
                           "--pc2", str(tmp_path / "r.pc2")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "the scene has 1 scripted drivers" in proc.stdout
    assert (tmp_path / "r.pc2").exists()
