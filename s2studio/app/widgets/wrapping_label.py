"""A word-wrapped label whose minimum height follows its width.

Qt lays out a wrapped ``QLabel`` by its height-for-width only where every parent layout passes
that on; a ``QSplitter`` does not, so inside one the label got the height of a single line and
its text ran over the widgets below it (the Play button over the waveform at the window's
minimum height). Setting the minimum height from the current width makes the layout — and the
window's minimum size — account for the wrapped lines.
"""

from __future__ import annotations

from PySide6.QtCore import QSize
from PySide6.QtWidgets import QLabel, QSizePolicy


class WrappingLabel(QLabel):
    def __init__(self, text: str = "", parent=None):
        super().__init__(text, parent)
        self.setWordWrap(True)
        # exactly as tall as its lines: never handed spare height (a gap under a short note)
        self.setSizePolicy(self.sizePolicy().horizontalPolicy(), QSizePolicy.Policy.Maximum)
        self._no_height_for_width()

    def _no_height_for_width(self) -> None:
        # QLabel turns the flag back on whenever its text changes; the minimum height does its job
        policy = self.sizePolicy()
        if policy.hasHeightForWidth():
            policy.setHeightForWidth(False)
            self.setSizePolicy(policy)

    def setText(self, text: str) -> None:  # noqa: N802 - Qt's name
        super().setText(text)
        self._no_height_for_width()
        self._fit_height()

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        hint = super().sizeHint()
        return QSize(hint.width(), max(self.minimumHeight(), 1)) if self.text() else hint

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit_height()

    def _fit_height(self) -> None:
        width = self.width() if self.width() > 0 else self.sizeHint().width()
        needed = self.heightForWidth(width) if self.text() else 0
        if needed > 0 and needed != self.minimumHeight():
            self.setMinimumHeight(needed)
