"""Which ``.s2voice`` a request names, confined to the server's voice folder.

s2.cpp takes ``voice`` (an id, or a ``.s2voice`` path relative to its working directory) and
``voice_dir`` (any directory) from the client and opens whatever they name. Here both must end
up inside the configured voice folder once symlinks are resolved; anything else is refused
(400), so a client can neither read files elsewhere nor probe the file system.
"""

from __future__ import annotations

import os
from pathlib import Path

from s2studio.engine.voices import InvalidVoiceIdError, VoiceNotFoundError, resolve_voice_path


def _inside(folder: Path, path: Path) -> bool:
    return path == folder or folder in path.parents


def request_voice_dir(root: str | os.PathLike[str], voice_dir: str) -> Path:
    """The folder a request's ``voice_dir`` names: the configured folder or one inside it.

    A relative value is tried first as s2.cpp reads it (from the server's working directory,
    e.g. ``./voices``), then relative to the configured folder."""
    base = Path(os.path.realpath(root))
    if not voice_dir:
        return base
    if "\x00" in voice_dir:
        raise InvalidVoiceIdError("voice_dir is not a valid folder name.")
    candidates = [Path(os.path.realpath(voice_dir))]
    if not os.path.isabs(voice_dir):
        candidates.append(Path(os.path.realpath(base / voice_dir)))
    for candidate in candidates:
        if _inside(base, candidate):
            return candidate
    raise InvalidVoiceIdError(f"voice_dir {voice_dir!r} is outside the server's voice folder.")


def resolve_request_voice(root: str | os.PathLike[str], voice: str, voice_dir: str = "") -> Path:
    """The real path of the voice file a request names (``InvalidVoiceIdError`` when it would
    leave the voice folder, ``VoiceNotFoundError`` when there is no such voice)."""
    folder = request_voice_dir(root, voice_dir)
    root_real = Path(os.path.realpath(root))
    is_path = voice.lower().endswith(".s2voice") or "/" in voice or "\\" in voice
    if is_path and not os.path.isabs(voice):
        # s2.cpp's README sends voice=voices/hope.s2voice, relative to the server's working
        # directory; accept that spelling when it lands inside the voice folder.
        try:
            return resolve_voice_path(root_real, os.path.abspath(voice))
        except (InvalidVoiceIdError, VoiceNotFoundError):
            pass
    if is_path:
        # Paths are always judged against the configured root, never a client-chosen folder.
        return resolve_voice_path(root_real, voice if os.path.isabs(voice) else str(folder / voice))
    path = resolve_voice_path(folder, voice)
    if not _inside(root_real, path.parent):  # an id whose file is a symlink out of the folder
        raise InvalidVoiceIdError(f"The voice {voice!r} is outside the voice folder.")
    return path
