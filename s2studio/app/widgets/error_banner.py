"""Inline banners: an error (with Details: traceback + log file) or a plain notice.

Errors the user can fix (a bad model file, silent audio) are sentences in a banner, not modal
dialogs: the app stays usable and the message stays visible while they fix it.
Each message records its *cause* (e.g. "clip", "engine"): whoever fixes that cause calls
``dismiss(cause)``, so a banner goes as soon as its problem does, and a fix for one problem never
hides the message about another.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
)

from s2studio.app.requests import WorkerError
from s2studio.app.widgets.wrapping_label import WrappingLabel

_STYLES = {
    "error": "background:#f8d7da; color:#58151c; border:1px solid #f1aeb5; border-radius:4px;",
    "notice": "background:#fff3cd; color:#664d03; border:1px solid #ffe69c; border-radius:4px;",
}


class Banner(QFrame):
    def __init__(self, kind: str = "error", parent=None):
        super().__init__(parent)
        self.kind = kind
        self.setObjectName(f"{kind}_banner")
        self.setStyleSheet(f"QFrame#{kind}_banner {{{_STYLES[kind]}}} QLabel {{color: inherit; border: none;}}")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 6, 6, 6)
        self.label = WrappingLabel()
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.label, 1)
        self.details_button = QPushButton("Details…")
        self.details_button.clicked.connect(self.show_details)
        layout.addWidget(self.details_button)
        close = QPushButton("✕")
        close.setFlat(True)
        close.setFixedWidth(28)
        close.setToolTip("Dismiss")
        close.clicked.connect(self.hide)
        layout.addWidget(close)
        self.error: WorkerError | None = None
        self.cause = ""
        self.hide()

    @property
    def text(self) -> str:
        return self.label.text()

    def show_message(self, text: str, cause: str = "") -> None:
        self.error = None
        self.cause = cause
        self.label.setText(text)
        self.details_button.hide()
        self.show()

    def show_error(self, error: WorkerError, cause: str = "") -> None:
        self.error = error
        self.cause = cause
        self.label.setText(error.message)
        self.details_button.setVisible(bool(error.details))
        self.show()

    def dismiss(self, cause: str) -> None:
        """Hide the banner if what it shows was caused by ``cause`` (which has just gone)."""
        if self.cause == cause:
            self.hide()

    def show_details(self) -> None:
        if self.error is not None:
            ErrorDetailsDialog(self.error, self.window()).exec()


class ErrorDetailsDialog(QDialog):
    def __init__(self, error: WorkerError, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Error details")
        self.resize(720, 420)
        layout = QVBoxLayout(self)
        summary = QLabel(error.message)
        summary.setWordWrap(True)
        layout.addWidget(summary)
        self.trace = QPlainTextEdit(error.details)
        self.trace.setReadOnly(True)
        self.trace.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        layout.addWidget(self.trace, 1)
        if error.log_file:
            log_label = QLabel(f"Log file: {error.log_file}")
            log_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            layout.addWidget(log_label)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        copy = buttons.addButton("Copy", QDialogButtonBox.ButtonRole.ActionRole)
        copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(f"{error.message}\n\n{error.details}"))
        if error.log_file:
            folder = buttons.addButton("Open log folder", QDialogButtonBox.ButtonRole.ActionRole)
            folder.clicked.connect(lambda: QDesktopServices.openUrl(
                QUrl.fromLocalFile(str(__import__("pathlib").Path(error.log_file).parent))))
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
