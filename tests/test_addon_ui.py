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
from types import SimpleNamespace

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
    # the sample's own loop range (scene["loop_frames"], within the cache), not the settled cache's 25-72
    assert (settings.frame_start, settings.frame_end) == tuple(bpy.context.scene["loop_frames"])
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


def test_the_panel_estimates_a_long_first_phase_and_its_bar_never_stops(installed):
    """A loop whose work before its first iteration (the child's start, the solver's own simulation, the
    cache's start and its first structured iteration) takes over a minute: the flag over all its 72 cached
    frames at 24 sub-steps (about 360,000 unknowns). Driven as the modal Make Loop drives it (its Plan and
    Progress, the real child solve, a look every half second): the bar moves at least every 10 s, the
    phases and the race's starts are named, and the first time left (from the problem's size, before
    anything ran) is within 2x of the time the run took."""
    obj, settings = open_sample("flag", frames=(1, 72))
    settings.substeps, settings.max_iters = 24, 1
    operators = addon_module("ui.operators")
    progress_mod = addon_module("report.progress")
    plan = operators.plan(bpy.context, obj, settings)
    assert plan.solver == "structured"
    progress = progress_mod.Progress(settings.max_iters, settings.init, plan=plan)
    first_left = progress.seconds_left
    t0 = time.monotonic()
    job = addon_module("pipeline.stages").prepare(operators.loop_settings(obj, settings, bpy.context), {},
                                                  bpy.context, python="auto")
    progress.update("")
    job.start()
    looks, headlines, phases = [], set(), []
    while True:                   # a look as soon as the child starts (the panel's first draw), then every 0.5 s
        for info in job.progress():
            progress.take(info)
        looks.append((time.monotonic() - t0, progress.look(), progress.phase))
        headlines.add(progress.words())
        if not phases or phases[-1] != progress.phase:
            phases.append(progress.phase)
        if job.done or time.monotonic() - t0 >= 600:
            break
        job.wait(0.5)
    actual = time.monotonic() - t0
    assert job.error is None and job.q is not None, job.error
    first_iteration = next(t for t, _, phase in looks if phase == "gauss_newton")
    assert first_iteration > 60, first_iteration
    moves = [t for (t, f, _), (_, before, _) in zip(looks[1:], looks) if f > before]
    gaps = np.diff([0.0, *moves])
    print(f"\nfirst phase {first_iteration:.0f} s, run {actual:.0f} s, first estimate {first_left:.0f} s, "
          f"longest wait between bar moves {gaps.max():.1f} s")
    assert gaps.max() <= 10.0, (gaps.max(), looks)
    assert 0.5 <= first_left / actual <= 2.0, (first_left, actual)
    assert phases[:4] == ["", "forward", "start", "gauss_newton"], phases
    assert {"Starting from the cache (1 of 2)", "Starting the solver", "Simulating"} <= headlines, headlines
    assert job.solver == progress.solver == "structured"


def test_stop_keeps_the_best_loop_so_far(installed):
    """Stop with Keep (the panel's "Stop, Keep Best"): the child ends after its current iteration and saves
    its best loop, which is written like a finished one, its verdict saying it was stopped."""
    obj, settings = open_sample("flag")
    job = quick_job(obj, settings, iterations=10_000, python="auto")
    job.start()
    deadline = time.monotonic() + 120
    while job.iterations < 2 and not job.done and time.monotonic() < deadline:
        job.progress()
        time.sleep(0.05)
    assert job.iterations >= 2
    job.stop(keep=True)
    assert job.wait(60), "the job did not end after stop"
    assert job.error is None and not job.cancelled and job.stopped and job.q is not None
    assert job.report["stop_reason"] == "cancelled" and 2 <= job.report["gauss_newton_iterations"] < 10_000
    verdict = addon_module("report.verdict").verdict(job.report)
    assert any(v["headline"] == "Stopped: best so far" for v in verdict), verdict
    operators = addon_module("ui.operators")
    addon_module("pipeline.targets").remember(bpy.context.scene, "cyclic_loop_targets", [obj])
    addon_module("pipeline.stages").finish(job, {}, keys=True, context=bpy.context)
    assert len(loop_keys(obj)) == job.q.shape[0]
    assert operators.CYCLICLOOP_OT_cancel.description(bpy.context, SimpleNamespace(keep=True)).startswith("Stop now")


def test_the_solvers_python_has_cholmod_and_the_panel_names_the_solver(installed):
    """The probe prefers a Python with CHOLMOD and says so; the child names its linear solve; the plan before
    a run names it too; a wide mesh over few frames never factorizes where a longer loop would not, with or
    without CHOLMOD."""
    child_solve = addon_module("pipeline.child_solve")
    search = child_solve.Search()
    python, reason = search.wait()
    assert python is not None and search.cholmod and child_solve.cholmod_known() is True, reason
    obj, settings = open_sample("flag")
    job = quick_job(obj, settings, iterations=1, python="auto")
    seen, _ = follow(job)
    assert job.solver == "cholmod" and seen[0]["phase"] == "setup" and seen[0]["solver"] == "cholmod"
    panel = addon_module("ui.panel")
    assert panel.solver_line(job.solver) == "Linear solver: CHOLMOD"
    lines = panel.before_run(bpy.context, obj, settings)
    assert lines[0][0].startswith("Expected: ") and lines[0][0].endswith("with CHOLMOD"), lines
    structured = addon_module("core").sc.optimize.gauss_newton.auto_structured
    for direct in ("cholmod", "scipy"):     # the 651-vertex curtain over 30 and 120 frames
        assert structured(3 * 651 * 30, 30, True, direct=direct) and structured(3 * 651 * 120, 120, True, direct=direct)
    # without CHOLMOD SciPy's LU factorizes only small problems: the flag at 4 sub-steps goes structured
    assert not structured(36_288, 192, True, direct="cholmod") and structured(36_288, 192, True, direct="scipy")
    assert not structured(4_536, 24, True, direct="scipy")


def test_the_panel_says_what_it_needs_before_a_run(installed):
    """The active preset, the sample's own loop range, the N-body selection's advice, a message that Undo
    makes stale cleared, the Alembic output's availability."""
    obj, settings = open_sample("flag")
    presets = addon_module("ui.presets")
    for key in ("preview", "final"):
        assert bpy.ops.cyclic_loop.preset(preset=key) == {"FINISHED"}
        assert presets.active(obj, settings, bpy.context.scene) == key
    settings.max_iters = 13
    assert presets.active(obj, settings, bpy.context.scene) is None
    panel = addon_module("ui.panel")
    settings.frame_start, settings.frame_end, settings.substeps, settings.max_iters = 1, 72, 24, 50
    texts = [text for text, _ in panel.before_run(bpy.context, obj, settings)]   # a long loop: the preview offered
    assert texts[0].startswith("Expected: about ") and texts[-1].startswith("A long loop: try the Quick Preview"), texts
    assert bpy.ops.cyclic_loop.preset(preset="preview") == {"FINISHED"}
    assert not any("Quick Preview" in text for text, _ in panel.before_run(bpy.context, obj, settings))
    settings.output = "ALEMBIC"     # this Blender has the exporter (Debian's 3.4: tests/test_blender_executable.py)
    assert "alembic_export" in dir(bpy.ops.wm) and panel.output_note(settings) == ""
    run = bpy.context.scene.cyclic_loop_run
    run.message = "Cancelled: the scene is unchanged"
    bpy.ops.ed.undo_push(message="before")
    settings.max_iters = 14
    bpy.ops.ed.undo_push(message="after")
    assert bpy.ops.ed.undo() == {"FINISHED"}
    assert bpy.context.scene.cyclic_loop_run.message == ""
    bpy.ops.wm.open_mainfile(filepath=os.path.join(SAMPLES, "planets.blend"))
    sun = bpy.data.objects["Sun"]
    for ob in bpy.context.scene.objects:
        ob.select_set(ob is sun)
    bpy.context.view_layer.objects.active = sun
    reason = addon_module("ui.selection").problem(bpy.context)
    assert reason.startswith("Sun is one of 3 moving bodies: select all of them"), reason
    for ob in bpy.context.scene.objects:
        ob.select_set(True)
    assert addon_module("ui.selection").problem(bpy.context) is None
