"""A real Blender window under Xvfb (Debian's `blender`, `xvfb`): open the Loop tab, click Make Loop on
the flag sample, cancel with Esc, run to the end while orbiting the view; tests/gui_driver.py does it
inside Blender and the screenshots of the panel are kept in out/ci_screenshots/ (CI output).

    .venv/bin/python -m pytest -q -s tests/test_gui_xvfb.py     (-s shows the measured redraw gaps)
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHOTS = os.path.join(ROOT, "out", "ci_screenshots")
BLENDER, XVFB = shutil.which("blender"), shutil.which("xvfb-run")

pytestmark = pytest.mark.skipif(not (BLENDER and XVFB) and not os.environ.get("CI"),
                                reason="needs the blender and xvfb-run executables; under CI they must run")


@pytest.fixture(scope="module")
def gui_run(tmp_path_factory):
    """Build the legacy zip and the flag sample (with this Blender), run the driver, return its result."""
    tmp = tmp_path_factory.mktemp("gui")
    subprocess.run([sys.executable, os.path.join(ROOT, "cyclic_loop_addon", "build_extension.py"),
                    "--legacy-only", "--out", str(tmp)], check=True, capture_output=True)
    subprocess.run([BLENDER, "-b", "--factory-startup", "--python",
                    os.path.join(ROOT, "sample_scenes", "build_samples.py"), "--", "--out", str(tmp), "flag"],
                   check=True, capture_output=True, timeout=300)
    os.makedirs(SHOTS, exist_ok=True)
    # The folders must exist: Blender 3.4 falls back to ~/.config/blender for a missing one (and would
    # read and save the user's preferences there).
    (tmp / "scripts").mkdir()
    (tmp / "config").mkdir()
    env = dict(os.environ, BLENDER_USER_SCRIPTS=str(tmp / "scripts"), BLENDER_USER_CONFIG=str(tmp / "config"))
    result_json = tmp / "result.json"
    proc = subprocess.run(
        [XVFB, "-a", "-s", "-screen 0 1280x900x24", BLENDER, "--enable-event-simulate",
         "--window-geometry", "0", "0", "1280", "900", str(tmp / "flag.blend"),
         "--python", os.path.join(ROOT, "tests", "gui_driver.py"), "--",
         str(tmp / "cyclic_loop-0.1.0-legacy.zip"), SHOTS, str(result_json)],
        env=env, capture_output=True, text=True, timeout=600)
    assert result_json.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(result_json.read_text())
    assert result["errors"] == [], result["errors"]
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout[-3000:] + proc.stderr[-3000:]
    return result


def test_loop_tab_opens(gui_run):
    assert gui_run["loop_tab_open"]


def test_esc_cancels_and_leaves_scene_unchanged(gui_run):
    assert gui_run["run1_started"] and gui_run["run1_progress_at_esc"] > 0
    assert gui_run["run1_message"].startswith("Cancelled")
    assert gui_run["run1_scene_unchanged"]


def test_solve_runs_in_a_child_process_while_the_view_is_used(gui_run):
    """Make Loop hands the solve to a child Python (Debian's Blender runs on the system Python 3.11, so
    there is one): the solver's numpy / SciPy work then never holds the GIL that Blender's Python
    (timers, panel drawing, the modal operator) needs. The view is orbited every half second meanwhile.

    The measured waits (for the GIL, between timer ticks, between viewport redraws) are printed (-s)
    but not asserted: under Xvfb a viewport redraw is software OpenGL (0.3 s to 0.5 s on a loaded
    2-core machine) and the driver's own screenshot holds the GIL, so they measure the machine more
    than the add-on."""
    assert gui_run["run1_solving_in"] == gui_run["run2_solving_in"] == "process"
    assert gui_run["orbits"] and set(gui_run["orbits"]) == {"FINISHED"}
    print(f"\nrun 2: {gui_run['run2_seconds']:.1f} s solving in a child process; longest waits: for the GIL "
          f"{gui_run['run2_longest_gil_wait']:.3f} s, between timer ticks {gui_run['run2_longest_tick_gap']:.3f} s, "
          f"between viewport redraws {gui_run['run2_longest_draw_gap']:.3f} s")


def test_progress_advances_while_window_redraws(gui_run):
    run2 = [s for s in gui_run["samples"] if s["label"] == "run2" and s["running"]]
    progress = [s["progress"] for s in run2]
    assert progress == sorted(progress) and len(set(progress)) >= 4, progress
    assert len({s["iteration"] for s in run2}) >= 4
    first, last = run2[0], run2[-1]
    assert last["timer_redraws"] - first["timer_redraws"] >= 5
    assert last["panel_draws"] - first["panel_draws"] >= 5
    assert last["viewport_draws"] - first["viewport_draws"] >= 5
    assert gui_run["second_make_loop"] == ["CANCELLED"]


def test_run_to_the_end_writes_loop_and_report(gui_run):
    assert gui_run["run2_started"] and gui_run["run2_message"].startswith("Loop written")
    rep = gui_run["report"]
    assert rep["has_report"] and rep["method"] == "physical" and rep["iterations"] > 0 and rep["seconds"] > 0
    assert gui_run["loop_keys_after"] == gui_run["n_loop_frames"]


def test_screenshots_saved(gui_run):
    for name in ("panel_before", "panel_during", "panel_cancelled", "panel_after"):
        path = gui_run["screenshots"][name]
        assert os.path.getsize(path) > 10_000, path
