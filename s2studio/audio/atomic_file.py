"""Safe file writes and reads: every output file is complete or absent, and nothing that is
not an ordinary file is ever replaced or read.

Writes: a crash, a full disk or an exception half-way through must never leave a truncated
file under the name the user asked for (a player would happily open it and play garbage). So
we write to a hidden temporary file in the *same* directory (``os.replace`` is only atomic
within one file system), fsync it, and rename it over the destination. Around that:

* the destination is resolved through symlinks first, so ``-o link.wav`` updates the link's
  target (and the temp file lies in the *target's* folder, on the target's file system)
  instead of replacing the link with a file;
* an existing destination that is not a regular file (``/dev/full``, a FIFO, a socket) is
  refused: renaming over it would silently destroy a device node or a pipe someone reads;
* an existing file keeps its permission bits (a 0600 file stays private); a new one gets the
  usual umask permissions;
* temp files are named ``.<name>.s2-<pid>.<random>.part``, or ``.s2-<pid>.<random>.part``
  when the name is too long to carry (a legal final name of up to 255 bytes must still be
  writable); one whose process is gone (killed with SIGKILL, power cut) is removed the next
  time anything is written in that folder.

Reads (:func:`read_regular_file`): ``open()`` on a FIFO blocks until a writer appears and a
sparse 20 GB file would be read whole, so callers state the largest size they accept and the
file is checked (regular, within the size) before a byte is read.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import tempfile
import time
from contextlib import contextmanager
from typing import IO, Iterator

from s2studio.errors import InputError

TEMP_SUFFIX = ".part"
# ".<name>.s2-<pid>.<8 random chars from mkstemp>.part": the pid lets a later run tell a
# temp file whose writer died from one being written right now.
_TEMP_RE = re.compile(r"^\.(?:.+\.)?s2-(\d+)\.[A-Za-z0-9_]{8}\.part$")
# Bytes a temp name adds to the final name: ".", ".s2-", a pid (7 digits at most on Linux,
# 10 elsewhere), ".", 8 random characters and ".part". Past this the name is left out.
_TEMP_OVERHEAD = 1 + 4 + 10 + 1 + 8 + 5
_MAX_NAME_BYTES = 255
# Where a writer's liveness cannot be checked (Windows: os.kill would terminate the process),
# a temp file untouched for this long is taken to be abandoned.
_STALE_AFTER_SECONDS = 24 * 3600


class OutputPathError(InputError):
    """An output path that cannot or must not be written (missing folder, a folder, a device...)."""

    def __init__(self, path: str | os.PathLike[str], problem: str):
        self.path = os.fspath(path)
        self.problem = problem
        super().__init__(f"Output {self.path}: {problem}")


class UnreadableFileError(InputError):
    """A file that must not be read: not a regular file, or larger than the caller allows."""

    def __init__(self, path: str | os.PathLike[str], problem: str):
        self.path = os.fspath(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


# ------------------------------------------------------------------------------ checks


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def resolve_output_path(dest: str | os.PathLike[str]) -> str:
    """The real file a write to ``dest`` goes to: symlinks resolved (a dangling link gives the
    path it points at). Raises :class:`OutputPathError` when that is an existing non-regular
    file; a missing folder is left to the caller (``mkstemp`` raises FileNotFoundError)."""
    dest = os.fspath(dest)
    if not dest:
        raise OutputPathError(dest, "the file name is empty.")
    real = os.path.realpath(dest)
    try:
        st = os.stat(real)
    except (FileNotFoundError, NotADirectoryError):
        return real  # new file (or a missing folder, which check_output_path words)
    except OSError as err:
        raise OutputPathError(dest, f"cannot be checked ({err.strerror or err}).") from None
    if not stat.S_ISREG(st.st_mode):
        kind = _kind(st.st_mode)
        hint = " Give a file name." if kind == "a folder" else " Refusing to replace it; give an ordinary file name."
        raise OutputPathError(dest, f"is {kind}.{hint}")
    return real


def check_output_path(dest: str | os.PathLike[str]) -> str:
    """Check, before any slow work, that ``dest`` can be written: its folder exists and is a
    folder we can create files in, and ``dest`` is not a folder, device, FIFO or socket.
    Returns the resolved path; raises :class:`OutputPathError` with one clear sentence."""
    real = resolve_output_path(dest)
    folder = os.path.dirname(real)
    if not os.path.isdir(folder):
        what = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise OutputPathError(dest, f"the folder {folder} {what}.")
    # Creating (and removing) a file is the only honest test: os.access says yes to root and
    # knows nothing of read-only mounts.
    try:
        fd, probe = tempfile.mkstemp(prefix=temp_prefix(os.path.basename(real)), suffix=TEMP_SUFFIX, dir=folder)
    except OSError as err:
        raise OutputPathError(dest, f"cannot create files in the folder {folder} "
                                    f"({err.strerror or err}).") from None
    os.close(fd)
    remove_quietly(probe)
    return real


# ------------------------------------------------------------------------------ writing


def temp_prefix(name: str) -> str:
    """The start of a temp file's name for final name ``name``: the name itself when the
    result stays within a file name's 255 bytes, else none (the pid and random part suffice)."""
    if len(os.fsencode(name)) + _TEMP_OVERHEAD <= _MAX_NAME_BYTES:
        return f".{name}.s2-{os.getpid()}."
    return f".s2-{os.getpid()}."


def _default_file_mode() -> int:
    # mkstemp creates 0600 files; a user's output should get the usual umask permissions.
    # (os.umask can only be read by setting it; the window is a few instructions.)
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    except OSError:
        return True
    return True


def remove_stale_temp_files(folder: str | os.PathLike[str]) -> list[str]:
    """Remove our temp files (``.<name>.s2-<pid>.<rand>.part``) in ``folder`` whose writing
    process no longer exists; other files are never touched. Returns the removed paths."""
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        m = _TEMP_RE.match(name)
        if m is None:
            continue
        path = os.path.join(folder, name)
        if os.name == "posix":
            if _pid_alive(int(m.group(1))):
                continue
        else:
            try:
                if time.time() - os.lstat(path).st_mtime < _STALE_AFTER_SECONDS:
                    continue
            except OSError:
                continue
        try:
            if stat.S_ISREG(os.lstat(path).st_mode):
                os.unlink(path)
                removed.append(path)
        except OSError:
            pass
    return removed


def make_temp_beside(dest: str) -> tuple[int, str]:
    """Create an empty temp file next to ``dest``'s real file (symlinks resolved), with the
    permissions ``dest`` has (or ordinary ones when it is new); return (fd, temp path).

    Raises :class:`OutputPathError` when ``dest`` is a folder, device, FIFO or socket."""
    real = resolve_output_path(dest)
    directory, name = os.path.split(real)
    remove_stale_temp_files(directory)
    fd, path = tempfile.mkstemp(prefix=temp_prefix(name), suffix=TEMP_SUFFIX, dir=directory)
    if os.name == "posix":
        try:
            try:
                existing = os.stat(real)
            except FileNotFoundError:
                os.fchmod(fd, _default_file_mode())
            else:
                os.fchmod(fd, stat.S_IMODE(existing.st_mode))
                if os.geteuid() == 0 and (existing.st_uid, existing.st_gid) != (0, 0):
                    # root writing a user's file: the file stays theirs
                    os.fchown(fd, existing.st_uid, existing.st_gid)
        except BaseException:
            os.close(fd)
            remove_quietly(path)
            raise
    return fd, path


@contextmanager
def atomic_output(dest: str) -> Iterator[IO[bytes]]:
    """``with atomic_output(path) as fh: fh.write(...)``: the file appears complete under
    ``dest`` when the block ends, or not at all if it raises."""
    fd, temp = make_temp_beside(dest)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        commit_temp(temp, dest)
    except BaseException:
        remove_quietly(temp)
        raise


def remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def fsync_path(path: str) -> None:
    # Read-write: on Windows fsync (_commit) refuses a read-only descriptor.
    fd = os.open(path, os.O_RDWR | getattr(os, "O_BINARY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_folder(folder: str) -> None:
    """Persist renames/unlinks in ``folder`` (without this a power cut can lose a rename)."""
    if os.name != "posix":
        return
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    except OSError:
        pass  # some file systems (e.g. network mounts) refuse fsync on directories
    finally:
        os.close(dir_fd)


def commit_temp(temp_path: str, dest: str) -> None:
    """Rename a fully written, fsynced temp file over ``dest``'s real file (through symlinks)
    and persist the rename."""
    real = resolve_output_path(dest)
    os.replace(temp_path, real)
    fsync_folder(os.path.dirname(real))


# ------------------------------------------------------------------------------ reading


def read_regular_file(path: str | os.PathLike[str], max_bytes: int, *, what: str = "file") -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``max_bytes``.

    Raises FileNotFoundError / IsADirectoryError / other OSError as ``open`` would, and
    :class:`UnreadableFileError` for a FIFO, device or socket (checked *before* opening, and
    opened non-blocking so a FIFO swapped in meanwhile cannot hang us) or a file too large.
    """
    path = os.fspath(path)
    st = os.stat(path)
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    if not stat.S_ISREG(st.st_mode):
        raise UnreadableFileError(path, f"is {_kind(st.st_mode)}, not a {what}.")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnreadableFileError(path, f"is {_kind(st.st_mode)}, not a {what}.")
        if st.st_size > max_bytes:
            raise UnreadableFileError(path, f"is {st.st_size} bytes, larger than any {what} "
                                            f"({max_bytes} bytes at most).")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:  # grew while we read it
                raise UnreadableFileError(path, f"is larger than any {what} ({max_bytes} bytes at most).")
        return b"".join(chunks)
    finally:
        os.close(fd)
