"""The benchmarks' one entry point: ``python -m benchmarks --help`` lists every benchmark module, and each
benchmark that needs no Blender gives its options."""
import os
import subprocess
import sys

import numpy as np
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


@pytest.mark.parametrize("n_frames", [7, 8])
def test_circulant_preconditioner_inverts_the_frame_averaged_operator(n_frames):
    """The benchmarked block-circulant preconditioner is exact on a loop operator that does not vary over the
    frames (odd and even frame counts, soft first frames), so its PCG counts on the real loops measure how much
    their stiffness varies, not a slip in its transform."""
    pytest.importorskip("sksparse")
    import solver_core as sc
    from benchmarks.circulant import averaged_error
    from derivatives import quad_grid

    rest, faces = quad_grid(3, 2)
    model, dt, substeps = sc.blender_cloth_problem_parts(rest, faces, dict(sc.CLOTH_SETTINGS_DEFAULTS), fps=24)
    rng = np.random.default_rng(0)
    prob = sc.LoopProblem(model, n_frames, dt, rest, rest + 0.003, scheme="linearized", eps0=1e-3, eps1=1e-2,
                          pins=np.array([0, 3]), substeps=substeps)
    q = prob.apply_constraints(rest[None] + 0.03 * rng.normal(size=(prob.n_steps,) + rest.shape))
    assert averaged_error(prob, q, damping=1e-3) < 1e-9
