"""A layout that places its items in rows and wraps to the next row when the width runs out.

Used for the script editor's tag palette: ten tag buttons on one row made the window at least
1018 px wide, wider than a laptop screen at 200 % scaling. Wrapping lets the window shrink.
"""

from __future__ import annotations

from PySide6.QtCore import QPoint, QRect, QSize, Qt
from PySide6.QtWidgets import QLayout, QSizePolicy, QWidget


class FlowLayout(QLayout):
    def __init__(self, parent=None, spacing: int = 2):
        super().__init__(parent)
        self._items = []
        self.setContentsMargins(0, 0, 0, 0)
        self.setSpacing(spacing)

    # ---- QLayout's item bookkeeping --------------------------------------------------------
    def addItem(self, item) -> None:  # noqa: N802 - Qt's names
        self._items.append(item)

    def count(self) -> int:
        return len(self._items)

    def itemAt(self, index: int):  # noqa: N802
        return self._items[index] if 0 <= index < len(self._items) else None

    def takeAt(self, index: int):  # noqa: N802
        return self._items.pop(index) if 0 <= index < len(self._items) else None

    # ---- geometry ---------------------------------------------------------------------------
    def expandingDirections(self) -> Qt.Orientation:  # noqa: N802
        return Qt.Orientation(0)

    def hasHeightForWidth(self) -> bool:  # noqa: N802
        return True

    def heightForWidth(self, width: int) -> int:  # noqa: N802
        return self._arrange(QRect(0, 0, width, 0), move=False)

    def setGeometry(self, rect: QRect) -> None:  # noqa: N802
        super().setGeometry(rect)
        self._arrange(rect, move=True)

    def sizeHint(self) -> QSize:  # noqa: N802
        return self.minimumSize()

    def minimumSize(self) -> QSize:  # noqa: N802
        size = QSize()
        for item in self._items:  # as narrow as the widest item
            size = size.expandedTo(item.minimumSize())
        m = self.contentsMargins()
        return size + QSize(m.left() + m.right(), m.top() + m.bottom())

    def _arrange(self, rect: QRect, move: bool) -> int:
        """Place the items row by row (each centred vertically in its row); returns the height."""
        m = self.contentsMargins()
        area = rect.adjusted(m.left(), m.top(), -m.right(), -m.bottom())
        gap = self.spacing() if self.spacing() >= 0 else self._style_spacing()
        rows: list[list] = [[]]
        x = area.x()
        for item in self._items:
            width = item.sizeHint().width()
            if x + width > area.right() + 1 and rows[-1]:
                rows.append([])
                x = area.x()
            rows[-1].append(item)
            x += width + gap
        y = area.y()
        for row in rows:
            line_height = max((item.sizeHint().height() for item in row), default=0)
            x = area.x()
            for item in row:
                hint = item.sizeHint()
                if move:
                    item.setGeometry(QRect(QPoint(x, y + (line_height - hint.height()) // 2), hint))
                x += hint.width() + gap
            y += line_height + gap
        return max(0, y - gap - rect.y()) + m.bottom()

    def _style_spacing(self) -> int:
        parent = self.parentWidget()
        if parent is None:
            return 4
        return parent.style().layoutSpacing(QSizePolicy.ControlType.PushButton, QSizePolicy.ControlType.PushButton,
                                            Qt.Orientation.Horizontal)


class FlowRow(QWidget):
    """A widget holding a ``FlowLayout`` whose minimum height is that of its wrapped rows.

    Parents that ignore height-for-width (a ``QSplitter``) would otherwise give it one row's
    height and let the wrapped rows overlap the widgets below."""

    def __init__(self, parent=None, spacing: int = 2):
        super().__init__(parent)
        self.flow = FlowLayout(self, spacing)

    def addWidget(self, widget: QWidget) -> None:  # noqa: N802
        self.flow.addWidget(widget)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        needed = self.flow.heightForWidth(self.width())
        if needed != self.minimumHeight():
            self.setMinimumHeight(needed)
