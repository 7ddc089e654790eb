"""Saving and loading problems and results as .npz files (with a format version).

A model is stored as the tree of its force terms' constructor arguments (each force term remembers
them), so any model built from solver_core classes round-trips; arrays go into the archive, the tree
into a JSON string. A force term is named relative to this package (``models.cloth.Cloth``), so a file
reads the same whatever the package is called where it was saved (``solver_core``, or inside a Blender
extension); a class of another package keeps its full name.
"""
import json
import os
import re
import stat
import tempfile
import zipfile

import numpy as np

from .loop import LoopResult
from .physics.models.base import Term
from .file_locks import lock_held, process_alive
from .problem import LoopProblem

try:
    import fcntl
except ImportError:     # Windows: no flock; a live writer is known by its pid alone
    fcntl = None

FORMAT_VERSION = 1


_PACKAGE = __name__.rpartition(".")[0] + "."


def _term_name(cls):
    """The name a force term class is saved under: relative to this package when it is one of its own."""
    module = cls.__module__
    return f"{module[len(_PACKAGE):] if module.startswith(_PACKAGE) else module}.{cls.__qualname__}"


def _term_classes():
    found, stack = {}, [Term]
    while stack:
        cls = stack.pop()
        found[_term_name(cls)] = cls
        stack.extend(cls.__subclasses__())
    return found


def _encode(value, arrays):
    if isinstance(value, Term):
        args, kwargs = value.init_args
        cls = type(value)
        return {"__term__": _term_name(cls),
                "args": [_encode(a, arrays) for a in args],
                "kwargs": {k: _encode(v, arrays) for k, v in kwargs.items()}}
    if isinstance(value, (list, tuple)):
        return {"__list__": [_encode(v, arrays) for v in value]}
    if isinstance(value, np.ndarray) or (hasattr(value, "__array__") and not np.isscalar(value)):
        key = f"a{len(arrays)}"
        arrays[key] = np.asarray(value)
        return {"__array__": key}
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot save a model argument of type {type(value).__name__}")


def _decode(value, arrays, classes):
    if isinstance(value, dict):
        if "__array__" in value:
            return arrays[value["__array__"]]
        if "__list__" in value:
            return [_decode(v, arrays, classes) for v in value["__list__"]]
        if "__term__" in value:
            # files saved before names were relative hold "solver_core.physics.models...."
            cls = classes.get(value["__term__"]) or classes.get(value["__term__"].rpartition("solver_core.")[2])
            if cls is None:
                raise ValueError(f"unknown force model {value['__term__']!r} in the file")
            return cls(*[_decode(a, arrays, classes) for a in value["args"]],
                       **{k: _decode(v, arrays, classes) for k, v in value["kwargs"].items()})
    return value


# <name>.partial-<pid>-<8 random>.npz (``_write_npz``), or <name>.partial-<pid>.npz of earlier versions
_PARTIAL_NAME = re.compile(r"\.partial-(\d+)(?:-[a-z0-9_]{8})?\.npz$")


def clean_stale_partials(folder):
    """Remove the temporary files of ``_write_npz`` in ``folder`` that no live process writes (the add-on's
    ``files.clean_stale_partials`` rule): only names ``*.partial-<pid>[-<random>].npz``, only when that pid
    has ended here and nobody holds the file's lock. A user's file of another pattern and a live writer's
    file are kept.

    Parameters
    ----------
    folder : str
        The output folder.

    Returns
    -------
    list of str
        The paths removed.
    """
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        match = _PARTIAL_NAME.search(name)
        path = os.path.join(folder, name)
        pid = int(match.group(1)) if match else None
        if pid is None or pid == os.getpid() or process_alive(pid) or lock_held(path):
            continue
        try:
            os.remove(path)         # a file or a link (not followed); a folder of that name stays
        except OSError:
            continue
        removed.append(path)
    return removed


def _write_npz(path, arrays):
    """Write atomically: a new temporary file in the same folder (O_EXCL, an unpredictable name, so no planted
    link redirects it), flushed, given the mode of the file it replaces (a new one: the umask's), then renamed.
    Only a regular file or a new name is replaced: a link, device or FIFO at ``path`` raises ValueError.
    Temporary files of ended writers in the folder are removed first (``clean_stale_partials``)."""
    path = os.path.abspath(path)
    if os.path.lexists(path) and not stat.S_ISREG(os.lstat(path).st_mode):
        raise ValueError(f"{path} is a link or a special file (device, FIFO, socket); results are written as "
                         "regular files only: give the path of a regular file or a new name")
    mask = os.umask(0)
    os.umask(mask)
    mode = stat.S_IMODE(os.stat(path).st_mode) if os.path.exists(path) else 0o666 & ~mask
    clean_stale_partials(os.path.dirname(path))
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=f"{os.path.basename(path)}.partial-{os.getpid()}-",
                               suffix=".npz")
    try:
        with os.fdopen(fd, "wb") as f:
            if fcntl is not None:       # the mark of a live writer until the file is renamed and closed
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            np.savez_compressed(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _read_npz(path, kind):
    """(meta, arrays) of a file saved by ``save_problem`` / ``save_result``; ValueError saying what is wrong."""
    try:
        with np.load(path, allow_pickle=False) as data:
            if not hasattr(data, "files"):
                raise ValueError("a single array")
            arrays = {k: data[k] for k in data.files}
        meta = json.loads(str(arrays.pop("meta")))
    except FileNotFoundError:
        raise
    except (zipfile.BadZipFile, EOFError, OSError) as exc:
        raise ValueError(f"{path} is not a complete .npz file (truncated or damaged: {exc}); save the {kind} "
                         "again") from exc
    except (ValueError, KeyError) as exc:
        raise ValueError(f"{path} is not a {kind} file saved by solver_core (it is another kind of file or has "
                         f"no metadata); give a .npz written by save_{kind} or bake.py") from exc
    if not isinstance(meta, dict) or meta.get("kind") != kind:
        found = meta.get("kind") if isinstance(meta, dict) else None
        raise ValueError(f"{path} holds a {found!r}, not a {kind!r}")
    if meta.get("format_version", 0) > FORMAT_VERSION:
        raise ValueError(f"{path} has format version {meta['format_version']}; this solver reads up to {FORMAT_VERSION}")
    return meta, arrays


def save_problem(path, prob):
    """Save a LoopProblem to ``path``.

    Parameters
    ----------
    path : str or path-like
        The .npz file to write.
    prob : LoopProblem
        The problem: its model (force terms by class name and arrays), time grid, initial conditions and pins.
    """
    arrays = {}
    meta = dict(kind="problem", format_version=FORMAT_VERSION, model=_encode(prob.model, arrays),
                n_frames=prob.n_frames, dt=prob.dt, scheme=prob.scheme, eps0=prob.eps0, eps1=prob.eps1,
                substeps=prob.substeps)
    arrays.update(r0=prob.r0, r1=prob.r1, pins=prob.pins, pin_positions=prob.pin_positions)
    arrays["meta"] = np.array(json.dumps(meta))
    _write_npz(path, arrays)


def load_problem(path):
    """Load a LoopProblem saved by ``save_problem``.

    Parameters
    ----------
    path : str or path-like
        The .npz file.

    Returns
    -------
    LoopProblem
        The problem as saved.

    Raises
    ------
    ValueError
        When the file is not a problem of this format or lacks an entry.
    """
    meta, arrays = _read_npz(path, "problem")
    try:
        model = _decode(meta["model"], arrays, _term_classes())
        return LoopProblem(model, meta["n_frames"], meta["dt"], arrays["r0"], arrays["r1"], scheme=meta["scheme"],
                           eps0=meta["eps0"], eps1=meta["eps1"], pins=arrays["pins"],
                           pin_positions=arrays["pin_positions"], substeps=meta["substeps"])
    except KeyError as exc:
        raise ValueError(f"{path} lacks the problem's {exc} entry; save the problem again") from exc


_RESULT_ARRAYS = ("q", "q_steps", "initial_guess")


def save_result(path, res):
    """Save a LoopResult to ``path``.

    Parameters
    ----------
    path : str or path-like
        The .npz file to write.
    res : LoopResult
        The result: its trajectories as arrays, every other field as JSON.
    """
    fields = {k: v for k, v in res.items() if k not in _RESULT_ARRAYS and not isinstance(v, np.ndarray)}
    meta = dict(kind="result", format_version=FORMAT_VERSION, **fields)
    arrays = {k: res[k] for k in _RESULT_ARRAYS}
    arrays.update({k: v for k, v in res.items() if isinstance(v, np.ndarray) and k not in _RESULT_ARRAYS})
    arrays["meta"] = np.array(json.dumps(meta, default=float))
    _write_npz(path, arrays)


def load_result(path):
    """Load a LoopResult saved by ``save_result``.

    Parameters
    ----------
    path : str or path-like
        The .npz file.

    Returns
    -------
    LoopResult
        The result as saved.

    Raises
    ------
    ValueError
        When the file is not a result of this format.
    """
    meta, arrays = _read_npz(path, "result")
    meta.pop("kind"), meta.pop("format_version")
    return LoopResult(**arrays, **meta)
