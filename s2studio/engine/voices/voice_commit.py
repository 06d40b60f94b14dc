"""Writing several files of one voice as one unit (a small redo log).

A voice is three files (``.s2voice``, sidecar, reference clip) and no file system renames
three files at once. So a replace goes:

1. every new file is written in full and fsynced under a hidden staging name beside its
   target, ``.<name>.s2stage-<pid>.<random>.part``;
2. a commit record ``.<id>.commit.json`` listing (staging file -> target) renames and the
   files to remove is written atomically: from this moment the replace is decided;
3. the renames and removals are carried out, then the record is removed.

A crash before 2 leaves the old files untouched; the staging files of a process that no longer
exists are swept (:func:`sweep_staged_files`). A crash after 2 is finished by whoever next
opens the folder (:func:`finish_pending_commits`): each step can be repeated, by two
processes at once too (a rename whose source is gone was already done).

A record only ever renames one of our staging files onto the voice file beside it and removes
voice files in the folder; anything else in a record (hand-made, or from an untrusted upload)
is ignored and the record removed.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
from pathlib import Path

from s2studio.audio.atomic_file import (
    UnreadableFileError,
    atomic_output,
    fsync_folder,
    read_regular_file,
    remove_quietly,
    resolve_output_path,
)

COMMIT_SUFFIX = ".commit.json"
MAX_RECORD_BYTES = 1 << 20
VOICE_FILE_SUFFIXES = (".s2voice", ".json", ".ref.wav")

_COMMIT_RE = re.compile(r"^\.(.+)\.commit\.json$")
_STAGE_RE = re.compile(r"^\.(.+)\.s2stage-(\d+)\.[A-Za-z0-9_]{8}\.part$")


def commit_record_path(folder: Path, voice_id: str) -> Path:
    return folder / f".{voice_id}{COMMIT_SUFFIX}"


def commit_files(folder: Path, record: Path, files: dict[str, bytes], remove: list[str]) -> None:
    """Write ``files`` (name in ``folder`` -> bytes) and remove the names in ``remove``, as one unit.

    Each file goes to its real path: a voice file that is a symlink is updated at its target
    (staged beside the target, so the rename stays on one file system), and one that is a
    pipe, device or socket is refused (OutputPathError) before anything is written."""
    targets = {name: resolve_output_path(folder / name) for name in files}
    staged: list[tuple[str, str]] = []
    try:
        for name, data in files.items():
            staged.append((_stage(targets[name], data), targets[name]))
        with atomic_output(str(record)) as fh:
            fh.write(json.dumps({"moves": staged, "remove": remove}).encode("utf-8"))
    except BaseException:
        for temp, _target in staged:
            remove_quietly(temp)
        raise
    # From here on the replace is decided: whatever stops us, the next start finishes it.
    apply_commit(folder, record)


def _stage(target: str, data: bytes) -> str:
    """Write ``data`` fully (fsynced) to a staging file beside ``target``; return its path."""
    directory, name = os.path.split(target)
    fd, path = tempfile.mkstemp(prefix=f".{name}.s2stage-{os.getpid()}.", suffix=".part", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            if os.name == "posix":
                os.fchmod(fh.fileno(), _mode_for(target))
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        remove_quietly(path)
        raise
    return path


def _mode_for(target: str) -> int:
    try:
        return stat.S_IMODE(os.stat(target).st_mode)  # a replaced file keeps its mode
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def apply_commit(folder: Path, record: Path) -> None:
    """Carry out a commit record; safe to repeat and to run from two processes at once."""
    try:
        plan = json.loads(read_regular_file(record, MAX_RECORD_BYTES, what="commit record").decode("utf-8"))
        moves = [(str(t), str(f)) for t, f in plan["moves"]]
        removals = [str(n) for n in plan.get("remove", [])]
    except FileNotFoundError:
        return  # someone else finished it
    except (OSError, ValueError, KeyError, TypeError, UnreadableFileError):
        remove_quietly(str(record))  # unusable: its staging files get swept
        return
    if not all(_is_our_move(temp, target) for temp, target in moves) or not all(map(_is_voice_file_name, removals)):
        remove_quietly(str(record))  # not written by us: do nothing it asks
        return
    for temp, target in moves:
        try:
            os.replace(temp, target)
        except FileNotFoundError:
            pass  # renamed already (by us before a crash, or by another process)
    for name in removals:
        remove_quietly(str(folder / name))
    remove_quietly(str(record))
    for directory in {str(folder)} | {os.path.dirname(target) for _temp, target in moves}:
        fsync_folder(directory)


def finish_pending_commits(folder: Path) -> None:
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        if _COMMIT_RE.match(name):
            apply_commit(folder, folder / name)


def sweep_staged_files(folder: Path) -> None:
    """Remove staging files whose process is gone. Call after :func:`finish_pending_commits`:
    a staging file a record names is renamed by then."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        m = _STAGE_RE.match(name)
        if m is None or _pid_alive(int(m.group(2))):
            continue
        path = folder / name
        try:
            if stat.S_ISREG(os.lstat(path).st_mode):
                os.unlink(path)
        except OSError:
            pass


def _is_our_move(temp: str, target: str) -> bool:
    """A record only ever renames one of our staging files onto the voice file beside it."""
    m = _STAGE_RE.match(os.path.basename(temp))
    return (
        os.path.isabs(temp)
        and os.path.isabs(target)
        and m is not None
        and m.group(1) == os.path.basename(target)
        and os.path.dirname(temp) == os.path.dirname(target)
        and target.endswith(VOICE_FILE_SUFFIXES)
    )


def _is_voice_file_name(name: str) -> bool:
    """A plain file name in the voice folder (no path) of one of a voice's files."""
    return os.path.basename(name) == name and not name.startswith(".") and name.endswith(VOICE_FILE_SUFFIXES)


def _pid_alive(pid: int) -> bool:
    if os.name != "posix":
        return True  # cannot ask safely (os.kill terminates on Windows): keep the file
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)  # signal 0 only asks whether the process exists
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True
