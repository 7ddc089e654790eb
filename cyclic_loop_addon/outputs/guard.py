"""The one guard for every path the bake and the operators write: checked before any work starts.

An output may not be, or alias (symlink, ``..``, hard link), the open .blend, a file the scene reads its
simulation from (point caches on disk, Mesh Cache / Alembic cache files, linked libraries) or another
output. The only exception: with ``overwrite`` the outputs named in ``may_replace_input`` (bake.py's
``--output``, a .blend) may replace the open .blend. Links and special files (devices, FIFOs, sockets)
are refused as outputs (files.check_writable), and an output written in one format only must carry its
extension (``FORMATS``), so a file's name never promises another format than its bytes.
"""
import os

import bpy

from . import writeback
from ..errors import LoopInputError
from .files import check_writable, clean_stale_partials, refuse_special, same_path


# Outputs written in one format only: label -> (extensions accepted, what the file is)
FORMATS = {"--preview": ((".png",), "the seam picture is written as PNG")}


def _point_cache_folder(cache):
    if cache.use_external:
        return bpy.path.abspath(cache.filepath)
    if not cache.use_disk_cache or not bpy.data.filepath:
        return ""
    stem = os.path.splitext(os.path.basename(bpy.data.filepath))[0]
    return os.path.join(os.path.dirname(bpy.data.filepath), f"blendcache_{stem}")


def source_files():
    """(what, path) of every file the open scene reads its simulation from."""
    found = []
    for ob in bpy.data.objects:
        for mod in ob.modifiers:
            cache = getattr(mod, "point_cache", None)
            folder = _point_cache_folder(cache) if cache is not None else ""
            if folder and os.path.isdir(folder):
                found += [(f"a {mod.name} cache file of {ob.name!r}", os.path.join(folder, name))
                          for name in os.listdir(folder)]
                found.append((f"the {mod.name} cache folder of {ob.name!r}", folder))
            if mod.type == "MESH_CACHE" and mod.name != writeback.CACHE_MODIFIER and mod.filepath:
                found.append((f"the mesh cache of {ob.name!r}", bpy.path.abspath(mod.filepath)))
    found += [("a cache file the scene reads", bpy.path.abspath(c.filepath)) for c in bpy.data.cache_files]
    found += [("a library the scene links", bpy.path.abspath(lib.filepath)) for lib in bpy.data.libraries]
    return found


def check_outputs(outputs, overwrite=False, may_replace_input=()):
    """Refuse outputs that would destroy an input or each other; returns their absolute paths.

    Parameters
    ----------
    outputs : list of (str, str, bool)
        (label, path, is_folder) per output to write (label as the user knows it, e.g. "--abc").
    overwrite : bool
        The outputs named in ``may_replace_input`` may replace the open .blend.
    may_replace_input : tuple of str
        Labels of the outputs that may replace the open .blend with ``overwrite``.

    Returns
    -------
    list of str
        The absolute paths, once each can be written (its folder exists and is writable, it is no link or
        special file, it has its format's extension). The temporaries of ended processes in their folders
        are removed then (files.clean_stale_partials).
    """
    opened = bpy.data.filepath
    protected = ([("the input file (the open .blend)", opened)] if opened else []) + source_files()
    checked = []
    for label, path, is_folder in outputs:
        path = check_writable(path, label, folder_output=is_folder, special=False)
        for what, other in protected:
            if not same_path(path, other):
                continue
            replaceable = other == opened and label in may_replace_input
            if replaceable and overwrite:
                continue
            hint = " (or pass --overwrite to replace it with the looped scene)" if replaceable else ""
            raise LoopInputError(f"{label} {path} is {what}: writing it would destroy your input. Choose "
                                 f"another path{hint}")
        for other_label, other in checked:
            if same_path(path, other):
                raise LoopInputError(f"{label} and {other_label} name the same file ({path}): one would "
                                     "overwrite the other. Give each output its own path")
        checked.append((label, path))
    for label, path in checked:     # after the inputs: a link to the input is named as the input
        refuse_special(path, label)
        extensions, fmt = FORMATS.get(label, (None, ""))
        if extensions and not path.lower().endswith(extensions):
            raise LoopInputError(f"{label} {path}: {fmt}; give a file name ending in {' or '.join(extensions)}")
    for _, path in checked:     # temporaries a killed earlier run left there (of ended processes only)
        clean_stale_partials(os.path.dirname(path))
        if os.path.isdir(path):
            clean_stale_partials(path)
    return [path for _, path in checked]
