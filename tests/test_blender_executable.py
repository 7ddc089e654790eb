"""Inside a real Blender executable (Debian's `blender` 3.4, Python 3.11, python3-scipy), via pytest-blender:

    .venv/bin/python -m pytest -p pytest-blender tests/test_blender_executable.py

The add-on installs as a legacy add-on from the built zip, registers, unregisters, registers again and
makes a loop; the headless ``blender -b ... --python cyclic_loop_addon/bake.py`` path writes its outputs.
Skipped elsewhere (the bpy module has no executable).
"""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from bake_scripts import TERMINATED_AFTER_THE_RENAMES

bpy = pytest.importorskip("bpy")
addon_utils = pytest.importorskip("addon_utils")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.skipif(not bpy.app.binary_path, reason="runs inside a Blender executable (pytest-blender)")


def blender_run(*args, timeout=600, cwd=None):
    """Run this Blender in the background; an uncaught Python error exits with status 1."""
    return subprocess.run([bpy.app.binary_path, "-b", "--factory-startup", "--python-exit-code", "1", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd)


SAMPLES = ("flag", "flag_gusts", "swing", "softbody", "ribbons", "planets")


@pytest.mark.parametrize("name", SAMPLES)
def test_bundled_sample_opens_in_this_blender(name):
    """Each committed sample opens in this Blender (the oldest the add-on supports) with its caches baked:
    the samples are saved by Blender 3.4, which later Blenders read (a file of a later Blender crashes it)."""
    check = ("import bpy; mods = [m for ob in bpy.data.objects for m in ob.modifiers if m.type in {'CLOTH', "
             "'SOFT_BODY'}]; assert all(m.point_cache.is_baked for m in mods); print('opened', len(bpy.data.objects), "
             "len(mods), tuple(bpy.context.scene['loop_frames']))")
    proc = blender_run(os.path.join(ROOT, "sample_scenes", f"{name}.blend"), "--python-expr", check, timeout=120)
    assert proc.returncode == 0 and "opened " in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]


@pytest.fixture(scope="module")
def flag_blend(tmp_path_factory):
    """The flag sample built by this Blender now, with a relative --out (Blender resolves it against its own
    folder unless build_samples makes it absolute)."""
    out = tmp_path_factory.mktemp("samples")
    proc = blender_run("--python", os.path.join(ROOT, "sample_scenes", "build_samples.py"), "--",
                       "--out", ".", "flag", cwd=str(out))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return str(out / "flag.blend")


@pytest.fixture(scope="module")
def legacy_addon(tmp_path_factory):
    """The legacy zip built by tools/build_extension.py, installed by bpy.ops.preferences.addon_install."""
    spec = importlib.util.spec_from_file_location(
        "build_extension", os.path.join(ROOT, "tools", "build_extension.py"))
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    zip_path = build.build_legacy(str(tmp_path_factory.mktemp("dist")))
    mp = pytest.MonkeyPatch()
    scripts = tmp_path_factory.mktemp("scripts")
    mp.setenv("BLENDER_USER_SCRIPTS", str(scripts))
    assert bpy.ops.preferences.addon_install(filepath=zip_path) == {"FINISHED"}
    assert bpy.ops.preferences.addon_enable(module="cyclic_loop") == {"FINISHED"}
    yield sys.modules["cyclic_loop"]
    addon_utils.disable("cyclic_loop")
    mp.undo()


def test_installs_as_legacy_addon(legacy_addon):
    assert legacy_addon.__file__.startswith(os.environ["BLENDER_USER_SCRIPTS"])
    assert legacy_addon.bl_info["blender"] <= bpy.app.version
    assert sys.modules["cyclic_loop.cyclic_loop_addon.core"].sc.__name__ == "cyclic_loop.solver_core"


def test_register_unregister_register(legacy_addon):
    addon_utils.disable("cyclic_loop")
    assert not hasattr(bpy.types, "CYCLIC_LOOP_OT_make_loop")
    addon_utils.enable("cyclic_loop")
    assert hasattr(bpy.types, "CYCLIC_LOOP_OT_make_loop") and hasattr(bpy.types, "VIEW3D_PT_cyclic_loop")


def _flag_with_defaults(flag_blend):
    """Open the flag sample, make the flag active and give it the panel's physics defaults, 2 iterations."""
    bpy.ops.wm.open_mainfile(filepath=flag_blend)
    scene = bpy.context.scene
    obj = bpy.data.objects["Flag"]
    for ob in scene.objects:
        ob.select_set(ob is obj)
    bpy.context.view_layer.objects.active = obj
    assert bpy.ops.cyclic_loop.physics_defaults() == {"FINISHED"}
    settings = obj.cyclic_loop_settings
    settings.frame_start, settings.frame_end = scene["loop_frames"]
    settings.substeps, settings.max_iters = 1, 2
    return scene, obj, settings


def test_make_loop_in_blender(legacy_addon, flag_blend):
    scene, obj, settings = _flag_with_defaults(flag_blend)
    assert bpy.ops.cyclic_loop.make_loop() == {"FINISHED"}
    run = scene.cyclic_loop_run
    assert run.has_report and run.iterations > 0
    keys = [kb.name for kb in obj.data.shape_keys.key_blocks if kb.name.startswith("CyclicLoop.")]
    assert len(keys) == settings.frame_end - settings.frame_start + 1
    assert bpy.ops.cyclic_loop.restore() == {"FINISHED"}


def test_solve_in_a_child_process(legacy_addon, flag_blend):
    """Make Loop's background solve runs in a child Python found from this Blender (its sys.executable
    or the system Python 3.11 Debian's Blender is built on) and gives the loop of the in-thread solve."""
    worker = sys.modules["cyclic_loop.cyclic_loop_addon.pipeline.solve_job"]
    scene_reader = sys.modules["cyclic_loop.cyclic_loop_addon.pipeline.scene_reader"]
    bpy.ops.wm.open_mainfile(filepath=flag_blend)
    start = bpy.context.scene["loop_frames"][0]
    options = scene_reader.LoopSettings(objects=("Flag",), frame_start=start, frame_end=start + 11, substeps=1,
                                    iterations=1, init="cache")
    gathered = scene_reader.gather(options)
    in_process, in_thread = worker.SolveJob(gathered, options, python="auto"), worker.SolveJob(gathered, options)
    in_process.run()
    in_thread.run()
    assert in_process.error is None and in_thread.error is None, (in_process.error, in_thread.error)
    assert (in_process.where, in_process.notes) == ("process", [])
    assert (in_process.q == in_thread.q).all()
    assert in_process.report["loop"] == in_thread.report["loop"]


def test_pc2_export_with_mesh_cache_modifier(legacy_addon, flag_blend, tmp_path):
    """Output PC2: the file is written and played by a looping Mesh Cache modifier that takes the cloth
    modifier's place in the stack (Blender 3.4 has no ``modifiers.move``: the operator moves it)."""
    export = sys.modules["cyclic_loop.cyclic_loop_addon.outputs.export"]
    scene, obj, settings = _flag_with_defaults(flag_blend)
    settings.output, settings.filepath = "PC2", str(tmp_path / "flag_loop")
    assert bpy.ops.cyclic_loop.make_loop() == {"FINISHED"}
    assert scene.cyclic_loop_run.message == "Loop written as flag_loop.pc2"
    points, start, rate = export.read_pc2(str(tmp_path / "flag_loop.pc2"))
    n_frames = settings.frame_end - settings.frame_start + 1
    assert points.shape == (n_frames, len(obj.data.vertices), 3) and (start, rate) == (settings.frame_start, 1.0)
    assert [(m.type, m.show_viewport) for m in obj.modifiers] == [("MESH_CACHE", True), ("CLOTH", False)]
    assert obj.modifiers[0].filepath == str(tmp_path / "flag_loop.pc2")
    for frame, k in ((settings.frame_start, 0), (settings.frame_start + 5, 5), (settings.frame_end + 1, 0)):
        scene.frame_set(frame)
        mesh = obj.evaluated_get(bpy.context.evaluated_depsgraph_get()).data
        co = [tuple(v.co) for v in mesh.vertices]
        assert max(abs(a - b) for v, p in zip(co, points[k]) for a, b in zip(v, p)) < 1e-5, (frame, k)
    assert bpy.ops.cyclic_loop.restore() == {"FINISHED"}
    assert [(m.type, m.show_viewport) for m in obj.modifiers] == [("CLOTH", True)]


PLAYS_THE_PC2 = """
import json, struct, bpy
with open({pc2!r}, "rb") as f:
    _, _, points, start, rate, samples = struct.unpack("<12siiffi", f.read(32))
    data = struct.unpack("<%df" % (points * samples * 3), f.read())
step, n = int(rate), samples
period = n * step
sample = lambda j: [data[3 * (j * points + i):3 * (j * points + i) + 3] for i in range(points)]
obj, worst = bpy.data.objects["Flag"], 0.0
for k in range(-period, 2 * period + 1):
    j, r = divmod(k % period, step)
    t = r / step if j + 1 < n else 0.0           # sample N - 1 held until the wrap
    bpy.context.scene.frame_set(int(start) + k)
    mesh = obj.evaluated_get(bpy.context.evaluated_depsgraph_get()).data
    worst = max([worst] + [abs(c - ((1 - t) * a + t * b)) for v, p, q in zip(mesh.vertices, sample(j),
                 sample(min(j + 1, n - 1))) for c, a, b in zip(v.co, p, q)])
control = obj.evaluated_get(bpy.context.evaluated_depsgraph_get())["control"]
print("PLAYED " + json.dumps(dict(start=start, rate=rate, samples=n, worst=worst, frame=bpy.context.scene.frame_current,
                                  control=control, autoexec_fail=bpy.app.autoexec_fail)))
"""


def test_pc2_loop_plays_past_the_period_with_auto_run_scripts_off(flag_blend, tmp_path):
    """bake.py --pc2 --output on frames 49-60 with a scene frame step of 2: the PC2 header says start frame 49,
    sample rate 2, and the saved scene, opened with --disable-autoexec, plays it through its Mesh Cache modifier
    at every scene frame from one period before 49 to two after, wrapping: its driver is a simple expression,
    evaluated without Python, while a Python driver in the same file is blocked."""
    bpy.ops.wm.open_mainfile(filepath=flag_blend)
    bpy.context.scene.frame_step = 2
    step2 = tmp_path / "step2.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(step2), copy=True)
    pc2, out = tmp_path / "loop.pc2", tmp_path / "loop.blend"
    proc = blender_run(str(step2), "--python", BAKE, "--", *QUICK, "--pc2", str(pc2), "--output", str(out))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    bpy.ops.wm.open_mainfile(filepath=str(out))
    flag = bpy.data.objects["Flag"]
    assert flag.animation_data.drivers[0].driver.is_simple_expression
    flag["control"] = 1.0
    control = flag.driver_add('["control"]').driver
    control.type, control.expression = "SCRIPTED", "__import__('math').floor(frame) * 2"   # only through Python
    assert not control.is_simple_expression
    controlled = tmp_path / "controlled.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(controlled), copy=True)
    script = tmp_path / "plays.py"
    script.write_text(PLAYS_THE_PC2.format(pc2=str(pc2)))
    proc = blender_run("--disable-autoexec", str(controlled), "--python", str(script))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    played = json.loads(proc.stdout.split("PLAYED ")[1].splitlines()[0])
    assert (played["start"], played["rate"], played["samples"]) == (49, 2, 6)
    assert played["worst"] < 1e-5 and played["frame"] == 49 + 2 * 12
    assert played["control"] == 0.0 and played["autoexec_fail"]                # Python drivers were off


def test_headless_bake(flag_blend, tmp_path):
    out, report = tmp_path / "flag_loop.blend", tmp_path / "report.json"
    proc = blender_run(flag_blend, "--python", os.path.join(ROOT, "cyclic_loop_addon", "bake.py"), "--",
                       "--object", "Flag", "--frames", "49", "72", "--substeps", "1", "--iterations", "2",
                       "--output", str(out), "--json", str(report))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert out.exists() and report.exists()


def test_written_wind_is_cyclic_and_resimulates_near_the_loop_in_this_blender(tmp_path):
    """bake.py --write-wind on the gusts sample in this Blender (3.4): the saved scene holds three Wind fields
    keyed cyclically with the loop's period, and Blender's cloth re-simulated in them stays within half a
    motion of the loop in each of the three periods (the report's figures; from one simulation of a copy
    to the next Blender's cloth differs by a few hundredths of a motion, so periods are not ranked)."""
    import json

    out, report = tmp_path / "loop.blend", tmp_path / "loop.json"
    proc = blender_run(os.path.join(ROOT, "sample_scenes", "flag_gusts.blend"), "--python",
                       os.path.join(ROOT, "cyclic_loop_addon", "bake.py"), "--", "--object", "Flag", "--frames", "49",
                       "72", "--output", str(out), "--json", str(report), "--write-wind", timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    again = json.loads(report.read_text())["motion"]["resimulated"]
    assert len(again["periods"]) == 3 and again["last"] == again["periods"][-1]
    assert max(again["periods"]) <= 0.5
    check = ("import bpy; c = bpy.data.collections['Loop Wind']; f = [o.animation_data.action.fcurves[0] for o in "
             "sorted(c.objects, key=lambda o: o.name)]; assert [o.field.type for o in c.objects] == ['WIND'] * 3; "
             "assert all(m.type == 'CYCLES' for x in f for m in x.modifiers); "
             "assert all(abs(x.evaluate(49 + j) - x.evaluate(73 + j)) < 1e-6 for x in f for j in range(24)); "
             "print('cyclic', [round(x.evaluate(60), 3) for x in f])")
    proc = blender_run(str(out), "--python-expr", check, timeout=120)
    assert proc.returncode == 0 and "cyclic " in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_engine_and_web_outputs(legacy_addon, flag_blend, tmp_path):
    """Output VAT, glTF and Web Preview from the panel in this Blender (its image API and glTF exporter)."""
    import json
    import struct

    import numpy as np
    vat = sys.modules["cyclic_loop.cyclic_loop_addon.outputs.vat"]
    scene, obj, settings = _flag_with_defaults(flag_blend)
    settings.method = "crossfade"
    n_frames, n = settings.frame_end - settings.frame_start + 1, len(obj.data.vertices)
    for output, name in (("VAT", "flag_loop"), ("GLTF", "flag_loop.glb"), ("WEB", "flag_loop.html")):
        settings.output, settings.filepath = output, str(tmp_path / "flag_loop")
        assert bpy.ops.cyclic_loop.make_loop() == {"FINISHED"}, scene.cyclic_loop_run.message
        assert scene.cyclic_loop_run.message == f"Loop written as {name}"
    info, exr, normals = vat.read_vat(str(tmp_path / "flag_loop" / "Flag.json"), ".exr")
    _, png, _ = vat.read_vat(str(tmp_path / "flag_loop" / "Flag.json"), ".png")
    assert info["frame_count"] == n_frames and exr.shape == png.shape == (n_frames, n, 3)
    assert np.abs(exr - png).max() <= 2.0 ** -11 * np.abs(png).max() + 1e-4
    assert np.abs(np.linalg.norm(normals, axis=2) - 1).max() < 2e-3
    data = (tmp_path / "flag_loop.glb").read_bytes()
    doc = json.loads(data[20:20 + struct.unpack("<I", data[12:16])[0]])
    sampler = doc["animations"][0]["samplers"][0]
    assert doc["accessors"][sampler["input"]]["count"] == n_frames + 1 and sampler["interpolation"] == "LINEAR"
    assert doc["extensionsRequired"] == ["KHR_mesh_quantization"]        # the panel's default storage
    assert "three-core" in (tmp_path / "flag_loop.html").read_text()[:2000]


# ------------------------------------------------------------------------------------------------ exit statuses

BAKE = os.path.join(ROOT, "cyclic_loop_addon", "bake.py")
QUICK = ["--object", "Flag", "--frames", "49", "60", "--init", "cache", "--iterations", "1", "--substeps", "1"]


def _nan_vertex_copy(flag_blend, folder):
    bpy.ops.wm.open_mainfile(filepath=flag_blend)
    bpy.data.objects["Flag"].data.vertices[3].co = (float("nan"), 0.0, 0.0)
    path = str(folder / "nan.blend")
    bpy.ops.wm.save_as_mainfile(filepath=path, copy=True)
    return path


def test_headless_bake_exit_status_holds_under_blender(flag_blend, tmp_path):
    """Blender's executable exits 2 with one line (no traceback) for an error that used to escape as a
    traceback with status 0 (a NaN vertex), and leaves no file behind."""
    src = _nan_vertex_copy(flag_blend, tmp_path)
    before = open(src, "rb").read()
    proc = blender_run(src, "--python", BAKE, "--", *QUICK, "--output", str(tmp_path / "o.blend"))
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "vertices with invalid (NaN or infinite) coordinates" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert open(src, "rb").read() == before and sorted(os.listdir(tmp_path)) == ["nan.blend"]


@pytest.mark.parametrize("content", ["text", "truncated"])
def test_a_file_blender_cannot_open_is_refused(flag_blend, tmp_path, content):
    """Given after ``--``, bake.py opens the .blend itself, so an unreadable one exits 2 with a message."""
    path = tmp_path / "scene.blend"
    data = open(flag_blend, "rb").read()
    path.write_bytes(b"not a scene\n" if content == "text" else data[:len(data) // 2])
    before = path.read_bytes()
    proc = blender_run("--python", BAKE, "--", str(path), *QUICK, "--output", str(tmp_path / "o.blend"))
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"cannot open {path}: it is not a complete .blend file" in proc.stderr and "Traceback" not in proc.stderr
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["scene.blend"]


@pytest.mark.parametrize("option, message", [("--abc", "no Alembic exporter")])
def test_outputs_this_blender_cannot_write_are_refused_up_front(flag_blend, tmp_path, option, message):
    """Debian's Blender 3.4 has no Alembic exporter: said before any work, status 2."""
    proc = blender_run(flag_blend, "--python", BAKE, "--", *QUICK, option, str(tmp_path / "x.out"))
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]
    assert "Reading the simulation" not in proc.stdout and os.listdir(tmp_path) == []


def test_ctrl_c_stops_a_headless_bake_with_130(flag_blend, tmp_path):
    argv = [*QUICK[:7], "--substeps", "1", "--iterations", "500", "--output", str(tmp_path / "o.blend")]
    proc = subprocess.Popen([bpy.app.binary_path, "-b", "--factory-startup", flag_blend, "--python", BAKE, "--",
                             *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:        # interrupt once the solve runs
        if "iteration 1 " in line:
            proc.send_signal(subprocess.signal.SIGINT)
            break
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out[-2000:] + err[-2000:]
    assert err.strip().splitlines()[-1] == "[cyclic-loop] interrupted: nothing was written"
    assert "Traceback" not in err and os.listdir(tmp_path) == []


# ------------------------------------------------------------------------------------------------ output safety
# docs/output_safety.md: the data-loss, security and hang classes in this Blender, as a farm task runs bake.py.


def _tree(folder):
    """{name: bytes, or "<link>" / "<fifo>" / "<folder>"} of everything under ``folder``."""
    import stat
    found = {}
    for root, dirs, names in os.walk(folder):
        for name in dirs + names:
            path = os.path.join(root, name)
            mode = os.lstat(path).st_mode
            found[os.path.relpath(path, folder)] = (
                "<link>" if stat.S_ISLNK(mode) else "<fifo>" if stat.S_ISFIFO(mode) else
                "<folder>" if stat.S_ISDIR(mode) else open(path, "rb").read())
    return found


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_a_link_or_fifo_at_an_output_is_refused(flag_blend, tmp_path, kind):
    """A symbolic link planted at an output, or a FIFO given as one: exit 2 before any work, the link's
    target unchanged, nothing written."""
    victim = tmp_path / "victim.pc2"
    victim.write_bytes(b"another file")
    target = tmp_path / ("out.pc2" if kind == "link" else "out.json")
    os.symlink(victim, target) if kind == "link" else os.mkfifo(target)
    before = _tree(tmp_path)
    outputs = ["--pc2", str(target)] if kind == "link" else ["--pc2", str(tmp_path / "a.pc2"), "--json", str(target)]
    proc = blender_run(flag_blend, "--python", BAKE, "--", *QUICK, *outputs)
    assert proc.returncode == 2 and "outputs are written as regular files only" in proc.stderr, proc.stderr[-2000:]
    assert "solving" not in proc.stdout and "Traceback" not in proc.stderr
    assert _tree(tmp_path) == before and victim.read_bytes() == b"another file"


def test_a_failed_export_leaves_the_earlier_set_intact(flag_blend, tmp_path):
    """--vat vat --glb vat/Flag_mesh.glb over a complete earlier VAT set (both write Flag_mesh.glb): exit 2,
    the earlier set byte for byte as it was."""
    vat = tmp_path / "vat"
    proc = blender_run(flag_blend, "--python", BAKE, "--", *QUICK, "--vat", str(vat), "--json",
                       str(tmp_path / "r.json"))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    earlier = _tree(tmp_path)
    assert "vat/Flag_mesh.glb" in earlier
    proc = blender_run(flag_blend, "--python", BAKE, "--", *QUICK, "--iterations", "2", "--vat", str(vat), "--glb",
                       str(vat / "Flag_mesh.glb"), "--json", str(tmp_path / "r.json"))
    assert proc.returncode == 2 and "two outputs of this run name the same file" in proc.stderr, proc.stderr[-2000:]
    assert _tree(tmp_path) == earlier


def test_a_hostile_object_name_runs_as_one_quoted_line(flag_blend, tmp_path):
    """An object named with shell syntax, quotes and a comma, through ``farm.py list --bare``: one
    shell-quoted line per task; the line, run by a shell as a one-command-a-line runner would, bakes that
    object in this Blender and runs nothing else. A name with a line break is refused (exit 2)."""
    import shlex
    name = "$(touch pwned);'a\",b` -b"
    bpy.ops.wm.open_mainfile(filepath=flag_blend)
    bpy.data.objects["Flag"].name = name
    scene = tmp_path / "scene.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(scene), copy=True)
    batch = tmp_path / "batch.toml"

    def write_batch(names):
        import json
        batch.write_text(f'[batch]\nname = "b"\noutput_dir = "out"\noutputs = ["pc2"]\n'
                         f'blender = {json.dumps(bpy.app.binary_path)}\n'
                         '[variants.quick]\ninit = "cache"\niterations = 1\nsubsteps = 1\n'
                         f'[[scene]]\nfile = "scene.blend"\nobjects = {json.dumps([[n] for n in names])}\n'
                         'frames = [49, 60]\n')

    farm_py = os.path.join(ROOT, "cyclic_loop_addon", "farm.py")
    write_batch([name])
    proc = subprocess.run([sys.executable, farm_py, "list", "--bare", str(batch)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    args = shlex.split(lines[0])
    assert len(lines) == 1 and args[args.index("--object") + 1] == name
    (tmp_path / "out").mkdir()        # farm.py run makes it; a runner of the bare lines makes it first
    run = subprocess.run(["sh", "-c", lines[0]], capture_output=True, text=True, timeout=600, cwd=str(tmp_path))
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert f"gathered {name}:" in run.stdout
    assert not (tmp_path / "pwned").exists() and len(os.listdir(tmp_path / "out")) == 2   # the PC2 and its report
    write_batch(["Flag\nrm -rf ~"])
    proc = subprocess.run([sys.executable, farm_py, "list", "--bare", str(batch)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "line break or another control character" in proc.stderr and proc.stdout == ""


def test_bake_exits_with_its_status_on_a_scene_with_scripted_drivers(flag_blend, tmp_path):
    """A scripted Python driver in the scene: this Blender's bake writes its outputs, says the drivers are
    there, and exits with its status (0; 2 on bad input) instead of hanging."""
    bpy.ops.wm.open_mainfile(filepath=flag_blend)
    flag = bpy.data.objects["Flag"]
    flag["drive"] = 0.0
    driver = flag.driver_add('["drive"]').driver
    driver.type = "SCRIPTED"
    driver.expression = "__import__('math').sin(frame) * 0.0"
    scene = tmp_path / "drivers.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(scene), copy=True)
    proc = blender_run(str(scene), "--python", BAKE, "--", *QUICK, "--pc2", str(tmp_path / "r.pc2"), timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "the scene has 1 scripted drivers" in proc.stdout and (tmp_path / "r.pc2").exists()
    proc = blender_run(str(scene), "--python", BAKE, "--", *QUICK, "--frames", "1", "2", "--pc2",
                       str(tmp_path / "s.pc2"), timeout=300)
    assert proc.returncode == 2 and not (tmp_path / "s.pc2").exists(), proc.stderr[-2000:]


def test_sigterm_after_the_renames_leaves_every_earlier_file_as_it_was(flag_blend, tmp_path):
    """A farm cancels the task with SIGTERM once the outputs are renamed into place: exit 143 and every
    earlier output and report back as it was."""
    outputs = ["--pc2", str(tmp_path / "loop.pc2"), "--json", str(tmp_path / "loop.json"), "--output",
               str(tmp_path / "loop.blend")]
    proc = blender_run(flag_blend, "--python", BAKE, "--", *QUICK, *outputs)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    earlier = _tree(tmp_path)
    hook = tmp_path.parent / f"{tmp_path.name}_hook.py"
    hook.write_text(TERMINATED_AFTER_THE_RENAMES.format(root=ROOT))
    proc = subprocess.Popen([bpy.app.binary_path, "-b", "--factory-startup", flag_blend, "--python", str(hook), "--",
                             *QUICK, "--iterations", "2", *outputs], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if line.startswith("[cyclic-loop] wrote "):
                break
        assert _tree(tmp_path) != earlier
        proc.terminate()
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + 15, out[-2000:] + err[-2000:]
    assert _tree(tmp_path) == earlier


def test_the_output_section_says_before_a_run_that_alembic_is_missing(legacy_addon, flag_blend):
    """Debian's Blender 3.4 has no Alembic exporter (bake.py refuses --abc there): the panel's Output section
    says so as soon as Alembic is chosen, and names the outputs that work."""
    bpy.ops.wm.open_mainfile(filepath=flag_blend)
    settings = bpy.data.objects["Flag"].cyclic_loop_settings
    panel = sys.modules["cyclic_loop.cyclic_loop_addon.ui.panel"]
    settings.output = "PC2"
    assert panel.output_note(settings) == ""
    settings.output = "ALEMBIC"
    if "alembic_export" in dir(bpy.ops.wm):
        assert panel.output_note(settings) == ""
    else:
        assert panel.output_note(settings).startswith("This Blender has no Alembic exporter")
