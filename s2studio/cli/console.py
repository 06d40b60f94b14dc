"""What every command shows in the terminal: one-line argument errors, quiet logging, progress bars.

Every subcommand gets these without doing anything:

* **Argument errors** are one line on stderr and exit code 2 (:class:`OneLineErrorParser`; the
  subparsers ``add_subparsers`` makes are of the parent's class, so a new ``subparsers.add_parser``
  inherits it). ``--help`` still prints the whole usage.
* **Logging** is quiet by default (warnings and errors); ``--verbose`` or ``--log-level
  info|debug`` shows more (:func:`add_log_level` adds both). Log lines go through ``tqdm.write``,
  so they appear above a progress bar instead of inside it.
* **Progress**: :func:`progress_bar` is a ``tqdm`` bar on stderr with percent, elapsed and time
  left, shown only when stderr is a terminal (pipes and logs get the one-line summary only).
"""

from __future__ import annotations

import argparse
import logging
import sys

LOG_LEVELS = ["debug", "info", "warn", "error"]
DEFAULT_LOG_LEVEL = "warn"


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (``error: ...``) naming the command and ``--help``."""

    def error(self, message: str) -> "typing.NoReturn":  # noqa: F821 - the annotation is documentation
        text = " ".join(message.split())  # argparse's messages may wrap
        self.exit(2, f"error: {text} (see: {self.prog} --help)\n")


def add_log_level(parser: argparse.ArgumentParser, *, outermost: bool = False) -> None:
    """``--log-level`` and ``--verbose``; only the top-level parser carries the default, so an
    inner copy never overwrites a value given further out (see ``s2studio/cli/__init__.py``)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--log-level", default=DEFAULT_LOG_LEVEL if outermost else argparse.SUPPRESS,
                       choices=LOG_LEVELS, help=f"logging verbosity (default: {DEFAULT_LOG_LEVEL})")
    group.add_argument("--verbose", dest="log_level", action="store_const", const="info",
                       default=DEFAULT_LOG_LEVEL if outermost else argparse.SUPPRESS,
                       help="show what the engine does (same as --log-level info)")


class TqdmLogHandler(logging.Handler):
    """Writes log records through ``tqdm.write``: a running bar is cleared, the line printed and
    the bar drawn again below it, so the two never share a line."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            from tqdm import tqdm

            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # noqa: BLE001 - logging must never raise
            self.handleError(record)


def setup_logging(level: str) -> None:
    handler = TqdmLogHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.replace("warn", "warning").upper(), logging.WARNING))


def progress_bar(total: float | None, *, description: str = "", unit: str = "it", enabled: bool = True,
                 initial: float = 0, scale_bytes: bool = False):
    """A ``tqdm`` bar on stderr: ``description  42%|████      | 2.4/5.6 GB [00:12<00:16, ...]``.

    Disabled (a silent bar with the same methods) when stderr is not a terminal or ``enabled``
    is False."""
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=description, unit=unit, file=sys.stderr, leave=False,
                disable=not (enabled and sys.stderr.isatty()), dynamic_ncols=True, unit_scale=scale_bytes,
                unit_divisor=1024 if scale_bytes else 1000, mininterval=0.2)


FRAMES_PER_SECOND = 44100 / 2048  # the S2 codec: one frame of 10 codes per 2048 samples
CHARS_PER_SECOND = 15.0  # a rough speaking rate, as the app's estimate (app/widgets/script_editor.py)


class TakeProgress:
    """A take's progress bar: percent of the frames expected, elapsed, time left.

    A segment's length is known only when the model ends it, so it is estimated from its text
    (``CHARS_PER_SECOND``, capped at the frame budget); each finished segment replaces its estimate
    with what it really took, and the rest are scaled by the same ratio. The bar is in frames;
    ``tqdm`` derives the time left from the measured rate."""

    def __init__(self, segment_texts: list[str], max_frames: int, *, enabled: bool = True):
        self.max_frames = max(1, max_frames)
        self.expected = [self._guess(t) for t in segment_texts] or [float(self.max_frames)]
        self.taken: dict[int, int] = {}  # finished segment -> frames
        self.current, self.current_frames = 0, 0
        self.bar = progress_bar(round(sum(self.expected)), description="speaking", unit="frame", enabled=enabled)

    def _guess(self, text: str) -> float:
        return float(min(self.max_frames, max(4.0, len(text.strip()) / CHARS_PER_SECOND * FRAMES_PER_SECOND)))

    def update(self, chunk) -> None:
        if chunk.segment != self.current:
            self.taken[self.current] = self.current_frames
            self.current, self.current_frames = chunk.segment, 0
        self.current_frames += chunk.frame_count
        if self.bar.disable:
            return
        done = [(self.taken[i], self.expected[i]) for i in self.taken if i < len(self.expected)]
        scale = sum(f for f, _ in done) / max(1.0, sum(e for _, e in done)) if done else 1.0
        later = sum(min(self.max_frames, e * scale) for e in self.expected[self.current + 1:])
        now = max(self.current_frames + 1, min(self.max_frames, self.expected[min(self.current,
                                                                                   len(self.expected) - 1)] * scale))
        self.bar.total = round(sum(self.taken.values()) + now + later)
        self.bar.set_description_str(f"segment {chunk.segment + 1}/{chunk.segment_count}")
        self.bar.update(chunk.frame_count)

    def close(self) -> None:
        self.bar.close()
