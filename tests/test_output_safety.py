"""Nothing overwritten, nothing injected (docs/output_safety.md): temporary files that no planted link or
file can redirect, links and special files refused as outputs, modes kept, all-or-nothing renames that put
back what they replaced, stale temporaries of ended writers cleaned (not those of live ones), the farm
generators' output guard, and names quoted or refused at every boundary they cross. No bpy here: the bake's
own cases are in test_output_safety_bake.py."""
import json
import re
import os
import shlex
import stat
import subprocess
import sys

import numpy as np
import pytest

from cyclic_loop_addon.jobs import batch as batch_file
from cyclic_loop_addon import farm
from cyclic_loop_addon.outputs import files, web_page
from cyclic_loop_addon.jobs import openjd
from cyclic_loop_addon.errors import LoopInputError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FARM_PY = os.path.join(ROOT, "cyclic_loop_addon", "farm.py")


def _write(path, data=b"new", what="PC2 file"):
    with files.atomic_path(str(path), what) as tmp, open(tmp, "wb") as f:
        f.write(data)


def _dead_pid():
    return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)


# ------------------------------------------------------------------------------------------------ temporary files


def test_a_link_planted_at_a_temporary_name_is_not_followed(tmp_path):
    """The old predictable names (<name>.partial-<pid>.<ext>) and any guess of the new ones lead nowhere:
    the write lands only in the output, which stays a regular file."""
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious")
    out = tmp_path / "loop.pc2"
    for name in (f"loop.partial-{os.getpid()}.pc2", f"loop.pc2.partial-{os.getpid()}-guess"):
        os.symlink(victim, tmp_path / name)
    _write(out, b"loop data")
    assert victim.read_bytes() == b"precious"
    assert stat.S_ISREG(os.lstat(out).st_mode) and out.read_bytes() == b"loop data"


@pytest.mark.parametrize("make, kind", [
    (lambda p, t: os.symlink(t / "elsewhere.pc2", p), "a symbolic link"),
    (lambda p, t: os.symlink("/dev/null", p), "a symbolic link"),
    (lambda p, t: os.mkfifo(p), "a FIFO (named pipe)"),
])
def test_links_and_special_files_are_refused_as_outputs(tmp_path, make, kind):
    out = tmp_path / "out.pc2"
    (tmp_path / "elsewhere.pc2").write_bytes(b"other file")
    make(str(out), tmp_path)
    before = os.lstat(out)
    with pytest.raises(LoopInputError, match=re.escape(f"is {kind}; outputs are written as regular files only")):
        _write(out)
    after = os.lstat(out)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
    assert (tmp_path / "elsewhere.pc2").read_bytes() == b"other file"
    assert sorted(os.listdir(tmp_path)) == ["elsewhere.pc2", "out.pc2"]       # no temporary left


def test_a_device_is_refused_as_an_output():
    with pytest.raises(LoopInputError, match="/dev/null is a device"):
        files.check_writable("/dev/null", "--json")


def test_a_link_planted_while_the_writer_runs_is_refused_not_replaced(tmp_path):
    out, victim = tmp_path / "out.json", tmp_path / "victim"
    victim.write_bytes(b"precious")
    with pytest.raises(LoopInputError, match="is a symbolic link"):
        with files.atomic_path(str(out), "--json") as tmp, open(tmp, "w") as f:
            f.write("{}")
            os.symlink(victim, out)
    assert os.path.islink(out) and victim.read_bytes() == b"precious"
    assert sorted(os.listdir(tmp_path)) == ["out.json", "victim"]


def test_the_mode_of_a_replaced_file_is_kept(tmp_path):
    out = tmp_path / "loop.pc2"
    out.write_bytes(b"old")
    os.chmod(out, 0o640)
    _write(out)
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o640 and out.read_bytes() == b"new"
    old = os.umask(0o022)
    try:
        _write(tmp_path / "fresh.pc2")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "fresh.pc2").st_mode) == 0o644


def test_the_solver_result_is_written_safely(tmp_path):
    """solver_core.io: an unpredictable temporary name, the replaced file's mode, links refused."""
    from solver_core import io
    out, victim = tmp_path / "r.npz", tmp_path / "victim"
    victim.write_bytes(b"precious")
    os.symlink(victim, tmp_path / f"r.npz.partial-{os.getpid()}.npz")
    out.write_bytes(b"old")
    os.chmod(out, 0o600)
    io._write_npz(str(out), {"a": np.arange(3)})
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600 and np.load(out)["a"].tolist() == [0, 1, 2]
    assert victim.read_bytes() == b"precious"
    os.symlink(victim, tmp_path / "link.npz")
    with pytest.raises(ValueError, match="is a link or a special file"):
        io._write_npz(str(tmp_path / "link.npz"), {"a": np.arange(3)})
    assert victim.read_bytes() == b"precious"


HOLD_FILE = """import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print("ready", flush=True)
sys.stdin.read()
"""


def test_the_solver_cli_removes_stale_temporaries_of_ended_writers_only(tmp_path):
    """``python -m solver_core loop -o DIR/r.npz`` removes its own temporary names of ended processes in DIR
    before it writes; a live pid's file, a locked one (another PID namespace), a user's own file and the
    add-on's temporaries stay."""
    from solver_core.io import save_problem
    from solver_core.scenes.nbody import nbody_problem
    problem = tmp_path / "in" / "p.npz"
    problem.parent.mkdir()
    save_problem(str(problem), nbody_problem(3, seed=1, n_frames=12))
    dead = _dead_pid()
    stale = [tmp_path / f"r.npz.partial-{dead}-abcd_123.npz", tmp_path / f"old.npz.partial-{dead}.npz"]
    keep = [tmp_path / f"r.npz.partial-{os.getpid()}-live_123.npz", tmp_path / "notes.partial-2024.txt",
            tmp_path / f"loop.pc2.partial-{dead}.pc2"]
    for path in stale + keep:
        path.write_bytes(b"half")
    locked = tmp_path / f"r.npz.partial-{dead}-lock_123.npz"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_FILE, str(locked)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        proc = subprocess.run([sys.executable, "-m", "solver_core", "loop", str(problem), "-o", str(tmp_path / "r.npz"),
                               "--max-iters", "2", "--quiet"], capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert all(not os.path.lexists(p) for p in stale)
        assert all(p.exists() for p in keep) and locked.exists()
    finally:
        holder.communicate("")


def test_two_outputs_of_one_run_never_share_a_temporary_name(tmp_path):
    seen = []
    with files.all_or_nothing():
        for name in ("a.png", "b.png"):
            with files.atomic_path(str(tmp_path / name), "image") as tmp, open(tmp, "wb") as f:
                f.write(name.encode())
                seen.append(tmp)
    assert seen[0] != seen[1] and all(not os.path.exists(t) for t in seen)
    assert (tmp_path / "a.png").read_bytes() == b"a.png" and (tmp_path / "b.png").read_bytes() == b"b.png"


def test_two_outputs_naming_one_file_leave_the_earlier_file_as_it_was(tmp_path):
    """--vat vat --glb vat/Flag_mesh.glb: both write Flag_mesh.glb; the run is refused, the earlier set kept."""
    earlier = {name: f"earlier {name}".encode() for name in ("Flag_pos.png", "Flag.json", "Flag_mesh.glb")}
    for name, data in earlier.items():
        (tmp_path / name).write_bytes(data)
    with pytest.raises(LoopInputError, match="two outputs of this run name the same file"):
        with files.all_or_nothing([str(tmp_path)]):
            for name in ("Flag_pos.png", "Flag.json", "Flag_mesh.glb", "Flag_mesh.glb"):
                _write(tmp_path / name, b"this run")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == earlier


def test_a_rename_that_fails_puts_back_the_files_renamed_before_it(tmp_path):
    outputs = [tmp_path / n for n in ("a.pc2", "b.pc2", "c.pc2")]
    for path in outputs[:2]:
        path.write_bytes(b"earlier " + path.name.encode())
    inodes = [os.stat(p).st_ino for p in outputs[:2]]
    with pytest.raises(LoopInputError, match="is a folder"):
        with files.all_or_nothing([str(p) for p in outputs]):
            for path in outputs:
                _write(path, b"this run")
            outputs[2].mkdir()                       # the last rename cannot happen
    assert [p.read_bytes() for p in outputs[:2]] == [b"earlier a.pc2", b"earlier b.pc2"]
    assert [os.stat(p).st_ino for p in outputs[:2]] == inodes
    assert sorted(os.listdir(tmp_path)) == ["a.pc2", "b.pc2"]         # the folder the block saw made goes too


def test_a_run_failing_after_its_renames_puts_every_earlier_file_back(tmp_path):
    """The renames of an inner block are done; the outer block (the whole bake) then fails: each replaced
    file is back (same inode, bytes and mode), each new one gone, the earlier report kept, no temporary left."""
    earlier = {"a.pc2": b"earlier a", "r.json": b"earlier report"}
    for name, data in earlier.items():
        (tmp_path / name).write_bytes(data)
    os.chmod(tmp_path / "a.pc2", 0o600)
    inodes = {name: os.stat(tmp_path / name).st_ino for name in earlier}
    outputs = [str(tmp_path / n) for n in ("a.pc2", "b.png")]
    with pytest.raises(SystemExit):
        with files.all_or_nothing(outputs, str(tmp_path / "r.json")):
            with files.all_or_nothing():
                for name in ("a.pc2", "b.png", "r.json"):
                    _write(tmp_path / name, b"this run")
            assert (tmp_path / "a.pc2").read_bytes() == b"this run"
            raise SystemExit(128 + 15)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == earlier
    assert {name: os.stat(tmp_path / name).st_ino for name in earlier} == inodes
    assert stat.S_IMODE(os.stat(tmp_path / "a.pc2").st_mode) == 0o600


# ------------------------------------------------------------------------------------------------ stale temporaries


HOLD = """import fcntl, os, sys
folder = sys.argv[1]
os.mkdir(folder)
fd = os.open(folder, os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("ready", flush=True)
sys.stdin.read()
"""


def test_stale_temporaries_of_ended_writers_are_removed_live_ones_kept(tmp_path):
    """A killed writer's files go on the next write into the folder; a live writer's folder stays, also
    one of another PID namespace (its pid means nothing here, its lock does); a user's file stays."""
    dead = _dead_pid()
    stale = [tmp_path / f"loop.pc2.partial-{dead}-k3x_9q12", tmp_path / f"loop.partial-{dead}.pc2",
             tmp_path / f"loop.blend.partial-{dead}-0abc_xyz.blend"]
    stale[0].mkdir()
    (stale[0] / "loop.pc2").write_bytes(b"half")
    stale[1].write_bytes(b"half")
    stale[2].write_bytes(b"half")
    keep = [tmp_path / "notes.partial-2024.txt", tmp_path / "report.partial-2024-final.pdf",
            tmp_path / f"loop.glb.partial-{os.getpid()}-live_123"]
    keep[0].write_text("mine")
    keep[1].write_text("mine")
    keep[2].mkdir()
    other_namespace = tmp_path / f"loop.abc.partial-{dead}-other_12"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(other_namespace)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        _write(tmp_path / "loop.pc2")
        assert all(not os.path.lexists(p) for p in stale)
        assert all(p.exists() for p in keep) and other_namespace.is_dir()
    finally:
        holder.communicate("")
    assert files.clean_stale_partials(str(tmp_path)) == [str(other_namespace)]     # its writer has ended


KILLED = """import os, signal, sys
sys.path.insert(0, {root!r})
from cyclic_loop_addon.outputs import files
with files.all_or_nothing([{out!r}]):
    for name in ("loop.pc2", "loop.json"):
        with files.atomic_path(os.path.join({folder!r}, name), name) as tmp, open(tmp, "w") as f:
            f.write("half")
    print("written", flush=True)
    sys.stdin.read()
"""


def test_a_killed_bake_leaves_nothing_after_the_next_run(tmp_path):
    out = tmp_path / "loop.pc2"
    script = KILLED.format(root=ROOT, out=str(out), folder=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "written"
    proc.kill()
    proc.wait()
    assert len(os.listdir(tmp_path)) == 2                      # its two private folders, waiting to be renamed
    _write(out, b"next run")
    assert os.listdir(tmp_path) == ["loop.pc2"] and out.read_bytes() == b"next run"


def test_another_namespaces_live_staging_folder_is_kept(tmp_path):
    dead = _dead_pid()
    live = tmp_path / f"{files.TEMP_PREFIX}{dead}_other"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(live)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        assert files.clean_stale_temp(str(tmp_path)) == [] and live.is_dir()
    finally:
        holder.communicate("")
    assert files.clean_stale_temp(str(tmp_path)) == [str(live)]


# ------------------------------------------------------------------------------------------------ the farm tools


BATCH = """
[batch]
name = "props"
output_dir = "out"
outputs = ["pc2"]
blender = "/opt/blender/blender"

[[scene]]
file = "props.blend"
objects = OBJECTS
frames = [10, 40]
"""


def _batch(tmp_path, objects='["Flag"]', text=BATCH):
    (tmp_path / "props.blend").write_bytes(b"BLENDER")
    path = tmp_path / "batch.toml"
    path.write_text(text.replace("OBJECTS", objects))
    return path


def _farm(*args):
    return subprocess.run([sys.executable, FARM_PY, *map(str, args)], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("target, message", [
    ("batch.toml", "is the batch file"),
    ("props.blend", "is a scene of the batch"),
    ("out/props-Flag-default.pc2", "is an output of task props-Flag-default"),
    ("old.json", "exists: pass --overwrite"),
    ("link.json", "is a symbolic link"),
    ("missing/t.json", "folder {tmp}/missing does not exist"),
    ("sub", "is a folder"),
])
def test_the_template_path_is_guarded(tmp_path, target, message):
    """farm.py openjd -o: never the scene, the batch file, an output, a link, an existing file (without
    --overwrite); a missing folder is a message, not a traceback. Nothing changes on disk."""
    batch = _batch(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "props-Flag-default.pc2").write_bytes(b"earlier loop")
    (tmp_path / "old.json").write_text("{}")
    (tmp_path / "sub").mkdir()
    os.symlink(tmp_path / "props.blend", tmp_path / "link.json")
    before = {p: (p.read_bytes() if p.is_file() else None) for p in tmp_path.rglob("*")}
    proc = _farm("openjd", batch, "-o", tmp_path / target)
    assert proc.returncode == 2 and message.format(tmp=tmp_path) in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert {p: (p.read_bytes() if p.is_file() else None) for p in tmp_path.rglob("*")} == before


def test_overwrite_replaces_an_earlier_template(tmp_path, monkeypatch, capsys):
    batch = _batch(tmp_path)
    out = tmp_path / "t.json"
    out.write_text("earlier")
    os.chmod(out, 0o640)
    sizes = dict(vertices=70, substeps=4, physics_substeps=4, scheme="linearized", velocity_terms=True, frames=[10, 40])
    monkeypatch.setattr(openjd, "probe", lambda blender, scene, specs: {"objects": {s: sizes for s in specs}})
    assert farm.main(["openjd", str(batch), "-o", str(out)]) == 2 and out.read_text() == "earlier"
    assert farm.main(["openjd", str(batch), "-o", str(out), "--overwrite"]) == 0
    template = json.loads(out.read_text())
    assert "--object={{Task.Param.Object}}" in template["steps"][0]["script"]["actions"]["onRun"]["args"]
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o640
    assert sorted(os.listdir(tmp_path)) == ["batch.toml", "props.blend", "t.json"]


@pytest.mark.parametrize("objects", ['["{{Param.BlenderExe}}"]', '["Flag}}"]', '[["Sun", "A,B"]]'])
def test_openjd_refuses_names_it_would_expand_or_split(tmp_path, objects):
    proc = _farm("openjd", _batch(tmp_path, objects), "-o", tmp_path / "t.json")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "OpenJD expands" in proc.stderr or "cannot be one OpenJD task parameter" in proc.stderr
    assert not (tmp_path / "t.json").exists()


HOSTILE = ["Banner 2", "it's", 'say "hi"', "$(touch pwned)", "a;b", "`id`", "Flag,with,commas", "-b", "--overwrite"]


def test_list_bare_prints_one_shell_quoted_line_per_task(tmp_path):
    objects = json.dumps([[name] for name in HOSTILE])
    batch = _batch(tmp_path, objects)
    proc = _farm("list", "--bare", batch)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    tasks = batch_file.load(batch).tasks()
    assert len(lines) == len(HOSTILE) == len(tasks)
    assert [shlex.split(line) for line in lines] == [farm.command(t, "/opt/blender/blender") for t in tasks]
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("name", ["Flag\nrm -rf ~", "Flag\r", "Flag\x1b[2J"])
def test_list_refuses_a_name_that_would_break_the_line(tmp_path, name):
    proc = _farm("list", "--bare", _batch(tmp_path, json.dumps([name])))
    assert proc.returncode == 2 and "line break or another control character" in proc.stderr, proc.stderr
    assert proc.stdout == ""


def test_option_like_and_comma_names_are_passed_as_values(tmp_path):
    """A name starting with "-" goes as --object=NAME; a comma in a name is a one-name list in the batch
    file; an N-body group with such a name passes one --object=NAME per name."""
    batch = batch_file.load(_batch(tmp_path, '["-b", ["Flag,with,commas"], ["Sun", "Planet"], "Earth,Moon", '
                                               '["Moon", "A,B"]]'))
    tasks = batch.tasks()
    assert [t.names for t in tasks] == [("-b",), ("Flag,with,commas",), ("Sun", "Planet"), ("Earth", "Moon"),
                                        ("Moon", "A,B")]
    assert [t.bake_args()[:2] for t in tasks] == [
        ["--object=-b", "--frames"], ["--object", "Flag,with,commas"], ["--object", "Sun,Planet"],
        ["--object", "Earth,Moon"], ["--object=Moon", "--object=A,B"]]
    assert [t.name for t in tasks] == ["props--b-default", "props-Flag_with_commas-default", "props-Sun+Planet-default",
                                       "props-Earth+Moon-default", "props-Moon+A_B-default"]
    assert batch_file.option("--pin-group", "-pins") == ["--pin-group=-pins"]


def test_two_spellings_of_one_group_are_one_task(tmp_path):
    with pytest.raises(batch_file.BatchError, match="two tasks are named props-Sun\\+Planet-default"):
        batch_file.load(_batch(tmp_path, '[["Sun", "Planet"], "Sun,Planet"]'))


@pytest.mark.parametrize("text, message", [
    (BATCH.replace("[batch]", "batch = 3\n[x]"), "[batch] should be a table"),
    ("variants = 3\n" + BATCH, "[variants.NAME] tables expected"),
    (BATCH + "\n[variants]\ndraft = 1\n", "variants.draft should be a table"),
    ('scene = "props.blend"\n' + BATCH.split("[[scene]]")[0], "scene should be [[scene]] tables"),
    (BATCH.replace("frames = [10, 40]", "frames = [10, 40]\nvariants = [1]"), "variants should be a list of"),
    (BATCH.replace('outputs = ["pc2"]', 'outputs = [["pc2"]]'), "outputs should be some of"),
    (BATCH.replace("OBJECTS", '[3]'), "objects should be a list of object names"),
    (BATCH.replace("OBJECTS", '[[]]'), "objects should be a list of object names"),
])
def test_wrong_toml_types_are_messages(tmp_path, text, message):
    proc = _farm("list", _batch(tmp_path, text=text))
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_a_batch_path_that_is_a_folder_and_an_output_dir_that_is_a_file_are_messages(tmp_path):
    proc = _farm("list", tmp_path)
    assert proc.returncode == 2 and "is a folder; give the .toml file" in proc.stderr, proc.stderr
    batch = _batch(tmp_path)
    (tmp_path / "out").write_text("a file")
    proc = _farm("run", batch)
    assert proc.returncode == 2 and "output_dir" in proc.stderr and "is a file" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and (tmp_path / "out").read_text() == "a file"


# ------------------------------------------------------------------------------------------------ the web page


def _page_parts(page):
    """(title text, the loop-data script's text) as a browser's HTML parser splits the page."""
    from html.parser import HTMLParser

    class Parts(HTMLParser):
        def __init__(self):
            super().__init__()
            self.where, self.title, self.scripts = None, "", []

        def handle_starttag(self, tag, attrs):
            self.where = tag
            if tag == "script":
                self.scripts.append((dict(attrs).get("id"), ""))

        def handle_endtag(self, tag):
            self.where = None

        def handle_data(self, data):
            if self.where == "title":
                self.title += data
            elif self.where == "script":
                self.scripts[-1] = (self.scripts[-1][0], self.scripts[-1][1] + data)

    parts = Parts()
    parts.feed(page)
    return parts.title, dict(parts.scripts)["loop-data"]


@pytest.mark.parametrize("name", ["<!--<script>", "</script><script>alert(1)</script>", "__DATA__", "__TITLE__",
                                  "a & b <b>"])
def test_the_web_page_keeps_hostile_names_as_text(name):
    data = {"name": name, "frames": 3}
    page = web_page.render(json.dumps({"imports": {}}), json.dumps(data), name)
    title, script = _page_parts(page)
    assert title == f"Cyclic Loop: {name}"
    assert json.loads(script) == data
    assert "<!--" not in script and "</" not in script and page.count("<script") == 3



CANCELLED = """import os, signal, sys
sys.path.insert(0, {root!r})
from cyclic_loop_addon.outputs.files import all_or_nothing
with all_or_nothing([{vat!r}, {pc2!r}], {report!r}):
    os.mkdir({vat!r})                      # the VAT export makes its folder first
    os.kill(os.getpid(), signal.SIGTERM)
    signal.pause()
"""


def test_a_cancelled_run_keeps_the_previous_report(tmp_path):
    """SIGTERM before any output is renamed: the folder the run made goes, the earlier report and
    outputs stay as they were (they still match)."""
    vat, pc2, report = tmp_path / "vat", tmp_path / "loop.pc2", tmp_path / "loop.json"
    pc2.write_bytes(b"earlier loop")
    report.write_text('{"earlier": true}')
    script = CANCELLED.format(root=ROOT, vat=str(vat), pc2=str(pc2), report=str(report))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 128 + 15, proc.stderr
    assert not vat.exists() and pc2.read_bytes() == b"earlier loop" and report.read_text() == '{"earlier": true}'


@pytest.mark.parametrize("make", [lambda p, t: os.mkfifo(p), lambda p, t: os.symlink(t / "victim.npz", p)])
def test_the_solver_cli_refuses_a_link_or_fifo_as_its_output(tmp_path, capsys, make):
    """python -m solver_core loop P -o OUT: exit 2 through its error path, the link or FIFO and the file it
    names as they were, no temporary left."""
    from solver_core.__main__ import main
    from solver_core.scenes.nbody import nbody_problem
    import solver_core as sc
    sc.save_problem(tmp_path / "p.npz", nbody_problem(3, seed=1, n_frames=12, perturbation=0.005))
    (tmp_path / "victim.npz").write_bytes(b"precious")
    out = tmp_path / "r.npz"
    make(str(out), tmp_path)
    before = os.lstat(out)
    assert main(["loop", str(tmp_path / "p.npz"), "-o", str(out), "--max-iters", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "is a link or a special file" in err and "Traceback" not in err, err
    assert (os.lstat(out).st_ino, os.lstat(out).st_mode) == (before.st_ino, before.st_mode)
    assert (tmp_path / "victim.npz").read_bytes() == b"precious"
    assert sorted(os.listdir(tmp_path)) == ["p.npz", "r.npz", "victim.npz"]
