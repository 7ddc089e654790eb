"""outputs/glb_loop.py on a small GLB made here (no Blender): the closing key, the animation's extras, the
quantized and sparse storages, the normal basis, the rebase on frame 0, and the shapes a player computes from
each file; and, with the bpy module, the default GLB's size on the flag sample against its raw data."""
import numpy as np
import pytest

from cyclic_loop_addon.outputs import glb_loop

N, FPS = 6, 24.0
LOOP = {"name": "Cloth", "frame_count": N, "fps": FPS}


def _open_glb(normal_turn=0.3, weights=None, scale=(2.0, 2.0, 2.0)):
    """A GLB as Blender's exporter writes a loop: a quad of 4 vertices, N morph targets (a wave of up to
    0.4 m, normals turning by up to ``normal_turn`` rad), N one-hot keys at j / fps (or ``weights``)."""
    rest = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]], np.float32)
    angle = 2 * np.pi * np.arange(N)[:, None] / N + rest[None, :, 0]
    frames = rest + 0.4 * np.stack([0 * angle, 0.3 * np.cos(angle), np.sin(angle)], axis=-1)
    turn = normal_turn * np.sin(angle)
    normals = np.stack([np.sin(turn), 0 * turn, np.cos(turn)], axis=-1)
    writer = glb_loop._Writer()
    acc = [glb_loop._accessor(writer, rest, vertex=True, bounds=True),
           glb_loop._accessor(writer, np.tile([[0, 0, 1]], (4, 1)).astype(np.float32), vertex=True),
           glb_loop._accessor(writer, np.array([[0], [1], [2], [2], [1], [3]], np.uint16),
                              target=glb_loop.ELEMENT_ARRAY_BUFFER)]
    targets = []
    for j in range(N):
        acc.append(glb_loop._accessor(writer, (frames[j] - rest).astype(np.float32), vertex=True, bounds=True))
        acc.append(glb_loop._accessor(writer, (normals[j] - [0, 0, 1]).astype(np.float32), vertex=True))
        targets.append({"POSITION": len(acc) - 2, "NORMAL": len(acc) - 1})
    acc.append(glb_loop._accessor(writer, (np.arange(N) / FPS).astype(np.float32)[:, None], bounds=True))
    w = np.eye(N, dtype=np.float32) if weights is None else np.asarray(weights, np.float32)
    acc.append(glb_loop._accessor(writer, w.reshape(-1, 1)))
    doc = {"asset": {"version": "2.0"}, "scene": 0, "scenes": [{"nodes": [0]}],
           "nodes": [{"mesh": 0, "name": "Cloth_loop", "translation": [0.5, 0, 0], "scale": list(scale)}],
           "meshes": [{"primitives": [{"attributes": {"POSITION": 0, "NORMAL": 1}, "indices": 2,
                                       "targets": targets}], "weights": [1.0] + [0.0] * (N - 1)}],
           "animations": [{"name": "CyclicLoop Cloth_loop",
                           "channels": [{"sampler": 0, "target": {"node": 0, "path": "weights"}}],
                           "samplers": [{"input": len(acc) - 2, "output": len(acc) - 1, "interpolation": "LINEAR"}]}],
           "accessors": acc, "bufferViews": writer.views}
    return glb_loop.write_glb(doc, writer.blob), frames, normals


def _node_matrix(node):
    """A glTF node's local 4 x 4 matrix (its ``matrix``, column-major, or translation, rotation, scale)."""
    if "matrix" in node:
        return np.array(node["matrix"], float).reshape(4, 4).T
    x, y, z, w = node.get("rotation", [0, 0, 0, 1])
    rotation = np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                         [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                         [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])
    matrix = np.eye(4)
    matrix[:3, :3] = rotation * np.asarray(node.get("scale", [1, 1, 1]), float)
    matrix[:3, 3] = node.get("translation", [0, 0, 0])
    return matrix


def _played(data, t):
    """What a player shows at time ``t`` (s): world positions (node scale and translation applied) and
    normalized normals, the weights interpolated linearly between keys."""
    doc, blob = glb_loop.read_glb(data)
    prim = doc["meshes"][0]["primitives"][0]
    sampler = doc["animations"][0]["samplers"][0]
    times = glb_loop.read_accessor(doc, blob, sampler["input"])[:, 0]
    weights = glb_loop.read_accessor(doc, blob, sampler["output"]).reshape(len(times), -1)
    w = np.array([np.interp(t, times, weights[:, i]) for i in range(weights.shape[1])])
    read = lambda i: glb_loop.read_accessor(doc, blob, i).astype(np.float64)  # noqa: E731
    position = read(prim["attributes"]["POSITION"]) + sum(wi * read(tg["POSITION"]) for wi, tg in
                                                           zip(w, prim["targets"]))
    matrix = _node_matrix(doc["nodes"][0])
    world = position @ matrix[:3, :3].T + matrix[:3, 3]
    normal = None
    if "NORMAL" in prim["attributes"]:
        normal = read(prim["attributes"]["NORMAL"]) + sum(wi * read(tg["NORMAL"]) for wi, tg in
                                                          zip(w, prim["targets"]))
        normal /= np.linalg.norm(normal, axis=1, keepdims=True)
    return world, normal


def _angle(a, b):
    """Largest angle (degrees) between the unit vectors of ``a`` and ``b`` (n, 3)."""
    cos = np.sum(a * b, axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    return np.degrees(np.arccos(np.clip(cos, -1, 1))).max()


@pytest.mark.parametrize("storage", glb_loop.STORAGES)
@pytest.mark.parametrize("normal_turn", [0.3, 1.6])
def test_rewrite_closes_the_clip_and_keeps_every_played_shape(storage, normal_turn):
    """Positions within the quantization error and normals within ``NORMAL_TOLERANCE`` (exact in float) at
    every key and between keys, across the wrap; normals that turn by more than a unit in a component too."""
    data, frames, normals = _open_glb(normal_turn)
    glb, figures = glb_loop.rewrite(data, LOOP, storage=storage)
    doc, blob = glb_loop.read_glb(glb)
    (animation,) = doc["animations"]
    assert animation["name"] == "Cloth-loop"
    assert animation["extras"]["cyclic_loop"] == {**animation["extras"]["cyclic_loop"], "name": "Cloth",
                                                  "frame_count": N, "fps": FPS, "period": N / FPS}
    sampler = animation["samplers"][0]
    times = glb_loop.read_accessor(doc, blob, sampler["input"])[:, 0]
    np.testing.assert_allclose(times, np.arange(N + 1) / FPS, rtol=1e-7)
    k = figures["normal_targets"]
    assert len(doc["meshes"][0]["primitives"][0]["targets"]) == N + k
    weights = glb_loop.read_accessor(doc, blob, sampler["output"]).reshape(N + 1, N + k)
    np.testing.assert_array_equal(weights[:, :N], np.eye(N)[np.arange(N + 1) % N])
    np.testing.assert_array_equal(weights[N], weights[0])
    assert np.abs(weights[:, N:]).max(initial=0) <= (1 + 1e-6 if storage == "quantized" else np.inf)
    world = frames * 2.0 + [0.5, 0, 0]
    position_error = 2.0 * figures["max_quantization_error"] + 1e-6
    assert figures["max_quantization_error"] <= 0.5 * figures["position_step"] * (1 + 1e-9)
    assert figures["normal_error"] <= glb_loop.NORMAL_TOLERANCE and (k > 0) == (storage != "float")
    angles = []
    for t in np.arange(0, 2 * N + 1) * 0.37 / FPS:        # across the wrap, between keys too
        frame = (t * FPS) % N
        low, part = int(frame), frame - int(frame)
        expected = (1 - part) * world[low] + part * world[(low + 1) % N]
        shown, normal = _played(glb, t)
        np.testing.assert_allclose(shown, expected, atol=position_error)
        angles.append(_angle(normal, (1 - part) * normals[low] + part * normals[(low + 1) % N]))
    assert max(angles) <= figures["normal_error"] + 1e-4, angles        # float32 and int8 storage aside


def test_storages_hold_what_they_say():
    data, frames, _ = _open_glb()
    docs = {s: glb_loop.read_glb(glb_loop.rewrite(data, LOOP, storage=s)[0])[0] for s in glb_loop.STORAGES}
    for storage, doc in docs.items():
        prim = doc["meshes"][0]["primitives"][0]
        frame_targets, basis = prim["targets"][:N], prim["targets"][N:]
        kinds = {doc["accessors"][t["POSITION"]]["componentType"] for t in frame_targets}
        output = doc["accessors"][doc["animations"][0]["samplers"][0]["output"]]
        assert kinds == ({5126} if storage == "float" else {5122})         # float / int16
        assert ("sparse" in output) == (storage == "compact") and output["count"] == (N + 1) * (N + len(basis))
        assert ("KHR_mesh_quantization" in doc.get("extensionsRequired", [])) == (storage != "float")
        views = {doc["accessors"][t["POSITION"]]["bufferView"] for t in prim["targets"]}
        assert len(views) == (N if storage == "float" else 1)       # one view for all targets' positions
        if storage == "float":          # a float normal per target
            assert not basis and {doc["accessors"][t["NORMAL"]]["componentType"] for t in frame_targets} == {5126}
            continue
        # the frames' targets share one zero normal, the basis' targets one zero position (frame 0's, the base)
        assert basis and len({t["NORMAL"] for t in frame_targets}) == 1
        assert {t["POSITION"] for t in basis} == {frame_targets[0]["POSITION"]}
        zero = doc["accessors"][frame_targets[0]["POSITION"]]
        assert zero["min"] == zero["max"] == [0, 0, 0]
        normal_kinds = {(doc["accessors"][t["NORMAL"]]["componentType"],
                         doc["accessors"][t["NORMAL"]].get("normalized")) for t in basis}
        assert normal_kinds == ({(5120, True)} if storage == "compact" else {(5126, None)})   # int8 normalized / float
        assert len(doc["meshes"][0]["weights"]) == N + len(basis)
    compact = docs["compact"]
    sparse = compact["accessors"][compact["animations"][0]["samplers"][0]["output"]]
    assert "bufferView" not in sparse and sparse["sparse"]["count"] < (N + 1) * (N + 1)
    step = docs["quantized"]["nodes"][0]["scale"][0] / 2.0
    # rebased on frame 0: the deltas span the motion within the loop, so the step is the largest of those / 32767
    rebased = frames - frames[0]
    assert step == pytest.approx(np.abs(rebased).max() / glb_loop.SHORT_MAX, rel=1e-6)


def test_normal_basis_is_the_fewest_components_within_the_tolerance():
    """Normals turning around an axis with a phase along the mesh: the basis keeps every normal a player
    shows, at the keys and between them, within the tolerance; one component fewer does not; normals that
    barely move take none."""
    rng = np.random.default_rng(1)
    base = rng.normal(size=(50, 3))
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    phase = 2 * np.pi * np.arange(12)[:, None] / 12 + np.linspace(0, 3, 50)
    turn = 0.2 * np.sin(phase)[..., None]
    axis = np.cross(base, [0.0, 0.0, 1.0])
    axis /= np.linalg.norm(axis, axis=1, keepdims=True)
    turned = base * np.cos(turn) + np.cross(axis, base) * np.sin(turn)      # Rodrigues, axis ⟂ base
    coefficients, basis, error = glb_loop.normal_basis(base, turned - base, tolerance=0.5)
    assert 2 <= len(basis) < 12 and error <= 0.5 and np.abs(coefficients).max() == pytest.approx(1)
    played = base + np.einsum("rk,knc->rnc", coefficients, basis)
    segments = np.stack([np.arange(12), (np.arange(12) + 1) % 12], axis=1)
    fewer = np.einsum("rk,knc->rnc", coefficients[:, :-1], basis[:-1])
    assert glb_loop._played_error(base, turned - base, fewer, segments) > 0.5
    for a in np.linspace(0, 1, 9):              # keys and between keys, the last to the first included
        blend = lambda v: (1 - a) * v + a * np.roll(v, -1, axis=0)      # noqa: E731
        assert max(_angle(p, t) for p, t in zip(blend(played), blend(turned))) <= error + 1e-9
    coefficients, basis, error = glb_loop.normal_basis(base, 1e-4 * (turned - base), tolerance=0.5)
    assert coefficients.shape == (12, 0) and basis.shape == (0, 50, 3) and error < 0.5


def test_weights_that_do_not_add_up_to_one_keep_the_base():
    """Without one-hot keys the base is not moved (the shapes between keys would change)."""
    weights = 0.5 * np.eye(N)
    data, frames, _ = _open_glb(weights=weights)
    glb, _ = glb_loop.rewrite(data, LOOP, storage="quantized")
    for j in range(N):
        rest = frames[0] * 0 + np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]])
        expected = (rest + 0.5 * (frames[j] - rest)) * 2.0 + [0.5, 0, 0]
        np.testing.assert_allclose(_played(glb, j / FPS)[0], expected, atol=1e-4)


def test_without_normals_and_already_closed():
    data, _, _ = _open_glb()
    glb, _ = glb_loop.rewrite(data, LOOP, storage="compact", normals=False)
    doc, _ = glb_loop.read_glb(glb)
    prim = doc["meshes"][0]["primitives"][0]
    assert "NORMAL" not in prim["attributes"] and all("NORMAL" not in t for t in prim["targets"])
    again, _ = glb_loop.rewrite(glb_loop.rewrite(data, LOOP, storage="float")[0], LOOP, storage="float")
    doc, blob = glb_loop.read_glb(again)
    assert doc["accessors"][doc["animations"][0]["samplers"][0]["input"]]["count"] == N + 1


def test_bad_input_is_refused_with_a_message():
    data, _, _ = _open_glb()
    with pytest.raises(ValueError, match="not a glTF 2.0 binary"):
        glb_loop.rewrite(b"PK\x03\x04" + bytes(40), LOOP)
    with pytest.raises(ValueError, match="storage 'dense' is not one of float, quantized, compact"):
        glb_loop.rewrite(data, LOOP, storage="dense")
    assert glb_loop.size_report(2016, 7, 6) == {"glb_bytes": 2016, "raw_bytes": 504, "ratio": 4.0}


def test_the_default_glb_of_the_flag_is_at_most_twice_its_raw_data(tmp_path):
    """The default GLB (smooth shading, quantized storage) of the flag sample, as the glb_sizes benchmark
    writes it (70 vertices x 24 frames, raw data 70 x 24 x 3 float32 = 20,160 bytes): at most 2 x the raw
    data."""
    pytest.importorskip("bpy")
    from benchmarks import glb_sizes
    from cyclic_loop_addon.outputs import gltf
    (figures,) = glb_sizes.sizes(str(tmp_path), [gltf.DEFAULTS])
    assert (figures["vertices"], figures["frames"], figures["raw_bytes"]) == (70, 24, 20160)
    assert figures["glb_bytes"] == (tmp_path / "smooth_quantized.glb").stat().st_size
    print("default GLB / raw data:", figures["ratio"])
    assert figures["ratio"] <= 2.0


@pytest.mark.parametrize("form", ["trs", "matrix"])
def test_the_node_holds_the_step_and_the_centre_and_its_child_stays(form):
    """The quantized GLB's node scales by the step and moves by its transform of the mesh's centre (the base
    stored from there): a turned node shows every frame where the float GLB does, and its child stays put."""
    data, frames, _ = _open_glb()
    doc, blob = glb_loop.read_glb(data)
    turn = [0.0, np.sin(0.3), 0.0, np.cos(0.3)]
    doc["nodes"][0].update(rotation=turn, children=[1])
    doc["nodes"].append({"name": "Child", "translation": [0.2, -1.0, 3.0], "rotation": turn, "scale": [1, 2, 1]})
    if form == "matrix":
        for node in doc["nodes"]:
            node["matrix"] = _node_matrix(node).T.ravel().tolist()
            for key in ("translation", "rotation", "scale"):
                node.pop(key, None)
    data = glb_loop.write_glb(doc, blob)
    before = [_node_matrix(nd) for nd in doc["nodes"]]
    glb, figures = glb_loop.rewrite(data, LOOP, storage="quantized")
    out = glb_loop.read_glb(glb)[0]
    after = [_node_matrix(nd) for nd in out["nodes"]]
    np.testing.assert_allclose(after[0] @ after[1], before[0] @ before[1], atol=1e-9)     # the child's world
    stored = glb_loop.read_accessor(out, glb_loop.read_glb(glb)[1], out["meshes"][0]["primitives"][0]["attributes"]
                                    ["POSITION"])
    assert np.abs(stored).max() < 0.51 * np.ptp(frames[0], axis=0).max() / figures["position_step"] + 1
    for j in range(N):
        expected = frames[j] @ before[0][:3, :3].T + before[0][:3, 3]
        np.testing.assert_allclose(_played(glb, j / FPS)[0], expected,
                                   atol=2 * figures["max_quantization_error"] + 1e-6)
