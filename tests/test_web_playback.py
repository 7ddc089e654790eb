"""The exports played by real engines: three.js in headless Chromium (Debian's chromium, playwright-core and
three from ``npm ci --prefix web``) and Godot 3 headless (Debian's godot3-server), checked against the loop
as Blender plays it (bpy wheel).

One headless bake of the flag sample writes the loop (.blend), the GLB, the VAT and the web page, and two
more bakes write the GLB's other storages and shadings; the GLBs play as imported (no code of the project's
in the player) across two periods in steps of 1 / fps and of 0.37 / fps, the VAT across several wraps, and
the wrap must be as smooth there as in Blender. The default GLB's normals (a basis of a few morph targets)
must show as the float GLB's (a normal per target) do in each player.
"""
import base64
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

bpy = pytest.importorskip("bpy")

from blender_helpers import ROOT, evaluated_local, open_sample, sample_path, settings  # noqa: E402
from cyclic_loop_addon.outputs import glb_loop, gltf, images, vat, writeback  # noqa: E402
from cyclic_loop_addon.pipeline import scene_reader  # noqa: E402

WRAPS = 3
PERIODS, FRACTION = 2, 0.37         # the GLB runs: two periods in steps of 1 / fps and of FRACTION / fps
# The GLBs the fixture writes: file -> glTF options (bake.py's --glb-shading, --glb-storage; flag.glb: the defaults).
GLBS = {"flag.glb": gltf.DEFAULTS,
        "flag_float_flat.glb": {"shading": "flat", "storage": "float"},
        "flag_compact_flat.glb": {"shading": "flat", "storage": "compact"}}
GODOT_GLBS = ("flag.glb", "flag_float_flat.glb")      # Godot 3 reads neither sparse nor normalized data
# The same exports of a travelling wave over the flag: every sample the same distance from the next, the wrap
# included, so a player's wrap step is the only step that can stand out (the baked loop's own wrap is uneven).
WAVES = {f"wave{name[4:]}": options for name, options in GLBS.items()}
# The wave with a float normal per target, smooth: the normals the default GLB's basis stands for.
WAVES["wave_float_smooth.glb"] = {"shading": "smooth", "storage": "float"}


def node(script, *args, timeout=300):
    """Run one of tests/web/*.mjs from the repository root; its JSON output."""
    run = subprocess.run(["node", os.path.join("tests", "web", script), *map(str, args)], cwd=ROOT,
                         capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def wrap_ratio(frames, n_frames):
    """Largest second difference at the wrap (centred on the last and on the first frame of the period),
    over the median second difference of all frames: frames (K, n, 3) played at loop frames k mod N."""
    d2 = np.abs(frames[2:] - 2 * frames[1:-1] + frames[:-2]).max(axis=(1, 2))
    centre = np.arange(1, len(frames) - 1) % n_frames
    return d2[(centre == 0) | (centre == n_frames - 1)].max() / np.median(d2)


def y_up(points):
    return np.stack([points[..., 0], points[..., 2], -points[..., 1]], axis=-1)


@pytest.fixture(scope="module")
def baked(tmp_path_factory):
    """bake.py on the flag sample (1 Gauss-Newton step from the cache, hard first frames) writing every format.
    With the cloth's default soft first frames one step leaves a loop whose second differences at the wrap
    are within a few half-float steps of the VAT's quantization: wrap ratio 1.47 played from the VAT
    against 1.10 in Blender (benchmarks/results/exports.md)."""
    out = tmp_path_factory.mktemp("web")
    cmd = [sys.executable, os.path.join(ROOT, "cyclic_loop_addon", "bake.py"), sample_path("flag"), "--",
           "--object", "Flag", "--frames", "49", "72", "--substeps", "1", "--iterations", "1", "--init", "cache",
           "--soft", "0", "--output", out / "flag.blend", "--glb", out / "flag.glb", "--vat", out / "flag_vat",
           "--html", out / "flag.html"]
    run = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    for name, options in GLBS.items():
        if name != "flag.glb":
            glb = ["--glb", out / name, "--glb-shading", options["shading"], "--glb-storage", options["storage"]]
            more = subprocess.run(list(map(str, cmd[:cmd.index("--output")] + glb)), capture_output=True,
                                  text=True, timeout=300)
            assert more.returncode == 0, more.stdout[-2000:] + more.stderr[-2000:]
    bpy.ops.wm.open_mainfile(filepath=str(out / "flag.blend"))
    obj = bpy.data.objects["Flag"]
    n_frames, start = 24, 49
    played = np.array([evaluated_local(obj, start + k) for k in range(WRAPS * n_frames + 2)])
    rest = np.array([v.co for v in obj.data.vertices])
    world = np.array(obj.matrix_world)
    baked = dict(out=out, played=played, rest=rest, n_frames=n_frames, start=start, world=world, fps=24.0,
                 loop=y_up(played[:n_frames] @ world[:3, :3].T + world[:3, 3]))
    open_sample("flag")
    gathered = scene_reader.gather(settings("flag", frame_start=start, frame_end=start + n_frames - 1))
    phase = 2 * np.pi * (np.arange(n_frames)[:, None] / n_frames + gathered.source[0][:, 0] / 1.5)
    wave = gathered.source[0] + 0.05 * np.stack([0 * phase, np.sin(phase), 0.5 * np.cos(phase)], axis=-1)
    for name, options in WAVES.items():
        gltf.export_gltf(gathered, wave, str(out / name), **options)
    to_world = np.array(bpy.data.objects["Flag"].matrix_world)
    baked["wave"] = y_up(writeback.local_loop(gathered, wave) @ to_world[:3, :3].T + to_world[:3, 3])
    return baked


def loop_at(loop, fps, times):
    """The loop (N, n, 3) played at ``times`` (seconds): linear between samples, wrapping from the last to the
    first like any other step."""
    frame = np.asarray(times) * fps
    low = np.floor(frame).astype(int)
    part = (frame - low)[:, None, None]
    return (1 - part) * loop[low % len(loop)] + part * loop[(low + 1) % len(loop)]


def wrap_step_ratio(frames, times, period):
    """Largest step (of any vertex, between consecutive samples) that crosses a wrap, over the median step."""
    steps = np.abs(np.diff(frames, axis=0)).max(axis=(1, 2))
    cycle = np.floor(np.asarray(times) / period + 1e-9)
    return steps[np.diff(cycle) > 0].max() / np.median(steps)


def glb_figures(path):
    """The GLB's animation extras (cyclic_loop) and its closing key, read back from the file."""
    doc, blob = glb_loop.read_glb(path.read_bytes())
    (animation,) = doc["animations"]
    sampler = animation["samplers"][0]
    times = glb_loop.read_accessor(doc, blob, sampler["input"])[:, 0]
    weights = glb_loop.read_accessor(doc, blob, sampler["output"]).reshape(len(times), -1)
    return dict(animation["extras"]["cyclic_loop"], name_in_file=animation["name"], times=times, weights=weights,
                doc=doc)


def tolerance(extras):
    """How far a played position may be from the loop: float32 rounding, plus half a quantization step."""
    return 1e-6 + 0.5 * extras["position_step"]


def _original_vertex(points, reference, within=1e-6):
    """Index of the reference vertex at each point (players split vertices at flat faces)."""
    points = np.reshape(points, (-1, 3))
    d = np.linalg.norm(points[:, None] - reference[None], axis=2)
    assert d.min(axis=1).max() < within
    return d.argmin(axis=1)


def test_khronos_validator_finds_no_errors(baked):
    paths = [baked["out"] / name for name in GLBS] + [baked["out"] / "flag_vat" / "Flag_mesh.glb"]
    reports = node("validate.mjs", *paths)
    for report in reports:
        assert report["issues"]["numErrors"] == 0, (report["path"], report["issues"]["messages"])
    for report in reports[:len(GLBS)]:
        assert report["info"]["animationCount"] == 1 and report["info"]["hasMorphTargets"]
    uses = {os.path.basename(r["path"]): r["info"].get("extensionsRequired", []) for r in reports}
    assert uses["flag.glb"] == uses["flag_compact_flat.glb"] == ["KHR_mesh_quantization"]
    assert uses["flag_float_flat.glb"] == []


def test_glbs_close_the_loop_and_carry_its_figures(baked):
    """Each GLB's clip ends with the closing key (t = N / fps, frame 0's weights) and names the loop; the
    sizes against the raw data (70 vertices x 24 frames x 3 float32) are the ones docs/design/exports.md gives."""
    n = baked["n_frames"]
    raw = baked["rest"].shape[0] * n * 12
    sizes = {}
    for name in GLBS:
        extras = glb_figures(baked["out"] / name)
        assert (extras["name"], extras["frame_count"], extras["fps"], extras["period"]) == ("Flag", n, 24.0, n / 24)
        assert extras["name_in_file"] == "Flag-loop"
        np.testing.assert_allclose(extras["times"], np.arange(n + 1) / 24, atol=1e-6)
        np.testing.assert_array_equal(extras["weights"][-1], extras["weights"][0])
        np.testing.assert_array_equal(extras["weights"][:n, :n], np.eye(n))      # then the normal basis' weights
        assert extras["weights"].shape == (n + 1, n + extras["normal_targets"])
        sizes[name] = (baked["out"] / name).stat().st_size / raw
    print("GLB size / raw data:", sizes)
    compact = glb_figures(baked["out"] / "flag_compact_flat.glb")["doc"]
    (weights,) = [a for a in compact["accessors"] if "sparse" in a]
    assert "bufferView" not in weights and weights["sparse"]["count"] == n + 1
    assert sizes["flag_compact_flat.glb"] <= 2.0 and sizes["flag.glb"] <= 2.0
    assert sizes["flag.glb"] < sizes["flag_float_flat.glb"] / 2.5


@pytest.fixture(scope="module")
def three(baked):
    """three.js in headless Chromium playing every GLB as imported and the VAT."""
    steps = len(baked["played"])
    result = node("play_exports.mjs", baked["out"], ",".join([*GLBS, *WAVES]), "flag_vat/Flag.json", steps)
    assert result.get("error") is None and result["errors"] == [] and result["blocked"] == [], result
    return result


def _check_runs(runs, loop, fps, extras, player, even):
    """Positions of each run against ``loop`` at the player's clock, that clock against the run's own
    (k * step, so a clip that wraps early shows), and the wrap step against the median step: at most 1.2
    times it for an ``even`` loop (the wave), else at most the loop's own ratio (played by its definition)."""
    n, period = len(loop), len(loop) / fps
    ratios = {}
    for name, step in (("frame", 1 / fps), ("fraction", FRACTION / fps)):
        clock = np.asarray(runs[name]["times"], float)
        frames = np.reshape(runs[name]["frames"], (len(clock), -1, 3))
        nominal = step * np.arange(len(frames))
        assert nominal[-1] >= PERIODS * period - step and len(frames) > PERIODS * n
        late = np.mod(clock - nominal, period)
        assert np.minimum(late, period - late).max() < 1e-5, (player, name)
        index = _original_vertex(frames[0], loop[0], 2 * tolerance(extras))
        error = np.abs(frames - loop_at(loop, fps, clock)[:, index]).max()
        print(f"{player} {name}: largest distance from the loop {error:.3g} m")
        np.testing.assert_allclose(frames, loop_at(loop, fps, clock)[:, index], rtol=0,
                                   atol=tolerance(extras), err_msg=f"{player} {name}")
        ratios[name] = wrap_step_ratio(frames, nominal, period)
        own = wrap_step_ratio(loop_at(loop, fps, nominal), nominal, period)
        assert ratios[name] <= (1.2 if even else own * 1.01), (player, name, ratios, own)
    return ratios


def test_three_js_plays_each_glb_as_imported_seamlessly(baked, three):
    """three.js's default looping (LoopRepeat, no code of the project's) plays the loop: every position at
    1 / fps and 0.37 / fps steps over two periods, the wrap step no larger than any other."""
    n = baked["n_frames"]
    ratios = {}
    for name in GLBS:
        glb, extras = three["glbs"][name], glb_figures(baked["out"] / name)
        assert glb["loop"]["frame_count"] == n and glb["targets"] == n + extras["normal_targets"]
        assert glb["duration"] == pytest.approx(n / baked["fps"])
        ratios[name] = _check_runs(glb["runs"], baked["loop"], baked["fps"], extras, f"three.js {name}", False)
        halfway = 0.5 * (baked["loop"][n - 1] + baked["loop"][0])      # the wrap interpolated like any step
        index = _original_vertex(np.asarray(glb["runs"]["frame"]["frames"][0]), baked["loop"][0],
                                 2 * tolerance(extras))
        np.testing.assert_allclose(np.reshape(glb["halfway"], (-1, 3)), halfway[index], atol=tolerance(extras))
    for name in WAVES:
        ratios[name] = _check_runs(three["glbs"][name]["runs"], baked["wave"], baked["fps"],
                                   glb_figures(baked["out"] / name), f"three.js {name}", True)
    print("three.js wrap step / median step:", ratios)
    compact = three["glbs"]["flag_compact_flat.glb"]        # flat shading without normals: three.js computes them
    assert not compact["normals"] and compact["flatShading"] and three["glbs"]["flag.glb"]["normals"]
    assert len(compact["rest"]) // 3 == baked["rest"].shape[0] < len(three["glbs"]["flag_float_flat.glb"]["rest"]) // 3


def test_three_js_plays_the_vat_as_smoothly_as_blender(baked, three):
    n, played = baked["n_frames"], baked["played"]
    steps = len(played)
    blender = wrap_ratio(played, n)
    info = three["vat"]["info"]
    width, height = info["texture_size"]
    uv = np.reshape(three["vat"]["uv1"], (-1, 2))
    texel = np.floor(uv[:, 0] * width).astype(int) + width * np.floor(uv[:, 1] * height).astype(int)
    np.testing.assert_allclose(np.reshape(three["vat"]["rest"], (-1, 3)), y_up(baked["rest"][texel]), atol=1e-6)
    gpu = np.reshape(three["vat"]["frames"], (steps, -1, 3))
    half = 2.0 ** -11 * np.abs(played - baked["rest"]).max()                      # half-float offsets
    np.testing.assert_allclose(gpu, y_up(played[:, texel]), atol=half * 1.01)
    ratios = {"blender": blender, "vat": wrap_ratio(gpu, n)}
    print("wrap second-difference ratio:", ratios)
    assert ratios["vat"] <= blender * 1.02


def godot_play(glb, folder, fps, n_frames):
    """Import ``glb`` in a throwaway Godot 3 project (headless editor import), then play its animation with
    tests/godot/sample_loop.gd over PERIODS periods in steps of 1 / fps and FRACTION / fps; the script's
    JSON lines: (header, {run: [samples]})."""
    godot = shutil.which("godot3-server")
    assert godot, "godot3-server is not installed: bash .ci/setup installs it (Debian's godot3-server)"
    folder.mkdir()
    shutil.copy(glb, folder / "loop.glb")
    shutil.copy(os.path.join(ROOT, "tests", "godot", "sample_loop.gd"), folder)
    (folder / "project.godot").write_text('config_version=4\n\n[application]\n\nconfig/name="loop"\n')
    frames = PERIODS * n_frames
    runs = [{"name": "frame", "step": 1 / fps, "samples": frames + 1},
            {"name": "fraction", "step": FRACTION / fps, "samples": math.floor(frames / FRACTION) + 1}]
    (folder / "sample.json").write_text(json.dumps({"scene": "res://loop.glb", "runs": runs}))
    env = dict(os.environ, **{k: str(folder / k.lower()) for k in ("XDG_CONFIG_HOME", "XDG_DATA_HOME",
                                                                    "XDG_CACHE_HOME")})
    imported = subprocess.run([godot, "--path", str(folder), "--editor", "--quit"], capture_output=True,
                              text=True, timeout=120, env=env)
    assert list((folder / ".import").glob("loop.glb-*.scn")), imported.stdout[-3000:] + imported.stderr[-3000:]
    played = subprocess.run([godot, "--path", str(folder), "--script", "res://sample_loop.gd"],
                            capture_output=True, text=True, timeout=120, env=env)
    lines = [json.loads(line) for line in played.stdout.splitlines() if line.startswith("{")]
    assert played.returncode == 0 and "SCRIPT ERROR" not in played.stdout + played.stderr and \
        len(lines) == 1 + sum(r["samples"] for r in runs), \
        played.stdout[-3000:] + played.stderr[-3000:]
    samples = {r["name"]: [s for s in lines[1:] if s["run"] == r["name"]] for r in runs}
    head = dict(lines[0], rest=exact(lines[0]["rest"]).reshape(-1, 3))
    return head, {name: {"frames": [exact(s["positions"]).reshape(-1, 3) for s in run],
                         "times": [exact(s["time"])[0] for s in run],
                         "normals": [exact(s["normals"]).reshape(-1, 3) for s in run if "normals" in s]}
                  for name, run in samples.items()}


def exact(text):
    """Numbers the GDScript wrote as base64 of float64s."""
    return np.frombuffer(base64.b64decode(text), "<f8")


@pytest.mark.parametrize("name", [*GODOT_GLBS, *(f"wave{name[4:]}" for name in GODOT_GLBS)])
def test_godot_3_plays_the_glb_as_imported_seamlessly(baked, tmp_path, name):
    """Godot 3's glTF importer makes a looping Animation of length N / fps (the name's -loop suffix, the
    closing key); its AnimationPlayer plays the loop at 1 / fps and 0.37 / fps, the wrap no larger a step
    than the loop's own (the wave's within 1.2 times the median step)."""
    n = baked["n_frames"]
    head, runs = godot_play(baked["out"] / name, tmp_path / "godot", baked["fps"], n)
    extras = glb_figures(baked["out"] / name)
    assert head["loop"] and head["length"] == pytest.approx(n / baked["fps"])
    assert head["blend_shapes"] == n + extras["normal_targets"] and head["normals"]
    wave = name.startswith("wave")
    ratios = _check_runs(runs, baked["wave" if wave else "loop"], baked["fps"], extras, f"Godot {name}", wave)
    print(f"Godot 3 {name} wrap step / median step:", ratios)


def shown_normals(runs, loop, within):
    """The normals a player showed in its run at 1 / fps (keys), (samples, n, 3), in the loop's vertex order
    (each played vertex matched to the loop's by its frame-0 position: smooth shading splits none)."""
    frames = np.reshape(runs["frame"]["frames"], (len(runs["frame"]["times"]), -1, 3))
    index = _original_vertex(frames[0], loop[0], within)
    assert sorted(index.tolist()) == list(range(len(loop[0])))
    normals = np.empty_like(frames)
    normals[:, index] = np.reshape(runs["frame"]["normals"], frames.shape)
    return normals


def degrees_between(a, b):
    """Angles (degrees) between unit vectors ``a`` and ``b`` (..., 3)."""
    return np.degrees(np.arccos(np.clip(np.sum(a * b, axis=-1), -1.0, 1.0)))


def test_players_show_the_float_glbs_normals_from_the_default_basis(baked, three, tmp_path):
    """The default GLB of the wave holds its normals as a basis of a few morph targets; at every key of two
    periods each player shows the normals it shows from the float GLB (a normal per target): three.js (float
    normals) within the basis' bound; Godot 3, which stores every normal in 8 bits (nearest of 1 / 127 a
    component, r = sqrt(3) / 254 a vector; the shapes' normals are absolute), within that bound plus
    asin(r (2 + 2 k)): the base's and each of the k basis shapes' rounding (weights within [-1, 1]) twice,
    and the float GLB's own."""
    default, reference = "wave.glb", "wave_float_smooth.glb"
    extras = glb_figures(baked["out"] / default)
    k, bound = extras["normal_targets"], extras["normal_error"]
    assert k > 0 and bound <= glb_loop.NORMAL_TOLERANCE
    within = 2 * tolerance(extras)
    godot = {name: godot_play(baked["out"] / name, tmp_path / name, baked["fps"], baked["n_frames"])[1]
             for name in (default, reference)}
    r = math.sqrt(3) / 254
    for player, runs, most in (("three.js", {n: three["glbs"][n]["runs"] for n in (default, reference)},
                                bound + 1e-3),
                               ("Godot 3", godot, bound + math.degrees(math.asin(r * (2 + 2 * k))))):
        shown = {n: shown_normals(runs[n], baked["wave"], within) for n in (default, reference)}
        moved = degrees_between(shown[reference], shown[reference][:1]).max()
        error = degrees_between(shown[default], shown[reference]).max()
        print(f"{player}: default GLB's normals within {error:.3f} degrees of the float GLB's (bound {most:.3f}; "
              f"they turn by up to {moved:.2f} degrees)")
        assert error <= most and moved > 3 * most, (player, error, most, moved)


def open_clip(path, to):
    """The GLB at ``path`` as Blender's exporter writes it: the clip without its closing key (N keys, lasting
    (N - 1) / fps), its name still ending in -loop, as a user would loop it by hand in Godot."""
    doc, blob = glb_loop.read_glb(path.read_bytes())
    sampler = doc["animations"][0]["samplers"][0]
    for key in ("input", "output"):
        acc = doc["accessors"][sampler[key]]
        acc["count"] -= acc["count"] // len(glb_figures(path)["times"])
    doc["accessors"][sampler["input"]]["max"] = [float(glb_figures(path)["times"][-2])]
    to.write_bytes(glb_loop.write_glb(doc, blob))
    return to


def test_the_open_clip_skips_a_frame_in_both_players(baked, tmp_path):
    """The measure sees the fault the closing key removes: the wave's clip without it wraps from the last key
    straight to the first in three.js and in Godot 3 (a skipped frame: about twice the median step)."""
    name = open_clip(baked["out"] / "wave_float_flat.glb", baked["out"] / "wave_open.glb").name
    three = node("play_exports.mjs", baked["out"], name, "flag_vat/Flag.json", 2)["glbs"][name]
    _, godot = godot_play(baked["out"] / name, tmp_path / "godot", baked["fps"], baked["n_frames"])
    period = baked["n_frames"] / baked["fps"]
    for player, runs in (("three.js", three["runs"]), ("Godot 3", godot)):
        ratios = {}
        for run, step in (("frame", 1 / baked["fps"]), ("fraction", FRACTION / baked["fps"])):
            frames = np.reshape(runs[run]["frames"], (len(runs[run]["times"]), -1, 3))
            nominal = step * np.arange(len(frames))
            # the player's own period is (N - 1) / fps: its wraps are where the clip restarts
            ratios[run] = wrap_step_ratio(frames, nominal, period * (baked["n_frames"] - 1) / baked["n_frames"])
        print(f"{player} open clip: wrap step / median step {ratios}")
        assert ratios["frame"] > 1.8 and ratios["fraction"] > 1.8, (player, ratios)


def test_wrap_ratio_sees_a_repeated_last_sample():
    """The measure itself: a smooth loop played open is even at the wrap; repeating the first sample is not."""
    n = 24
    angle = 2 * np.pi * np.arange(WRAPS * n + 2) / n
    circle = np.stack([np.cos(angle), np.sin(angle), 0 * angle], axis=-1)[:, None]
    assert wrap_ratio(circle, n) < 1.2
    closed = np.concatenate([circle[:n + 1]] * WRAPS)
    assert wrap_ratio(closed, n + 1) > 3


def test_web_preview_plays_offline_and_shows_both_clips(baked, tmp_path):
    n = baked["n_frames"]
    shot = tmp_path / "page.png"
    page = node("preview_shot.mjs", baked["out"] / "flag.html", shot, n - 0.5)      # halfway through the wrap
    assert page["errors"] == [] and page["blocked"] == [] and page["frames"] == n
    local = 0.5 * (baked["played"][n - 1] + baked["played"][0])
    world = local @ baked["world"][:3, :3].T + baked["world"][:3, 3]
    np.testing.assert_allclose(np.reshape(page["loop"], (-1, 3)), y_up(world), atol=1e-5)
    picture = images.read_image(str(shot))[..., :3]
    half = picture.shape[1] // 2
    orange = (picture[..., 0] > 0.5) & (picture[..., 2] < 0.35)
    blue = (picture[..., 2] > 0.5) & (picture[..., 0] < 0.4)
    assert orange[:, :half].mean() > 0.02 and blue[:, half:].mean() > 0.02
    assert orange[:, half:].mean() < 0.001 and blue[:, :half].mean() < 0.001


def test_vat_json_matches_the_blend(baked):
    info = json.load(open(baked["out"] / "flag_vat" / "Flag.json"))
    offsets = baked["played"][:baked["n_frames"]] - baked["rest"]
    decoded = vat.read_vat(str(baked["out"] / "flag_vat" / "Flag.json"), ".png")[1]
    span = np.array(info["bounds"]["max"]) - np.array(info["bounds"]["min"])
    assert decoded.shape == offsets.shape and np.all(np.abs(decoded - offsets) <= span / 65535 * 0.51 + 1e-6)
