"""Shared helpers of the Blender pipeline tests: sample files, evaluated meshes, file hashes."""
import hashlib
import os
import shutil
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES_DIR = os.path.join(ROOT, "sample_scenes")
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import bpy  # noqa: E402

from cyclic_loop_addon.pipeline import scene_reader  # noqa: E402

# sample name -> objects to loop
SAMPLES = {
    "flag": ("Flag",),
    "flag_gusts": ("Flag",),
    "swing": ("Sheet",),
    "softbody": ("Ball",),
    "ribbons": ("Ribbons",),
    "planets": ("Sun", "Planet", "Moonlet"),
}


def sample_path(name):
    return os.path.join(SAMPLES_DIR, f"{name}.blend")


def open_sample(name, folder=None):
    """Open a sample (a copy in ``folder`` when given, so the original can't change); returns the path opened."""
    path = sample_path(name)
    if folder is not None:
        path = shutil.copy(path, os.path.join(folder, f"{name}.blend"))
    bpy.ops.wm.open_mainfile(filepath=path)
    return path


def settings(name, **overrides):
    """LoopSettings for a sample over its suggested loop range."""
    a, b = bpy.context.scene["loop_frames"]
    values = dict(objects=SAMPLES[name], frame_start=a, frame_end=b)
    values.update(overrides)
    return scene_reader.LoopSettings(**values)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def evaluated_local(obj, frame):
    """Object-space vertex positions (n, 3) of the evaluated object at ``frame``."""
    bpy.context.scene.frame_set(frame)
    mesh = obj.evaluated_get(bpy.context.evaluated_depsgraph_get()).data
    co = np.empty(len(mesh.vertices) * 3)
    mesh.vertices.foreach_get("co", co)
    return co.reshape(-1, 3)


def evaluated_locations(objects, frame):
    """World locations (bodies, 3) of objects at ``frame``."""
    bpy.context.scene.frame_set(frame)
    depsgraph = bpy.context.evaluated_depsgraph_get()
    return np.array([np.array(ob.evaluated_get(depsgraph).matrix_world)[:3, 3] for ob in objects])
