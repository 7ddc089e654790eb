"""Loop -> vertex animation textures (VAT), OpenVAT-style, for real-time engines.

A folder ``DIR`` gets, for an object ``NAME``:

    NAME_pos.png / NAME_pos.exr     position offsets from the rest pose (16-bit PNG: remapped to [0, 1] by the
                                    bounds; half-float EXR: the offsets themselves)
    NAME_nrm.png / NAME_nrm.exr     vertex normals (PNG: n * 0.5 + 0.5; EXR: n)
    NAME.json                       what a shader needs: frame count, fps, bounds, texture size, vertex count
    NAME_mesh.glb                   the rest mesh with a second UV map ``VAT_UV`` at each vertex's texel

Layout: one column per vertex (wrapped onto ``rows_per_frame`` rows when there are more vertices than
``MAX_WIDTH``), one block of rows per frame, frame 0 at the top of the picture. Exactly the N distinct
frames of the loop: a player wraps from frame N - 1 back to frame 0. Offsets and normals are in the
object's space (Blender: Z up); the glTF mesh is Y up, so an engine reads offset (x, y, z) as (x, z, -y).

Width and height are powers of two (unused columns and the rows below the last frame are padding) and the
width is at most 1,024: every texel centre of frame 0, (2 i + 1) / 2^(k + 1) with i < 1,024, then has at
most 11 significant bits, so it is exact in a half float. Engines that store UV2 as half floats (Godot 3's
default mesh compression) keep ``VAT_UV`` exactly, and every vertex addresses its own texel.
"""
import json
import os

import numpy as np

from . import export, gltf, images, writeback
from ..errors import LoopInputError
from .files import atomic_path, check_writable

MAX_WIDTH = 1024                # texel centres exact in half floats up to 1,024 columns and rows per frame
MAX_SIZE = 16384                # the largest texture side engines and GPUs commonly load
UV_NAME = "VAT_UV"


def _power_of_two(n):
    """The smallest power of two >= n (n >= 1)."""
    return 1 << (int(n) - 1).bit_length()


def layout(n_vertices, n_frames, max_width=MAX_WIDTH):
    """Texture layout of a VAT.

    Parameters
    ----------
    n_vertices, n_frames : int
        Vertices per frame and frames of the loop.
    max_width : int
        Most columns, a power of two.

    Returns
    -------
    (width, rows_per_frame, height) : tuple of int
        Width and height are powers of two; frame f uses rows ``f * rows_per_frame`` to
        ``(f + 1) * rows_per_frame - 1`` and the rows from ``n_frames * rows_per_frame`` on are padding.

    Raises
    ------
    LoopInputError
        When a frame needs more than ``max_width`` rows (its texel centres would not be exact in half
        floats) or the texture would be taller than ``MAX_SIZE``.
    """
    if n_vertices < 1 or n_frames < 1:
        raise LoopInputError(f"a VAT needs vertices and frames, got {n_vertices} vertices and {n_frames} frames")
    if max_width & (max_width - 1):
        raise ValueError(f"max_width must be a power of two, got {max_width}")
    width = min(_power_of_two(n_vertices), max_width)
    rows = -(-n_vertices // width)
    if rows > max_width:
        raise LoopInputError(f"a VAT addresses at most {max_width * max_width:,} vertices exactly in half-float "
                             f"UVs; the mesh has {n_vertices:,}")
    height = _power_of_two(n_frames * rows)
    if height > MAX_SIZE:
        raise LoopInputError(f"the VAT would be {height:,} texels tall ({n_frames} frames of {rows} rows), more "
                             f"than the {MAX_SIZE:,} engines load: loop fewer frames or a coarser mesh")
    return width, rows, height


def encode(values, max_width=MAX_WIDTH):
    """(N, n, 3) per-frame vertex vectors -> (H, W, 4) RGBA image rows (top first), alpha 1 where used and 0
    in the padding."""
    n_frames, n = values.shape[:2]
    width, rows, height = layout(n, n_frames, max_width)
    image = np.zeros((height, width, 4), dtype=np.float32)
    frames = image[:n_frames * rows].reshape(n_frames, rows * width, 4)
    frames[:, :n, :3] = values
    frames[:, :n, 3] = 1.0
    return image


def decode(image, n_vertices, n_frames):
    """Inverse of ``encode``: (H, W, 4) -> (N, n, 3)."""
    rows = -(-n_vertices // image.shape[1])
    return image[:n_frames * rows].reshape(n_frames, -1, 4)[:, :n_vertices, :3]


def texel_uv(n_vertices, n_frames, max_width=MAX_WIDTH):
    """(n, 2) Blender UVs (v up) of each vertex's frame-0 texel centre, exact in half floats (see module)."""
    width, _, height = layout(n_vertices, n_frames, max_width)
    i = np.arange(n_vertices)
    return np.column_stack([(i % width + 0.5) / width, 1.0 - (i // width + 0.5) / height])


def polygon_corners(loop_starts, n_corners):
    """(next corner, previous corner, polygon) of each corner, from the polygons' first corners."""
    starts = np.asarray(loop_starts)
    ends = np.append(starts[1:], n_corners)
    polygon = np.repeat(np.arange(len(starts)), ends - starts)
    corner = np.arange(n_corners)
    following = np.where(corner + 1 == ends[polygon], starts[polygon], corner + 1)
    previous = np.where(corner == starts[polygon], ends[polygon] - 1, corner - 1)
    return following, previous, polygon


def vertex_normals(positions, corner_vertex, loop_starts):
    """Unit vertex normals (N, n, 3) of positions (N, n, 3), as Blender computes them: each polygon's
    (Newell) normal weighted by the polygon's corner angle at the vertex. ``corner_vertex``: vertex of
    each polygon corner; ``loop_starts``: each polygon's first corner."""
    following, previous, polygon = polygon_corners(loop_starts, len(corner_vertex))
    p = positions[:, corner_vertex]                                     # (N, corners, 3)
    face = np.zeros((positions.shape[0], len(loop_starts), 3))
    np.add.at(face, (slice(None), polygon), np.cross(p, p[:, following]))
    face /= np.maximum(np.linalg.norm(face, axis=2, keepdims=True), 1e-30)
    a, b = p[:, following] - p, p[:, previous] - p
    cos = np.einsum("fcx,fcx->fc", a, b) / np.maximum(np.linalg.norm(a, axis=2) * np.linalg.norm(b, axis=2), 1e-30)
    normals = np.zeros_like(positions)
    np.add.at(normals, (slice(None), corner_vertex), face[:, polygon] * np.arccos(np.clip(cos, -1, 1))[..., None])
    length = np.linalg.norm(normals, axis=2, keepdims=True)
    return np.divide(normals, length, out=np.zeros_like(normals), where=length > 0)


def mesh_corners(mesh):
    """(vertex of each polygon corner, first corner of each polygon) of a Blender mesh."""
    corner_vertex = np.empty(len(mesh.loops), dtype=np.int64)
    mesh.loops.foreach_get("vertex_index", corner_vertex)
    starts = np.empty(len(mesh.polygons), dtype=np.int64)
    mesh.polygons.foreach_get("loop_start", starts)
    return corner_vertex, starts


def encoded_textures(local, rest, corner_vertex, loop_starts):
    """The four images and their decode ranges: {(kind, ext): (image, lo, hi)} with value = lo + texel * (hi - lo)."""
    offsets = local - rest[None]
    normals = vertex_normals(local, corner_vertex, loop_starts)
    lo, hi = offsets.reshape(-1, 3).min(axis=0), offsets.reshape(-1, 3).max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    return {
        ("pos", ".png"): (encode((offsets - lo) / span), lo, lo + span),
        ("pos", ".exr"): (encode(offsets), np.zeros(3), np.ones(3)),
        ("nrm", ".png"): (encode(normals * 0.5 + 0.5), -np.ones(3), np.ones(3)),
        ("nrm", ".exr"): (encode(normals), np.zeros(3), np.ones(3)),
    }


def export_vat(gathered, q, folder, context=None):
    """Write the VAT files of loop q into ``folder`` (created if its parent exists); returns the JSON's path."""
    if gathered.kind != "mesh":
        raise LoopInputError("a vertex animation texture holds mesh vertices; N bodies are written as location keys")
    folder = os.path.abspath(folder)
    check_writable(probe_path(folder), "VAT folder")
    local = writeback.local_loop(gathered, q)
    n_frames, n = local.shape[:2]
    width, rows, height = layout(n, n_frames)           # refuses a texture too large before writing anything
    if not os.path.isdir(folder):
        os.mkdir(folder)
    with export.temporary_copy(gathered, context, "_vat") as (temp, source):
        rest = np.empty(len(temp.data.vertices) * 3)
        temp.data.vertices.foreach_get("co", rest)
        rest = rest.reshape(-1, 3)
        corners = mesh_corners(temp.data)
        name = safe_name(source.name)
        textures = encoded_textures(local, rest, *corners)
        for (kind, ext), (image, _, _) in textures.items():
            images.write_image(os.path.join(folder, f"{name}_{kind}{ext}"), image, "VAT texture")
        if not temp.data.uv_layers:              # VAT_UV is the second UV set (TEXCOORD_1), as VAT shaders expect
            temp.data.uv_layers.new(name="UVMap")
        uv = temp.data.uv_layers.new(name=UV_NAME)
        if uv is None:
            raise LoopInputError(f"{source.name!r} already has the most UV maps a mesh can hold; remove one")
        uv.data.foreach_set("uv", texel_uv(n, n_frames)[corners[0]].astype(np.float32).ravel())
        temp.matrix_world = source.matrix_world
        mesh_path = os.path.join(folder, f"{name}_mesh.glb")
        gltf.export_selected(mesh_path, animations=False)
        uv_set = list(temp.data.uv_layers.keys()).index(UV_NAME)
        extras = gltf.loop_extras(gathered, temp.users_scene[0])
    pos_png = textures[("pos", ".png")]
    info = {
        "format": "cyclic-loop-vat", "version": 2, "name": name,
        **extras, "frame_start": gathered.frame_start, "frame_step": gathered.frame_step,
        "vertex_count": n, "texture_size": [width, height], "rows_per_frame": rows,
        "layout": "vertex i at column i % width, row frame * rows_per_frame + i // width; row 0 at the top; "
                  "rows from frame_count * rows_per_frame on are padding",
        "space": "object", "up_axis": "Z", "mesh": os.path.basename(mesh_path), "uv_map": UV_NAME,
        "uv_set": uv_set,
        "bounds": {"min": pos_png[1].tolist(), "max": pos_png[2].tolist()},
        "position_bounds": {"min": local.reshape(-1, 3).min(axis=0).tolist(),
                            "max": local.reshape(-1, 3).max(axis=0).tolist()},
        "textures": {kind: {ext[1:]: f"{name}_{kind}{ext}" for (k, ext) in textures if k == kind}
                     for kind in ("pos", "nrm")},
        "decode": {ext[1:]: {kind: {"min": textures[(kind, ext)][1].tolist(), "max": textures[(kind, ext)][2].tolist()}
                             for kind in ("pos", "nrm")} for ext in (".png", ".exr")},
        "os-remap": {"Min": pos_png[1].tolist(), "Max": pos_png[2].tolist(), "Frames": n_frames},
    }
    path = os.path.join(folder, f"{name}.json")
    with atomic_path(path, "VAT JSON") as tmp, open(tmp, "w") as f:
        json.dump(info, f, indent=2)
    return path


def probe_path(folder):
    """A path that ``files.check_writable`` accepts exactly when the VAT files can be written into ``folder``."""
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise LoopInputError(f"the VAT folder {folder} is a file; give a folder (it is created if missing)")
    return os.path.join(folder, "vat.json") if os.path.isdir(folder) else folder


def safe_name(name):
    """``name`` usable as a file name."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def read_vat(json_path, ext=".exr"):
    """(info, offsets (N, n, 3), normals (N, n, 3)) decoded from the VAT files the JSON names."""
    with open(json_path) as f:
        info = json.load(f)
    folder, n, n_frames = os.path.dirname(json_path), info["vertex_count"], info["frame_count"]
    out = []
    for kind in ("pos", "nrm"):
        image = images.read_image(os.path.join(folder, info["textures"][kind][ext[1:]]))
        rng = info["decode"][ext[1:]][kind]
        lo, hi = np.array(rng["min"]), np.array(rng["max"])
        out.append(lo + decode(image, n, n_frames) * (hi - lo))
    return info, out[0], out[1]
