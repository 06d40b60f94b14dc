"""The voice panel: saved voices, and a reference clip to turn into a new voice.

A reference comes from a file (Open…, or dropped anywhere on the window) or from the
microphone. It is shown as a waveform where a region can be selected: only that region is
kept (encoded and saved). Saving is asynchronous: the panel asks, the window sends a
``SaveVoiceRequest`` to the worker (encoding needs the codec), and the new voice appears in the
list when the worker reports it.

Problems are reported with their cause (``CLIP``, ``TRANSCRIPT``, ``VOICES``) and
``problem_gone`` says when a cause has gone, so the window's banner never outlives its reason.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from s2studio.app.audio_service import AudioService
from s2studio.app.widgets.level_meter import LevelMeter
from s2studio.app.widgets.reference_workbench import ReferenceWorkbench
from s2studio.app.widgets.waveform import WaveformView
from s2studio.app.widgets.wrapping_label import WrappingLabel
from s2studio.audio import (
    CODEC_SAMPLE_RATE,
    DEFAULT_MAX_REFERENCE_SECONDS,
    SUPPORTED_EXTENSIONS,
    read_audio,
    validate_reference,
)
from s2studio.audio.reference_check import level_reference
from s2studio.errors import S2Error
from s2studio.engine.voices import VoiceLibrary

log = logging.getLogger(__name__)

NO_VOICE = "__none__"
UNSAVED_REFERENCE = "__reference__"
TRANSCRIPT_SUFFIXES = (".txt", ".lab")
# Causes of the problems this panel reports (see Banner.dismiss).
CLIP, TRANSCRIPT, VOICES = "clip", "transcript", "voices"
# A clip longer than a reference may be is opened for trimming (the first 60 s selected), up to
# this length; longer files are refused when opened (a whole audiobook is not a voice sample).
MAX_TRIM_SOURCE_SECONDS = 15 * 60
SHORT_REFERENCE_SECONDS = 3.0  # below this a clip is accepted with a warning (5-30 s recommended)
# Answers to "a voice with this name exists".
REPLACE, RENAME, CANCEL = "replace", "rename", "cancel"


def transcript_beside(audio_path: Path) -> str:
    """The transcript from ``clip.txt`` or ``clip.lab`` next to ``clip.wav`` ("" if none)."""
    for suffix in TRANSCRIPT_SUFFIXES:
        candidate = audio_path.with_suffix(suffix)
        try:
            return candidate.read_text(encoding="utf-8-sig").strip()
        except (OSError, UnicodeDecodeError):
            continue
    return ""


@dataclass(frozen=True, eq=False)
class VoiceChoice:
    """What the next take is spoken with."""

    kind: str  # "none" | "voice" | "reference"
    label: str
    voice_id: str | None = None
    samples: np.ndarray | None = None  # the kept region, for "reference"
    transcript: str = ""


class VoicePanel(QWidget):
    save_requested = Signal(object, str, str, object)  # samples (kept region), transcript, name, id to replace
    problem = Signal(str, str)  # message, cause
    problem_gone = Signal(str)  # cause
    notice = Signal(str)  # advice, not an error: a clip to trim, a very short clip
    notice_gone = Signal()  # that advice was about a clip no longer in the panel (or now saved)
    library_requested = Signal()  # "Library…": the window opens the voice library

    def __init__(self, library: VoiceLibrary, audio: AudioService, parent=None):
        super().__init__(parent)
        self.library = library
        self.audio = audio
        self._reference: np.ndarray | None = None
        self._reference_label = ""
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)

        voices_box = QGroupBox("Voices")
        vb = QVBoxLayout(voices_box)
        self.voice_list = QListWidget()
        self.voice_list.currentItemChanged.connect(self._on_voice_selected)
        vb.addWidget(self.voice_list, 1)
        row = QHBoxLayout()
        self.rename_button = QPushButton("Rename…")
        self.rename_button.clicked.connect(self.rename_selected)
        self.delete_button = QPushButton("Delete")
        self.delete_button.clicked.connect(self.delete_selected)
        self.library_button = QPushButton("Library…")
        self.library_button.setToolTip("Search, preview, import and export voices (Voices ▸ Voice library…)")
        self.library_button.clicked.connect(self.library_requested)
        row.addWidget(self.rename_button)
        row.addWidget(self.delete_button)
        row.addStretch(1)
        row.addWidget(self.library_button)
        vb.addLayout(row)
        layout.addWidget(voices_box, 2)

        ref_box = QGroupBox("New voice from a reference clip")
        rb = QVBoxLayout(ref_box)
        row = QHBoxLayout()
        self.open_button = QPushButton("Open…")
        self.open_button.setToolTip("Choose an audio file (or drop one anywhere on the window)")
        self.open_button.clicked.connect(self.choose_file)
        self.record_button = QPushButton("● Record")
        self.record_button.setCheckable(True)
        self.record_button.toggled.connect(self._toggle_recording)
        self.level_meter = LevelMeter()
        self.elapsed_label = QLabel("")
        row.addWidget(self.open_button)
        row.addWidget(self.record_button)
        row.addWidget(self.level_meter, 1)
        row.addWidget(self.elapsed_label)
        rb.addLayout(row)
        self.audio_note = WrappingLabel("")
        self.audio_note.setStyleSheet("color: palette(placeholder-text);")
        rb.addWidget(self.audio_note)
        self.waveform = WaveformView(selectable=True, placeholder="Drop a 5–30 s clip here, open one, or record")
        self.waveform.setToolTip("Drag to keep only a part of the clip. Keyboard: ←/→ move the start, "
                                 "Shift+←/→ the end (Ctrl: whole seconds), Home/End reset them.")
        self.waveform.selection_changed.connect(self._update_region_label)
        self.waveform.seek_requested.connect(lambda s: self.audio.seek(s))
        rb.addWidget(self.waveform, 1)
        row = QHBoxLayout()
        self.play_button = QPushButton("▶ Play")
        self.play_button.clicked.connect(self.toggle_play)
        # Short, and never sets the panel's width: a long line here used to widen the window when a
        # clip was loaded and shift the waveform when a drag ended (the text changed length).
        self.region_label = QLabel("")
        self.region_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        row.addWidget(self.play_button)
        row.addWidget(self.region_label, 1)
        rb.addLayout(row)
        # "Find the best part" and the checks of the part kept (clipping, noise floor, loudness)
        self.workbench = ReferenceWorkbench(CODEC_SAMPLE_RATE)
        self.workbench.proposal.connect(lambda start, end: self.waveform.set_selection((start, end)))
        self.workbench.problem.connect(lambda message: self.problem.emit(message, CLIP))
        rb.addWidget(self.workbench)
        rb.addWidget(QLabel("Transcript (exactly what is said in the clip):"))
        self.transcript = QPlainTextEdit()
        self.transcript.setMaximumHeight(70)
        self.transcript.setMinimumHeight(44)
        self.transcript.setTabChangesFocus(True)  # a transcript has no tabs; Tab must not trap the focus
        self.transcript.textChanged.connect(self._on_transcript_changed)
        rb.addWidget(self.transcript)
        # The transcript must say what the *kept part* says: when the part changes after it was
        # written (a long clip trimmed, its .txt still the whole clip's), it is marked for review
        # until it is edited.
        self._transcript_region: tuple[int, int] | None = None
        self.transcript_needs_review = False
        self.review_label = WrappingLabel("The part kept has changed: check that the transcript says exactly "
                                          "what is said in it (edit it to clear this note).")
        self.review_label.setStyleSheet("color: #b26a00;")
        self.review_label.hide()
        rb.addWidget(self.review_label)
        row = QHBoxLayout()
        self.name_edit = QLineEdit()
        self.name_edit.setPlaceholderText("Voice name")
        self.save_button = QPushButton("Save as voice")
        self.save_button.clicked.connect(self.request_save)
        row.addWidget(self.name_edit, 1)
        row.addWidget(self.save_button)
        rb.addLayout(row)
        layout.addWidget(ref_box, 3)

        audio.level_changed.connect(self._on_level)
        audio.recording_limit_reached.connect(lambda: self.record_button.setChecked(False))
        audio.recording_interrupted.connect(lambda: self.record_button.setChecked(False))  # keeps the part recorded
        audio.position_changed.connect(self._on_position)
        audio.playback_stopped.connect(self._on_playback_stopped)
        self.apply_audio_status()
        self.reload_voices()
        self._update_buttons()

    # ---- voices -----------------------------------------------------------------------------
    def reload_voices(self, select_id: str | None = None) -> None:
        current = select_id or self.current_item_key()
        self.voice_list.blockSignals(True)
        self.voice_list.clear()
        none_item = QListWidgetItem("Model's own voice (no reference)")
        none_item.setData(Qt.ItemDataRole.UserRole, NO_VOICE)
        self.voice_list.addItem(none_item)
        if self._reference is not None:
            item = QListWidgetItem(f"Unsaved reference: {self._reference_label}")
            item.setData(Qt.ItemDataRole.UserRole, UNSAVED_REFERENCE)
            self.voice_list.addItem(item)
        try:
            infos = self.library.list()
        except OSError as err:
            infos = []
            self.problem.emit(f"The voice folder {self.library.folder} cannot be read ({err.strerror}).", VOICES)
        for info in infos:
            text = f"{info.name}  ·  {info.duration_seconds:.1f} s" if info.problem is None else f"{info.name} (unusable)"
            item = QListWidgetItem(text)
            item.setData(Qt.ItemDataRole.UserRole, info.id)
            item.setToolTip(info.problem or info.transcript)
            if info.problem is not None:
                item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEnabled)
            self.voice_list.addItem(item)
        self.voice_list.blockSignals(False)
        self._select_key(current or NO_VOICE)

    def _select_key(self, key: str) -> None:
        for i in range(self.voice_list.count()):
            if self.voice_list.item(i).data(Qt.ItemDataRole.UserRole) == key:
                self.voice_list.setCurrentRow(i)
                return
        self.voice_list.setCurrentRow(0)

    def current_item_key(self) -> str | None:
        item = self.voice_list.currentItem()
        return item.data(Qt.ItemDataRole.UserRole) if item is not None else None

    def voice_ids(self) -> list[str]:
        keys = [self.voice_list.item(i).data(Qt.ItemDataRole.UserRole) for i in range(self.voice_list.count())]
        return [k for k in keys if k not in (NO_VOICE, UNSAVED_REFERENCE)]

    def select_voice(self, voice_id: str) -> None:
        self._select_key(voice_id)

    def current_choice(self) -> VoiceChoice:
        key = self.current_item_key()
        if key == UNSAVED_REFERENCE and self._reference is not None:
            return VoiceChoice("reference", self._reference_label, samples=self.kept_region(),
                               transcript=self.transcript.toPlainText().strip())
        if key not in (None, NO_VOICE, UNSAVED_REFERENCE):
            item = self.voice_list.currentItem()
            return VoiceChoice("voice", item.text().split("  ·  ")[0], voice_id=key)
        return VoiceChoice("none", "model's own voice")

    def _on_voice_selected(self, *_):
        self._update_buttons()
        if self.current_item_key() != UNSAVED_REFERENCE:
            self.problem_gone.emit(TRANSCRIPT)  # a saved voice (or none) needs no transcript typed

    def _on_transcript_changed(self) -> None:
        if self.transcript.toPlainText().strip():
            self.problem_gone.emit(TRANSCRIPT)
        self._transcript_region = self._kept_range()  # written (or edited) for the part kept now
        self._mark_transcript_review(False)

    def _kept_range(self) -> tuple[int, int] | None:
        if self._reference is None:
            return None
        return tuple(self.waveform.selection) if self.waveform.selection else (0, len(self._reference))

    def _mark_transcript_review(self, needed: bool) -> None:
        self.transcript_needs_review = needed
        self.review_label.setVisible(needed)
        self.transcript.setStyleSheet("QPlainTextEdit { border: 2px solid #e0a030; }" if needed else "")

    def rename_selected(self) -> None:
        key = self.current_item_key()
        if key in (None, NO_VOICE, UNSAVED_REFERENCE):
            return
        try:  # the voice may have gone from the folder since the list was read
            current = self.library.get(key).info.name
        except (S2Error, OSError) as err:
            self.problem.emit(str(err), VOICES)
            return
        name = self.ask_text("Rename voice", "New name:", current)
        if not name:
            return
        try:
            self.library.rename(key, name)
        except (S2Error, OSError) as err:
            self.problem.emit(str(err), VOICES)
            return
        self.problem_gone.emit(VOICES)
        self.reload_voices(key)

    def delete_selected(self) -> None:
        key = self.current_item_key()
        if key in (None, NO_VOICE, UNSAVED_REFERENCE):
            return
        if not self.confirm(f"Delete the voice “{self.voice_list.currentItem().text().split('  ·  ')[0]}”? "
                            "Its files are removed from the voice folder."):
            return
        try:
            self.library.delete(key)
        except (S2Error, OSError) as err:
            self.problem.emit(str(err), VOICES)
            return
        self.problem_gone.emit(VOICES)
        self.reload_voices(NO_VOICE)

    # Dialog hooks: separate methods so tests can answer them without a modal loop.
    def ask_text(self, title: str, label: str, default: str) -> str | None:
        text, ok = QInputDialog.getText(self, title, label, text=default)
        return text.strip() if ok and text.strip() else None

    def confirm(self, question: str) -> bool:
        return QMessageBox.question(self, "s2studio", question) == QMessageBox.StandardButton.Yes

    def ask_name_clash(self, name: str) -> str:
        """A voice called ``name`` exists: REPLACE it, RENAME the new one, or CANCEL."""
        box = QMessageBox(QMessageBox.Icon.Question, "s2studio",
                          f"A voice named “{name}” already exists. Replace it with this clip, or save "
                          "the new voice under another name?", parent=self)
        replace = box.addButton("Replace", QMessageBox.ButtonRole.DestructiveRole)
        rename = box.addButton("Rename…", QMessageBox.ButtonRole.AcceptRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(rename)
        box.exec()
        return {replace: REPLACE, rename: RENAME}.get(box.clickedButton(), CANCEL)

    def ask_open_path(self) -> str | None:
        patterns = " ".join(f"*{e}" for e in SUPPORTED_EXTENSIONS)
        path, _ = QFileDialog.getOpenFileName(self, "Open a reference clip", "", f"Audio ({patterns})")
        return path or None

    # ---- reference clip ---------------------------------------------------------------------
    def choose_file(self) -> None:
        path = self.ask_open_path()
        if path:
            self.load_reference_file(Path(path))

    def load_reference_file(self, path: Path) -> bool:
        """Read a clip (validated, 44.1 kHz mono); fill the transcript from a .txt/.lab beside it."""
        try:
            samples = read_audio(path, max_seconds=MAX_TRIM_SOURCE_SECONDS)
        except S2Error as err:
            self.problem.emit(str(err), CLIP)
            return False
        self.set_reference(samples, path.name, transcript_beside(path), name=path.stem)
        self._advise_on_length(len(samples) / CODEC_SAMPLE_RATE)  # a long clip: trimmed, so review
        return True

    def _advise_on_length(self, seconds: float) -> None:
        """Over 60 s: the waveform becomes the trim view with the first 60 s selected; under 3 s:
        kept, with a warning (such a short clip rarely carries the voice well)."""
        limit = DEFAULT_MAX_REFERENCE_SECONDS
        if seconds > limit:
            self.waveform.set_selection((0, int(limit * CODEC_SAMPLE_RATE)))
            self.notice.emit(f"The clip is {seconds:.0f} s long; a reference can be at most {limit:g} s. The first "
                             f"{limit:g} s are selected: drag on the waveform to keep another part "
                             "(5–30 s works best), or press “Find the best part”.")
        elif seconds < SHORT_REFERENCE_SECONDS:
            self.notice.emit(f"The clip is only {seconds:.1f} s long; 5–30 s of clear speech is recommended, "
                             "or the cloned voice may sound little like it.")

    def set_reference(self, samples: np.ndarray, label: str, transcript: str = "", name: str = "") -> None:
        """A new clip starts afresh: its own transcript ("" if none was found) and its own name —
        never the previous clip's, which Generate would otherwise silently use."""
        self.audio.stop()
        self.notice_gone.emit()  # advice about the previous clip ("it is 90 s long") no longer applies
        self._reference = np.asarray(samples, np.float32)
        self._reference_label = label
        self.waveform.set_audio(self._reference, CODEC_SAMPLE_RATE)
        self.workbench.set_clip(self._reference)
        self.transcript.setPlainText(transcript)  # for the whole clip, the part kept now
        self._transcript_region = self._kept_range()
        self._mark_transcript_review(False)
        self.name_edit.setText(name)
        self.problem_gone.emit(CLIP)
        self.problem_gone.emit(TRANSCRIPT)  # that message was about the previous clip
        self.reload_voices(UNSAVED_REFERENCE)
        self._update_region_label(None)
        self._update_buttons()

    @property
    def reference(self) -> np.ndarray | None:
        return self._reference

    def kept_region(self) -> np.ndarray | None:
        if self._reference is None:
            return None
        sel = self.waveform.selection
        return self._reference[sel[0]:sel[1]] if sel else self._reference

    def _update_region_label(self, _sel) -> None:
        if self._reference is None:
            self.region_label.setText("")
            return
        total = len(self._reference) / CODEC_SAMPLE_RATE
        kept = len(self.kept_region()) / CODEC_SAMPLE_RATE
        self.workbench.set_kept(self.kept_region())
        if kept <= DEFAULT_MAX_REFERENCE_SECONDS:
            self.problem_gone.emit(CLIP)  # e.g. "the part kept is too long": trimmed now
        if self.transcript.toPlainText().strip() and self._kept_range() != self._transcript_region:
            self._mark_transcript_review(True)
        self.region_label.setText(f"Keeping {kept:.1f} s of {total:.1f} s")
        self.region_label.setToolTip(self.waveform.toolTip())

    def request_save(self) -> None:
        region = self.kept_region()
        if region is None:
            self.problem.emit("Open, drop or record a reference clip first.", CLIP)
            return
        transcript = self.transcript.toPlainText().strip()
        if not transcript:
            self.problem.emit("Type the transcript of the clip: the model needs to know what is said in it.",
                              TRANSCRIPT)
            return
        try:
            validate_reference(region, CODEC_SAMPLE_RATE)
        except S2Error as err:
            self.problem.emit(str(err), CLIP)
            return
        # levelled to the reference loudness (see reference_check; the panel's note says by how much)
        region = level_reference(region, CODEC_SAMPLE_RATE)
        name = self.name_edit.text().strip() or self._reference_label.rsplit(".", 1)[0] or "voice"
        replace_id = None
        while (existing := self._voice_named(name)) is not None:
            answer = self.ask_name_clash(name)
            if answer == REPLACE:
                replace_id = existing
                break
            if answer != RENAME:
                return
            new_name = self.ask_text("Save as voice", "Name for the new voice:", name)
            if not new_name:
                return
            name = new_name
        self.name_edit.setText(name)
        self.save_button.setEnabled(False)
        self.save_button.setText("Saving…")
        self.save_requested.emit(region, transcript, name, replace_id)

    def _voice_named(self, name: str) -> str | None:
        """The id of the saved voice whose name is ``name`` (case-insensitively), if any."""
        try:
            infos = self.library.list()
        except OSError:
            return None
        folded = name.casefold()
        return next((info.id for info in infos if info.name.casefold() == folded), None)

    def voice_saved(self, info) -> None:
        self.notice_gone.emit()
        self.save_button.setText("Save as voice")
        self._update_buttons()
        self.reload_voices(info.id)
        self.problem_gone.emit(TRANSCRIPT)
        self.problem_gone.emit(CLIP)

    def save_failed(self) -> None:
        self.save_button.setText("Save as voice")
        self._update_buttons()

    # ---- audio ------------------------------------------------------------------------------
    def apply_audio_status(self) -> None:
        status = self.audio.status
        self.record_button.setEnabled(status.can_record)
        self.play_button.setEnabled(status.can_play and self._reference is not None)
        self.level_meter.setVisible(status.can_record)
        self.audio_note.setText(status.reason)
        self.audio_note.setVisible(bool(status.reason))

    def toggle_play(self) -> None:
        if self.audio.playing_owner == "reference":
            self.audio.stop()
            return
        if self._reference is None:
            return
        sel = self.waveform.selection or (0, len(self._reference))
        if self.audio.play_clip("reference", self._reference, CODEC_SAMPLE_RATE, sel[0], sel[1]):
            self.play_button.setText("■ Stop")

    def _on_position(self, owner: str, sample: int) -> None:
        if owner == "reference":
            self.waveform.set_playhead(sample)

    def _on_playback_stopped(self, owner: str) -> None:
        if owner == "reference":
            self.play_button.setText("▶ Play")
            self.waveform.set_playhead(None)

    def _toggle_recording(self, on: bool) -> None:
        if on:
            if not self.audio.start_recording():
                self.record_button.blockSignals(True)
                self.record_button.setChecked(False)
                self.record_button.blockSignals(False)
                return
            self.record_button.setText("■ Stop")
            self.elapsed_label.setText("0.0 s")
        else:
            take = self.audio.stop_recording()
            self.record_button.setText("● Record")
            self.level_meter.set_level(0.0)
            if len(take):
                self.set_reference(take, "recording", name="My voice")

    def _on_level(self, level: float, elapsed: float) -> None:
        self.level_meter.set_level(level)
        self.elapsed_label.setText(f"{elapsed:.1f} s")

    def _update_buttons(self) -> None:
        key = self.current_item_key()
        is_saved = key not in (None, NO_VOICE, UNSAVED_REFERENCE)
        self.rename_button.setEnabled(is_saved)
        self.delete_button.setEnabled(is_saved)
        has_ref = self._reference is not None
        self.save_button.setEnabled(has_ref and self.save_button.text() == "Save as voice")
        self.play_button.setEnabled(has_ref and self.audio.status.can_play)
