"""The benchmarks' one entry point: ``python -m benchmarks --help`` lists every benchmark module, and each
benchmark that needs no Blender gives its options."""
import os
import subprocess
import sys

import pytest

from benchmarks.__main__ import BENCHMARKS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HELPERS = {"__init__", "__main__", "seam_plot"}       # modules the benchmarks share, not benchmarks


def run(*args):
    return subprocess.run([sys.executable, "-m", "benchmarks", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_help_lists_every_benchmark_module():
    modules = {name[:-3] for name in os.listdir(os.path.join(ROOT, "benchmarks")) if name.endswith(".py")}
    assert modules - HELPERS == set(BENCHMARKS)
    done = run("--help")
    assert done.returncode == 0, done.stderr
    for name in BENCHMARKS:
        assert f"  {name} " in done.stdout


@pytest.mark.parametrize("name", [name for name, needs in BENCHMARKS.items() if needs != "bpy module"])
def test_benchmark_gives_its_options(name):
    done = run(name, "--help")
    assert done.returncode == 0, done.stderr
    assert f"python -m benchmarks {name}" in done.stdout


def test_unknown_benchmark_is_refused():
    done = run("no_such_benchmark")
    assert done.returncode == 2 and "unknown benchmark" in done.stderr
