"""VAT, glTF and web-page exports on real Blender data (bpy wheel): each file read back (Blender's importers,
the VAT decoded with its JSON) reproduces the loop to the format's precision with exactly N frames."""
import json
import os
import struct

import numpy as np
import pytest

bpy = pytest.importorskip("bpy")

from blender_helpers import evaluated_local, open_sample, settings, sha256  # noqa: E402
from cyclic_loop_addon import bake  # noqa: E402
from cyclic_loop_addon.outputs import export, gltf, vat, web_preview, writeback
from cyclic_loop_addon.pipeline import scene_reader
from cyclic_loop_addon.errors import LoopInputError  # noqa: E402
from cyclic_loop_addon.core import sc  # noqa: E402

HALF_EPS = 2.0 ** -11       # half-float relative rounding


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
    assert vat.layout(11, 5, max_width=4) == (4, 3, 15) and image.shape == (15, 4, 4)
    np.testing.assert_array_equal(vat.decode(image, 11, 5), values.astype(np.float32))
    uv = vat.texel_uv(11, 5, max_width=4)
    col, row = np.floor(uv[:, 0] * 4).astype(int), np.floor((1 - uv[:, 1]) * 15).astype(int)
    np.testing.assert_array_equal(row * 4 + col, np.arange(11))
    np.testing.assert_array_equal(image[row, col, :3], values[0].astype(np.float32))


def test_vat_reads_back_to_half_and_16_bit_precision(tmp_path):
    g, q = _flag()
    local = writeback.local_loop(g, q)
    rest = _rest("Flag")
    path = vat.export_vat(g, q, str(tmp_path / "flag_vat"))
    names = sorted(os.listdir(tmp_path / "flag_vat"))
    assert names == ["Flag.json", "Flag_mesh.glb", "Flag_nrm.exr", "Flag_nrm.png", "Flag_pos.exr", "Flag_pos.png"]
    info = json.load(open(path))
    n, frames = g.n_written, g.n_frames
    assert (info["frame_count"], info["vertex_count"], info["texture_size"]) == (frames, n, [n, frames])
    assert info["fps"] == 24 and info["duration"] == frames / 24 and info["uv_set"] == 1
    with open(tmp_path / "flag_vat" / "Flag_pos.png", "rb") as f:
        png = f.read(26)
    assert png[12:16] == b"IHDR" and struct.unpack(">II", png[16:24]) == (n, frames) and png[24] == 16
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


def _rest_of(obj):
    co = np.empty(len(obj.data.vertices) * 3)
    obj.data.vertices.foreach_get("co", co)
    return co.reshape(-1, 3)


@pytest.mark.parametrize("storage", gltf.STORAGES)
def test_glb_holds_one_closed_period_and_reimports_as_the_loop(tmp_path, storage):
    """N targets, N + 1 keys (the last at N / fps repeating the first), the loop's figures in the animation's
    extras; Blender's importer reads every storage back as the loop (world space: a quantized file's node
    scale holds the step), within half a quantization step."""
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
    assert weights["count"] == (n + 1) * n and ("sparse" in weights) == (storage == "compact")
    assert len(doc["meshes"][0]["primitives"][0]["targets"]) == n
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
    assert len(keys.key_blocks) == n + 1
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


def test_alembic_and_pc2_hold_n_samples_with_a_frame_step(tmp_path):
    """A scene frame step S: the loop's N frames are S frames apart, and each file still holds N samples."""
    open_sample("flag")
    bpy.context.scene.frame_step = 2
    g = scene_reader.gather(settings("flag", frame_start=49, frame_end=72))
    n = g.n_frames
    assert (n, g.frame_step) == (12, 2)
    q = sc.crossfade_loop(g.source)
    export.export_pc2(g, q, str(tmp_path / "flag.pc2"))
    points, start, rate = export.read_pc2(str(tmp_path / "flag.pc2"))
    assert points.shape[0] == n and rate == 2.0
    export.export_alembic(g, q, str(tmp_path / "flag.abc"))
    assert bpy.context.scene.render.fps_base == 1.0
    bpy.ops.wm.read_factory_settings(use_empty=True)
    bpy.ops.wm.alembic_import(filepath=str(tmp_path / "flag.abc"), as_background_job=False)
    scene = bpy.context.scene
    (obj,) = bpy.data.objects
    assert (scene.frame_start, scene.frame_end) == (48, 48 + (n - 1) * 2)      # N samples, 2 frames apart
    for j in (0, 1, n - 1):
        np.testing.assert_allclose(evaluated_local(obj, 48 + 2 * j), q[j], atol=1e-5)
    np.testing.assert_allclose(evaluated_local(obj, 49), 0.5 * (q[0] + q[1]), atol=1e-5)


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
