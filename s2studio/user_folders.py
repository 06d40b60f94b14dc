"""Where s2studio keeps its files in the user's folders — shared by the app and the CLI.

Config, logs, voices, models and projects come from ``platformdirs`` (app name ``s2studio``).
Tests and portable installs redirect them with environment variables, so nothing in a test
touches the user's real folders: ``S2STUDIO_CONFIG_DIR``, ``S2STUDIO_LOG_DIR``,
``S2STUDIO_VOICES_DIR``, ``S2STUDIO_MODELS_DIR``, ``S2STUDIO_PROJECTS_DIR``.

Qt-free and torch-free: ``s2studio models`` and the model lookup of every CLI command use the
same folders as the app (``app/paths.py`` re-exports these).
"""

from __future__ import annotations

import os
from pathlib import Path

APP_NAME = "s2studio"


def _from_env_or(var: str, default) -> Path:
    value = os.environ.get(var)
    return Path(value) if value else Path(default())


def _user_data_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def config_dir() -> Path:
    import platformdirs

    return _from_env_or("S2STUDIO_CONFIG_DIR", lambda: platformdirs.user_config_dir(APP_NAME, appauthor=False))


def log_dir() -> Path:
    import platformdirs

    return _from_env_or("S2STUDIO_LOG_DIR", lambda: platformdirs.user_log_dir(APP_NAME, appauthor=False))


def voices_dir() -> Path:
    return _from_env_or("S2STUDIO_VOICES_DIR", lambda: _user_data_dir() / "voices")


def models_dir() -> Path:
    """Downloaded model files (large: the user data folder, not roaming config)."""
    return _from_env_or("S2STUDIO_MODELS_DIR", lambda: _user_data_dir() / "models")


def projects_dir() -> Path:
    """Projects the app keeps by itself (the autosave), in the user data folder."""
    return _from_env_or("S2STUDIO_PROJECTS_DIR", lambda: _user_data_dir() / "projects")


def settings_file() -> Path:
    """The app's settings (JSON); its ``model_path`` is also the CLI's default model."""
    return config_dir() / "settings.json"
