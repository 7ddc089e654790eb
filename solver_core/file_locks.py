"""Whether the writer of a temporary file still lives: by its pid here, or by the flock it holds (a writer
of another PID namespace sharing the folder, whose pid means nothing here). The solver's result files and
the add-on's outputs clean stale temporaries by these two tests."""
import os

try:
    import fcntl
except ImportError:     # Windows: no flock; a live writer is known by its pid alone
    fcntl = None


def process_alive(pid):
    """True when a process ``pid`` runs here (or exists but belongs to another user).

    Parameters
    ----------
    pid : int
        The process id.

    Returns
    -------
    bool
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lock_held(path):
    """True when a live process holds the flock of ``path`` (a file or folder); False when it can be taken.

    Parameters
    ----------
    path : str
        The file or folder (a link is not followed).

    Returns
    -------
    bool
    """
    if fcntl is None:
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
