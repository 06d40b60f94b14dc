"""Where the app keeps its files, and where its bundled resources are.

The user folders live in ``s2studio/user_folders.py`` (Qt-free, shared with the CLI's
``s2studio models``); they are re-exported here so the app has one place to ask.
"""

from __future__ import annotations

import sys
from pathlib import Path

from s2studio.user_folders import (  # noqa: F401 - re-exported for the app
    APP_NAME,
    config_dir,
    log_dir,
    models_dir,
    projects_dir,
    settings_file,
    voices_dir,
)


def downloads_dir() -> Path:
    """Default folder for downloaded model files: the models folder ``s2studio models`` uses."""
    return models_dir()


def books_dir() -> Path:
    """Book projects made by the Book view's import (one folder per book)."""
    return projects_dir() / "books"


def autosave_dir() -> Path:
    return projects_dir() / "autosave"


def log_file() -> Path:
    return log_dir() / "s2studio.log"


def resource(name: str) -> Path:
    """A file from ``resources/``: the source tree in development, ``sys._MEIPASS`` when frozen."""
    frozen_root = getattr(sys, "_MEIPASS", None)
    root = Path(frozen_root) if frozen_root else Path(__file__).resolve().parents[2]
    return root / "resources" / name
