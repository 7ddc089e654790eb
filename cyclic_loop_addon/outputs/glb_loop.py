"""A loop's GLB as players play it as imported: the closing key, the loop's extras, quantized and sparse data.

Blender's exporter writes one period open (N keys at t = j / fps) with dense float data. ``rewrite`` takes
its GLB and returns one that

- closes every animation: each sampler gets a key at t = N / fps equal to its first key, so a player that
  wraps at the clip's end (three.js ``LoopRepeat``, Godot's looping Animation) interpolates from the last
  sample back to the first like any other step;
- names the animation ``NAME-loop`` (Godot's importer loops an animation whose name ends in ``-loop`` and
  drops the suffix) and puts the loop's name, frame count, fps, period, quantization step and normal basis
  (its targets, after the N of the frames, and its bound in degrees) in its ``extras.cyclic_loop``;
- with ``storage`` "quantized": stores the morph targets' positions as 16-bit integers
  (KHR_mesh_quantization, not normalized: the node's scale holds the quantization step, which every importer
  applies, where Godot 3's importer ignores ``normalized``; the node's translation holds the mesh's centre,
  from which the base positions are stored) and the normals as a basis: the fewest principal
  components of the keys' normals that keep every key's normal within ``NORMAL_TOLERANCE`` degrees, each
  in a morph target of its own whose weight the animation keys (the targets of the frames carry none);
- with ``storage`` "compact": also that basis as normalized 8-bit integers and the weights output as a
  sparse accessor (only the nonzero weights);
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
# Degrees: the largest angle between a key's normal played from the normal basis and the exported one; about
# the error of a normal stored in 8 bits (the coarsest glTF allows, and how Godot 3 stores mesh normals).
NORMAL_TOLERANCE = 0.5


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
    """Write the morph targets' ``attribute`` ``arrays`` (each (n, 3), one dtype) to one vertex bufferView, one
    accessor each at its offset (one view instead of one per target keeps the JSON small), and point the
    targets at them. The arrays that are all zero (the target the base was moved to; the positions of a
    normal target, the normals of a frame's target) share one stored array and its accessor."""
    if not arrays:
        return
    nonzero = [bool(a.any()) for a in arrays]
    stored = [a for a, keep in zip(arrays, nonzero) if keep]
    if not all(nonzero):
        stored.append(np.zeros_like(arrays[0]))
    data, stride = _vertex_bytes(np.concatenate(stored))
    stride = stride or arrays[0].dtype.itemsize * 3
    view = writer.view(data, ARRAY_BUFFER, stride)
    first = len(out["accessors"])
    for k, values in enumerate(stored):
        acc = {"bufferView": view, "componentType": CODES[values.dtype], "count": len(values), "type": "VEC3"}
        if k:
            acc["byteOffset"] = k * len(values) * stride
        if bounds:
            acc["min"], acc["max"] = _bounds(values)
        if normalized:
            acc["normalized"] = True
        out["accessors"].append(acc)
    index = np.cumsum(nonzero) - 1 + first
    for target, keep, k in zip(targets, nonzero, index.tolist()):
        target[attribute] = k if keep else len(out["accessors"]) - 1


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


def _weight_samplers(doc, blob, mesh_index):
    """The samplers that animate the weights of a node showing mesh ``mesh_index``: a list of
    ``((animation, sampler), interpolation, weights)``, weights (keys, targets) (CUBICSPLINE: 3 rows a key)."""
    nodes = {i for i, node in enumerate(doc.get("nodes", [])) if node.get("mesh") == mesh_index}
    found = {}
    for a, animation in enumerate(doc.get("animations", [])):
        for channel in animation["channels"]:
            if channel["target"].get("path") != "weights" or channel["target"].get("node") not in nodes:
                continue
            sampler = animation["samplers"][channel["sampler"]]
            if (a, channel["sampler"]) not in found:
                times = read_accessor(doc, blob, sampler["input"])
                interpolation = sampler.get("interpolation", "LINEAR")
                rows = len(times) * (3 if interpolation == "CUBICSPLINE" else 1)
                weights = read_accessor(doc, blob, sampler["output"]).astype(np.float64).reshape(rows, -1)
                found[(a, channel["sampler"])] = (interpolation, weights)
    return [(key, interpolation, weights) for key, (interpolation, weights) in found.items()]


def _first_target(samplers):
    """The morph target that the first key of the mesh's weights animation shows alone, when every key's
    weights add up to 1 (a loop's one-hot keys, and every linear blend of them); None otherwise."""
    first = None
    for _, interpolation, weights in samplers:
        if interpolation == "CUBICSPLINE" or not np.allclose(weights.sum(axis=1), 1, atol=1e-6):
            return None
        if first is not None and first != int(np.argmax(weights[0])):
            return None
        first = int(np.argmax(weights[0]))
    return first


def _unit(vectors):
    return vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)


def _shortest(base, keyed, segments):
    """The shortest normal (before normalizing) a player blends on each of ``segments`` ((S, 2) key
    indices) from the deltas ``keyed`` ((R, n, 3)) on ``base``: (S, n), the distance of each segment from 0."""
    start, end = base + keyed[segments[:, 0]], base + keyed[segments[:, 1]]
    along = end - start
    t = np.clip(-np.sum(start * along, axis=-1) / np.maximum(np.sum(along * along, axis=-1), 1e-30), 0.0, 1.0)
    return np.linalg.norm(start + t[..., None] * along, axis=-1)


def _played_error(base, keyed, approx, segments, shortest=None):
    """A bound, in degrees, on the angle between the normal a player shows from ``approx`` and from ``keyed``
    ((R, n, 3) deltas from ``base`` at R keys), at the keys and anywhere between the two keys of each of
    ``segments`` ((S, 2) key indices): the player blends the keys linearly and normalizes, so the error vector
    on a segment is at most the larger of its ends' and the normal at least the segment's distance from 0
    (``shortest``, computed when not given)."""
    if shortest is None:
        shortest = _shortest(base, keyed, segments)
    error = np.linalg.norm(approx - keyed, axis=-1)
    ratio = np.maximum(error[segments[:, 0]], error[segments[:, 1]]) / np.maximum(shortest, 1e-30)
    return float(np.degrees(np.arcsin(np.minimum(ratio, 1.0))).max(initial=0.0))


def normal_basis(base, keyed, tolerance=NORMAL_TOLERANCE, segments=None, levels=None):
    """The fewest principal components of the keys' normal deltas that keep every normal a player shows
    within ``tolerance`` degrees of the one it shows from the exported normals.

    A player adds the weighted morph targets' normal deltas to the base normal and normalizes, the weights
    blended linearly between keys. The keys' normal deltas of a loop are few vectors of one smooth motion, so
    a handful of components (each a morph target carrying only normals, with a weight per key) play them to
    within a fraction of a degree.

    Parameters
    ----------
    base : (n, 3) array
        The base normals (unit vectors).
    keyed : (R, n, 3) array
        The normal delta from ``base`` at each of R keys (a key's weights applied to the targets' deltas).
    tolerance : float
        The largest angle, in degrees, at a key or between the two keys of a segment.
    segments : (S, 2) int array, optional
        The pairs of keys a player blends between; by default each key and the next, and the last and the
        first (a loop's closing key repeats the first).
    levels : int, optional
        Store the basis as normalized integers: each component scaled to a largest value of 1 and rounded to
        multiples of 1 / ``levels`` (127: normalized bytes), the rounding counted in the error.

    Returns
    -------
    coefficients : (R, k) array
        The weights of the k components at each key (k = 0 when the base is within ``tolerance``); each
        column scaled to [-1, 1] unless ``levels`` is given.
    basis : (k, n, 3) array
        The components, as stored: the normal deltas of k morph targets.
    error : float
        The bound on the angle (``tolerance`` at most, unless even every component does not reach it).
    """
    keyed = np.asarray(keyed, np.float64)
    rows, n = len(keyed), keyed.shape[1]
    if segments is None:
        segments = np.stack([np.arange(rows), (np.arange(rows) + 1) % rows], axis=1)
    flat = keyed.reshape(rows, -1)
    # The left singular vectors from the keys' Gram matrix (R x R, cheap for any mesh); the projection on the
    # first k, u_k (u_k^T keyed), divides by no singular value.
    values, vectors = np.linalg.eigh(flat @ flat.T)
    u = vectors[:, np.argsort(values)[::-1][:min(rows, flat.shape[1])]]

    def stored(k):
        coefficients, basis = u[:, :k], (u[:, :k].T @ flat).reshape(k, n, 3)
        if levels:
            top = np.abs(basis).max(axis=(1, 2), initial=0.0)
            top[top == 0] = 1.0
            basis = np.round(basis / top[:, None, None] * levels) / levels
            return coefficients * top, basis
        scale = np.abs(coefficients).max(axis=0, initial=0.0)
        scale[scale == 0] = 1.0
        return coefficients / scale, basis * scale[:, None, None]

    chunk = max(1, 2 ** 21 // (3 * rows))         # vertices at a time: temporaries of a few MB, any mesh
    parts = [slice(at, at + chunk) for at in range(0, n, chunk)]
    shortest = [_shortest(base[part], keyed[:, part], segments) for part in parts]

    def error(k):
        coefficients, basis = stored(k)
        worst = 0.0
        for part, floor in zip(parts, shortest):
            some = basis[:, part]
            approx = (coefficients @ some.reshape(k, 3 * some.shape[1])).reshape(rows, -1, 3)
            worst = max(worst, _played_error(base[part], keyed[:, part], approx, segments, floor))
        return worst

    low, high = -1, u.shape[1]  # bisection for the smallest k within tolerance (all of them: rounding only)
    while high - low > 1:
        middle = (low + high) // 2
        if error(middle) <= tolerance:
            high = middle
        else:
            low = middle
    return (*stored(high), error(high))


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


def _rotate(quaternion, vector):
    """``vector`` rotated by the unit ``quaternion`` (x, y, z, w)."""
    q, w = np.asarray(quaternion[:3], float), float(quaternion[3])
    return vector + 2 * w * np.cross(q, vector) + 2 * np.cross(q, np.cross(q, vector))


def _place_nodes(doc, mesh_index, step, centre):
    """Scale every node showing mesh ``mesh_index`` by ``step`` and move it by its transform of ``centre``
    (mesh units), so that the mesh's positions stored as (position - centre) / step land where they were;
    its children's transforms get the inverse, so they stay where they were. Returns those nodes' indices."""
    placed = []
    for index, node in enumerate(doc.get("nodes", [])):
        if node.get("mesh") != mesh_index:
            continue
        if "matrix" in node:
            m = np.array(node["matrix"], float).reshape(4, 4)        # column-major: m[i] is column i
            m[3, :3] += m[:3, :3].T @ centre
            m[:3] *= step
            node["matrix"] = m.ravel().tolist()
        else:
            scale = np.array(node.get("scale", [1.0, 1.0, 1.0]))
            if centre.any():
                moved = _rotate(node.get("rotation", [0.0, 0.0, 0.0, 1.0]), scale * centre)
                node["translation"] = (np.array(node.get("translation", [0.0, 0.0, 0.0])) + moved).tolist()
            node["scale"] = (scale * step).tolist()
        for child in node.get("children", []):
            sub = doc["nodes"][child]
            if "matrix" in sub:
                m = np.array(sub["matrix"], float).reshape(4, 4)
                m[:3] /= step
                m[3, :3] = (m[3, :3] - centre) / step
                sub["matrix"] = m.ravel().tolist()
            else:
                sub["translation"] = ((np.array(sub.get("translation", [0.0, 0.0, 0.0])) - centre) / step).tolist()
                sub["scale"] = (np.array(sub.get("scale", [1.0, 1.0, 1.0])) / step).tolist()
        placed.append(index)
    return placed


def _moved_by_animation(doc, mesh_index):
    """Whether an animation moves, turns or scales a node showing mesh ``mesh_index``."""
    nodes = {i for i, node in enumerate(doc.get("nodes", [])) if node.get("mesh") == mesh_index}
    return any(ch["target"].get("node") in nodes and ch["target"].get("path") in ("translation", "rotation", "scale")
               for animation in doc.get("animations", []) for ch in animation["channels"])


def _mesh_normal_basis(prims, normal, base_normals, samplers, compact):
    """``normal_basis`` of one mesh, all its primitives at once (the weights are the mesh's); None where it
    does not apply: no target normals, or a weights animation that is CUBICSPLINE (or none).

    Returns a dict: ``arrays`` {id(prim): its k basis arrays (n, 3) as stored: float32, or in ``compact``
    int8 of normalized values where bytes reach the tolerance (then ``normalized``)}, ``coefficients``
    {(animation, sampler): (keys, k)}, ``project`` (a targets' weight vector -> its k basis weights, for the
    mesh's default weights), ``count`` k and ``error`` (the bound on the angle, in degrees)."""
    with_normals = [p for p in prims if "NORMAL" in p["attributes"] and any(id(t) in normal for t in p["targets"])]
    if not with_normals or not samplers or any(i not in ("LINEAR", "STEP") for _, i, _ in samplers):
        return None
    deltas = np.concatenate([np.stack([normal.get(id(t), np.zeros_like(base_normals[id(p)])) for t in p["targets"]])
                             for p in with_normals], axis=1).reshape(len(with_normals[0]["targets"]), -1)
    base = np.concatenate([base_normals[id(p)] for p in with_normals])
    weights = np.concatenate([w for _, _, w in samplers])
    keyed = (weights @ deltas).reshape(len(weights), *base.shape)
    rows = np.cumsum([len(w) for _, _, w in samplers])
    starts = np.concatenate([[0], rows[:-1]])        # each sampler's keys, each to the next and the last to its first
    segments = np.concatenate([a + np.stack([np.arange(b - a), (np.arange(b - a) + 1) % (b - a)], axis=1)
                               for a, b in zip(starts, rows)])
    coefficients, basis, error = normal_basis(base, keyed, segments=segments, levels=BYTE_MAX if compact else None)
    if compact and error > NORMAL_TOLERANCE:        # normals that swing far: bytes round too coarsely, floats
        coefficients, basis, error = normal_basis(base, keyed, segments=segments)
        compact = False
    stored = np.round(basis * BYTE_MAX).astype(np.int8) if compact else basis.astype(np.float32)
    flat = basis.reshape(len(basis), -1)
    norms = np.maximum(np.sum(flat ** 2, axis=1), 1e-30)
    ends = np.cumsum([len(base_normals[id(p)]) for p in with_normals])
    return {"arrays": {id(p): list(part) for p, part in zip(with_normals, np.split(stored, ends[:-1], axis=1))},
            "normalized": compact,
            "coefficients": {key: part for (key, _, _), part in zip(samplers, np.split(coefficients, rows[:-1]))},
            "project": lambda w: flat @ (np.asarray(w, np.float64) @ deltas) / norms,
            "count": len(basis), "error": error}


def rewrite(data, loop, storage="quantized", normals=True):
    """The GLB bytes ``data`` (one mesh with morph targets, animated by weights) rewritten to loop as imported.

    Parameters
    ----------
    data : bytes
        A GLB of one period written open (N keys at t = j / fps, no key at N / fps).
    loop : dict
        ``name``, ``frame_count``, ``fps`` of the loop; the closing key goes at ``frame_count / fps``.
    storage : {"float", "quantized", "compact"}
        float: every value float32, the normals per target, the weights dense; quantized: morph-target
        positions as 16-bit integers (KHR_mesh_quantization), the normals as a basis of float morph targets
        (``normal_basis``), the weights dense floats; compact: quantized, the basis 8-bit, the weights sparse.
    normals : bool
        Keep the normals (base and per target); False drops them, and players compute flat normals.

    Returns
    -------
    bytes, dict
        The new GLB and what it holds: ``period``, ``position_step`` (metres of the mesh per integer step of
        the quantized targets, 0 when not quantized), ``max_quantization_error`` (largest error of a target
        position in mesh units), ``normal_targets`` (the morph targets of the normal basis, 0 without one)
        and ``normal_error`` (the basis' largest angle from a key's exported normal, degrees).
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
    outputs = {}            # (animation, sampler) -> its weights with the normal basis' weights appended
    figures = {"period": period, "position_step": 0.0, "max_quantization_error": 0.0, "normal_targets": 0,
               "normal_error": 0.0}

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
        mesh.get("extras", {}).pop("targetNames", None)     # the frames' names: their order says it
        if not mesh.get("extras", True):
            del mesh["extras"]
        samplers = _weight_samplers(doc, blob, mesh_index)
        deltas = {id(t): read_accessor(doc, blob, t["POSITION"]).astype(np.float64)
                  for p in prims for t in p["targets"] if "POSITION" in t}
        normal = {id(t): read_accessor(doc, blob, t["NORMAL"]).astype(np.float64)
                  for p in prims for t in p["targets"] if "NORMAL" in t}
        first = _first_target(samplers)
        bases = {}              # POSITION accessor -> the rebased positions
        base_normals = {}       # id(prim) -> its base normals
        for prim in prims:
            base, base_normal = _rebase(doc, blob, prim, first, deltas, normal)
            if base is not None:
                bases[prim["attributes"]["POSITION"]] = base
            if base_normal is not None:
                replaced[prim["attributes"]["NORMAL"]] = _accessor(writer, base_normal.astype(np.float32),
                                                                   vertex=True)
            elif "NORMAL" in prim["attributes"]:
                base_normal = read_accessor(doc, blob, prim["attributes"]["NORMAL"]).astype(np.float64)
            base_normals[id(prim)] = base_normal
        basis = _mesh_normal_basis(prims, normal, base_normals, samplers, storage == "compact")
        k = basis["count"] if basis else 0
        if basis:
            for key, _, weights in samplers:
                outputs[key] = np.concatenate([weights, basis["coefficients"][key]], axis=1)
            for owner in [mesh] + [nd for nd in out.get("nodes", []) if nd.get("mesh") == mesh_index]:
                if "weights" in owner:
                    owner["weights"] = owner["weights"] + basis["project"](owner["weights"]).tolist()
            figures["normal_targets"], figures["normal_error"] = k, basis["error"]
        largest = max((np.abs(d).max() for d in deltas.values()), default=0.0)
        step = largest / SHORT_MAX if largest > 0 else 1.0
        for prim in mesh["primitives"]:
            key = prim["attributes"]["POSITION"]
            if key not in bases:
                bases[key] = read_accessor(doc, blob, key).astype(np.float64)
        # The positions stored from the centre of their box (the node's translation carries it): a player's
        # float32 sums of them (Godot's base * (1 - sum w) + sum w * shape) round at the mesh's size.
        low = np.min([b.min(axis=0) for b in bases.values()], axis=0)
        high = np.max([b.max(axis=0) for b in bases.values()], axis=0)
        centre = np.zeros(3) if _moved_by_animation(out, mesh_index) else 0.5 * (low + high)
        for prim in mesh["primitives"]:
            key = prim["attributes"]["POSITION"]
            base = bases[key]
            replaced[key] = _accessor(writer, ((base - centre) / step).astype(np.float32), vertex=True, bounds=True)
            targets = prim.get("targets", [])
            extra = [{} for _ in range(k)]
            moved = [t for t in targets if "POSITION" in t]
            ints = [np.round(deltas[id(t)] / step).astype(np.int16) for t in moved]
            for t, q in zip(moved, ints):
                error = float(np.abs(q * step - deltas[id(t)]).max())
                figures["max_quantization_error"] = max(figures["max_quantization_error"], error)
            zeros = [np.zeros((len(base), 3), np.int16)] * (k if moved else 0)
            _in_one_view(writer, out, moved + extra, "POSITION", ints + zeros, bounds=True)
            if basis is None:
                fits_8_bits = storage == "compact"
                small = [t for t in targets
                         if id(t) in normal and fits_8_bits and np.abs(normal[id(t)]).max() <= 1]
                large = [t for t in targets if id(t) in normal and t not in small]
                _in_one_view(writer, out, large, "NORMAL", [normal[id(t)].astype(np.float32) for t in large])
                _in_one_view(writer, out, small, "NORMAL",
                             [np.round(normal[id(t)] * BYTE_MAX).astype(np.int8) for t in small], normalized=True)
            else:       # the basis' targets hold the normals: the frames' share a zero normal array
                for t in targets:
                    t.pop("NORMAL", None)
                if k and id(prim) in basis["arrays"]:
                    arrays = basis["arrays"][id(prim)]
                    _in_one_view(writer, out, targets + extra, "NORMAL",
                                 [np.zeros_like(arrays[0])] * len(targets) + arrays, normalized=basis["normalized"])
            if k:
                prim["targets"] = targets + extra
        scaled.update(_place_nodes(out, mesh_index, step, centre))
        figures["position_step"] = step
        for extension in ("extensionsUsed", "extensionsRequired"):
            out[extension] = sorted(set(out.get(extension, [])) | {QUANTIZATION})

    for a, animation in enumerate(out["animations"]):
        weight_samplers = {ch["sampler"] for ch in animation["channels"] if ch["target"].get("path") == "weights"}
        scale_samplers = {ch["sampler"] for ch in animation["channels"]
                          if ch["target"].get("path") == "scale" and ch["target"].get("node") in scaled}
        closed_inputs = {}
        for index, sampler in enumerate(animation["samplers"]):
            times = read_accessor(doc, blob, sampler["input"])
            if (a, index) in outputs:
                values = outputs[(a, index)].reshape(-1, 1).astype(np.float32)
            else:
                values = read_accessor(doc, blob, sampler["output"]).astype(np.float32)
            if index in scale_samplers:
                values = values * np.float32(figures["position_step"])
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
            "position_step": figures["position_step"], "normal_targets": figures["normal_targets"],
            "normal_error": figures["normal_error"],
            "closing_key": "the last key, at t = period, repeats the first: wrap at the clip's end"}

    return _repack(doc, blob, out, writer, replaced), figures


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
