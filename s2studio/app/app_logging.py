"""File logging for the app: ``<user_log_dir>/s2studio.log``, rotated, set up once at start.

The path is shown in every error's Details view, so a user can attach it to a bug report.
"""

from __future__ import annotations

import logging
import logging.handlers
import sys
from pathlib import Path

from s2studio.app import paths

_FORMAT = "%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s"


def setup_file_logging(level: int = logging.INFO) -> Path | None:
    """Attach a rotating file handler to the root logger; returns the log file (None if the
    folder cannot be created: the app still runs, it just logs to stderr)."""
    path = paths.log_file()
    root = logging.getLogger()
    root.setLevel(level)
    for handler in root.handlers:
        if isinstance(handler, logging.handlers.RotatingFileHandler) and Path(handler.baseFilename) == path:
            return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(path, maxBytes=2_000_000, backupCount=3, encoding="utf-8")
    except OSError as err:
        logging.getLogger(__name__).warning("cannot write the log file %s: %s", path, err)
        return None
    handler.setFormatter(logging.Formatter(_FORMAT))
    root.addHandler(handler)
    # A console copy only when running from a terminal (a frozen windowed app has no stderr).
    if not getattr(sys, "frozen", False) and sys.stderr is not None and not any(
        type(h) is logging.StreamHandler for h in root.handlers
    ):
        console = logging.StreamHandler(sys.stderr)
        console.setLevel(logging.WARNING)
        console.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(console)
    return path
