"""Loop -> a self-contained web page (three.js inlined) that plays the loop beside the forward cache.

three.js comes from npm: the copy the add-on ships (``three/``, put there by build_extension.py), the
folder named by the CYCLIC_LOOP_THREE environment variable (three's ``build`` folder) or this repository's
``npm ci --prefix web``. Its two module files are inlined as data URLs in an import map, so the page needs
no network and no server.
"""
import base64
import json
import os

import bpy
import numpy as np

from . import gltf, web_page, writeback
from ..blender_mesh import mesh_arrays
from ..errors import LoopInputError
from .files import atomic_path, check_writable

HERE = os.path.dirname(os.path.abspath(__file__))
THREE_FILES = ("three.core.js", "three.module.js")


def three_build_dir():
    """three.js's build folder: CYCLIC_LOOP_THREE, else the copy shipped with the add-on, else the repository's."""
    override = os.environ.get("CYCLIC_LOOP_THREE")
    candidates = [override] if override else [
        os.path.join(HERE, "three"), os.path.join(os.path.dirname(os.path.dirname(HERE)), "web", "node_modules", "three", "build")]
    for folder in candidates:
        if all(os.path.isfile(os.path.join(folder, name)) for name in THREE_FILES):
            return folder
    raise LoopInputError("the web preview inlines three.js, which was not found: set CYCLIC_LOOP_THREE to the "
                         "build folder of three (npm), or run `npm ci --prefix web` in the Cyclic Loop repository "
                         "and build the add-on again")


def _data_url(text):
    return "data:text/javascript;base64," + base64.b64encode(text.encode()).decode()


def import_map():
    """An import map resolving ``three`` to the inlined module (and its core) as data URLs."""
    folder = three_build_dir()
    with open(os.path.join(folder, "three.core.js"), encoding="utf-8") as f:
        core = f.read()
    with open(os.path.join(folder, "three.module.js"), encoding="utf-8") as f:
        module = f.read().replace("from './three.core.js'", "from 'three-core'")
    return json.dumps({"imports": {"three-core": _data_url(core), "three": _data_url(module)}})


def _b64(array, dtype):
    return base64.b64encode(np.ascontiguousarray(array, dtype=dtype).tobytes()).decode()


def y_up(points):
    """Blender (Z up) -> glTF / three.js (Y up) coordinates: (x, y, z) -> (x, z, -y)."""
    return np.stack([points[..., 0], points[..., 2], -points[..., 1]], axis=-1)


def page_data(gathered, q, scene):
    """The page's data: world-space (Y up) cache and loop, triangles (meshes), frame rate."""
    loop = writeback.written_loop(gathered, q)
    cache = np.asarray(gathered.source)[:, :gathered.n_written]
    triangles = np.zeros((0, 3))
    if gathered.kind == "mesh":
        _, _, triangles, _ = mesh_arrays(bpy.data.objects[gathered.object_names[0]].data)
    extras = gltf.loop_extras(gathered, scene)
    return {"name": ", ".join(gathered.object_names), "kind": gathered.kind, "frames": gathered.n_frames,
            "fps": extras["fps"], "frame_start": gathered.frame_start, "frame_step": gathered.frame_step,
            "vertices": gathered.n_written, "triangles": _b64(triangles, "<u4"),
            "cache": _b64(y_up(cache), "<f4"), "loop": _b64(y_up(loop), "<f4")}


def write_page(gathered, q, path, context=None):
    """Write the preview page of loop q at ``path`` (atomically); returns ``path``."""
    check_writable(path, "web page")
    scene = (context or bpy.context).scene
    data = page_data(gathered, q, scene)
    html = web_page.render(import_map(), json.dumps(data), data["name"])
    with atomic_path(path, "web page") as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(html)
    return path
