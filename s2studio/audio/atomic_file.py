"""Write-then-rename helpers so an output file is either complete or absent.

A crash, a full disk or an exception half-way through must never leave a truncated WAV under
the name the user asked for (a player would happily open it and play garbage). So we write to
a hidden temporary file in the *same* directory (``os.replace`` is only atomic within one file
system), fsync it, and rename it over the destination.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from typing import IO, Iterator


def _default_file_mode() -> int:
    # mkstemp creates 0600 files; a user's output should get the usual umask permissions.
    # (os.umask can only be read by setting it; the window is a few instructions.)
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def make_temp_beside(dest: str) -> tuple[int, str]:
    """Create an empty temp file next to ``dest`` with ordinary permissions; return (fd, path)."""
    directory, name = os.path.split(os.path.abspath(dest))
    fd, path = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=directory)
    if os.name == "posix":
        os.fchmod(fd, _default_file_mode())
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


def commit_temp(temp_path: str, dest: str) -> None:
    """Rename a fully written, fsynced temp file over ``dest`` and persist the rename."""
    os.replace(temp_path, dest)
    if os.name == "posix":
        # Without syncing the directory a power cut could lose the rename itself.
        dir_fd = os.open(os.path.dirname(os.path.abspath(dest)), os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        except OSError:
            pass  # some file systems (e.g. network mounts) refuse fsync on directories
        finally:
            os.close(dir_fd)
