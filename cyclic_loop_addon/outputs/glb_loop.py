"""A loop's GLB as players play it as imported: the closing key, the loop's extras, quantized and sparse data.

Blender's exporter writes one period open (N keys at t = j / fps) with dense float data. ``rewrite`` takes
its GLB and returns one that

- closes every animation: each sampler gets a key at t = N / fps equal to its first key, so a player that
  wraps at the clip's end (three.js ``LoopRepeat``, Godot's looping Animation) interpolates from the last
  sample back to the first like any other step;
- names the animation ``NAME-loop`` (Godot's importer loops an animation whose name ends in ``-loop`` and
  drops the suffix) and puts the loop's name, frame count, fps and period in its ``extras.cyclic_loop``;
- with ``storage`` "quantized": stores the morph targets' positions as 16-bit integers
  (KHR_mesh_quantization, not normalized: the node's scale holds the quantization step, which every importer
  applies, where Godot 3's importer ignores ``normalized``);
- with ``storage`` "compact": also the targets' normals as normalized 8-bit integers (a target whose normal
  moves by more than 1 in a component keeps float normals) and the weights output as a sparse accessor
  (only the nonzero weights: the one-hot weights of a loop are N + 1 of (N + 1) x N values);
- with ``normals=False``: drops every NORMAL (base and targets): glTF players compute flat normals then.

No bpy: numpy on the GLB's two chunks, so the tests read the files back with the same code.
"""
import copy
import json
import struct

import numpy as np

COMPONENTS = {5120: np.int8, 5121: np.uint8, 5122: np.int16, 5123: np.uint16, 5125: np.uint32, 5126: np.float32}
CODES = {np.dtype(v): k for k, v in COMPONENTS.items()}
WIDTHS = {"SCALAR": 1, "VEC2": 2, "VEC3": 3, "VEC4": 4, "MAT2": 4, "MAT3": 9, "MAT4": 16}
TYPES = {1: "SCALAR", 2: "VEC2", 3: "VEC3", 4: "VEC4"}
ARRAY_BUFFER, ELEMENT_ARRAY_BUFFER = 34962, 34963
QUANTIZATION = "KHR_mesh_quantization"
SHORT_MAX = 32767
STORAGES = ("float", "quantized", "compact")
BYTE_MAX = 127


def read_glb(data):
    """``(doc, blob)``: the JSON document and the binary chunk (``b""`` without one) of GLB bytes ``data``.

    Raises
    ------
    ValueError
        ``data`` is not a version 2 GLB.
    """
    if len(data) < 20 or data[:4] != b"glTF" or struct.unpack_from("<I", data, 4)[0] != 2:
        raise ValueError("not a glTF 2.0 binary (.glb) file")
    length, kind = struct.unpack_from("<II", data, 12)
    if kind != 0x4E4F534A:
        raise ValueError("the GLB's first chunk is not its JSON")
    doc = json.loads(data[20:20 + length])
    at = 20 + length
    blob = b""
    if at + 8 <= len(data):
        size, kind = struct.unpack_from("<II", data, at)
        if kind == 0x004E4942:
            blob = bytes(data[at + 8:at + 8 + size])
    return doc, blob


def write_glb(doc, blob):
    """GLB bytes of the JSON document ``doc`` and binary chunk ``blob`` (both padded to 4 bytes)."""
    if blob:
        doc["buffers"] = [{"byteLength": len(blob)}]
    text = json.dumps(doc, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 4)
    blob = bytes(blob) + b"\0" * (-len(blob) % 4)
    chunks = struct.pack("<II", len(text), 0x4E4F534A) + text
    if blob:
        chunks += struct.pack("<II", len(blob), 0x004E4942) + blob
    return struct.pack("<III", 0x46546C67, 2, 12 + len(chunks)) + chunks


def _rows(doc, blob, view_index, offset, count, dtype, width):
    view = doc["bufferViews"][view_index]
    stride = view.get("byteStride", width * dtype.itemsize)
    start = view.get("byteOffset", 0) + offset
    return np.ndarray((count, width), dtype, buffer=blob, offset=start,
                      strides=(stride, dtype.itemsize)).copy()


def read_accessor(doc, blob, index, normalize=True):
    """Accessor ``index`` as a (count, components) array: strides, sparse substitution and (with
    ``normalize``) normalized integers as floats resolved the way glTF defines them."""
    acc = doc["accessors"][index]
    dtype = np.dtype(COMPONENTS[acc["componentType"]]).newbyteorder("<")
    width, count = WIDTHS[acc["type"]], acc["count"]
    if "bufferView" in acc:
        values = _rows(doc, blob, acc["bufferView"], acc.get("byteOffset", 0), count, dtype, width)
    else:
        values = np.zeros((count, width), dtype)
    sparse = acc.get("sparse")
    if sparse:
        idx = sparse["indices"]
        where = _rows(doc, blob, idx["bufferView"], idx.get("byteOffset", 0), sparse["count"],
                      np.dtype(COMPONENTS[idx["componentType"]]).newbyteorder("<"), 1)[:, 0]
        val = sparse["values"]
        values[where] = _rows(doc, blob, val["bufferView"], val.get("byteOffset", 0), sparse["count"], dtype, width)
    if normalize and acc.get("normalized"):
        top = np.iinfo(dtype).max
        return np.maximum(values.astype(np.float64) / top, -1.0)
    return values


class _Writer:
    """A new binary chunk and its bufferViews, each view 4-byte aligned."""

    def __init__(self):
        self.blob = bytearray()
        self.views = []

    def view(self, data, target=None, stride=None):
        self.blob += b"\0" * (-len(self.blob) % 4)
        view = {"buffer": 0, "byteOffset": len(self.blob), "byteLength": len(data)}
        if stride is not None:
            view["byteStride"] = stride
        if target is not None:
            view["target"] = target
        self.blob += data
        self.views.append(view)
        return len(self.views) - 1


def _vertex_bytes(values):
    """Vertex data (count, k) laid out with a stride that is a multiple of 4 (zero padding); (bytes, stride)."""
    item = values.dtype.itemsize * values.shape[1]
    stride = item + (-item % 4)
    if stride == item:
        return np.ascontiguousarray(values).tobytes(), None
    padded = np.zeros((len(values), stride), np.uint8)
    padded[:, :item] = np.ascontiguousarray(values).view(np.uint8).reshape(len(values), item)
    return padded.tobytes(), stride


def _bounds(values):
    if values.dtype.kind == "f":
        return values.min(axis=0).astype(float).tolist(), values.max(axis=0).astype(float).tolist()
    return values.min(axis=0).astype(int).tolist(), values.max(axis=0).astype(int).tolist()


def _accessor(writer, values, vertex=False, bounds=False, target=None):
    """A new accessor dict for ``values`` (count, k) written to a view of its own."""
    values = np.asarray(values)
    data, stride = _vertex_bytes(values) if vertex else (np.ascontiguousarray(values).tobytes(), None)
    acc = {"bufferView": writer.view(data, target=ARRAY_BUFFER if vertex else target, stride=stride),
           "componentType": CODES[values.dtype], "count": len(values), "type": TYPES[values.shape[1]]}
    if bounds:
        acc["min"], acc["max"] = _bounds(values)
    return acc


def _in_one_view(writer, out, targets, attribute, arrays, bounds=False, normalized=False):
    """Write the morph targets' ``attribute`` ``arrays`` (each (n, 3)) to one vertex bufferView, one accessor
    each at its offset (one view instead of one per target keeps the JSON small), and point the targets at
    them."""
    if not arrays:
        return
    data, stride = _vertex_bytes(np.concatenate(arrays))
    stride = stride or arrays[0].dtype.itemsize * 3
    view = writer.view(data, ARRAY_BUFFER, stride)
    for k, (target, values) in enumerate(zip(targets, arrays)):
        acc = {"bufferView": view, "byteOffset": k * len(values) * stride, "componentType": CODES[values.dtype],
               "count": len(values), "type": "VEC3"}
        if bounds:
            acc["min"], acc["max"] = _bounds(values)
        if normalized:
            acc["normalized"] = True
        out["accessors"].append(acc)
        target[attribute] = len(out["accessors"]) - 1


def _sparse_accessor(writer, values):
    """A float accessor of ``values`` (count, k) holding only its nonzero elements (the rest read as 0)."""
    values = np.asarray(values, np.float32)
    where = np.flatnonzero(np.any(values != 0, axis=1))
    acc = {"componentType": 5126, "count": len(values), "type": TYPES[values.shape[1]]}
    if len(where):
        index = where.astype(np.uint16 if len(values) <= 65535 else np.uint32)
        acc["sparse"] = {"count": len(where),
                         "indices": {"bufferView": writer.view(index.tobytes()), "componentType": CODES[index.dtype]},
                         "values": {"bufferView": writer.view(values[where].tobytes())}}
    return acc


def _close(times, values, period):
    """Times and values of one sampler with the key at ``period`` equal to the first key appended (nothing
    appended when its last key is there already); a CUBICSPLINE key's tangents come along with its value."""
    times = times[:, 0].astype(np.float64)
    if times[-1] >= period - 1e-6 * max(period, 1.0):
        return times, values
    per_key = values.reshape(len(times), -1, values.shape[1])
    closed = np.concatenate([per_key, per_key[:1]]).reshape(-1, values.shape[1])
    return np.append(times, period), closed


def _first_target(doc, blob, mesh_index):
    """The morph target that the first key of the mesh's weights animation shows alone, when every key's
    weights add up to 1 (a loop's one-hot keys, and every linear blend of them); None otherwise."""
    nodes = {i for i, node in enumerate(doc.get("nodes", [])) if node.get("mesh") == mesh_index}
    first = None
    for animation in doc["animations"]:
        for channel in animation["channels"]:
            if channel["target"].get("path") != "weights" or channel["target"].get("node") not in nodes:
                continue
            sampler = animation["samplers"][channel["sampler"]]
            times = read_accessor(doc, blob, sampler["input"])
            weights = read_accessor(doc, blob, sampler["output"]).reshape(len(times), -1)
            if sampler.get("interpolation") == "CUBICSPLINE" or not np.allclose(weights.sum(axis=1), 1, atol=1e-6):
                return None
            if first is not None and first != int(np.argmax(weights[0])):
                return None
            first = int(np.argmax(weights[0]))
    return first


def _rebase(doc, blob, prim, first, deltas, normal):
    """Make morph target ``first`` (the loop's frame 0) the primitive's base: base + its delta becomes the
    base, and every target's delta is taken from there (``deltas`` and ``normal`` rewritten in place). While
    the weights add up to 1 every played shape is the same; the deltas are smaller (only the motion within
    the loop, not from the rest pose), so their quantization steps are finer and the normals' fit 8 bits.
    Returns the new base positions and normals (None where they stay)."""
    targets = prim["targets"]
    if first is None or first >= len(targets) or "POSITION" not in targets[first]:
        return None, None
    shift = deltas[id(targets[first])].copy()
    base = read_accessor(doc, blob, prim["attributes"]["POSITION"]).astype(np.float64) + shift
    for t in targets:
        if "POSITION" in t:
            deltas[id(t)] = deltas[id(t)] - shift
    if "NORMAL" not in prim["attributes"] or "NORMAL" not in targets[first]:
        return base, None
    rest = read_accessor(doc, blob, prim["attributes"]["NORMAL"]).astype(np.float64)
    frames = {id(t): rest + normal[id(t)] for t in targets if "NORMAL" in t}
    base_normal = rest + normal[id(targets[first])]
    base_normal /= np.maximum(np.linalg.norm(base_normal, axis=1, keepdims=True), 1e-12)
    for t in targets:
        if "NORMAL" in t:
            normal[id(t)] = frames[id(t)] - base_normal
    return base, base_normal


def _scale_nodes(doc, mesh_index, step):
    """Multiply the scale of every node showing mesh ``mesh_index`` by ``step`` (its children's transforms
    by 1 / step, so they stay where they were) and return those nodes' indices."""
    scaled = []
    for index, node in enumerate(doc.get("nodes", [])):
        if node.get("mesh") != mesh_index:
            continue
        if "matrix" in node:
            m = np.array(node["matrix"], float).reshape(4, 4)
            m[:3] *= step
            node["matrix"] = m.ravel().tolist()
        else:
            node["scale"] = (np.array(node.get("scale", [1.0, 1.0, 1.0])) * step).tolist()
        for child in node.get("children", []):
            sub = doc["nodes"][child]
            if "matrix" in sub:
                m = np.array(sub["matrix"], float).reshape(4, 4)
                m[:3] /= step
                m[3, :3] /= step
                sub["matrix"] = m.ravel().tolist()
            else:
                sub["translation"] = (np.array(sub.get("translation", [0.0, 0.0, 0.0])) / step).tolist()
                sub["scale"] = (np.array(sub.get("scale", [1.0, 1.0, 1.0])) / step).tolist()
        scaled.append(index)
    return scaled


def rewrite(data, loop, storage="quantized", normals=True):
    """The GLB bytes ``data`` (one mesh with morph targets, animated by weights) rewritten to loop as imported.

    Parameters
    ----------
    data : bytes
        A GLB of one period written open (N keys at t = j / fps, no key at N / fps).
    loop : dict
        ``name``, ``frame_count``, ``fps`` of the loop; the closing key goes at ``frame_count / fps``.
    storage : {"float", "quantized", "compact"}
        float: every value float32, the weights dense; quantized: morph-target positions as 16-bit
        integers (KHR_mesh_quantization); compact: quantized, the targets' normals 8-bit, the weights sparse.
    normals : bool
        Keep the normals (base and per target); False drops them, and players compute flat normals.

    Returns
    -------
    bytes, dict
        The new GLB and what it holds: ``period``, ``position_step`` (metres of the mesh per integer step of
        the quantized targets, 0 when not quantized), ``max_quantization_error`` (largest error of a target
        position in mesh units).
    """
    if storage not in STORAGES:
        raise ValueError(f"storage {storage!r} is not one of {', '.join(STORAGES)}")
    doc, blob = read_glb(data)
    if not doc.get("animations"):
        raise ValueError("the GLB has no animation to close")
    out = copy.deepcopy(doc)
    writer = _Writer()
    period = loop["frame_count"] / loop["fps"]
    replaced = {}           # accessor index -> the new accessor that takes its place
    quantized = {"period": period, "position_step": 0.0, "max_quantization_error": 0.0}

    scaled = set()         # nodes whose scale holds the quantization step
    for mesh_index, mesh in enumerate(out.get("meshes", [])):
        prims = [p for p in mesh["primitives"] if p.get("targets")]
        if not prims:
            continue
        if not normals:
            for prim in mesh["primitives"]:
                for attrs in (prim["attributes"], *prim.get("targets", [])):
                    attrs.pop("NORMAL", None)
                    attrs.pop("TANGENT", None)
        if storage == "float":
            continue
        deltas = {id(t): read_accessor(doc, blob, t["POSITION"]).astype(np.float64)
                  for p in prims for t in p["targets"] if "POSITION" in t}
        normal = {id(t): read_accessor(doc, blob, t["NORMAL"]).astype(np.float64)
                  for p in prims for t in p["targets"] if "NORMAL" in t}
        first = _first_target(doc, blob, mesh_index)
        bases = {}              # POSITION accessor -> the rebased positions
        for prim in prims:
            base, base_normal = _rebase(doc, blob, prim, first, deltas, normal)
            if base is not None:
                bases[prim["attributes"]["POSITION"]] = base
            if base_normal is not None:
                replaced[prim["attributes"]["NORMAL"]] = _accessor(writer, base_normal.astype(np.float32),
                                                                   vertex=True)
        largest = max((np.abs(d).max() for d in deltas.values()), default=0.0)
        step = largest / SHORT_MAX if largest > 0 else 1.0
        for prim in mesh["primitives"]:
            key = prim["attributes"]["POSITION"]
            base = bases[key] if key in bases else read_accessor(doc, blob, key).astype(np.float64)
            replaced[key] = _accessor(writer, (base / step).astype(np.float32), vertex=True, bounds=True)
            targets = prim.get("targets", [])
            moved = [t for t in targets if "POSITION" in t]
            ints = [np.round(deltas[id(t)] / step).astype(np.int16) for t in moved]
            for t, q in zip(moved, ints):
                error = float(np.abs(q * step - deltas[id(t)]).max())
                quantized["max_quantization_error"] = max(quantized["max_quantization_error"], error)
            _in_one_view(writer, out, moved, "POSITION", ints, bounds=True)
            fits_8_bits = storage == "compact"
            small = [t for t in targets if id(t) in normal and fits_8_bits and np.abs(normal[id(t)]).max() <= 1]
            large = [t for t in targets if id(t) in normal and t not in small]
            _in_one_view(writer, out, large, "NORMAL", [normal[id(t)].astype(np.float32) for t in large])
            _in_one_view(writer, out, small, "NORMAL",
                         [np.round(normal[id(t)] * BYTE_MAX).astype(np.int8) for t in small], normalized=True)
        scaled.update(_scale_nodes(out, mesh_index, step))
        quantized["position_step"] = step
        for extension in ("extensionsUsed", "extensionsRequired"):
            out[extension] = sorted(set(out.get(extension, [])) | {QUANTIZATION})

    for animation in out["animations"]:
        weight_samplers = {ch["sampler"] for ch in animation["channels"] if ch["target"].get("path") == "weights"}
        scale_samplers = {ch["sampler"] for ch in animation["channels"]
                          if ch["target"].get("path") == "scale" and ch["target"].get("node") in scaled}
        closed_inputs = {}
        for index, sampler in enumerate(animation["samplers"]):
            times = read_accessor(doc, blob, sampler["input"])
            values = read_accessor(doc, blob, sampler["output"]).astype(np.float32)
            if index in scale_samplers:
                values = values * np.float32(quantized["position_step"])
            new_times, new_values = _close(times, values, period)
            if sampler["input"] not in closed_inputs:
                out["accessors"].append(_accessor(writer, new_times.astype(np.float32)[:, None], bounds=True))
                closed_inputs[sampler["input"]] = len(out["accessors"]) - 1
            sampler["input"] = closed_inputs[sampler["input"]]
            sparse = storage == "compact" and index in weight_samplers
            out["accessors"].append(_sparse_accessor(writer, new_values) if sparse else _accessor(writer, new_values))
            sampler["output"] = len(out["accessors"]) - 1
        animation["name"] = f"{loop['name']}-loop"
        animation.setdefault("extras", {})["cyclic_loop"] = {
            "name": loop["name"], "frame_count": loop["frame_count"], "fps": loop["fps"], "period": period,
            "position_step": quantized["position_step"],
            "closing_key": "the last key, at t = period, repeats the first: wrap at the clip's end"}

    return _repack(doc, blob, out, writer, replaced), quantized


def _repack(doc, blob, out, writer, replaced):
    """The GLB of ``out``: the accessors in ``replaced`` swapped in, every other accessor and image still
    referenced copied with its bufferView, everything else (Blender's dense originals) left out."""
    used = set()
    for mesh in out.get("meshes", []):
        for prim in mesh["primitives"]:
            used.update(prim["attributes"].values())
            used.update(v for t in prim.get("targets", []) for v in t.values())
            if "indices" in prim:
                used.add(prim["indices"])
    for animation in out.get("animations", []):
        for sampler in animation["samplers"]:
            used.update((sampler["input"], sampler["output"]))
    for skin in out.get("skins", []):
        if "inverseBindMatrices" in skin:
            used.add(skin["inverseBindMatrices"])
    copied = {}

    def copy_view(index):
        if index not in copied:
            view = doc["bufferViews"][index]
            start = view.get("byteOffset", 0)
            copied[index] = writer.view(blob[start:start + view["byteLength"]], view.get("target"),
                                        view.get("byteStride"))
        return copied[index]

    accessors, renumber = [], {}
    for index in sorted(used):
        acc = replaced.get(index) or copy.deepcopy(out["accessors"][index])
        if index not in replaced and index < len(doc["accessors"]):
            if "bufferView" in acc:
                acc["bufferView"] = copy_view(acc["bufferView"])
            for part in ("indices", "values"):
                if "sparse" in acc:
                    acc["sparse"][part]["bufferView"] = copy_view(acc["sparse"][part]["bufferView"])
        renumber[index] = len(accessors)
        accessors.append(acc)
    for image in out.get("images", []):
        if "bufferView" in image:
            image["bufferView"] = copy_view(image["bufferView"])
    for mesh in out.get("meshes", []):
        for prim in mesh["primitives"]:
            prim["attributes"] = {k: renumber[v] for k, v in prim["attributes"].items()}
            if "targets" in prim:
                prim["targets"] = [{k: renumber[v] for k, v in t.items()} for t in prim["targets"]]
            if "indices" in prim:
                prim["indices"] = renumber[prim["indices"]]
    for animation in out.get("animations", []):
        for sampler in animation["samplers"]:
            sampler["input"], sampler["output"] = renumber[sampler["input"]], renumber[sampler["output"]]
    for skin in out.get("skins", []):
        if "inverseBindMatrices" in skin:
            skin["inverseBindMatrices"] = renumber[skin["inverseBindMatrices"]]
    out["accessors"], out["bufferViews"] = accessors, writer.views
    return write_glb(out, writer.blob)


def size_report(size, n_vertices, n_frames):
    """Bytes of a GLB against the raw data it holds (``n_vertices x n_frames x 3`` float32 positions)."""
    raw = n_vertices * n_frames * 3 * 4
    return {"glb_bytes": int(size), "raw_bytes": raw, "ratio": size / raw if raw else float("inf")}
