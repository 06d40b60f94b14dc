"""File logging for the app: ``<user_log_dir>/s2studio.log``, rotated, set up once at start.

The path is shown in every error's Details view, so a user can attach it to a bug report.
A native crash (a segfault or abort in Qt, torch or numba) kills the process before any Python
logging runs, so ``faulthandler`` writes the Python stack of every thread into the same file
at that moment: the log then ends with the trace instead of just stopping.
"""

from __future__ import annotations

import faulthandler
import logging
import logging.handlers
import sys
from pathlib import Path

from s2studio.app import paths

_FORMAT = "%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s"

# The file object faulthandler writes to: it must stay open for the life of the process.
_crash_file = None


def _enable_crash_traces(path: Path) -> None:
    """Point faulthandler at ``path`` through its own append-mode descriptor (the logging
    handler's stream is closed and reopened at every rollover, which would leave faulthandler
    writing to a dead descriptor)."""
    global _crash_file
    try:
        new = open(path, "a", encoding="utf-8")  # noqa: SIM115 - kept open on purpose
    except OSError:
        return
    faulthandler.enable(file=new, all_threads=True)
    old, _crash_file = _crash_file, new
    if old is not None:
        old.close()


def _disable_crash_traces() -> None:
    global _crash_file
    faulthandler.disable()
    if _crash_file is not None:
        _crash_file.close()
        _crash_file = None


class _CrashTracingFileHandler(logging.handlers.RotatingFileHandler):
    """A rotating log file that keeps faulthandler writing to the current file."""

    def doRollover(self) -> None:
        # Windows cannot rename a file that another descriptor holds open: let go of it first.
        _disable_crash_traces()
        try:
            super().doRollover()
        finally:
            _enable_crash_traces(Path(self.baseFilename))


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
        handler = _CrashTracingFileHandler(path, maxBytes=2_000_000, backupCount=3, encoding="utf-8")
    except OSError as err:
        logging.getLogger(__name__).warning("cannot write the log file %s: %s", path, err)
        return None
    handler.setFormatter(logging.Formatter(_FORMAT))
    root.addHandler(handler)
    _enable_crash_traces(path)
    # A console copy only when running from a terminal (a frozen windowed app has no stderr).
    if not getattr(sys, "frozen", False) and sys.stderr is not None and not any(
        type(h) is logging.StreamHandler for h in root.handlers
    ):
        console = logging.StreamHandler(sys.stderr)
        console.setLevel(logging.WARNING)
        console.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(console)
    return path
