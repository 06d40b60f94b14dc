"""A small JSON file of per-machine measurement verdicts (codec placement, CPU kernel choice):
``{"version": N, "entries": {key: {...}}}``, read leniently and written atomically."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform

log = logging.getLogger(__name__)


def machine_key(*parts: str) -> str:
    """A short hash naming this machine (host, CPU, core count) plus ``parts`` (versions,
    threads, devices...): a verdict measured under other conditions is not reused."""
    ident = [platform.node(), platform.machine(), platform.processor(), str(os.cpu_count()), *parts]
    return hashlib.sha256("\n".join(ident).encode()).hexdigest()[:32]


def cache_dir() -> str:
    """$S2STUDIO_CACHE_DIR (tests, portable installs), else the user's cache folder."""
    env = os.environ.get("S2STUDIO_CACHE_DIR")
    if env:
        return env
    import platformdirs

    return platformdirs.user_cache_dir("s2studio")


def read_entry(path: str, version: int, key: str) -> dict | None:
    """The entry, or None when the file is missing, damaged, of another version or lacks it."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        entry = data["entries"][key] if data.get("version") == version else None
        return entry if isinstance(entry, dict) else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def write_entry(path: str, version: int, key: str, entry: dict) -> None:
    """Add or replace one entry (temp file + os.replace, so a crash never leaves half a file).
    A cache that cannot be written is only logged: the next start measures again."""
    try:
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
            if data.get("version") != version or not isinstance(data.get("entries"), dict):
                raise ValueError
        except (OSError, ValueError, AttributeError):
            data = {"version": version, "entries": {}}
        data["entries"][key] = entry
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1)
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("could not write the cache %s: %s", path, exc)
