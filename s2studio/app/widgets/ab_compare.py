"""A/B comparison of two candidates (two takes, or two versions of one sentence): play either,
switch between them at the same moment (the position carries over, as in a mixing desk's A/B),
and keep one. Non-modal: the window stays usable while comparing."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QDialog, QGridLayout, QLabel, QPushButton

from s2studio.app.audio_service import AudioService

OWNER = "compare"


@dataclass(frozen=True, eq=False)
class Candidate:
    label: str
    audio: np.ndarray
    sample_rate: int


class ABCompareDialog(QDialog):
    picked = Signal(int)  # index into the candidates

    def __init__(self, title: str, candidates: list[Candidate], a: int, b: int, audio: AudioService, parent=None):
        super().__init__(parent)
        self.setWindowTitle(title)
        self.candidates = candidates
        self.audio = audio
        self.playing: str = ""  # "A", "B" or ""
        self._position = 0
        grid = QGridLayout(self)
        self.choosers: dict[str, QComboBox] = {}
        self.play_buttons: dict[str, QPushButton] = {}
        self.keep_buttons: dict[str, QPushButton] = {}
        for col, (side, start) in enumerate((("A", a), ("B", b))):
            grid.addWidget(QLabel(f"<b>{side}</b>"), 0, col)
            chooser = QComboBox()
            chooser.addItems([c.label for c in candidates])
            chooser.setCurrentIndex(start)
            chooser.currentIndexChanged.connect(lambda _i, s=side: self._chosen_changed(s))
            play = QPushButton(f"▶ Play {side}")
            play.clicked.connect(lambda _=False, s=side: self.play(s))
            keep = QPushButton(f"Keep {side}")
            keep.clicked.connect(lambda _=False, s=side: self.keep(s))
            grid.addWidget(chooser, 1, col)
            grid.addWidget(play, 2, col)
            grid.addWidget(keep, 3, col)
            self.choosers[side], self.play_buttons[side], self.keep_buttons[side] = chooser, play, keep
        self.hint = QLabel("Switching A ↔ B while playing continues at the same moment.")
        grid.addWidget(self.hint, 4, 0, 1, 2)
        can_play = audio.status.can_play
        reason = audio.status.reason or "No sound output was found."
        for b in self.play_buttons.values():
            b.setEnabled(can_play)
            b.setToolTip("" if can_play else reason)
        if not can_play:  # a disabled button's tooltip is easy to miss: say it where one looks
            self.hint.setText(f"Playing is not possible: {reason} You can still keep either version.")
            self.hint.setWordWrap(True)
        audio.position_changed.connect(self._on_position)
        audio.playback_stopped.connect(self._on_stopped)

    def candidate(self, side: str) -> Candidate:
        return self.candidates[self.choosers[side].currentIndex()]

    def play(self, side: str) -> None:
        """Play ``side``; while the other one plays, switch to it at the same position."""
        if self.playing == side:
            self.audio.stop()
            return
        start = self._position if self.playing else 0
        c = self.candidate(side)
        start = start if start < len(c.audio) else 0
        if self.audio.play_clip(OWNER, c.audio, c.sample_rate, start):
            self.playing = side
            self._position = start
            self._label_buttons()

    def keep(self, side: str) -> None:
        self.audio.stop() if self.audio.playing_owner == OWNER else None
        self.picked.emit(self.choosers[side].currentIndex())
        self.accept()

    def _chosen_changed(self, side: str) -> None:
        if self.playing == side:
            self.audio.stop()

    def _on_position(self, owner: str, sample: int) -> None:
        if owner == OWNER:
            self._position = sample

    def _on_stopped(self, owner: str) -> None:
        if owner == OWNER and self.audio.playing_owner != OWNER:
            self.playing = ""
            self._label_buttons()

    def _label_buttons(self) -> None:
        for side, b in self.play_buttons.items():
            b.setText(f"❚❚ Pause {side}" if self.playing == side else f"▶ Play {side}")

    def done(self, result: int) -> None:
        if self.audio.playing_owner == OWNER:
            self.audio.stop()
        self.audio.position_changed.disconnect(self._on_position)
        self.audio.playback_stopped.disconnect(self._on_stopped)
        super().done(result)
