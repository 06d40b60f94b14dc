"""A painted waveform: peaks per pixel column, an optional playhead and selection.

The time axis spans ``max(audio length, min_seconds)``, so live output visibly grows from
the left instead of being rescaled to full width on every chunk. Peaks are recomputed only
when the audio or the width changes, never in ``paintEvent``.

A selectable view is also a keyboard control (trimming must not need a mouse): ←/→ move the
start handle, Shift+←/→ the end handle, by a tenth of a second (Ctrl: a whole second);
Home/End put the start/end back at the clip's edges.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QPainter, QPalette, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from s2studio.app.peaks import peak_buckets


KEY_STEP_SECONDS = 0.1
KEY_BIG_STEP_SECONDS = 1.0


class WaveformView(QWidget):
    selection_changed = Signal(object)  # (start, end) in samples, or None
    seek_requested = Signal(int)  # sample

    def __init__(self, parent=None, *, selectable: bool = False, placeholder: str = ""):
        super().__init__(parent)
        self.setMinimumHeight(70)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.selectable = selectable
        if selectable:
            self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.placeholder = placeholder
        self.sample_rate = 44100
        self.min_seconds = 0.0
        self._pieces: list[np.ndarray] = []
        self._samples = np.zeros(0, np.float32)
        self._dirty = False
        self._mins = self._maxs = np.zeros(0, np.float32)
        self._playhead: int | None = None
        self._selection: tuple[int, int] | None = None
        self._drag_from: int | None = None

    # ---- data -------------------------------------------------------------------------------
    def set_audio(self, samples: np.ndarray | None, sample_rate: int = 44100) -> None:
        self.sample_rate = sample_rate
        self._pieces = [] if samples is None else [np.asarray(samples, np.float32)]
        self._dirty = True
        self._selection = None
        self._playhead = None
        self._rebuild()

    def append(self, samples: np.ndarray) -> None:
        self._pieces.append(np.asarray(samples, np.float32))
        self._dirty = True
        self._rebuild()

    def clear(self) -> None:
        self.set_audio(None)

    @property
    def samples(self) -> np.ndarray:
        if self._dirty:
            self._samples = np.concatenate(self._pieces) if self._pieces else np.zeros(0, np.float32)
            self._pieces = [self._samples] if len(self._samples) else []
            self._dirty = False
        return self._samples

    @property
    def sample_count(self) -> int:
        return sum(len(p) for p in self._pieces) if self._dirty else len(self._samples)

    @property
    def duration_seconds(self) -> float:
        return self.sample_count / self.sample_rate if self.sample_rate else 0.0

    @property
    def drawn_columns(self) -> int:
        """How many pixel columns hold waveform (what the user sees growing)."""
        return len(self._maxs)

    # ---- playhead and selection -------------------------------------------------------------
    def set_playhead(self, sample: int | None) -> None:
        if sample != self._playhead:
            self._playhead = sample
            self.update()

    @property
    def playhead(self) -> int | None:
        return self._playhead

    @property
    def selection(self) -> tuple[int, int] | None:
        return self._selection

    def set_selection(self, selection: tuple[int, int] | None) -> None:
        if selection is not None:
            a, b = sorted(int(v) for v in selection)
            a, b = max(0, a), min(self.sample_count, b)
            selection = (a, b) if b - a > 0 else None
        self._selection = selection
        self.selection_changed.emit(selection)
        self.update()

    # ---- geometry ---------------------------------------------------------------------------
    def _span_samples(self) -> int:
        return max(self.sample_count, int(self.min_seconds * self.sample_rate), 1)

    def _x_of(self, sample: int) -> float:
        return sample / self._span_samples() * self.width()

    def _sample_at(self, x: float) -> int:
        return int(max(0.0, min(1.0, x / max(self.width(), 1))) * self._span_samples())

    def _rebuild(self) -> None:
        n = self.sample_count
        columns = int(round(n / self._span_samples() * max(self.width(), 1)))
        self._mins, self._maxs = peak_buckets(self.samples, columns)
        self.update()

    def resizeEvent(self, event) -> None:
        self._rebuild()
        super().resizeEvent(event)

    # ---- mouse ------------------------------------------------------------------------------
    def mousePressEvent(self, event) -> None:
        if event.button() == Qt.MouseButton.LeftButton and self.sample_count:
            self._drag_from = min(self._sample_at(event.position().x()), self.sample_count)

    def mouseMoveEvent(self, event) -> None:
        if self._drag_from is not None and self.selectable:
            here = min(self._sample_at(event.position().x()), self.sample_count)
            self._selection = tuple(sorted((self._drag_from, here))) if here != self._drag_from else None
            self.update()

    def mouseReleaseEvent(self, event) -> None:
        if self._drag_from is None:
            return
        here = min(self._sample_at(event.position().x()), self.sample_count)
        start, self._drag_from = self._drag_from, None
        if self.selectable and abs(here - start) > self.sample_rate * 0.05:
            self.set_selection((start, here))
        else:
            self.seek_requested.emit(here)

    # ---- keyboard -----------------------------------------------------------------------------
    def keyPressEvent(self, event) -> None:
        n = self.sample_count
        key, mods = event.key(), event.modifiers()
        if not (self.selectable and n) or key not in (Qt.Key.Key_Left, Qt.Key.Key_Right, Qt.Key.Key_Home,
                                                       Qt.Key.Key_End):
            super().keyPressEvent(event)
            return
        start, end = self._selection or (0, n)
        if key == Qt.Key.Key_Home:
            start = 0
        elif key == Qt.Key.Key_End:
            end = n
        else:
            seconds = KEY_BIG_STEP_SECONDS if mods & Qt.KeyboardModifier.ControlModifier else KEY_STEP_SECONDS
            step = int(round(seconds * self.sample_rate)) * (1 if key == Qt.Key.Key_Right else -1)
            gap = max(1, int(KEY_STEP_SECONDS * self.sample_rate))  # handles never cross or meet
            if mods & Qt.KeyboardModifier.ShiftModifier:
                end = min(n, max(start + gap, end + step))
            else:
                start = max(0, min(end - gap, start + step))
        self.set_selection(None if (start, end) == (0, n) else (start, end))
        event.accept()

    def focusInEvent(self, event) -> None:
        self.update()
        super().focusInEvent(event)

    def focusOutEvent(self, event) -> None:
        self.update()
        super().focusOutEvent(event)

    # ---- painting ---------------------------------------------------------------------------
    def paintEvent(self, _event) -> None:
        p = QPainter(self)
        pal = self.palette()
        p.fillRect(self.rect(), pal.color(QPalette.ColorRole.Base))
        h = self.height()
        mid = h / 2
        accent = pal.color(QPalette.ColorRole.Highlight)
        if self._selection is not None:
            a, b = (self._x_of(v) for v in self._selection)
            shade = QColor(accent)
            shade.setAlpha(60)
            p.fillRect(QRectF(a, 0, b - a, h), shade)
        if len(self._maxs):
            p.setPen(QPen(accent, 1))
            scale = (h / 2 - 2)
            for x, (lo, hi) in enumerate(zip(self._mins, self._maxs)):
                p.drawLine(QPointF(x + 0.5, mid - float(hi) * scale), QPointF(x + 0.5, mid - float(lo) * scale))
            p.setPen(QPen(pal.color(QPalette.ColorRole.Mid), 1))
            p.drawLine(QPointF(0, mid), QPointF(self.width(), mid))
        else:  # no zero line here: it would strike through the placeholder text
            p.setPen(pal.color(QPalette.ColorRole.PlaceholderText))
            # wrapped: in a narrow panel a single line was cut off at both ends
            p.drawText(self.rect().adjusted(6, 4, -6, -4),
                       Qt.AlignmentFlag.AlignCenter | Qt.TextFlag.TextWordWrap, self.placeholder)
        if self._playhead is not None:
            x = self._x_of(self._playhead)
            p.setPen(QPen(pal.color(QPalette.ColorRole.Text), 2))
            p.drawLine(QPointF(x, 0), QPointF(x, h))
        if self.hasFocus():  # a plain frame in the accent colour: the style's dotted one is too faint here
            p.setPen(QPen(accent, 2))
            p.setBrush(Qt.BrushStyle.NoBrush)
            p.drawRect(QRectF(1, 1, self.width() - 2, h - 2))
        p.end()
