"""A one-line label that cuts a long text with "…" where it no longer fits, and shows the
whole text as its tooltip.

A plain QLabel clips a long line mid-word ("…Generate ma", "23 ms,") and gives no way to read
the rest; this one ends in an ellipsis, the tooltip has it all, and its width never sets the
window's minimum width (a long take title once made the page scroll sideways).
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QLabel, QSizePolicy


class ElidedLabel(QLabel):
    def __init__(self, text: str = "", parent=None):
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setMinimumWidth(1)
        self.setText(text)

    def setText(self, text: str) -> None:  # noqa: N802 (Qt's name)
        super().setText(text)
        self.setToolTip(text)  # the whole line, whatever the width

    def shown_text(self) -> str:
        """What is painted: the text, or its start and "…" when it does not fit."""
        width = self.contentsRect().width()
        return self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, max(width, 0))

    def is_elided(self) -> bool:
        return self.shown_text() != self.text()

    def paintEvent(self, _event) -> None:  # noqa: N802
        painter = QPainter(self)
        painter.setPen(self.palette().color(self.foregroundRole()))
        painter.drawText(self.contentsRect(), int(self.alignment() | Qt.AlignmentFlag.AlignVCenter), self.shown_text())
