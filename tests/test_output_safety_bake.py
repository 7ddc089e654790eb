"""Nothing overwritten, nothing injected, with the real bake (bpy wheel, no mocks; docs/output_safety.md):
two outputs of one run naming one file leave the earlier VAT set as it was, links and special files are
refused before any work, a replaced output keeps its mode, a preview is PNG by name, the farm's
option-like names reach bake.py as values, and the loop plays exactly over the artist's own shape keys."""
import hashlib
import os
import stat

import bpy
import numpy as np
import pytest

from bake_scripts import TERMINATED_AFTER_THE_RENAMES
from blender_helpers import evaluated_local, open_sample, settings

from cyclic_loop_addon import bake  # noqa: E402  (after bpy)
from cyclic_loop_addon.outputs import export, writeback
from cyclic_loop_addon.pipeline import scene_reader
from cyclic_loop_addon.jobs import batch as batch_file  # noqa: E402
from cyclic_loop_addon.core import sc  # noqa: E402

QUICK = ["--object", "Flag", "--frames", "49", "60", "--init", "cache", "--iterations", "1", "--substeps", "1"]


def _bake(argv, capsys):
    """bake.main in this process: (status, stderr); stdout is kept in ``_bake.out``."""
    status = bake.main(["bake.py", *argv])
    captured = capsys.readouterr()
    _bake.out = captured.out
    return status, captured.err


def _tree(folder):
    """{relative path: sha256 or "<folder>" / "<link>" / "<fifo>"} of everything under ``folder``."""
    found = {}
    for root, dirs, names in os.walk(folder):
        for name in dirs + names:
            path = os.path.join(root, name)
            mode = os.lstat(path).st_mode
            kind = ("<link>" if stat.S_ISLNK(mode) else "<folder>" if stat.S_ISDIR(mode) else
                    "<fifo>" if stat.S_ISFIFO(mode) else None)
            if kind is None:
                with open(path, "rb") as f:
                    kind = hashlib.sha256(f.read()).hexdigest()
            found[os.path.relpath(path, folder)] = kind
    return found


def test_two_outputs_naming_one_file_leave_the_earlier_vat_set_intact(tmp_path, capsys):
    """--vat vat --glb vat/Flag_mesh.glb over a complete earlier set: refused (exit 2), the set as it was;
    on a fresh folder: nothing left behind."""
    path = open_sample("flag", tmp_path)
    vat = tmp_path / "vat"
    status, err = _bake([path, "--", *QUICK, "--vat", str(vat)], capsys)
    assert status == 0, err
    earlier = _tree(tmp_path)
    status, err = _bake([path, "--", *QUICK, "--vat", str(vat), "--glb", str(vat / "Flag_mesh.glb")], capsys)
    assert status == 2 and "two outputs of this run name the same file" in err, err
    assert _tree(tmp_path) == earlier
    fresh = tmp_path / "fresh"
    status, err = _bake([path, "--", *QUICK, "--vat", str(fresh), "--glb", str(fresh / "Flag_mesh.glb")], capsys)
    assert status == 2 and not fresh.exists() and _tree(tmp_path) == earlier, err


@pytest.mark.parametrize("option, make, message", [
    ("--json", lambda p, t: os.mkfifo(p), "is a FIFO (named pipe)"),
    ("--pc2", lambda p, t: os.symlink(t / "victim.pc2", p), "is a symbolic link"),
    ("--output", lambda p, t: os.symlink(t / "victim.pc2", p), "is a symbolic link"),
    ("--preview", None, "the seam picture is written as PNG; give a file name ending in .png"),
])
def test_links_special_files_and_wrong_formats_are_refused_before_any_work(tmp_path, capsys, option, make, message):
    path = open_sample("flag", tmp_path)
    (tmp_path / "victim.pc2").write_bytes(b"another file")
    target = tmp_path / ("x.jpg" if make is None else f"out{option.replace('--', '.')}")
    if make is not None:
        make(str(target), tmp_path)
    before = _tree(tmp_path)
    also = [] if option == "--pc2" else ["--pc2", str(tmp_path / "loop.pc2")]
    status, err = _bake([path, "--", *QUICK, option, str(target), *also], capsys)
    assert status == 2 and message in err and "Traceback" not in err, err
    assert "solving" not in _bake.out
    assert _tree(tmp_path) == before


def test_a_replaced_output_keeps_its_mode(tmp_path, capsys):
    path = open_sample("flag", tmp_path)
    out, report = tmp_path / "loop.pc2", tmp_path / "loop.json"
    for file, mode in ((out, 0o600), (report, 0o640)):
        file.write_bytes(b"earlier")
        os.chmod(file, mode)
    old = os.umask(0o022)
    try:
        status, err = _bake([path, "--", *QUICK, "--pc2", str(out), "--json", str(report), "--output",
                             str(tmp_path / "loop.blend")], capsys)
    finally:
        os.umask(old)
    assert status == 0, err
    assert [stat.S_IMODE(os.stat(p).st_mode) for p in (out, report, tmp_path / "loop.blend")] == [0o600, 0o640, 0o644]
    assert out.read_bytes() != b"earlier"
    assert sorted(os.listdir(tmp_path)) == ["flag.blend", "loop.blend", "loop.json", "loop.pc2"]   # nothing else


@pytest.mark.parametrize("name", ["-b", "--overwrite", "--json=/tmp/x"])
def test_option_like_names_of_a_farm_task_reach_bake_py_as_names(tmp_path, name):
    (tmp_path / "s.blend").write_bytes(b"BLENDER")
    (tmp_path / "b.toml").write_text(f'[batch]\noutputs = ["pc2"]\n[[scene]]\nfile = "s.blend"\nobjects = [{name!r}]\n'
                                     .replace("'", '"'))
    task = batch_file.load(tmp_path / "b.toml").tasks()[0]
    args = bake.parse_args(["bake.py", task.scene, "--", *task.bake_args()])
    assert args.object == [name] and not args.overwrite
    assert args.json == task.report and args.pc2 == task.outputs["pc2"]


def _user_key(obj, name, dz, value, relative_to=None, mute=False):
    kb = obj.shape_key_add(name=name, from_mix=False)
    co = np.empty(len(kb.data) * 3)
    kb.data.foreach_get("co", co)
    co = co.reshape(-1, 3)
    co[:, 2] += dz
    kb.data.foreach_set("co", co.ravel())
    kb.value, kb.mute = value, mute
    if relative_to:
        kb.relative_key = obj.data.shape_keys.key_blocks[relative_to]
    return kb


def test_the_loop_plays_exactly_over_the_artists_own_shape_keys(tmp_path):
    """An active key at 0.5, a muted one and one relative to another key: the written keys evaluate to the
    solved loop; restoring the scene gives the artist's keys back as they were."""
    open_sample("flag")
    obj = bpy.data.objects["Flag"]
    obj.shape_key_add(name="Basis", from_mix=False)
    _user_key(obj, "Wave", 0.05, 0.5)
    _user_key(obj, "Off", 0.2, 1.0, mute=True)
    _user_key(obj, "OnTop", 0.03, 0.7, relative_to="Wave")
    obj.show_only_shape_key = True
    states = {kb.name: (kb.value, kb.mute, kb.relative_key.name) for kb in obj.data.shape_keys.key_blocks}
    g = scene_reader.gather(settings("flag"))
    q = sc.crossfade_loop(g.source)
    local = writeback.local_loop(g, q)
    writeback.write_back(g, q)
    for j in (0, 3, g.n_frames - 1):
        np.testing.assert_allclose(evaluated_local(obj, g.frame_start + j), local[j], atol=1e-5)
    export.export_pc2(g, q, str(tmp_path / "loop.pc2"), attach=True)      # the PC2 of the same run, played
    for j in (0, 3, g.n_frames - 1):
        np.testing.assert_allclose(evaluated_local(obj, g.frame_start + j), local[j], atol=1e-5)
        np.testing.assert_allclose(export.read_pc2(str(tmp_path / "loop.pc2"))[0][j], local[j], atol=1e-5)
    with writeback.showing_source([obj]):
        assert not obj.data.shape_keys.key_blocks["Wave"].mute and obj.show_only_shape_key
    assert obj.data.shape_keys.key_blocks["Wave"].mute and not obj.show_only_shape_key
    writeback.remove_loop(obj)
    assert {kb.name: (kb.value, kb.mute, kb.relative_key.name) for kb in obj.data.shape_keys.key_blocks} == states
    assert obj.show_only_shape_key


def test_the_next_bake_removes_a_killed_runs_temporaries_before_any_work(tmp_path, capsys):
    """Stale temporaries of ended processes go when the next bake checks its outputs, even when that bake
    then stops on bad input; a live writer's stay."""
    import subprocess
    import sys
    path = open_sample("flag", tmp_path)
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)
    stale = tmp_path / f"loop.pc2.partial-{dead}-abcd_123"
    stale.mkdir()
    (stale / "loop.pc2").write_bytes(b"half")
    (tmp_path / f"loop.blend.partial-{dead}-wxyz_987.blend").write_bytes(b"half")
    live = tmp_path / f"loop.pc2.partial-{os.getpid()}-live_123"
    live.mkdir()
    status, err = _bake([path, "--", "--object", "Flag", "--frames", "1", "2", "--pc2", str(tmp_path / "loop.pc2")],
                        capsys)
    assert status == 2 and "at least 4" in err, err
    assert sorted(os.listdir(tmp_path)) == ["flag.blend", live.name]


def test_sigterm_after_the_renames_leaves_every_earlier_file_as_it_was(tmp_path, capsys):
    """A farm cancels the task (SIGTERM) after the outputs are renamed into place, while the report is
    printed: exit 143, and the earlier outputs and report are back, byte for byte, with nothing left over."""
    import subprocess
    import sys
    from blender_helpers import ROOT
    path = open_sample("flag", tmp_path)
    outputs = ["--pc2", str(tmp_path / "loop.pc2"), "--json", str(tmp_path / "loop.json"),
               "--preview", str(tmp_path / "loop.png"), "--output", str(tmp_path / "loop.blend")]
    status, err = _bake([path, "--", *QUICK, *outputs], capsys)
    assert status == 0, err
    earlier = _tree(tmp_path)
    modes = {name: os.stat(tmp_path / name).st_mode for name in os.listdir(tmp_path)}
    changed = ["--iterations", "2"]      # another loop: every output's bytes differ from the earlier run's
    proc = subprocess.Popen([sys.executable, "-c", TERMINATED_AFTER_THE_RENAMES.format(root=ROOT), path, "--", *QUICK,
                             *changed, *outputs], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if line.startswith("[cyclic-loop] wrote "):
                break
        assert _tree(tmp_path) != earlier      # this run's outputs are in place now
        proc.terminate()
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + 15, err
    assert _tree(tmp_path) == earlier
    assert {name: os.stat(tmp_path / name).st_mode for name in os.listdir(tmp_path)} == modes
