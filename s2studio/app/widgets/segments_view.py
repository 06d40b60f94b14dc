"""The take as its sentences: one row per segment the pipeline speaks, with its chosen version
and lock, and the actions on the selected sentence (play from it, regenerate it alone, step
through or A/B-compare its versions). The sentence being spoken is highlighted during playback.

Before any take exists it previews the script's segments, so what will be generated sentence by
sentence is visible while typing. Widgets only: the TakesController does the work.
"""

from __future__ import annotations

import time

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from s2studio.app.project import ProjectTake
from s2studio.app.seed_text import short_seed
from s2studio.app.widgets.elided_label import ElidedLabel
from s2studio.app.widgets.flow_layout import FlowRow

NUMBER, TEXT, VERSION, LOCK = range(4)
SPOKEN_BRUSH = QBrush(QColor(255, 196, 0, 90))  # readable on light and dark palettes


def version_text(take: ProjectTake, index: int) -> str:
    s = take.sentences[index]
    if s.current is None:
        return "not generated"
    v = s.current
    stopped = " (stopped)" if v.stop_reason == "cancelled" else ""
    return f"{s.chosen + 1} of {len(s.versions)} · {v.seconds:.1f} s{stopped}"


class SegmentsView(QWidget):
    play_from = Signal(int)
    regenerate = Signal(int)
    regenerate_unlocked = Signal()
    lock_toggled = Signal(int, bool)
    version_chosen = Signal(int, int)  # sentence, version index
    compare_requested = Signal(int)  # sentence
    reuse_seed = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.take: ProjectTake | None = None
        self.spoken: int | None = None
        self.busy: set[int] = set()
        self._filling = False
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.title = ElidedLabel("Sentences")  # a long title ends in "…"; the tooltip has it all
        layout.addWidget(self.title)
        self.table = QTableWidget(0, 4)
        self.table.setHorizontalHeaderLabels(["#", "Sentence", "Version", "Lock"])
        self.table.verticalHeader().hide()
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setWordWrap(True)
        # Tab leaves the table (to the next control) instead of walking its every cell; the arrow
        # keys move between sentences
        self.table.setTabKeyNavigation(False)
        # one line of text a row (a long sentence is elided; its tooltip and the script have it
        # all): compact rows show 8+ sentences at the default window size
        self.table.verticalHeader().setDefaultSectionSize(self.table.fontMetrics().lineSpacing() + 8)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(NUMBER, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(TEXT, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(VERSION, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(LOCK, QHeaderView.ResizeMode.ResizeToContents)
        self.table.itemChanged.connect(self._on_item_changed)
        self.table.itemSelectionChanged.connect(self._update_buttons)
        self.table.cellDoubleClicked.connect(lambda row, _col: self.play_from.emit(row))
        layout.addWidget(self.table, 1)
        self.play_button = QPushButton("▶ From here")
        self.play_button.setToolTip("Play the take from the selected sentence (or double-click it)")
        self.play_button.clicked.connect(lambda: self._emit_for_selected(self.play_from))
        self.regenerate_button = QPushButton("↻ Regenerate")
        self.regenerate_button.setToolTip("Generate the selected sentence again with a new seed; the other "
                                          "sentences keep their audio (Ctrl+R)")
        self.regenerate_button.clicked.connect(lambda: self._emit_for_selected(self.regenerate))
        self.previous_button = QPushButton("◀")
        self.previous_button.setToolTip("Use the sentence's previous version")
        self.previous_button.clicked.connect(lambda: self._step_version(-1))
        self.next_button = QPushButton("▶")
        self.next_button.setToolTip("Use the sentence's next version")
        self.next_button.clicked.connect(lambda: self._step_version(+1))
        for b in (self.previous_button, self.next_button):
            b.setMaximumWidth(b.fontMetrics().horizontalAdvance("◀") + 24)
        self.compare_button = QPushButton("A/B…")
        self.compare_button.setToolTip("Compare two versions of the selected sentence and keep one")
        self.compare_button.clicked.connect(lambda: self._emit_for_selected(self.compare_requested))
        self.unlocked_button = QPushButton("Regenerate unlocked")
        self.unlocked_button.setToolTip("Generate every sentence that is not locked again, with new seeds")
        self.unlocked_button.clicked.connect(self.regenerate_unlocked)
        self.seed_button = QPushButton("Reuse seed")
        self.seed_button.setToolTip("Use this take's seed for the next takes (Settings: seed, locked)")
        self.seed_button.clicked.connect(self.reuse_seed)
        # wraps in a narrow window (200 % scaling) instead of widening it
        row = FlowRow(spacing=4)
        for w in (self.play_button, self.regenerate_button, self.previous_button, self.next_button,
                  self.compare_button, self.unlocked_button, self.seed_button):
            row.addWidget(w)
        layout.addWidget(row)
        # keys while the table has focus: Enter plays from the sentence, Ctrl+R regenerates it,
        # Ctrl+L locks or unlocks it, Alt+Left / Alt+Right step through its versions
        for keys, action in (("Return", self.play_button.click), ("Enter", self.play_button.click),
                             ("Ctrl+R", self.regenerate_button.click), ("Ctrl+L", self._toggle_lock),
                             ("Alt+Left", self.previous_button.click), ("Alt+Right", self.next_button.click)):
            QShortcut(QKeySequence(keys), self.table, action, context=Qt.ShortcutContext.WidgetShortcut)
        self.script_differs = False
        self._update_buttons()

    # ---- content --------------------------------------------------------------------------
    def show_preview(self, texts: list[str]) -> None:
        """The script's segments, before a take of it exists."""
        self.take = None
        self.spoken = None
        self.title.setText(f"Script: {len(texts)} sentence(s), each generated on its own" if texts
                           else "Sentences: type a script; each sentence becomes a row here")
        self._fill([(t, "", None) for t in texts])

    def show_take(self, take: ProjectTake | None) -> None:
        if take is None:
            self.show_preview([])
            return
        self.take = take
        stamp = time.strftime("%H:%M:%S", time.localtime(take.created))
        locked = sum(s.locked for s in take.sentences)
        self.title.setText(f"Take of {stamp} · {take.voice_label or 'model voice'} · seed {short_seed(take.base_seed)} · "
                           f"{len(take.sentences)} sentence(s)" + (f", {locked} locked" if locked else "")
                           + (" · the script has changed since: Generate makes a new take" if self.script_differs
                              else ""))
        self.title.setToolTip(f"{self.title.text()}\n(seed {take.base_seed})")  # the whole seed
        self._fill([(s.text, version_text(take, i), s.locked) for i, s in enumerate(take.sentences)])

    def _fill(self, rows: list[tuple[str, str, bool | None]]) -> None:
        selected = self.selected_row()
        self._filling = True
        self.table.setRowCount(len(rows))
        for i, (text, version, locked) in enumerate(rows):
            number = QTableWidgetItem(str(i + 1))
            number.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            shown = text if i not in self.busy else f"{text}  (generating…)"
            cells = [number, QTableWidgetItem(shown), QTableWidgetItem(version), QTableWidgetItem("")]
            cells[TEXT].setToolTip(text)
            if self.take is not None and self.take.sentences[i].current is not None:
                cells[VERSION].setToolTip(f"seed {self.take.sentences[i].current.seed}")
            lock = cells[LOCK]
            if locked is None:
                lock.setFlags(Qt.ItemFlag.ItemIsEnabled)
            else:
                lock.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsUserCheckable | Qt.ItemFlag.ItemIsSelectable)
                lock.setCheckState(Qt.CheckState.Checked if locked else Qt.CheckState.Unchecked)
                lock.setToolTip("Locked sentences keep their audio when the others are regenerated")
            for col, item in enumerate(cells):
                self.table.setItem(i, col, item)
        self.table.resizeRowsToContents()
        self._filling = False
        if selected is not None and selected < len(rows):
            self.table.selectRow(selected)
        self._paint_spoken()
        self._update_buttons()

    def set_busy(self, rows: set[int]) -> None:
        self.busy = set(rows)
        self.show_take(self.take) if self.take is not None else None
        self._update_buttons()

    def set_spoken(self, index: int | None) -> None:
        """Highlight the sentence being spoken (None: none)."""
        if index == self.spoken:
            return
        previous, self.spoken = self.spoken, index
        self._paint_rows([r for r in (previous, index) if r is not None])
        if index is not None and self.table.item(index, TEXT) is not None:
            self.table.scrollToItem(self.table.item(index, TEXT))

    def _paint_spoken(self) -> None:
        if self.spoken is not None:
            self._paint_rows([self.spoken])

    def _paint_rows(self, rows: list[int]) -> None:
        """Only the rows whose highlight changes: a script of hundreds of sentences stays cheap."""
        blocked = self.table.blockSignals(True)  # restyling items is not a change of lock
        try:
            for row in rows:
                on = row == self.spoken
                for col in range(self.table.columnCount()):
                    item = self.table.item(row, col)
                    if item is None:
                        continue
                    item.setBackground(SPOKEN_BRUSH if on else QBrush())
                    font = QFont(item.font())
                    font.setBold(on)
                    item.setFont(font)
        finally:
            self.table.blockSignals(blocked)

    # ---- actions ------------------------------------------------------------------------
    def selected_row(self) -> int | None:
        rows = self.table.selectionModel().selectedRows() if self.table.selectionModel() else []
        return rows[0].row() if rows else None

    def _emit_for_selected(self, signal) -> None:
        row = self.selected_row()
        if row is not None:
            signal.emit(row)

    def _step_version(self, delta: int) -> None:
        row = self.selected_row()
        if self.take is None or row is None:
            return
        s = self.take.sentences[row]
        target = s.chosen + delta
        if 0 <= target < len(s.versions):
            self.version_chosen.emit(row, target)

    def _toggle_lock(self) -> None:
        row = self.selected_row()
        if self.take is not None and row is not None:
            self.lock_toggled.emit(row, not self.take.sentences[row].locked)

    def set_script_differs(self, differs: bool) -> None:
        """The script was edited since the take on screen was made: say so in the title."""
        if differs != self.script_differs:
            self.script_differs = differs
            self.show_take(self.take) if self.take is not None else None

    def _on_item_changed(self, item: QTableWidgetItem) -> None:
        if self._filling or item.column() != LOCK or self.take is None or item.row() >= len(self.take.sentences):
            return
        locked = item.checkState() == Qt.CheckState.Checked
        if locked != self.take.sentences[item.row()].locked:
            self.lock_toggled.emit(item.row(), locked)

    def _update_buttons(self) -> None:
        row = self.selected_row()
        take = self.take
        s = take.sentences[row] if take is not None and row is not None and row < len(take.sentences) else None
        idle = not self.busy
        self.play_button.setEnabled(s is not None and s.current is not None)
        self.regenerate_button.setEnabled(s is not None and not s.locked and idle)
        self.previous_button.setEnabled(s is not None and s.chosen > 0)
        self.next_button.setEnabled(s is not None and s.chosen < len(s.versions) - 1)
        self.compare_button.setEnabled(s is not None and len(s.versions) >= 2)
        self.unlocked_button.setEnabled(take is not None and idle and any(not x.locked for x in take.sentences))
        self.seed_button.setEnabled(take is not None)
