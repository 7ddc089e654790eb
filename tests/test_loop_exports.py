"""VAT, glTF and web-page exports on real Blender data (bpy wheel): each file read back (Blender's importers,
the VAT decoded with its JSON) reproduces the loop to the format's precision with exactly N frames."""
import json
import os
import shutil
import struct
import subprocess

import numpy as np
import pytest

bpy = pytest.importorskip("bpy")

from blender_helpers import ROOT, evaluated_local, open_sample, settings, sha256  # noqa: E402
from cyclic_loop_addon import bake  # noqa: E402
from cyclic_loop_addon.outputs import export, glb_loop, gltf, vat, web_preview, writeback
from cyclic_loop_addon.pipeline import scene_reader
from cyclic_loop_addon.errors import LoopInputError  # noqa: E402
from cyclic_loop_addon.core import sc  # noqa: E402

HALF_EPS = 2.0 ** -11       # half-float relative rounding
GODOT = "godot3-server"     # Debian's headless Godot 3 (with the editor's importers)
ARRAY_COMPRESS_TEX_UV2 = 16384      # Godot 3's Mesh.ARRAY_COMPRESS_TEX_UV2: UV2 stored as half floats


def _flag():
    open_sample("flag")
    g = scene_reader.gather(settings("flag"))
    return g, sc.crossfade_loop(g.source)


def _rest(name):
    mesh = bpy.data.objects[name].data
    co = np.empty(len(mesh.vertices) * 3)
    mesh.vertices.foreach_get("co", co)
    return co.reshape(-1, 3)


def _glb_json(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b"glTF"
    length = struct.unpack("<I", data[12:16])[0]
    return json.loads(data[20:20 + length])


def _exr_channel_types(path):
    """Pixel type of each channel in an OpenEXR header (0 uint, 1 half, 2 float)."""
    with open(path, "rb") as f:
        header = f.read(4096)
    start = header.index(b"channels\0chlist\0") + len(b"channels\0chlist\0") + 4
    types, at = {}, start
    while header[at] != 0:
        end = header.index(b"\0", at)
        types[header[at:end].decode()] = struct.unpack("<i", header[end + 1:end + 5])[0]
        at = end + 1 + 16
    return types


def test_layout_wraps_many_vertices_and_decodes_exactly():
    values = np.random.default_rng(1).random((5, 11, 3))
    image = vat.encode(values, max_width=4)
    assert vat.layout(11, 5, max_width=4) == (4, 3, 16) and image.shape == (16, 4, 4)
    assert not image[15].any() and not image[:15, :, 3].reshape(5, 12)[:, 11].any()    # padding
    np.testing.assert_array_equal(vat.decode(image, 11, 5), values.astype(np.float32))
    uv = vat.texel_uv(11, 5, max_width=4)
    col, row = np.floor(uv[:, 0] * 4).astype(int), np.floor((1 - uv[:, 1]) * 16).astype(int)
    np.testing.assert_array_equal(row * 4 + col, np.arange(11))
    np.testing.assert_array_equal(image[row, col, :3], values[0].astype(np.float32))


@pytest.mark.parametrize("n, frames", [(1, 24), (70, 24), (1000, 7), (1024, 24), (1025, 24), (2752, 24),
                                       (100_000, 24), (1024 * 1024, 16)])
def test_layout_texel_centres_are_exact_in_half_floats(n, frames):
    """Every vertex's UV, as float16 (Godot 3's UV2) and back, is still its own texel's centre: power-of-two
    sides, at most 1,024 columns and 1,024 rows per frame."""
    width, rows, height = vat.layout(n, frames)
    assert width <= 1024 and rows <= 1024 and height >= frames * rows
    assert width & (width - 1) == 0 and height & (height - 1) == 0 and width * rows >= n
    gl = vat.texel_uv(n, frames).astype(np.float32) * [1, -1] + [0, 1]       # glTF's v points down
    half = gl.astype(np.float16).astype(np.float64)
    np.testing.assert_array_equal(half, gl)
    column, row = half[:, 0] * width - 0.5, half[:, 1] * height - 0.5
    np.testing.assert_array_equal(row * width + column, np.arange(n))


def test_layout_refuses_what_half_floats_or_engines_cannot_address():
    with pytest.raises(LoopInputError, match="at most 1,048,576 vertices"):
        vat.layout(1024 * 1024 + 1, 2)
    with pytest.raises(LoopInputError, match="texels tall"):
        vat.layout(1024 * 100, 200)


def test_vat_reads_back_to_half_and_16_bit_precision(tmp_path):
    g, q = _flag()
    local = writeback.local_loop(g, q)
    rest = _rest("Flag")
    path = vat.export_vat(g, q, str(tmp_path / "flag_vat"))
    names = sorted(os.listdir(tmp_path / "flag_vat"))
    assert names == ["Flag.json", "Flag_mesh.glb", "Flag_nrm.exr", "Flag_nrm.png", "Flag_pos.exr", "Flag_pos.png"]
    info = json.load(open(path))
    n, frames = g.n_written, g.n_frames
    size = (128, 32)                                # powers of two: 70 vertices, 24 frames of one row
    assert (frames, n) == (24, 70) and info["rows_per_frame"] == 1
    assert (info["frame_count"], info["vertex_count"], info["texture_size"]) == (frames, n, list(size))
    assert info["fps"] == 24 and info["duration"] == frames / 24 and info["uv_set"] == 1
    with open(tmp_path / "flag_vat" / "Flag_pos.png", "rb") as f:
        png = f.read(26)
    assert png[12:16] == b"IHDR" and struct.unpack(">II", png[16:24]) == size and png[24] == 16
    assert _exr_channel_types(tmp_path / "flag_vat" / "Flag_pos.exr") == {"A": 1, "B": 1, "G": 1, "R": 1}

    offsets = local - rest
    _, exr_offsets, exr_normals = vat.read_vat(path, ".exr")
    assert exr_offsets.shape == (frames, n, 3)
    np.testing.assert_allclose(exr_offsets, offsets, rtol=0, atol=HALF_EPS * np.abs(offsets).max())
    _, png_offsets, png_normals = vat.read_vat(path, ".png")
    span = np.array(info["bounds"]["max"]) - np.array(info["bounds"]["min"])
    assert np.all(np.abs(png_offsets - offsets) <= span / 65535 * 0.51 + 1e-9)
    for normals, tol in ((exr_normals, 2 * HALF_EPS), (png_normals, 2 / 65535)):
        np.testing.assert_allclose(np.linalg.norm(normals, axis=2), 1.0, atol=2 * tol)
    obj = bpy.data.objects["Flag"]
    writeback.write_back(g, q)
    for j in (0, frames - 1):        # Blender's own vertex normals of the same frame agree closely
        bpy.context.scene.frame_set(g.frame_start + j)
        mesh = obj.evaluated_get(bpy.context.evaluated_depsgraph_get()).data
        blender = np.array([v.normal for v in mesh.vertices])
        assert np.einsum("ij,ij->i", blender, exr_normals[j]).min() > 0.999


def test_vat_mesh_second_uv_addresses_each_vertex_texel(tmp_path):
    g, q = _flag()
    rest = _rest("Flag")
    path = vat.export_vat(g, q, str(tmp_path / "vat"))
    info = json.load(open(path))
    bpy.ops.wm.read_factory_settings(use_empty=True)
    bpy.ops.import_scene.gltf(filepath=str(tmp_path / "vat" / info["mesh"]))
    (obj,) = [ob for ob in bpy.data.objects if ob.type == "MESH"]
    mesh = obj.data
    assert len(mesh.uv_layers) == 2 and info["uv_set"] == 1          # TEXCOORD_1 (the importer renames it)
    uv = np.empty(len(mesh.loops) * 2)
    mesh.uv_layers[1].data.foreach_get("uv", uv)
    loops = np.empty(len(mesh.loops), dtype=np.int64)
    mesh.loops.foreach_get("vertex_index", loops)
    width, height = info["texture_size"]
    uv = uv.reshape(-1, 2)
    vertex = np.floor(uv[:, 0] * width).astype(int) + width * np.floor((1 - uv[:, 1]) * height).astype(int)
    np.testing.assert_allclose(_rest_of(obj)[loops], rest[vertex], atol=1e-6)    # each vertex at its own texel
    assert sorted(set(vertex)) == list(range(g.n_written))


def _godot_import(glb, folder):
    """Import ``glb`` in a throwaway Godot 3 project (the editor's glTF importer with its default settings) and
    read its first mesh back as Godot stores it: [(format flags, positions (m, 3), UV2 (m, 2))] per surface."""
    project = folder / "godot"
    project.mkdir()
    shutil.copy(glb, project / "mesh.glb")
    shutil.copy(os.path.join(ROOT, "tests", "godot", "vat_uv2.gd"), project / "vat_uv2.gd")
    (project / "project.godot").write_text('config_version=4\n\n[application]\nconfig/name="vat"\n')
    env = dict(os.environ, **{k: str(folder / k.lower()) for k in ("XDG_CONFIG_HOME", "XDG_DATA_HOME",
                                                                   "XDG_CACHE_HOME")})
    out = folder / "uv2.bin"
    runs = [subprocess.run([GODOT, "--path", str(project), *args], capture_output=True, text=True, timeout=300,
                           env=env) for args in (["--editor", "--quit"], ["-s", "vat_uv2.gd", "res://mesh.glb", str(out)])]
    assert out.exists(), "".join(run.stdout[-2000:] + run.stderr[-2000:] for run in runs)
    data, surfaces, at = out.read_bytes(), [], 4
    for _ in range(struct.unpack_from("<I", data)[0]):
        fmt, m = struct.unpack_from("<II", data, at)
        values = np.frombuffer(data, "<f4", 5 * m, at + 8).reshape(m, 5).astype(np.float64)
        surfaces.append((fmt, values[:, :3], values[:, 3:]))
        at += 8 + 20 * m
    assert at == len(data) and surfaces
    return surfaces


def test_vat_uv2_as_godot_3_imports_it_addresses_each_vertex_texel(tmp_path):
    """Godot 3 imports the VAT mesh's UV2 as half floats: on a mesh of more than 2,048 vertices (1,024 columns,
    3 rows per frame) every vertex's UV2 is still exactly the centre of its own texel."""
    import bmesh
    from scipy.spatial import cKDTree
    open_sample("flag")
    mesh = bpy.data.objects["Flag"].data
    bm = bmesh.new()
    bm.from_mesh(mesh)
    bmesh.ops.subdivide_edges(bm, edges=bm.edges[:], cuts=6, use_grid_fill=True)
    bm.to_mesh(mesh)
    bm.free()
    bpy.ops.ptcache.free_bake_all()
    a = bpy.context.scene["loop_frames"][0]
    g = scene_reader.gather(settings("flag", frame_start=a, frame_end=a + 5, bake_missing=True))
    rest = _rest("Flag")
    path = vat.export_vat(g, sc.crossfade_loop(g.source), str(tmp_path / "vat"))
    info = json.load(open(path))
    width, height = info["texture_size"]
    assert g.n_written == 2752 and (width, height, info["rows_per_frame"]) == (1024, 32, 3)
    seen = set()
    for fmt, positions, uv2 in _godot_import(tmp_path / "vat" / info["mesh"], tmp_path):
        assert fmt & ARRAY_COMPRESS_TEX_UV2
        distance, vertex = cKDTree(rest).query(positions[:, [0, 2, 1]] * [1, -1, 1])   # Y up -> Z up
        assert distance.max() < 1e-6
        column, row = uv2[:, 0] * width - 0.5, uv2[:, 1] * height - 0.5
        np.testing.assert_array_equal(column, np.round(column))         # texel centres, exactly
        np.testing.assert_array_equal(row, np.round(row))
        np.testing.assert_array_equal(row * width + column, vertex)     # each vertex's own texel
        seen.update(vertex.tolist())
    assert seen == set(range(g.n_written))


def _rest_of(obj):
    co = np.empty(len(obj.data.vertices) * 3)
    obj.data.vertices.foreach_get("co", co)
    return co.reshape(-1, 3)


@pytest.mark.parametrize("storage", gltf.STORAGES)
def test_glb_holds_one_closed_period_and_reimports_as_the_loop(tmp_path, storage):
    """N targets of the frames (then, quantized and compact, those of the normal basis), N + 1 keys (the last
    at N / fps repeating the first), the loop's figures in the animation's extras; Blender's importer reads
    every storage back as the loop (world space: a quantized file's node scale holds the step, its
    translation the mesh's centre), within half a quantization step."""
    g, q = _flag()
    local = writeback.local_loop(g, q)
    path = str(tmp_path / "flag.glb")
    names = set(bpy.data.objects.keys())
    figures = gltf.export_gltf(g, q, path, storage=storage)
    assert set(bpy.data.objects.keys()) == names
    world = np.array(bpy.data.objects["Flag"].matrix_world)
    doc = _glb_json(path)
    (animation,) = doc["animations"]
    (sampler,) = animation["samplers"]
    times, weights = doc["accessors"][sampler["input"]], doc["accessors"][sampler["output"]]
    n = g.n_frames
    assert sampler["interpolation"] == "LINEAR" and animation["channels"][0]["target"]["path"] == "weights"
    assert times["count"] == n + 1 and times["min"] == [0] and times["max"][0] == pytest.approx(n / 24)
    k = figures["normal_targets"]
    assert (k > 0) == (storage != "float") and figures["normal_error"] <= glb_loop.NORMAL_TOLERANCE
    assert weights["count"] == (n + 1) * (n + k) and ("sparse" in weights) == (storage == "compact")
    assert len(doc["meshes"][0]["primitives"][0]["targets"]) == n + k
    assert animation["name"] == "Flag-loop" and animation["extras"]["cyclic_loop"] == {
        **animation["extras"]["cyclic_loop"], "name": "Flag", "frame_count": n, "fps": 24.0, "period": n / 24}
    (node,) = [nd for nd in doc["nodes"] if "mesh" in nd]
    assert node["extras"]["cyclic_loop"] == {**node["extras"]["cyclic_loop"], "frame_count": n, "fps": 24.0,
                                             "duration": n / 24}
    assert figures["glb_bytes"] == os.path.getsize(path) and figures["raw_bytes"] == len(local[0]) * n * 12
    assert (figures["position_step"] > 0) == (storage != "float")

    bpy.ops.wm.read_factory_settings(use_empty=True)
    bpy.ops.import_scene.gltf(filepath=path)
    (obj,) = [ob for ob in bpy.data.objects if ob.type == "MESH"]
    keys = obj.data.shape_keys
    assert len(keys.key_blocks) == n + k + 1
    (frames,) = {tuple(round(k.co[0], 3) for k in fc.keyframe_points) for fc in writeback._fcurves(keys, "")}
    assert len(frames) == n + 1 and np.allclose(np.diff(frames), 1.0)        # N keys and the closing one
    to_world = np.array(obj.matrix_world)
    played = lambda frame: evaluated_local(obj, frame) @ to_world[:3, :3].T + to_world[:3, 3]  # noqa: E731
    expected = local @ world[:3, :3].T + world[:3, 3]
    match = _nearest(played(round(frames[0])), expected[0], 1e-6 + figures["position_step"])
    for j in (0, 1, n // 2, n - 1, n):
        np.testing.assert_allclose(played(round(frames[0] + j)), expected[j % n][match],
                                   atol=1e-5 + 0.5 * figures["position_step"])


def _nearest(points, reference, within=1e-6):
    """Index of the nearest reference point of each point (the exporters split vertices at seams)."""
    d = np.linalg.norm(points[:, None] - reference[None], axis=2)
    assert d.min(axis=1).max() < within
    return d.argmin(axis=1)


def _played(loop, offsets, step):
    """The loop (N, n, 3) as Blender's caches play it at scene frames A + offsets: sample j at offset j * S (mod
    the period N * S), linear between samples, and sample N - 1 held until the wrap (a cache reader does not
    interpolate past a file's last sample; with S = 1 no scene frame falls there)."""
    n = len(loop)
    j, r = np.divmod(np.asarray(offsets) % (n * step), step)
    t = np.where(j + 1 < n, r / step, 0.0)[:, None, None]
    return (1 - t) * loop[j] + t * loop[np.minimum(j + 1, n - 1)]


@pytest.mark.parametrize("step, start", [(1, 49), (2, 49), (2, 50), (3, 49)])
def test_alembic_and_pc2_sample_the_loop_frames_and_wrap(tmp_path, step, start):
    """A scene frame step S and first frame A (odd A with S = 2 included): each file holds N samples, sample j
    at scene frame A + j * S (PC2 header: start frame A, sample rate S). Played back in Blender (the PC2 by
    the Mesh Cache modifier of export_pc2(attach=True), the Alembic re-imported by import_alembic) every scene
    frame from one period before A to two periods after it shows the loop's frame, wrapping by itself."""
    open_sample("flag")
    bpy.context.scene.frame_step = step
    g = scene_reader.gather(settings("flag", frame_start=start, frame_end=72))
    n, period = g.n_frames, g.period
    assert (g.frame_start, g.frame_step, n) == (start, step, len(range(start, 73, step)))
    q = sc.crossfade_loop(g.source)
    local = writeback.local_loop(g, q)
    export.export_pc2(g, q, str(tmp_path / "flag.pc2"), attach=True)
    points, header_start, rate = export.read_pc2(str(tmp_path / "flag.pc2"))
    assert points.shape == local.shape and (header_start, rate) == (start, step)
    offsets = np.arange(-period, 2 * period + 1)
    flag = bpy.data.objects["Flag"]
    pc2 = np.array([evaluated_local(flag, start + k) for k in offsets])
    np.testing.assert_allclose(pc2, _played(local, offsets, step), atol=1e-5)

    export.export_alembic(g, q, str(tmp_path / "flag.abc"))
    assert bpy.context.scene.render.fps_base == 1.0
    bpy.ops.wm.read_factory_settings(use_empty=True)
    bpy.context.scene.frame_start, bpy.context.scene.frame_end = 1, 250
    (obj,) = export.import_alembic(str(tmp_path / "flag.abc"), start, step, n)
    assert (obj.name, bpy.context.scene.frame_start, bpy.context.scene.frame_end) == ("Flag_loop", 1, 250)
    (cache_file,) = bpy.data.cache_files
    (fcurve,) = cache_file.animation_data.drivers
    assert cache_file.override_frame and fcurve.driver.is_simple_expression      # no Python needed
    abc = np.array([evaluated_local(obj, start + k) for k in offsets])
    np.testing.assert_allclose(abc, _played(q[:, :g.n_written], offsets, step), atol=1e-5)
    for shift in (-1, 1):             # samples one scene frame early or late would fail the comparisons
        assert np.abs(abc - _played(q[:, :g.n_written], offsets + shift, step)).max() > 1e-3


def test_wraps_play_with_auto_run_scripts_off(tmp_path):
    """The PC2's Mesh Cache modifier and the imported Alembic's cache file are driven by simple expressions, which
    Blender evaluates without Python: the scene saved and opened again untrusted (Python drivers blocked, as
    a Python driver in the same file shows) still plays both as the loop for two periods past the first."""
    open_sample("flag")
    bpy.context.scene.frame_step = 2
    g = scene_reader.gather(settings("flag", frame_start=49, frame_end=72))
    q = sc.crossfade_loop(g.source)
    export.export_pc2(g, q, str(tmp_path / "flag.pc2"), attach=True)
    export.export_alembic(g, q, str(tmp_path / "flag.abc"))
    export.import_alembic(str(tmp_path / "flag.abc"), 49, 2, g.n_frames)
    flag = bpy.data.objects["Flag"]
    flag["control"] = 1.0
    control = flag.driver_add('["control"]').driver
    control.type, control.expression = "SCRIPTED", "__import__('math').floor(frame) * 2"   # only through Python
    bpy.ops.wm.save_as_mainfile(filepath=str(tmp_path / "loop.blend"))
    try:
        bpy.ops.wm.open_mainfile(filepath=str(tmp_path / "loop.blend"), use_scripts=False)
        flag, loop = bpy.data.objects["Flag"], bpy.data.objects["Flag_loop"]
        offsets = np.arange(g.period, 3 * g.period)
        pc2 = np.array([evaluated_local(flag, 49 + k) for k in offsets])
        abc = np.array([evaluated_local(loop, 49 + k) for k in offsets])
        assert flag.evaluated_get(bpy.context.evaluated_depsgraph_get())["control"] == 0.0 and bpy.app.autoexec_fail
        np.testing.assert_allclose(pc2, _played(writeback.local_loop(g, q), offsets, 2), atol=1e-5)
        np.testing.assert_allclose(abc, _played(q[:, :g.n_written], offsets, 2), atol=1e-5)
    finally:
        bpy.ops.wm.read_factory_settings(use_empty=True)     # the bpy module hangs at exit with a Python driver


def test_played_holds_the_last_sample_before_the_wrap():
    loop = np.arange(3.0)[:, None, None] * np.ones((3, 1, 3))
    assert _played(loop, [0, 1, 2, 3, 4, 5, 6, -1], 2)[:, 0, 0].tolist() == [0, 0.5, 1, 1.5, 2, 2, 0, 2]


def test_import_alembic_refuses_a_missing_file(tmp_path):
    with pytest.raises(LoopInputError, match="no Alembic file"):
        export.import_alembic(str(tmp_path / "none.abc"), 49, 1, 24)


def test_pc2_and_wrap_refuse_bad_timing(tmp_path):
    with pytest.raises(ValueError, match="sample rate > 0"):
        export.write_pc2(str(tmp_path / "x.pc2"), np.zeros((2, 3, 3)), 49.0, 0.0)
    with pytest.raises(LoopInputError, match="frame step"):
        writeback.wrap_expression(49, 0, 24)
    assert not os.listdir(tmp_path)


def test_web_page_without_three_is_refused_and_nothing_written(tmp_path, monkeypatch):
    g, q = _flag()
    monkeypatch.setenv("CYCLIC_LOOP_THREE", str(tmp_path))
    with pytest.raises(LoopInputError, match="CYCLIC_LOOP_THREE"):
        web_preview.write_page(g, q, str(tmp_path / "page.html"))
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("extra, message", [
    (["--vat", "{tmp}/taken"], "is a file"),
    (["--vat", "{tmp}/no/such/folder"], "does not exist"),
    (["--glb", "{tmp}/loop.fbx"], "must end in .glb or .gltf"),
    (["--glb", "{tmp}/loop.glb", "--glb-storage", "dense"], "invalid choice: 'dense'"),
])
def test_bake_refuses_bad_engine_outputs(tmp_path, capsys, extra, message):
    path = open_sample("flag", tmp_path)
    (tmp_path / "taken").write_text("")
    before = sha256(path)
    argv = ["bake.py", path, "--", "--object", "Flag", "--frames", "49", "60", "--iterations", "1", "--init", "cache",
            "--substeps", "1", *[e.format(tmp=tmp_path) for e in extra]]
    assert bake.main(argv) == 2
    assert message in capsys.readouterr().err
    assert sha256(path) == before and sorted(os.listdir(tmp_path)) == ["flag.blend", "taken"]


@pytest.mark.parametrize("name", ["flag", "planets"])
def test_web_page_embeds_the_loop_and_the_cache(tmp_path, name):
    """The page's data: both clips in world space, Y up, N frames; triangles for a mesh, points for bodies."""
    import base64
    open_sample(name)
    g = scene_reader.gather(settings(name))
    q = sc.crossfade_loop(g.source)
    path = web_preview.write_page(g, q, str(tmp_path / "page.html"))
    html = open(path, encoding="utf-8").read()
    assert "three-core" in html and "http" not in html.split("<script type=\"module\">")[1]
    data = json.loads(html.split('<script id="loop-data" type="application/json">')[1].split("</script>")[0])
    clip = lambda key: np.frombuffer(base64.b64decode(data[key]), "<f4").reshape(g.n_frames, g.n_written, 3)  # noqa: E731
    np.testing.assert_allclose(clip("loop"), web_preview.y_up(q[:, :g.n_written]), atol=1e-6)
    np.testing.assert_allclose(clip("cache"), web_preview.y_up(g.source[:, :g.n_written]), atol=1e-6)
    triangles = np.frombuffer(base64.b64decode(data["triangles"]), "<u4")
    assert (data["kind"], data["frames"], len(triangles) > 0) == (g.kind, g.n_frames, name == "flag")
