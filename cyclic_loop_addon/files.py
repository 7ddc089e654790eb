"""Output files: checked before any work starts, written under a temporary name and renamed into place."""
import os
from contextlib import contextmanager

from .errors import LoopInputError


def check_writable(path, what="output"):
    """The absolute ``path``; raise LoopInputError unless it can be created or replaced."""
    path = os.path.abspath(path)
    folder = os.path.dirname(path)
    if os.path.isdir(path):
        raise LoopInputError(f"the {what} path {path} is a folder; give a file name")
    if not os.path.isdir(folder):
        raise LoopInputError(f"cannot write the {what} {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise LoopInputError(f"cannot write the {what} {path}: no write permission")
    return path


@contextmanager
def atomic_path(path, what="output"):
    """Yield a temporary path next to ``path`` (same extension); rename it onto ``path`` on success.

    On any failure the temporary file is removed and ``path`` is left as it was.
    """
    path = check_writable(path, what)
    root, ext = os.path.splitext(path)
    tmp = f"{root}.partial-{os.getpid()}{ext}"
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
