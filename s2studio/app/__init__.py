"""The desktop app (PySide6). ``run_app()`` opens the studio window.

Importing this package imports nothing heavy: Qt loads in ``run_app`` and torch only on the
inference worker's thread, after the window is on screen.
"""

from __future__ import annotations


def run_app(argv: list[str] | None = None) -> int:
    from s2studio.app.main import run_app as _run

    return _run(argv)


__all__ = ["run_app"]
