"""Measures how responsive the UI thread's event loop is: a 10 ms QTimer notes the longest
gap between its ticks. A model load or decode on the UI thread would show up as a gap of
seconds; the tests and ``benchmarks/ui_latency.py`` use it."""

from __future__ import annotations

import time

from PySide6.QtCore import QObject, QTimer


class EventLoopHeartbeat(QObject):
    def __init__(self, interval_ms: int = 10, parent=None):
        super().__init__(parent)
        self.interval_ms = interval_ms
        self._timer = QTimer(self)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self._tick)
        self._last = 0.0
        self.gaps: list[float] = []

    def start(self) -> None:
        self.gaps.clear()
        self._last = time.perf_counter()
        self._timer.start()

    def stop(self) -> None:
        self._timer.stop()

    def _tick(self) -> None:
        now = time.perf_counter()
        self.gaps.append(now - self._last)
        self._last = now

    @property
    def worst_gap(self) -> float:
        return max(self.gaps, default=0.0)

    def percentile(self, q: float) -> float:
        if not self.gaps:
            return 0.0
        ordered = sorted(self.gaps)
        return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]
