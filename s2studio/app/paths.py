"""Where the app keeps its files, and where its bundled resources are.

Config, logs and voices come from ``platformdirs`` (app name ``s2studio``). Tests and portable
installs redirect them with environment variables, so nothing in a test touches the user's
real folders: ``S2STUDIO_CONFIG_DIR``, ``S2STUDIO_LOG_DIR``, ``S2STUDIO_VOICES_DIR``,
``S2STUDIO_PROJECTS_DIR``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

APP_NAME = "s2studio"


def _from_env_or(var: str, default) -> Path:
    value = os.environ.get(var)
    return Path(value) if value else Path(default())


def config_dir() -> Path:
    import platformdirs

    return _from_env_or("S2STUDIO_CONFIG_DIR", lambda: platformdirs.user_config_dir(APP_NAME, appauthor=False))


def log_dir() -> Path:
    import platformdirs

    return _from_env_or("S2STUDIO_LOG_DIR", lambda: platformdirs.user_log_dir(APP_NAME, appauthor=False))


def voices_dir() -> Path:
    import platformdirs

    return _from_env_or(
        "S2STUDIO_VOICES_DIR", lambda: Path(platformdirs.user_data_dir(APP_NAME, appauthor=False)) / "voices"
    )


def downloads_dir() -> Path:
    """Default folder for downloaded model files (large: the user cache, not roaming config)."""
    import platformdirs

    return _from_env_or("S2STUDIO_MODELS_DIR", lambda: Path(platformdirs.user_data_dir(APP_NAME, appauthor=False)) / "models")


def projects_dir() -> Path:
    """Projects the app keeps by itself (the autosave), in the user data folder."""
    import platformdirs

    return _from_env_or("S2STUDIO_PROJECTS_DIR",
                        lambda: Path(platformdirs.user_data_dir(APP_NAME, appauthor=False)) / "projects")


def books_dir() -> Path:
    """Book projects made by the Book view's import (one folder per book)."""
    return projects_dir() / "books"


def autosave_dir() -> Path:
    return projects_dir() / "autosave"


def settings_file() -> Path:
    return config_dir() / "settings.json"


def log_file() -> Path:
    return log_dir() / "s2studio.log"


def resource(name: str) -> Path:
    """A file from ``resources/``: the source tree in development, ``sys._MEIPASS`` when frozen."""
    frozen_root = getattr(sys, "_MEIPASS", None)
    root = Path(frozen_root) if frozen_root else Path(__file__).resolve().parents[2]
    return root / "resources" / name
