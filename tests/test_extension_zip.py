"""The legacy add-on zip of tools/build_extension.py, extracted to a temporary folder: it holds the add-on and
the solver with its scenes (no benchmarks, tools or tests), and every ``python -m solver_core`` subcommand runs
from there."""
import os
import re
import subprocess
import sys
import zipfile

import pytest

import solver_core as sc
from solver_core.scenes.nbody import nbody_problem

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def addon_folder(tmp_path_factory):
    """The folder ``cyclic_loop/`` of the extracted legacy zip."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "build_extension.py"), "--legacy-only",
                    "--out", str(out)], check=True, capture_output=True)
    (zip_path,) = out.glob("*-legacy.zip")
    folder = tmp_path_factory.mktemp("extracted")
    with zipfile.ZipFile(zip_path) as zf:
        names = zf.namelist()
        zf.extractall(folder)
    tops = {name.split("/")[1] for name in names}
    assert {"__init__.py", "cyclic_loop_addon", "solver_core"} <= tops
    assert not tops & {"benchmarks", "tools", "tests", "sample_scenes"}
    assert "cyclic_loop/solver_core/scenes/demo_nbody.py" in names
    return folder / "cyclic_loop"


def solver_cli(folder, *args):
    """``python -m solver_core ARGS`` run in ``folder`` with nothing of the repository on its path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-m", "solver_core", *map(str, args)], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=600)


def test_every_subcommand_runs_from_the_extracted_zip(addon_folder, tmp_path):
    done = solver_cli(addon_folder, "--help")
    assert done.returncode == 0, done.stderr
    commands = re.search(r"\{([a-z_,]+)\}", done.stdout).group(1).split(",")
    for command in commands:
        done = solver_cli(addon_folder, command, "--help")
        assert done.returncode == 0, (command, done.stderr)
    done = solver_cli(addon_folder, "versions")
    assert done.returncode == 0, done.stderr
    problem = tmp_path / "problem.npz"
    sc.save_problem(str(problem), nbody_problem(3, seed=1, n_frames=12, perturbation=0.005))
    done = solver_cli(addon_folder, "loop", problem, "-o", tmp_path / "result.npz")
    assert done.returncode == 0, done.stderr
    assert sc.load_result(str(tmp_path / "result.npz")).q.shape == (12, 3, 3)
    pytest.importorskip("matplotlib")                      # the demo saves its plot with matplotlib
    done = solver_cli(addon_folder, "demo", "nbody", "--bodies", "3", "--out", tmp_path / "demo")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "demo" / "nbody_loop.png").exists()
