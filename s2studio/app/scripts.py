"""Script files: File ▸ Open script… (.txt or .md) and the recent-scripts list.

A script is plain UTF-8 text; a byte order mark (Notepad adds one) is dropped, Windows line
endings become ``\\n``. Anything else (not UTF-8, a folder, too large, unreadable) is one
``InputError`` sentence naming the file, shown in the error banner.
"""

from __future__ import annotations

import os
from pathlib import Path

from s2studio.audio.atomic_file import UnreadableFileError, read_regular_file
from s2studio.errors import InputError

SCRIPT_EXTENSIONS = (".txt", ".md")
# A script of an hour's speech is ~60 KB; a file this large is not a script (and would freeze the editor).
MAX_SCRIPT_BYTES = 2 << 20


class ScriptFileError(InputError):
    def __init__(self, path: str | os.PathLike[str], problem: str):
        super().__init__(f"The script {os.fspath(path)} {problem}")


def read_script(path: str | os.PathLike[str]) -> str:
    """The text of a .txt/.md script; raises :class:`ScriptFileError` with the reason."""
    p = Path(path)
    if p.suffix.lower() not in SCRIPT_EXTENSIONS:
        raise ScriptFileError(p, f"is not a .txt or .md file (it ends in {p.suffix or 'nothing'}).")
    try:
        raw = read_regular_file(p, MAX_SCRIPT_BYTES, what="script")
    except FileNotFoundError:
        raise ScriptFileError(p, "does not exist (any more).") from None
    except UnreadableFileError as err:
        raise ScriptFileError(p, err.problem) from None
    except OSError as err:
        raise ScriptFileError(p, f"cannot be read ({err.strerror or err}).") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ScriptFileError(p, f"is not UTF-8 text (byte {err.start} cannot be decoded); save it as "
                                 "UTF-8 and open it again.") from None
    if "\0" in text:
        raise ScriptFileError(p, "contains NUL bytes: it is not a text file.")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def remember_script(recent: list[str], path: str | os.PathLike[str], limit: int) -> list[str]:
    """``recent`` with ``path`` first (absolute, once), at most ``limit`` entries."""
    absolute = os.path.abspath(os.fspath(path))
    return [absolute] + [p for p in recent if p != absolute][: max(limit - 1, 0)]


def existing_scripts(recent: list[str]) -> list[str]:
    """The recent scripts that still exist: a moved or deleted file leaves the menu."""
    return [p for p in recent if os.path.isfile(p)]
