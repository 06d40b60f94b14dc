"""Speakers: one row per ``<|speaker:N|>`` of the script, each mapped to a saved voice.

Hidden while the script has no speaker tags. A speaker left on "Voice panel's choice" is
spoken in whatever the voice panel has selected; see engine/take.py for how a dialogue is made.
The choices survive edits of the script (a speaker that disappears and comes back keeps its voice)
and, through the settings (``speaker_voices``), a restart: ``choices_changed`` says when to store them.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QFormLayout, QGroupBox, QLabel

from s2studio.engine.take import speakers_in

PANEL_CHOICE = ""  # combo data: no saved voice, the voice panel's choice


class SpeakerPanel(QGroupBox):
    rows_changed = Signal()  # the combos were rebuilt (the window puts them in the tab order)
    choices_changed = Signal(dict)  # speaker number as text -> voice id: what the settings keep

    def __init__(self, library, parent=None, chosen: dict | None = None):
        super().__init__("Speakers", parent)
        self.library = library
        self.setToolTip("Each <|speaker:N|> of the script is spoken in the voice chosen here.")
        self._form = QFormLayout(self)
        self.combos: dict[int, QComboBox] = {}
        # speaker -> voice id, remembered across edits (and restarts: ``chosen`` from the settings)
        self._chosen: dict[int, str] = {int(n): v for n, v in (chosen or {}).items()}
        self._speakers: list[int] = []
        self.hint_shown = False  # "no saved voices yet"
        self._voices: list[tuple[str, str]] = []  # (id, name)
        self.reload_voices()
        self.setVisible(False)

    def reload_voices(self) -> None:
        """Read the saved voices again (one was saved, renamed, imported or deleted)."""
        try:
            self._voices = [(i.id, i.name) for i in self.library.list() if i.problem is None]
        except OSError:
            self._voices = []  # the voice panel reports an unreadable folder
        known = {vid for vid, _ in self._voices}
        self._chosen = {n: v for n, v in self._chosen.items() if v in known}
        self._rebuild()

    def update_script(self, text: str) -> None:
        speakers = speakers_in(text)
        if speakers != self._speakers:
            self._speakers = speakers
            self._rebuild()

    def _rebuild(self) -> None:
        while self._form.rowCount():
            self._form.removeRow(0)
        self.combos = {}
        for n in self._speakers:
            combo = QComboBox()
            combo.addItem("Voice panel's choice", PANEL_CHOICE)
            for vid, name in self._voices:
                combo.addItem(name, vid)
            combo.setCurrentIndex(max(0, combo.findData(self._chosen.get(n, PANEL_CHOICE))))
            combo.currentIndexChanged.connect(lambda _i, n=n, c=combo: self._remember(n, c.currentData()))
            self.combos[n] = combo
            self._form.addRow(QLabel(f"Speaker {n}:"), combo)
        if self._speakers and not self._voices:
            hint = QLabel("No saved voices yet: save one from a reference clip (left) to give each speaker "
                          "a voice of its own.")
            hint.setWordWrap(True)
            self._form.addRow(hint)
        self.hint_shown = bool(self._speakers and not self._voices)
        self.setVisible(bool(self._speakers))
        self.rows_changed.emit()

    def _remember(self, speaker: int, voice_id: str) -> None:
        if voice_id:
            self._chosen[speaker] = voice_id
        else:
            self._chosen.pop(speaker, None)
        self.choices_changed.emit(self.choices())

    def choices(self) -> dict:
        """Every remembered choice (also of speakers not in the script now), for the settings."""
        return {str(n): v for n, v in sorted(self._chosen.items())}

    def set_voice(self, speaker: int, voice_id: str) -> None:
        combo = self.combos[speaker]
        combo.setCurrentIndex(max(0, combo.findData(voice_id)))

    def mapping(self) -> tuple[tuple[int, str], ...]:
        """The script's speakers that have a saved voice: what a GenerateRequest carries."""
        return tuple((n, self._chosen[n]) for n in self._speakers if n in self._chosen)

    def label(self) -> str:
        names = dict(self._voices)
        return ", ".join(f"{n}: {names.get(v, v)}" for n, v in self.mapping())
