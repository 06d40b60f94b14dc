"""The window as it was left: its geometry and splitters, kept in the settings (hex of Qt's
``saveGeometry`` / ``QSplitter.saveState``) and restored at start."""

from __future__ import annotations

import logging

from PySide6.QtCore import QByteArray

from s2studio.app.settings import AppSettings

log = logging.getLogger(__name__)


def _splitters(window) -> tuple:
    return (window.main_splitter, window.script_splitter)


def restore(window, settings: AppSettings) -> None:
    try:
        if settings.window_geometry:
            window.restoreGeometry(QByteArray(bytes.fromhex(settings.window_geometry)))
        for splitter, state in zip(_splitters(window), settings.splitter_states):
            if isinstance(state, str) and state:
                splitter.restoreState(QByteArray(bytes.fromhex(state)))
    except ValueError:  # a hand-edited settings file: the default layout
        log.warning("the window state in the settings is not usable; using the default layout")


def remember(window, settings: AppSettings) -> None:
    settings.window_geometry = bytes(window.saveGeometry().data()).hex()
    settings.splitter_states = [bytes(sp.saveState().data()).hex() for sp in _splitters(window)]
