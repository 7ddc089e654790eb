"""The extension in the bpy module: built with tools/build_extension.py, installed by Blender's extension
machinery into a temporary repository, registered / unregistered / registered again, and Make Loop run
end to end (inline: the bpy module has no event loop, so the modal path is tested under Xvfb)."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

bpy = pytest.importorskip("bpy")
addon_utils = pytest.importorskip("addon_utils")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
from cyclic_loop_addon import bake  # noqa: E402
SAMPLES = os.path.join(ROOT, "sample_scenes")
REPO = "cyclic_loop_test"
MODULE = f"bl_ext.{REPO}.cyclic_loop"
PLATFORM = "linux-x64"


@pytest.fixture(scope="module")
def extension_zip(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "build_extension.py"),
                    "--platforms", PLATFORM, "--out", str(out)], check=True, capture_output=True)
    path = out / f"cyclic_loop-0.1.0-{PLATFORM.replace('-', '_')}.zip"
    assert path.exists(), sorted(os.listdir(out))
    return str(path)


@pytest.fixture(scope="module")
def installed(extension_zip, tmp_path_factory):
    """The extension installed (and enabled) by bpy.ops.extensions.package_install_files into a local
    repository in a temporary folder (the bundled wheels go to its .local site-packages)."""
    user = tmp_path_factory.mktemp("extensions")
    mp = pytest.MonkeyPatch()
    mp.setenv("BLENDER_USER_EXTENSIONS", str(user))
    repos = bpy.context.preferences.extensions.repos
    assert bpy.ops.preferences.extension_repo_add(name="Cyclic Loop Test", type="LOCAL", use_custom_directory=True,
                                                  custom_directory=str(user / REPO)) == {"FINISHED"}
    result = bpy.ops.extensions.package_install_files(filepath=extension_zip, repo=REPO, enable_on_install=True)
    assert result == {"FINISHED"}
    assert MODULE in bpy.context.preferences.addons
    yield sys.modules[MODULE]
    addon_utils.disable(MODULE)
    bpy.ops.preferences.extension_repo_remove(index=[r.module for r in repos].index(REPO), remove_files=True)
    mp.undo()


def open_sample(name, frames=None):
    """Open a sample .blend, select its simulated mesh and return it with its settings from physics."""
    bpy.ops.wm.open_mainfile(filepath=os.path.join(SAMPLES, f"{name}.blend"))
    scene = bpy.context.scene
    obj = next(ob for ob in scene.objects if any(m.type in {"CLOTH", "SOFT_BODY"} for m in ob.modifiers))
    for ob in scene.objects:
        ob.select_set(ob is obj)
    bpy.context.view_layer.objects.active = obj
    assert bpy.ops.cyclic_loop.physics_defaults() == {"FINISHED"}
    settings = obj.cyclic_loop_settings
    start, end = frames or scene["loop_frames"]
    settings.frame_start, settings.frame_end = start, end
    settings.substeps, settings.max_iters = 1, 2
    return obj, settings


def loop_keys(obj):
    keys = obj.data.shape_keys
    return [] if keys is None else [kb.name for kb in keys.key_blocks if kb.name.startswith("CyclicLoop.")]


def test_installed_through_extension_machinery(installed):
    assert installed.__file__.startswith(os.environ["BLENDER_USER_EXTENSIONS"])
    # The bundled package, not the checkout, provides the pipeline.
    assert sys.modules[MODULE + ".cyclic_loop_addon.core"].sc.__name__ == MODULE + ".solver_core"


def test_register_unregister_register(installed):
    addon_utils.disable(MODULE)
    assert not hasattr(bpy.types.Object, "cyclic_loop_settings")
    assert not hasattr(bpy.types, "CYCLIC_LOOP_OT_make_loop")
    addon_utils.enable(MODULE)
    assert hasattr(bpy.types.Object, "cyclic_loop_settings")
    assert hasattr(bpy.types, "CYCLIC_LOOP_OT_make_loop") and hasattr(bpy.types, "VIEW3D_PT_cyclic_loop")
    installed.unregister()
    installed.register()
    assert bpy.ops.cyclic_loop.make_loop.get_rna_type().name == "Make Loop"


def test_settings_default_from_physics_and_persist(installed, tmp_path):
    obj, settings = open_sample("flag")
    mod = next(m for m in obj.modifiers if m.type == "CLOTH")
    bpy.ops.cyclic_loop.physics_defaults()
    assert settings.model == "blender_cloth"
    assert settings.pin_group == mod.settings.vertex_group_mass != ""
    first, last = mod.point_cache.frame_start, mod.point_cache.frame_end
    assert (settings.frame_start, settings.frame_end) == (first + (last - first + 1) // 3, last)   # settled
    # Blender cloth's defaults that finish: from the cache and the solver's own simulation, on the frame
    # grid, soft first frames of eps 1000
    assert (settings.init, settings.substeps, settings.hard_initial, settings.soft_weight) == (
        "cache_or_forward", 1, False, 1000)
    # bake.py without solver options or frames takes the same defaults (one table: vocabulary.MODEL_DEFAULTS)
    baked = bake._settings(bake.parse_args(["bake.py", bpy.data.filepath, "--", "--object", obj.name]))
    assert (baked.frame_start, baked.frame_end, baked.init, baked.substeps, baked.soft) == (
        settings.frame_start, settings.frame_end, settings.init, settings.substeps, settings.soft_weight)
    settings.method, settings.max_iters, settings.scheme = "crossfade", 7, "backward"
    path, name = str(tmp_path / "saved.blend"), obj.name
    bpy.ops.wm.save_as_mainfile(filepath=path, copy=True)
    bpy.ops.wm.open_mainfile(filepath=path)
    saved = bpy.data.objects[name].cyclic_loop_settings
    assert (saved.method, saved.max_iters, saved.scheme, saved.initialized) == ("crossfade", 7, "backward", True)


def test_presets_take_the_models_default_sub_steps(installed):
    """Quick Preview: 8 iterations, one step per frame; Final: 50 iterations and the model's default steps
    (vocabulary.MODEL_DEFAULTS: one per frame for Blender cloth, the cloth's quality for the thin shell)."""
    obj, settings = open_sample("flag")
    quality = obj.modifiers["Cloth"].settings.quality
    assert quality > 1
    for model, preset, expected in (("blender_cloth", "preview", (8, 1)), ("blender_cloth", "final", (50, 1)),
                                    ("shell", "final", (50, quality)), ("shell", "preview", (8, 1))):
        settings.model = model
        assert bpy.ops.cyclic_loop.preset(preset=preset) == {"FINISHED"}
        assert (settings.max_iters, settings.substeps) == expected, (model, preset)


def test_make_loop_end_to_end_and_restore(installed):
    obj, settings = open_sample("flag")
    before = [v.co.copy() for v in obj.data.vertices]
    assert bpy.ops.cyclic_loop.make_loop() == {"FINISHED"}
    run = bpy.context.scene.cyclic_loop_run
    assert not run.running and run.has_report and run.object_name == obj.name
    assert run.init_used in {"fast_projection", "forward", "crossfade", "cache"} and run.iterations > 0 and run.seconds > 0
    assert 0 < run.seam_before < float("inf") and 0 < run.seam_after < float("inf") and run.residual > 0
    assert len(loop_keys(obj)) == settings.frame_end - settings.frame_start + 1
    assert bpy.ops.cyclic_loop.restore() == {"FINISHED"}
    assert loop_keys(obj) == [] and not run.has_report
    assert all(m.show_viewport for m in obj.modifiers)
    assert [v.co for v in obj.data.vertices] == before


def test_crossfade_baseline(installed):
    obj, settings = open_sample("flag")
    settings.method = "crossfade"
    assert bpy.ops.cyclic_loop.make_loop() == {"FINISHED"}
    run = bpy.context.scene.cyclic_loop_run
    assert run.method == "crossfade" and run.init_used == "crossfade" and run.iterations == 0
    assert run.seam_after < run.seam_before
    assert loop_keys(obj)


def test_second_make_loop_refused_and_cancel_writes_nothing(installed):
    obj, settings = open_sample("flag")
    operators = sys.modules[MODULE + ".cyclic_loop_addon.ui.operators"]
    worker = sys.modules[MODULE + ".cyclic_loop_addon.pipeline.solve_job"]
    scene_reader = sys.modules[MODULE + ".cyclic_loop_addon.pipeline.scene_reader"]
    options = operators.loop_settings(obj, settings, bpy.context)
    options.iterations = 10_000
    job = worker.SolveJob(scene_reader.gather(options), options)
    operators._job = job
    try:
        job.start()
        assert bpy.ops.cyclic_loop.make_loop() == {"CANCELLED"}
        assert bpy.ops.cyclic_loop.cancel() == {"FINISHED"}
        assert job.wait(60), "the worker did not stop after cancel"
    finally:
        operators._job = None
    assert job.cancelled and job.q is None and job.error is None
    assert loop_keys(obj) == [] and obj.get("cyclic_loop") is None


# The modal Make Loop solves in a child Python process (solve_job.SolveJob with python="auto"). The bpy
# module has no event loop, so these tests run that job directly, on the installed extension (whose
# module names, bl_ext.<repo>.cyclic_loop..., the child must reproduce to read the saved problem).


def addon_module(name):
    return sys.modules[f"{MODULE}.cyclic_loop_addon.{name}"]


def quick_job(obj, settings, iterations=1, init="cache", frames=12, **job_options):
    """A SolveJob of a short, quick solve of the open sample (a crossfade of the cache as initial guess)."""
    options = addon_module("ui.operators").loop_settings(obj, settings, bpy.context)
    options.iterations, options.init = iterations, init
    options.frame_end = options.frame_start + frames - 1
    return addon_module("pipeline.solve_job").SolveJob(addon_module("pipeline.scene_reader").gather(options), options, **job_options)


def wait_for_progress(job, timeout=120):
    """The first progress dicts of a started job (empty when it ended or timed out without any)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not job.done:
        items = job.progress()
        if items:
            return items
        time.sleep(0.05)
    return []


def follow(job, timeout=120):
    """Start ``job`` and advance it as the modal timer does until it ends: (its progress dicts, the threads that
    appeared meanwhile)."""
    before = set(threading.enumerate())
    job.start()
    seen, threads = [], set()
    deadline = time.monotonic() + timeout
    while not job.done and time.monotonic() < deadline:
        seen += job.progress()
        threads |= set(threading.enumerate()) - before
        time.sleep(0.02)
    return seen, threads


def test_child_process_solves_like_the_thread(installed):
    obj, settings = open_sample("flag")
    in_process, in_thread = quick_job(obj, settings, python="auto"), quick_job(obj, settings)
    in_process.run()
    in_thread.run()
    assert in_process.error is None and in_thread.error is None
    assert (in_process.where, in_thread.where, in_process.notes) == ("process", "thread", [])
    assert not os.path.exists(in_process.folder)
    assert np.array_equal(in_process.q, in_thread.q)
    strip = lambda rep: {k: v for k, v in rep.items() if k != "seconds"}  # noqa: E731
    assert strip(in_process.report) == strip(in_thread.report)
    # The child's progress lines arrive as the thread's callbacks do.
    assert in_process.progress() == in_thread.progress() != []


def test_a_job_in_a_child_process_runs_no_thread(installed):
    """The modal Make Loop follows the child from Blender's timer (``progress``): no Python thread runs
    beside Blender's drawing while it solves, from the probe to the result."""
    obj, settings = open_sample("flag")
    job = quick_job(obj, settings, iterations=3, python="auto")
    seen, threads = follow(job)
    assert job.done and job.error is None and job.q is not None and job.where == "process"
    assert threads == set()
    assert [info["phase"] for info in seen][-1] == "gauss_newton"


def test_the_crossfade_runs_in_the_child_too(installed):
    """The panel's Crossfade method (a blend and its metrics: seconds on a large cloth) runs in the child
    process like a solve: no thread beside Blender's drawing, the same loop and report as in this process."""
    obj, settings = open_sample("flag")
    in_process = quick_job(obj, settings, python="auto", method="crossfade")
    seen, threads = follow(in_process)
    in_thread = quick_job(obj, settings, method="crossfade")
    in_thread.run()
    assert in_process.error is None and in_thread.error is None and threads == set()
    assert (in_process.where, in_thread.where) == ("process", "thread")
    assert np.array_equal(in_process.q, in_thread.q)
    strip = lambda rep: json.dumps({k: v for k, v in rep.items() if k != "seconds"}, sort_keys=True)  # noqa: E731
    assert strip(in_process.report) == strip(in_thread.report)      # as text: its losses are nan
    assert in_process.report["init_used"] == "crossfade" and in_process.report["gauss_newton_iterations"] == 0
    assert [info["phase"] for info in seen] == [info["phase"] for info in in_thread.progress()] == ["crossfade"]


def test_the_python_search_does_not_block(installed, tmp_path):
    """A slow Python is probed in a child process that ``poll`` only looks at: each call returns at once,
    the answer comes when the probe ends, and it is kept for the session."""
    child_solve = addon_module("pipeline.child_solve")
    slow = tmp_path / "python"
    slow.write_text("#!/bin/sh\nsleep 2\necho 'ModuleNotFoundError: No module named scipy' >&2\nexit 1\n")
    slow.chmod(0o755)
    search = child_solve.Search([str(slow)])
    t0 = time.monotonic()
    assert search.poll() is None and search.poll() is None
    assert search.wait(0.3) is None
    assert time.monotonic() - t0 < 1.5
    python, reason = search.wait()
    assert time.monotonic() - t0 >= 2.0
    assert python is None and reason == f"{slow} cannot run the solver (ModuleNotFoundError: No module named scipy)"
    t1 = time.monotonic()
    assert child_solve.Search([str(slow)]).poll() == (None, reason)
    assert time.monotonic() - t1 < 0.5


def test_cancel_terminates_the_child_and_writes_nothing(installed):
    obj, settings = open_sample("flag")
    job = quick_job(obj, settings, iterations=10_000, python="auto")
    job.start()
    assert wait_for_progress(job), "the child reported no progress"
    pid = job.child_pid
    job.cancel()
    assert job.wait(30), "the job did not end after cancel"
    assert job.cancelled and job.q is None and job.report is None and job.error is None
    assert job.where == "process" and not os.path.exists(job.folder)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)     # ended and reaped
    assert loop_keys(obj) == [] and obj.get("cyclic_loop") is None


def test_child_errors_come_back_as_before(installed):
    obj, settings = open_sample("flag")
    # An error the solve raises (LoopSolveError): the same class and message as in the thread.
    in_process = quick_job(obj, settings, init="nonsense", python="auto")
    in_thread = quick_job(obj, settings, init="nonsense")
    in_process.run()
    in_thread.run()
    assert in_process.where == "process"
    assert type(in_process.error) is type(in_thread.error) is addon_module("errors").LoopSolveError
    assert str(in_process.error) == str(in_thread.error) and "unknown init" in str(in_process.error)
    # A child that dies: a clear message, nothing written.
    job = quick_job(obj, settings, iterations=10_000, python="auto")
    job.start()
    assert wait_for_progress(job), "the child reported no progress"
    os.kill(job.child_pid, signal.SIGKILL)
    assert job.wait(30)
    assert not job.cancelled and job.q is None
    assert "the solver process stopped unexpectedly (exit status -9)" in str(job.error)
    assert not os.path.exists(job.folder)


def test_without_a_usable_python_the_thread_solves(installed, tmp_path):
    obj, settings = open_sample("flag")
    not_python = tmp_path / "python"
    not_python.write_text("#!/bin/sh\nexit 1\n")
    not_python.chmod(0o755)
    job = quick_job(obj, settings, python=str(not_python))
    job.run()
    assert job.error is None and job.where == "thread" and job.q is not None
    assert len(job.notes) == 1 and job.notes[0].startswith("the solver ran inside Blender")
    assert str(not_python) not in job.notes[0] and "exit status" not in job.notes[0]    # words, not internals
    assert job.report["notes"][-1] == job.notes[0]


@pytest.mark.parametrize("output, name", [("VAT", "flag_loop/Flag.json"), ("GLTF", "flag_loop.glb"),
                                          ("WEB", "flag_loop.html")])
def test_panel_writes_the_engine_and_web_outputs(installed, tmp_path, output, name):
    """Output VAT / glTF / Web Preview from the panel; the page inlines the three.js the extension ships."""
    obj, settings = open_sample("flag")
    settings.method, settings.output, settings.filepath = "crossfade", output, str(tmp_path / "flag_loop")
    settings.glb_storage, settings.glb_shading = "compact", "flat"
    assert bpy.ops.cyclic_loop.make_loop() == {"FINISHED"}
    assert bpy.context.scene.cyclic_loop_run.message == f"Loop written as {name.split('/')[0]}"
    assert (tmp_path / name).stat().st_size > 0 and loop_keys(obj) == []
    if output == "GLTF":        # the panel's Storage and Shading reach the file: sparse weights, no normals
        doc, _ = addon_module("outputs.glb_loop").read_glb((tmp_path / name).read_bytes())
        assert any("sparse" in a for a in doc["accessors"])
        assert "NORMAL" not in doc["meshes"][0]["primitives"][0]["attributes"]
    if output == "WEB":
        shipped = os.path.join(os.path.dirname(addon_module("outputs.web_preview").__file__), "three", "three.module.js")
        assert os.path.isfile(shipped)
        page = (tmp_path / name).read_text()
        assert '<script type="importmap">{"imports": {"three-core": "data:text/javascript;base64,' in page


def test_make_loop_refuses_an_output_file_that_is_the_open_blend(installed, tmp_path):
    """Make Loop's PC2 / Alembic file goes through the same guard as bake.py: a link to the open .blend
    is refused before anything is gathered, and the file stays as it was."""
    obj, settings = open_sample("flag")
    link = tmp_path / "loop.pc2"
    os.symlink(bpy.data.filepath, link)
    before = open(bpy.data.filepath, "rb").read()
    settings.output, settings.filepath = "PC2", str(link)
    with pytest.raises(RuntimeError, match=r"is the input file \(the open .blend\)"):   # its ERROR report
        bpy.ops.cyclic_loop.make_loop()
    assert "is the input file (the open .blend)" in bpy.context.scene.cyclic_loop_run.message
    assert open(bpy.data.filepath, "rb").read() == before and loop_keys(obj) == []
    assert os.listdir(tmp_path) == ["loop.pc2"]
