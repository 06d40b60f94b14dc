"""The script editor: text, S2 inline tags from a palette, highlighting, length estimate.

The text comes first in the tab order (it is what the window focuses at start); the tag
palette follows it, and Tab leaves the text box instead of typing a tab.
"""

from __future__ import annotations

import re

from PySide6.QtCore import Signal
from PySide6.QtGui import QColor, QFont, QSyntaxHighlighter, QTextCharFormat
from PySide6.QtWidgets import QLabel, QPlainTextEdit, QToolButton, QVBoxLayout, QWidget

from s2studio.app.widgets.flow_layout import FlowRow

# Inline tags S2 Pro understands (free-form "[...]" works too; these are the common ones).
TAGS = ("[laugh]", "[whisper]", "[pause]", "[excited]", "[sad]", "[angry]", "[emphasis]", "[sigh]",
        "[shouting]", "[chuckle]")
CHARS_PER_SECOND = 15.0  # a rough speaking rate, only for the estimate shown to the user

_TAG_RE = re.compile(r"\[[^\[\]\n]{1,40}\]")
_SPEAKER_RE = re.compile(r"<\|speaker:\d+\|>")


def character_count(text: str) -> int:
    """Characters as a person counts them: spaces at the ends and runs of whitespace (several
    spaces, blank lines) do not count extra — one space between words does, as ElevenLabs does."""
    return len(" ".join(text.split()))


def estimated_seconds(text: str) -> float:
    """Rough speech length: spoken characters / 15 per second (tags and speaker marks excluded)."""
    spoken = _SPEAKER_RE.sub("", _TAG_RE.sub("", text))
    return len(spoken.strip()) / CHARS_PER_SECOND


def describe_estimate(seconds: float) -> str:
    """The estimate in words: "under 1 s" for a word or two (not "about 0 s")."""
    if seconds <= 0:
        return "no speech yet"
    if seconds < 1:
        return "under 1 s of speech (estimate)"
    return f"about {seconds:.0f} s of speech (estimate)"


class TagHighlighter(QSyntaxHighlighter):
    def __init__(self, document):
        super().__init__(document)
        self.tag_format = QTextCharFormat()
        self.tag_format.setForeground(QColor("#8e44ad"))
        self.tag_format.setFontWeight(QFont.Weight.Bold)
        self.speaker_format = QTextCharFormat()
        self.speaker_format.setForeground(QColor("#1f7a8c"))
        self.speaker_format.setBackground(QColor(31, 122, 140, 40))

    def highlightBlock(self, text: str) -> None:
        for m in _TAG_RE.finditer(text):
            self.setFormat(m.start(), m.end() - m.start(), self.tag_format)
        for m in _SPEAKER_RE.finditer(text):
            self.setFormat(m.start(), m.end() - m.start(), self.speaker_format)


class ScriptEditor(QWidget):
    text_changed = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.edit = QPlainTextEdit()
        self.edit.setTabChangesFocus(True)  # a spoken script has no tabs; Tab must move on
        self.edit.setPlaceholderText("Type what the voice should say. Tags like [laugh] or [whisper] shape the "
                                     "delivery; <|speaker:1|> switches speaker.")
        self.edit.setMinimumHeight(60)
        self.highlighter = TagHighlighter(self.edit.document())
        palette_row = FlowRow(spacing=2)  # wraps: the window can be narrower than all the tags
        palette_row.addWidget(QLabel("Insert:"))
        self.tag_buttons: dict[str, QToolButton] = {}
        for tag in TAGS:
            button = QToolButton()
            button.setText(tag)
            button.setToolTip(f"Insert {tag} at the cursor")
            button.clicked.connect(lambda _=False, t=tag: self.insert_tag(t))
            palette_row.addWidget(button)
            self.tag_buttons[tag] = button
        layout.addWidget(palette_row)
        layout.addWidget(self.edit, 1)
        previous = self.edit  # tab order: the text, then the tags (they are laid out above it)
        for button in self.tag_buttons.values():
            QWidget.setTabOrder(previous, button)
            previous = button
        self.stats = QLabel()
        layout.addWidget(self.stats)
        self.edit.textChanged.connect(self._update_stats)
        self.edit.textChanged.connect(self.text_changed)
        self._update_stats()

    def text(self) -> str:
        return self.edit.toPlainText()

    def set_text(self, text: str) -> None:
        self.edit.setPlainText(text)

    def insert_tag(self, tag: str) -> None:
        """``tag`` at the cursor, with one space on each side: none added where the text already
        has one (so no double spaces), none at the start of a line."""
        cursor = self.edit.textCursor()
        text, position = self.text(), cursor.position()
        before = text[position - 1:position] if position else ""
        after = text[position:position + 1]
        cursor.insertText(("" if not before or before.isspace() else " ") + tag
                          + ("" if after.isspace() and after else " "))
        self.edit.setTextCursor(cursor)
        self.edit.setFocus()

    def _update_stats(self) -> None:
        text = self.text()
        self.stats.setText(f"{character_count(text)} characters · {describe_estimate(estimated_seconds(text))}")
