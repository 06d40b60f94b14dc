"""A horizontal input level bar (0..1, peak), painted; green → amber → red near clipping."""

from __future__ import annotations

from PySide6.QtCore import QRectF
from PySide6.QtGui import QColor, QPainter, QPalette
from PySide6.QtWidgets import QWidget


class LevelMeter(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setFixedHeight(10)
        self.setMinimumWidth(80)
        self._level = 0.0

    @property
    def level(self) -> float:
        return self._level

    def set_level(self, level: float) -> None:
        level = max(0.0, min(1.0, float(level)))
        if abs(level - self._level) > 1e-3:
            self._level = level
            self.update()

    def paintEvent(self, _event) -> None:
        p = QPainter(self)
        p.fillRect(self.rect(), self.palette().color(QPalette.ColorRole.Base))
        color = QColor("#3bb143") if self._level < 0.7 else QColor("#e8a317") if self._level < 0.95 else QColor("#d7263d")
        p.fillRect(QRectF(0, 0, self.width() * self._level, self.height()), color)
        p.end()
