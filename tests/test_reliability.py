"""Nothing lost, ever: guarded outputs, complete-or-absent writes on a full disk, bounds before allocation,
exit statuses, clear messages for bad input, the scene safe during a solve (bpy wheel, no mocks).

Every case asserts the exit status or error, its message, that the input .blend is byte-identical and
that no partial or stray file is left. The full-disk cases run the bake on a small tmpfs mounted in a
private mount namespace (``unshare``), so a real write fails with ENOSPC. docs/reliability.md lists them.
"""
import os
import shutil
import subprocess
import sys
import types

import bpy
import numpy as np
import pytest

from blender_helpers import ROOT, open_sample, settings, sha256
from full_disk import run_on_tmpfs

import bmesh  # noqa: E402  (importable once bpy is)

from cyclic_loop_addon import bake  # noqa: E402
from cyclic_loop_addon.outputs import files, writeback
from cyclic_loop_addon.ui import operators
from cyclic_loop_addon.pipeline import scene_reader, targets
from cyclic_loop_addon.errors import LoopInputError  # noqa: E402

BAKE = os.path.join(ROOT, "cyclic_loop_addon", "bake.py")
QUICK = ["--object", "Flag", "--frames", "49", "60", "--init", "cache", "--iterations", "1", "--substeps", "1"]


def _bake(argv, capsys):
    """bake.main in this process: (status, stderr)."""
    status = bake.main(["bake.py", *argv])
    return status, capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ the guard


def _symlink(tmp, src):
    os.symlink(src, tmp / "link.blend")
    return str(tmp / "link.blend")


def _hardlink(tmp, src):
    os.link(src, tmp / "hard.blend")
    return str(tmp / "hard.blend")


def _disk_cache(tmp, src):
    """The flag's cloth cache on disk (blendcache_flag/), as Blender keeps it next to the file."""
    folder = tmp / "blendcache_flag"
    folder.mkdir()
    (folder / "Cloth_000049_00.bphys").write_bytes(b"BPHYSICS cache frame")
    bpy.ops.wm.open_mainfile(filepath=src)
    bpy.data.objects["Flag"].modifiers["Cloth"].point_cache.use_disk_cache = True
    bpy.ops.wm.save_mainfile()
    return str(folder / "Cloth_000049_00.bphys")


GUARDED = [  # (option, target (path or function of (tmp, input)), message)
    ("--abc", "{input}", "is the input file"),
    ("--json", "{input}", "is the input file"),
    ("--pc2", "{input}", "is the input file"),
    ("--preview", "{input}", "is the input file"),
    ("--html", "{input}", "is the input file"),
    ("--vat", "{input}", "is a file; give a folder"),
    ("--output", "{tmp}/sub/../flag.blend", "is the input file"),
    ("--json", _symlink, "is the input file"),
    ("--pc2", _hardlink, "is the input file"),
    ("--json", _disk_cache, "is a Cloth cache file of 'Flag'"),
    ("--abc", "{tmp}/out.blend", "name the same file"),
]


@pytest.mark.parametrize("option, target, message", GUARDED,
                         ids=[f"{o}-{t if isinstance(t, str) else t.__name__}" for o, t, _ in GUARDED])
def test_no_output_may_destroy_an_input_or_another_output(tmp_path, capsys, option, target, message):
    path = open_sample("flag", tmp_path)
    (tmp_path / "sub").mkdir()
    target = target(tmp_path, path) if callable(target) else target.format(input=path, tmp=tmp_path)
    before = _tree(tmp_path)
    status, err = _bake([path, "--", *QUICK, "--output", str(tmp_path / "out.blend"), option, target], capsys)
    assert status == 2 and message in err, err
    assert _tree(tmp_path) == before        # the input, the cache and the links as they were, nothing added


def _tree(folder):
    """relative path -> sha256 (files) or None (folders, symlinks) of everything under ``folder``."""
    found = {}
    for root, dirs, names in os.walk(folder):
        for name in dirs + names:
            path = os.path.join(root, name)
            plain = os.path.isfile(path) and not os.path.islink(path)
            found[os.path.relpath(path, folder)] = sha256(path) if plain else None
    return found


def test_overwrite_lets_only_output_replace_the_input(tmp_path, capsys):
    path = open_sample("flag", tmp_path)
    before = sha256(path)
    status, err = _bake([path, "--", *QUICK, "--overwrite", "--abc", path], capsys)
    assert status == 2 and "is the input file" in err and sha256(path) == before
    assert "--overwrite" not in err


def test_folder_outputs_are_guarded_too(tmp_path):
    """A folder output (such as vertex animation textures) may not be a file, the cache folder or the input."""
    from cyclic_loop_addon.outputs import guard
    path = open_sample("flag", tmp_path)
    cache = _disk_cache(tmp_path, path)
    before = _tree(tmp_path)
    assert guard.check_outputs([("--vat", str(tmp_path / "textures"), True)]) == [str(tmp_path / "textures")]
    for target, message in ((path, "is a file; give a folder"), (os.path.dirname(cache), "is the Cloth cache folder")):
        with pytest.raises(LoopInputError, match=message):
            guard.check_outputs([("--vat", target, True)])
    assert _tree(tmp_path) == before


def test_a_failed_output_removes_the_texture_folder_it_created_and_says_why(tmp_path, capsys, monkeypatch):
    """An output that fails after the VAT folder was made (three.js missing for --html) leaves no folder
    behind and reports its own error, not the clean-up's."""
    path = open_sample("flag", tmp_path)
    monkeypatch.setenv("CYCLIC_LOOP_THREE", str(tmp_path / "no_three"))
    before = _tree(tmp_path)
    status, err = _bake([path, "--", *QUICK, "--vat", str(tmp_path / "textures"), "--html",
                         str(tmp_path / "loop.html")], capsys)
    assert status == 2 and "three.js" in err and "Directory" not in err, err
    assert _tree(tmp_path) == before


# ------------------------------------------------------------------------------------------------ full disk


def _bake_on_tmpfs(tmp_path, size_kb, outputs, previous=None):
    """bake.py (bpy wheel) on the flag writing ``outputs`` (option -> name) to a ``size_kb`` tmpfs."""
    src = shutil.copy(os.path.join(ROOT, "sample_scenes", "flag.blend"), tmp_path / "flag.blend")
    disk = tmp_path / "disk"
    args = [a for option, name in outputs.items() for a in (option, str(disk / name))]
    proc, left = run_on_tmpfs([sys.executable, BAKE, str(src), "--", *QUICK, *args], str(disk), size_kb, previous)
    assert sha256(src) == sha256(os.path.join(ROOT, "sample_scenes", "flag.blend"))
    return proc, left


@pytest.mark.parametrize("size_kb, outputs, failing", [
    (120, {"--output": "x.blend"}, "--output"),                        # Blender saves a truncated .blend
    (40, {"--abc": "x.abc"}, "Alembic file"),                          # staged: the exporter cannot abort
    (60, {"--abc": "x.abc", "--pc2": "x.pc2", "--json": "r.json"}, "PC2 file"),  # after a complete .abc
])
def test_a_full_disk_leaves_no_partial_file_and_keeps_the_previous_one(tmp_path, size_kb, outputs, failing):
    previous = {"x.blend": b"previous", "x.abc": b"previous"}
    previous = {name: data for name, data in previous.items() if name in outputs.values()}
    proc, left = _bake_on_tmpfs(tmp_path, size_kb, outputs, previous)
    assert proc.returncode == 3, proc.stderr[-2000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert failing in line and "the disk is full" in line and "Nothing was written there" in line, line
    assert "Traceback" not in proc.stderr
    assert left == previous          # every output absent or as it was: no partial, no stray temporary file


def test_a_writer_failing_on_a_full_disk_says_so_in_one_line(tmp_path):
    """Blender's save reports a full disk in words that depend on where the write failed (one CI run got a
    message without them): the disk's own state or the system's words decide, and the line is one line."""
    path = str(tmp_path / "x.blend")
    full = files.writer_failure(path, "--output", RuntimeError("Error: Cannot write\nNo space left on device"))
    assert str(full) == (f"could not write the --output {path}: the disk is full. Nothing was written there; free "
                         "some space or choose another folder and run again")
    other = files.writer_failure(path, "--output", RuntimeError("Error: Cannot open\n  file for writing"))
    assert str(other) == (f"could not write the --output {path}: Error: Cannot open file for writing. Nothing was "
                          "written there")


# ------------------------------------------------------------------------------------------------ bounds


def _run_measured(argv, tmp_path):
    """(status, stderr, peak resident memory in MB) of bake.py in a child Python."""
    with open(tmp_path / "stdout", "w") as out, open(tmp_path / "stderr", "w+") as err:
        proc = subprocess.Popen([sys.executable, BAKE, *argv], stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        text = err.read()
    os.remove(tmp_path / "stdout")
    os.remove(tmp_path / "stderr")
    return proc.returncode, text, usage.ru_maxrss / 1024


@pytest.mark.parametrize("extra, message", [
    (["--frames", "1", "1000000000000"], "outside Blender's frame range"),
    (["--frames", "1", "1000000"], "outside the Cloth cache"),
    (["--substeps", "1000000"], "substeps must be"),
    (["--substeps", "9000"], "GB of memory"),
    (["--iterations", "0"], "iterations must be between 1"),
    (["--iterations", "-3"], "iterations must be between 1"),
    (["--soft", "-1"], "soft weight of the first two frames must be 0"),
])
def test_bounds_are_checked_before_any_array_is_made(tmp_path, extra, message):
    """Refused with a message before allocating: the bake's peak memory stays that of opening the file
    (unchecked, these sizes allocated from 18 GB up)."""
    path = shutil.copy(os.path.join(ROOT, "sample_scenes", "flag.blend"), tmp_path / "flag.blend")
    before = sha256(path)
    argv = [path, "--", "--object", "Flag", "--frames", "49", "60", "--output", str(tmp_path / "o.blend"), *extra]
    status, err, peak_mb = _run_measured(argv, tmp_path)
    assert status == 2 and message in err and "Traceback" not in err, err
    assert peak_mb < 1500, f"peak memory {peak_mb:.0f} MB: allocated before the check"
    assert sha256(path) == before and sorted(os.listdir(tmp_path)) == ["flag.blend"]


# ------------------------------------------------------------------------------------------------ messages


def _bmesh_edit(edit):
    def mutate():
        mesh = bpy.data.objects["Flag"].data
        bm = bmesh.new()
        bm.from_mesh(mesh)
        edit(bm)
        bm.to_mesh(mesh)
        bm.free()
    return mutate


def _rope(bm):
    bmesh.ops.delete(bm, geom=list(bm.faces), context="FACES_ONLY")


def _loose_vertex(bm):
    bm.verts.new((5.0, 5.0, 5.0))


def _zero_area(bm):
    bm.verts.ensure_lookup_table()
    bm.verts[1].co = bm.verts[0].co


def _nan_vertex():
    bpy.data.objects["Flag"].data.vertices[3].co = (float("nan"), 0.0, 0.0)


def _decimate_before_cloth():
    obj = bpy.data.objects["Flag"]
    obj.modifiers.new("Decimate", "DECIMATE").ratio = 0.5
    with bpy.context.temp_override(object=obj, active_object=obj):
        bpy.ops.object.modifier_move_to_index(modifier="Decimate", index=0)


def _edit_mode():
    obj = bpy.data.objects["Flag"]
    bpy.context.view_layer.objects.active = obj
    bpy.ops.object.mode_set(mode="EDIT")


MESSAGES = [
    (_bmesh_edit(_rope), "has no faces (an edges-only mesh such as a rope)"),
    (_bmesh_edit(_loose_vertex), "vertices on no face (loose vertices or edges"),
    (_bmesh_edit(_zero_area), "edges of zero length"),
    (_nan_vertex, "vertices with invalid (NaN or infinite) coordinates"),
    (_decimate_before_cloth, "Decimate before the Cloth modifier change the mesh it simulates"),
    (_edit_mode, "is in Edit Mode: leave Edit Mode"),
]


@pytest.mark.parametrize("mutate, message", MESSAGES, ids=[m for _, m in MESSAGES])
def test_bad_meshes_are_refused_in_the_users_terms(tmp_path, mutate, message):
    path = open_sample("flag", tmp_path)
    before = sha256(path)
    mutate()
    with pytest.raises(LoopInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        scene_reader.gather(settings("flag", frame_start=49, frame_end=60))
    if bpy.context.object and bpy.context.object.mode == "EDIT":
        bpy.ops.object.mode_set(mode="OBJECT")
    assert sha256(path) == before and os.listdir(tmp_path) == ["flag.blend"]


def test_an_exploded_cache_is_refused():
    frames = np.arange(10)
    rest = np.random.default_rng(0).random((5, 3))
    source = np.repeat(rest[None], 10, axis=0)
    source[7] *= 1e6
    named = types.SimpleNamespace(name="Flag")
    with pytest.raises(LoopInputError, match="times the size of the mesh: the simulation exploded"):
        scene_reader._check_source(named, named, source, rest, frames)
    source[7, 2, 1] = np.nan
    with pytest.raises(LoopInputError, match="invalid .NaN or infinite. positions at frame 7"):
        scene_reader._check_source(named, named, source, rest, frames)


@pytest.mark.parametrize("content, message", [
    (b"", "is not a complete .blend file"),
    ("truncated", "is not a complete .blend file"),
    (b"just some text\n", "is not a complete .blend file"),
])
def test_unreadable_blend_files_are_refused(tmp_path, capsys, content, message):
    path = tmp_path / "scene.blend"
    full = open(os.path.join(ROOT, "sample_scenes", "flag.blend"), "rb").read()
    path.write_bytes(full[:len(full) // 2] if content == "truncated" else content)
    before = sha256(path)
    status, err = _bake([str(path), "--", *QUICK, "--output", str(tmp_path / "o.blend")], capsys)
    assert status == 2 and message in err and "Traceback" not in err
    assert sha256(path) == before and os.listdir(tmp_path) == ["scene.blend"]


def test_missing_object_names_the_simulated_ones(tmp_path, capsys):
    path = open_sample("flag", tmp_path)
    status, err = _bake([path, "--", "--frames", "49", "60", "--output", str(tmp_path / "o.blend")], capsys)
    assert status == 2 and "give the simulated object with --object NAME" in err and "Flag" in err
    assert os.listdir(tmp_path) == ["flag.blend"]


def test_keyboard_interrupt_is_one_line_and_status_130(tmp_path, capsys, monkeypatch):
    path = open_sample("flag", tmp_path)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(scene_reader, "gather", interrupted)
    status, err = _bake([path, "--", *QUICK, "--output", str(tmp_path / "o.blend")], capsys)
    assert status == 130 and err.strip() == "[cyclic-loop] interrupted: nothing was written"
    assert os.listdir(tmp_path) == ["flag.blend"]


@pytest.mark.parametrize("debug", [False, True])
def test_an_unexpected_error_is_status_3_with_a_traceback_only_on_request(tmp_path, capsys, monkeypatch, debug):
    path = open_sample("flag", tmp_path)

    def broken(*args, **kwargs):
        raise RuntimeError("something nobody expected")
    monkeypatch.setattr(scene_reader, "gather", broken)
    argv = [path, "--", *QUICK, "--output", str(tmp_path / "o.blend")] + (["--debug"] if debug else [])
    status, err = _bake(argv, capsys)
    last = err.strip().splitlines()[-1]
    assert status == 3 and last == ("[cyclic-loop] unexpected error: RuntimeError: something nobody expected "
                                    "(run with --debug for the details)")
    assert ("Traceback" in err) == debug and os.listdir(tmp_path) == ["flag.blend"]


# ------------------------------------------------------------------------------------------------ scene safety


def _gathered_flag(tmp_path):
    open_sample("flag", tmp_path)
    gathered = scene_reader.gather(settings("flag", frame_start=49, frame_end=60, substeps=1))
    targets.remember(bpy.context.scene, targets.TARGETS, [bpy.data.objects["Flag"]])
    return gathered


def test_a_renamed_object_gets_the_loop_and_restore_finds_it(tmp_path):
    gathered = _gathered_flag(tmp_path)
    bpy.data.objects["Flag"].name = "Banner"
    objects = targets.target_objects(bpy.context.scene, gathered)
    assert [ob.name for ob in objects] == gathered.object_names == ["Banner"]
    writeback.write_back(gathered, gathered.source)
    targets.remember(bpy.context.scene, targets.LOOPED, objects)
    objects[0].name = "Pennant"
    found = operators.CYCLICLOOP_OT_restore._object(bpy.context)
    assert found == bpy.data.objects["Pennant"] and writeback.MARKER in found


@pytest.mark.parametrize("change, message", [
    (lambda ob: bpy.data.objects.remove(ob), "was deleted while the loop was being made"),
    (lambda ob: bpy.context.scene.collection.objects.unlink(ob), "was deleted while the loop was being made"),
    (lambda ob: ob.data.vertices.add(1), "was edited while the loop was being made"),
    (lambda ob: (setattr(bpy.context.view_layer.objects, "active", ob), bpy.ops.object.mode_set(mode="EDIT")),
     "is in Edit Mode: nothing was written"),
])
def test_changes_during_a_solve_are_caught_at_write_back(tmp_path, change, message):
    gathered = _gathered_flag(tmp_path)
    change(bpy.data.objects["Flag"])
    with pytest.raises(LoopInputError, match=message):
        targets.target_objects(bpy.context.scene, gathered)
    if bpy.context.object and bpy.context.object.mode == "EDIT":
        bpy.ops.object.mode_set(mode="OBJECT")
    assert all(writeback.MARKER not in ob for ob in bpy.data.objects)


def test_stale_temporary_folders_are_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    stale = tmp_path / f"{files.TEMP_PREFIX}{dead}_abc"
    live = tmp_path / f"{files.TEMP_PREFIX}{os.getpid()}_abc"
    other = tmp_path / "cyclic_loop_notes"
    for folder in (stale, live, other):
        folder.mkdir()
    assert files.clean_stale_temp(str(tmp_path)) == [str(stale)]
    assert sorted(os.listdir(tmp_path)) == sorted([live.name, other.name])


# ------------------------------------------------------------------------------------------------ solver CLI


def _problem_file(folder):
    from solver_core.scenes.nbody import nbody_problem
    import solver_core as sc
    path = folder / "p.npz"
    sc.save_problem(path, nbody_problem(3, seed=1, n_frames=12, perturbation=0.005))
    return path


def _truncated(path):
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])


def _no_metadata(path):
    np.savez(path, r0=np.zeros((3, 3)))


def _text(path):
    path.write_text("frames 1 2 3\n")


@pytest.mark.parametrize("damage, output, message", [
    (_truncated, "r.npz", "is not a complete .npz file (truncated or damaged"),
    (_no_metadata, "r.npz", "is not a problem file saved by solver_core"),
    (_text, "r.npz", "is not a problem file saved by solver_core"),
    (None, "p.npz", "is the problem file itself"),
    (None, "missing/r.npz", "does not exist; create it first"),
    (None, "sub", "is a folder"),
])
def test_solver_cli_refuses_bad_files_before_any_work(tmp_path, capsys, damage, output, message):
    from solver_core.__main__ import main
    path = _problem_file(tmp_path)
    (tmp_path / "sub").mkdir()
    if damage:
        damage(path)
    before, listing = sha256(path), sorted(os.listdir(tmp_path))
    assert main(["loop", str(path), "-o", str(tmp_path / output), "--max-iters", "1"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert (str(path) if damage or output == "p.npz" else str(tmp_path / output)) in err     # names its file
    assert sha256(path) == before and sorted(os.listdir(tmp_path)) == listing


def test_solver_cli_writes_with_the_users_umask(tmp_path, capsys):
    from solver_core.__main__ import main
    path = _problem_file(tmp_path)
    old = os.umask(0o022)
    try:
        assert main(["loop", str(path), "-o", str(tmp_path / "r.npz"), "--max-iters", "1", "--quiet"]) == 0
    finally:
        os.umask(old)
    assert all(os.stat(tmp_path / name).st_mode & 0o777 == 0o644 for name in ("p.npz", "r.npz"))
    assert sorted(os.listdir(tmp_path)) == ["p.npz", "r.npz"]
