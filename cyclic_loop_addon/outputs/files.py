"""Output files: checked before any work starts, written complete or not at all.

``atomic_path`` yields a temporary name inside a private folder (mode 0700, unpredictable name, made with
O_EXCL by ``tempfile.mkdtemp``) next to the target, so no planted file or link can redirect the write and
two outputs of one run never share a temporary name; a .blend, whose relative paths Blender remaps to the
folder it is saved in, gets a new unpredictable file beside the target instead (``tempfile.mkstemp``).
When the block ends the file is flushed to disk, checked (not empty, and for .blend / .abc its header and
end verified), given the mode of the file it replaces and renamed into place; only a regular file or a
new name is replaced: a link, device, FIFO, socket or folder given as an output is refused
(``check_writable``). A failed write (disk full, I/O error, no permission) raises a LoopError naming the
file and the cause and leaves no partial file; a previous file at the path is kept. Files whose writer
aborts the whole process on an I/O error (Blender's Alembic exporter) are written first into this
process's own temporary folder, checked for free space, then copied into place the same way. Inside
``all_or_nothing()`` the renames wait until the block succeeds; each replaced file is kept as a backup until
the outermost block has succeeded, so a rename that fails, an error or a SIGTERM after the renames puts back
every file renamed before it: a run leaves all its outputs complete or every earlier file as it was. Each
private folder or file is locked (flock) while its process lives; the next write into that folder removes
those of ended processes (``clean_stale_partials``). No bpy here.
"""
import atexit
import errno
import os
import re
import shutil
import signal
import stat
import tempfile
import threading
from contextlib import contextmanager

from ..core import sc
from ..errors import LoopInputError, LoopWriteError

try:
    import fcntl
except ImportError:     # Windows: no flock; a live writer is known by its pid alone
    fcntl = None

TEMP_PREFIX = "cyclic_loop_"        # temporary folders: cyclic_loop_<pid>_<random>
PARTIAL = ".partial-"               # private folders beside an output: <name>.partial-<pid>-<random>
# <name>.partial-<pid>-<8 random>[.blend|.npz][.previous|@|1] (this module, Blender's own save, the solver's .npz)
# or <name>.partial-<pid>.<ext> (earlier versions, an output extension only: a user's own
# "notes.partial-2024.txt" is no temporary file)
_PARTIAL_NAME = re.compile(r"\.partial-(\d+)(?:-[a-z0-9_]{8}(?:\.blend|\.npz)?(?:\.previous|@|1)?"
                           r"|\.(?:blend|abc|pc2|png|exr|glb|gltf|html|json|npz))$")
STAGED_EXTENSIONS = (".abc",)       # written by a library that aborts the process on I/O errors
SAME_FOLDER_EXTENSIONS = (".blend",)  # saved with paths relative to its folder: written beside the output
BACKUP = ".previous"                # the replaced file, kept as a hard link until every rename is done
STAGING_RESERVE = 256 * 2 ** 20     # free bytes the temporary folder needs before such a write
CHUNK = 2 ** 20

_CAUSES = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EIO: "an input/output error (a failing disk or a lost network share)",
    errno.EACCES: "no permission to write there",
    errno.EPERM: "no permission to write there",
    errno.EROFS: "the disk is read-only",
    errno.EFBIG: "the file is larger than this system allows (ulimit -f)",
}
_INPUT_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS)   # the user must pick another place: exit 2


def same_path(a, b):
    """True when ``a`` and ``b`` name the same file or folder: the same inode where both exist (hard
    links, symlinks), else the same real path (``..``, symlinked folders)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.normcase(os.path.realpath(a)) == os.path.normcase(os.path.realpath(b))


def special_kind(path):
    """What ``path`` is when it is neither missing, a regular file nor a real folder ("a symbolic link",
    "a device", "a FIFO (named pipe)", "a socket"); None otherwise. Links are not followed."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return None


def refuse_special(path, what="output"):
    """Raise LoopInputError when ``path`` is a symbolic link, a device, a FIFO or a socket: writing it
    would replace that node or write through it into another file."""
    kind = special_kind(path)
    if kind:
        raise LoopInputError(f"the {what} path {path} is {kind}; outputs are written as regular files only: "
                             "give the path of a regular file (or a new name)")


def check_writable(path, what="output", folder_output=False, special=True):
    """The absolute ``path``; raise LoopInputError unless it can be created or replaced.

    Parameters
    ----------
    path : str
        The output's path (a file, or a folder with ``folder_output``).
    what : str
        What messages call the output ("--abc", "the PC2 file").
    folder_output : bool
        The output is a folder (created if missing) rather than a file.
    special : bool
        Refuse a link or special file at ``path`` (the guard does it itself, after saying which input a
        link names).

    Returns
    -------
    str
        The absolute path.
    """
    path = os.path.abspath(path)
    parent = os.path.dirname(path)
    if special:
        refuse_special(path, what)
    if folder_output and os.path.exists(path) and not os.path.isdir(path):
        raise LoopInputError(f"the {what} path {path} is a file; give a folder")
    if not folder_output and os.path.isdir(path):
        raise LoopInputError(f"the {what} path {path} is a folder; give a file name")
    if not os.path.isdir(parent):
        raise LoopInputError(f"cannot write the {what} {path}: folder {parent} does not exist; create it "
                             "or choose another path")
    target = path if folder_output and os.path.isdir(path) else parent
    if not os.access(target, os.W_OK) or (os.path.isfile(path) and not os.access(path, os.W_OK)):
        raise LoopInputError(f"cannot write the {what} {path}: no write permission; choose another folder")
    return path


def _not_written(what, path, cause, tail="", advise=True, cls=LoopWriteError):
    """The error saying the ``what`` at ``path`` was not written because of ``cause`` (``tail`` after
    "Nothing was written there"; ``advise``: say to free space or choose another folder)."""
    advice = "; free some space or choose another folder and run again" if advise else ""
    return cls(f"could not write the {what} {path}: {cause}. Nothing was written there{tail}{advice}")


def _disk_full(path):
    """True when the folder of ``path`` has less than CHUNK bytes free."""
    return shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free < CHUNK


def writer_failure(path, what, exc):
    """The LoopWriteError for a writer that raised ``exc`` (Blender's save or an exporter, whose words
    for a full disk vary with where the write failed): a full disk said as such, else the writer's
    message on one line."""
    text = " ".join(str(exc).split())
    if _disk_full(path) or "No space left on device" in text:
        return _not_written(what, path, "the disk is full")
    return _not_written(what, path, text, advise=False)


def write_failure(path, what, exc, kept):
    """The LoopError for a failed write of ``path`` (OSError ``exc``): permission problems are bad input
    (LoopInputError), a full disk or an I/O error a failed write (LoopWriteError)."""
    cause = _CAUSES.get(exc.errno, exc.strerror or str(exc))
    tail = "; the previous file there is unchanged" if kept else ""
    cls = LoopInputError if exc.errno in _INPUT_ERRNOS else LoopWriteError
    return _not_written(what, path, cause, tail, cls=cls)


def _fsync(path, folder=False):
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if folder else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _tail(path, n):
    with open(path, "rb") as f:
        head = f.read(n)
        f.seek(max(os.path.getsize(path) - n, 0))
        return head, f.read(n)


def verify_blend(path):
    """Raise ValueError unless ``path`` is a complete .blend: plain (BLENDER header, ENDB block at the
    end), zstd (Blender 3.0+: its seek table closes the file) or gzip (read through to its checksum)."""
    head, tail = _tail(path, 64)
    if head.startswith(b"BLENDER"):
        if b"ENDB" not in tail:
            raise ValueError("the file ends before its last block (ENDB)")
    elif head.startswith(b"\x28\xb5\x2f\xfd"):
        if not tail.endswith(b"\xb1\xea\x92\x8f"):
            raise ValueError("the compressed file ends before its seek table")
    elif head.startswith(b"\x1f\x8b"):
        import gzip
        with gzip.open(path, "rb") as f:
            if not f.read(7).startswith(b"BLENDER"):
                raise ValueError("the compressed file is not a .blend")
            while f.read(CHUNK):
                pass
    else:
        raise ValueError("the file does not start like a .blend")


def verify_alembic(path):
    """Raise ValueError unless ``path`` is a finished Alembic (Ogawa) file: header and its frozen flag."""
    head, _ = _tail(path, 8)
    if not head.startswith(b"Ogawa"):
        raise ValueError("the file does not start like an Alembic (Ogawa) archive")
    if head[5:6] != b"\xff":
        raise ValueError("the Alembic archive was not finished")


VERIFIERS = {".blend": verify_blend, ".abc": verify_alembic}


_locks = {}      # private folder or temporary file -> the open descriptor holding its flock while this process lives


def _lock(path):
    """Hold an exclusive flock on ``path`` (a folder or file) until ``_unlock``: the mark of a live writer,
    also for processes of another PID namespace sharing the folder."""
    _unlock(path)
    if fcntl is None:
        return
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    _locks[path] = fd


def _unlock(path):
    fd = _locks.pop(path, None)
    if fd is not None:
        os.close(fd)


def _private_folder(path):
    """A new private folder (0700, locked) beside ``path``: ``<name>.partial-<pid>-<random>``."""
    folder = tempfile.mkdtemp(dir=os.path.dirname(path), prefix=f"{os.path.basename(path)}{PARTIAL}{os.getpid()}-")
    _lock(folder)
    return folder


def _remove_private(folder):
    _unlock(folder)
    shutil.rmtree(folder, ignore_errors=True)


def _temp_name(path):
    """A fresh temporary path for ``path``'s writer (see module): alone in its private folder, or, for a
    .blend (Blender remaps the scene's relative paths to the folder it saves into), a new file beside
    ``path`` made by ``tempfile.mkstemp`` (O_EXCL, unpredictable name, locked):
    ``<name>.partial-<pid>-<random>.blend``."""
    if os.path.splitext(path)[1].lower() not in SAME_FOLDER_EXTENSIONS:
        return os.path.join(_private_folder(path), os.path.basename(path))
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=f"{os.path.basename(path)}{PARTIAL}{os.getpid()}-",
                               suffix=os.path.splitext(path)[1])
    os.close(fd)
    _lock(tmp)
    return tmp


def _discard(tmp):
    """Remove what ``_temp_name`` made for ``tmp``: its private folder, or the file itself and its backup."""
    if os.path.basename(os.path.dirname(tmp)).startswith(os.path.basename(tmp) + PARTIAL):
        _remove_private(os.path.dirname(tmp))
        return
    _unlock(tmp)
    for leftover in (tmp, tmp + BACKUP, tmp + "1", tmp + "@"):     # Blender saves tmp@, keeps the old tmp as tmp1
        if os.path.lexists(leftover):
            os.remove(leftover)


def clean_stale_partials(folder):
    """Remove the temporary files and private folders (``*.partial-<pid>*``) in ``folder`` that no live
    process writes: its pid has ended here and no process (of any PID namespace) holds its lock. Returns
    their paths."""
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        match = _PARTIAL_NAME.search(name)
        path = os.path.join(folder, name)
        pid = int(match.group(1)) if match else None
        if pid is None or pid == os.getpid() or sc.file_locks.process_alive(pid) or sc.file_locks.lock_held(path):
            continue
        try:
            if stat.S_ISDIR(os.lstat(path).st_mode):
                shutil.rmtree(path)
            else:
                os.remove(path)
        except OSError:
            continue
        removed.append(path)
    return removed


def _copy(src, dst):
    with open(src, "rb") as fin, open(dst, "xb") as fout:
        shutil.copyfileobj(fin, fout, CHUNK)


class _Run:
    """The state of one all_or_nothing block: the (tmp, path) renames waiting for its end, the (path, backup)
    renames done (put back if the outermost block fails), and the temporary files to remove at the end."""

    def __init__(self):
        self.waiting, self.done, self.temporaries = [], [], []


_pending = []     # a stack of _Run, one per open all_or_nothing()


def _umask():
    """This process's umask, read without changing it (Linux: /proc), else by setting it back at once."""
    try:
        with open("/proc/self/status") as f:
            return int(next(line.split()[1] for line in f if line.startswith("Umask:")), 8)
    except (OSError, StopIteration, ValueError):
        mask = os.umask(0o022)
        os.umask(mask)
        return mask


def _keep_mode(tmp, path):
    """Give ``tmp`` the permission bits of the regular file at ``path`` it replaces; a new file gets the
    user's umask's (0644 under umask 022), also when its temporary file was made private (mkstemp: 0600)."""
    try:
        mode = stat.S_IMODE(os.lstat(path).st_mode)
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    os.chmod(tmp, mode)


def _replace(tmp, path):
    """Rename ``tmp`` onto ``path``: only onto a regular file or a new name (a link, device or FIFO planted
    at ``path`` since the check is refused, not replaced)."""
    refuse_special(path)
    if os.path.isdir(path):
        raise LoopInputError(f"the output path {path} is a folder; give a file name")
    _keep_mode(tmp, path)
    os.replace(tmp, path)


@contextmanager
def _signals_held():
    """Hold SIGTERM and SIGINT back while files are renamed or put back (delivered when the block ends), so
    a cancelled run stops between whole steps: before the renames, or after them with the backups kept."""
    held = {signal.SIGTERM, signal.SIGINT}
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _put_back(done):
    """Undo the renames ``done`` ((path, backup) in order): each replaced file back from its backup (the
    same inode, bytes, mode and time), each new file removed."""
    for path, backup in reversed(done):
        if backup:
            os.replace(backup, path)
        elif os.path.lexists(path):
            os.remove(path)
    del done[:]


def _commit(waiting, done):
    """Rename every (tmp, path) of ``waiting`` into place, or none: two entries naming one path are
    refused before any rename, and a rename that fails puts back the files renamed before it. Each old
    file is kept as a hard link ``tmp + BACKUP`` in its private folder; ``done`` receives (path, backup)
    of every rename, so that the enclosing all_or_nothing can still put them back."""
    targets = [path for _, path in waiting]
    twice = sorted({p for p in targets if targets.count(p) > 1})
    if twice:
        raise LoopInputError(f"two outputs of this run name the same file {twice[0]}: one would overwrite the "
                             "other. Give each output its own path (the VAT folder holds NAME_pos.png, "
                             "NAME_nrm.png, NAME_pos.exr, NAME_nrm.exr, NAME.json and NAME_mesh.glb)")
    mine = []
    with _signals_held():
        try:
            for tmp, path in waiting:
                backup = None
                if os.path.isfile(path) and not os.path.islink(path):
                    backup = tmp + BACKUP
                    try:
                        os.link(path, backup)
                    except OSError:        # a file system without hard links: no way back for this one
                        backup = None
                _replace(tmp, path)
                mine.append((path, backup))
        except BaseException:
            _put_back(mine)
            raise
    done.extend(mine)


def _finish(tmp, path, what, verify):
    """Flush ``tmp`` to disk, check it, and rename it onto ``path`` (now, or at the end of all_or_nothing)."""
    if not os.path.isfile(tmp) or os.path.getsize(tmp) == 0:
        raise _not_written(what, path, "the writer produced no data", advise=False)
    _fsync(tmp)
    for check in filter(None, (VERIFIERS.get(os.path.splitext(path)[1].lower()), verify)):
        try:
            check(tmp)
        except (ValueError, OSError) as exc:
            cause = "the disk is full" if _disk_full(path) else f"the written file is incomplete ({exc})"
            raise _not_written(what, path, cause) from exc
    if _pending:
        if tmp in _locks:           # a writer that saved by renaming its own file onto tmp: lock the new one
            _lock(tmp)
        _pending[-1].waiting.append((tmp, path))
        return
    _replace(tmp, path)
    _fsync(os.path.dirname(path), folder=True)


def _stamp(path):
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


@contextmanager
def all_or_nothing(outputs=(), report=None, keep=None):
    """Outputs written inside the block appear together when it ends without error; else none of them.

    The renames wait until the block ends. Each replaced file is kept as a backup (a hard link) until the
    outermost block ends: when it fails, also after the renames (an error or a SIGTERM while the report is
    printed), every renamed output is put back from its backup, byte for byte, and every new one removed.
    On an exception the files of ``outputs`` that the block's writers changed in place (not through
    ``atomic_path``) are removed too, and then the (older) ``report``, which no longer matches them; a
    folder output (textures) the block made is removed once the files waiting in it are, one that existed
    is left; ``keep`` (the input .blend) never is. So bad input found before writing anything, a run
    cancelled before or after its renames, or a failed export leaves every earlier file as it was. A farm
    cancelling the task with SIGTERM gets the same (exit status 128 + 15) when this runs on the main thread.

    Parameters
    ----------
    outputs : sequence of str
        The run's output paths (files or folders).
    report : str or None
        The earlier report beside them, removed when an output it describes is removed.
    keep : str or None
        A path among ``outputs`` never removed (the input .blend saved over with ``--overwrite``).
    """
    paths = [p for p in outputs if not keep or os.path.abspath(p) != os.path.abspath(keep)]
    before = {p: _stamp(p) for p in paths}
    main = bool(paths) and threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if main else None
    run, made_folders = _Run(), []
    outer = _pending[-1] if _pending else None
    _pending.append(run)
    ok = False
    try:
        yield
        _commit(run.waiting, run.done)
        for folder in {os.path.dirname(path) for path in (p for _, p in run.waiting)}:
            _fsync(folder, folder=True)
        ok = True
    except BaseException:
        with _signals_held():
            _put_back(run.done)
            changed = [p for p in paths if _stamp(p) not in (None, before[p])]
            removed = [p for p in changed if not os.path.isdir(p)]
            made_folders = [p for p in changed if os.path.isdir(p) and before[p] is None]
            for p in removed:
                os.remove(p)
            if removed and report and os.path.isfile(report):     # a folder made and removed again changed nothing
                os.remove(report)
        raise
    finally:
        _pending.pop()
        run.temporaries += [tmp for tmp, _ in run.waiting]
        if ok and outer is not None:       # the enclosing block decides: keep the backups until it ends
            outer.done += run.done
            outer.temporaries += run.temporaries
        else:
            for tmp in run.temporaries:
                _discard(tmp)
        for folder in made_folders:        # a folder output the block made: gone once its files are
            if not os.listdir(folder):
                os.rmdir(folder)
        if main:
            signal.signal(signal.SIGTERM, previous)


@contextmanager
def atomic_path(path, what="output", verify=None):
    """Yield a temporary path for the writer; afterwards put the finished file at ``path`` (see module).

    ``verify(tmp)`` may raise ValueError / OSError to reject the written file. Any failure removes the
    temporary file and leaves ``path`` as it was.
    """
    path = check_writable(path, what)
    kept = os.path.exists(path)
    clean_stale_partials(os.path.dirname(path))
    staged = tmp = None
    try:
        try:
            tmp = _temp_name(path)
            if os.path.splitext(path)[1].lower() in STAGED_EXTENSIONS:
                staged = os.path.join(temp_folder(), os.path.basename(path))
                yield staged
                _copy(staged, tmp)
            else:
                yield tmp
            _finish(tmp, path, what, verify)
        except OSError as exc:
            raise write_failure(path, what, exc, kept) from exc
    finally:
        waiting = _pending[-1].waiting if _pending else []
        if staged and os.path.exists(staged):
            os.remove(staged)
        if tmp and (tmp, path) not in waiting:
            _discard(tmp)


# ------------------------------------------------------------------------------------------------ temporary folders


def make_temp_folder():
    """A new temporary folder of this process (``cyclic_loop_<pid>_*``), removed at exit; a leftover of a
    killed process is removed by ``clean_stale_temp`` on the next start."""
    folder = tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}_")
    _lock(folder)
    atexit.register(_remove_private, folder)
    return folder


_staging = None


def temp_folder():
    """This process's staging folder, checked for STAGING_RESERVE free bytes."""
    global _staging
    if _staging is None or not os.path.isdir(_staging):
        _staging = make_temp_folder()
    folder = _staging
    free = shutil.disk_usage(folder).free
    if free < STAGING_RESERVE:
        raise LoopWriteError(f"the temporary folder {os.path.dirname(folder)} has only {free / 2 ** 20:.0f} MB "
                             f"free; the Alembic exporter needs {STAGING_RESERVE / 2 ** 20:.0f} MB there to write "
                             "safely. Free some space or point TMPDIR at a disk with room")
    return folder


def clean_stale_temp(root=None):
    """Remove temporary folders (``cyclic_loop_<pid>_*``) whose process has ended; returns their paths.

    A folder whose lock a live process holds (one of another PID namespace, whose pid means nothing
    here) is kept."""
    root = root or tempfile.gettempdir()
    removed = []
    for name in os.listdir(root):
        pid = name[len(TEMP_PREFIX):].split("_", 1)[0]
        path = os.path.join(root, name)
        if (name.startswith(TEMP_PREFIX) and pid.isdigit() and not sc.file_locks.process_alive(int(pid))
                and os.path.isdir(path) and not os.path.islink(path) and not sc.file_locks.lock_held(path)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed
