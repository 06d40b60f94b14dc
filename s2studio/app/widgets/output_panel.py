"""The output: the take's waveform (growing while it is generated), transport, export, and
the history of takes (replay or re-export any of them; the project keeps them across restarts)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from s2studio.app.audio_service import AudioService
from s2studio.app.widgets.waveform import WaveformView
from s2studio.app import export
from s2studio.app.seed_text import short_seed
from s2studio.audio.atomic_file import OutputPathError

OWNER = "output"


@dataclass(frozen=True, eq=False)
class Take:
    text: str
    voice: str
    seed: int
    params: str  # sampling summary, e.g. "temp 0.8 · top-p 0.8 · top-k 30"
    audio: np.ndarray
    sample_rate: int
    stopped: bool = False  # Stop was pressed: the audio is what was made until then
    stats: str = ""  # the generation's last progress line (segments, frames, real-time factor)
    segments: tuple = ()  # (start, end) sample range of each sentence: "Export sentences…"
    created: float = field(default_factory=time.time)
    key: str = ""  # the project take it shows (app/project.py), "" for none

    @property
    def seconds(self) -> float:
        return len(self.audio) / self.sample_rate

    def summary(self) -> str:
        text = self.text if len(self.text) <= 40 else self.text[:39] + "…"
        stamp = time.strftime("%H:%M:%S", time.localtime(self.created))
        stopped = " (stopped)" if self.stopped else ""
        return f"{stamp} · {self.voice} · seed {short_seed(self.seed)} · {self.seconds:.1f} s{stopped} — “{text}”"

    def details(self) -> str:
        """The Takes list's tooltip: what the row shortens."""
        return f"{self.text}\nseed {self.seed} · {self.params}"


def _clock(seconds: float) -> str:
    return f"{int(seconds // 60)}:{seconds % 60:04.1f}"


class OutputPanel(QWidget):
    problem = Signal(str)
    exported = Signal(str)
    take_shown = Signal(object)  # the Take now in the waveform (from the history or just made)

    def __init__(self, audio: AudioService, parent=None):
        super().__init__(parent)
        self.audio = audio
        self.takes: list[Take] = []
        self.current: Take | None = None
        self._paused_at = 0
        self._generating = False
        self._pending_final: Take | None = None  # the finished take, shown once live playback ends
        self.last_export_dir = ""
        self.last_written: list[str] = []  # the files the last export wrote
        self.export_format = export.DEFAULT_FORMAT  # key of the format last chosen (kept in the settings)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.waveform = WaveformView(placeholder="The generated audio appears here as it is made")
        self.waveform.seek_requested.connect(self.seek)
        layout.addWidget(self.waveform, 2)
        row = QHBoxLayout()
        self.play_button = QPushButton("▶ Play")
        self.play_button.setToolTip("Play / pause (Space)")
        self.play_button.clicked.connect(self.toggle_play)
        self.time_label = QLabel("0:00.0 / 0:00.0")
        # one width for every text it shows ("0:01.2 generated" is wider than "0:00.0 / 0:01.2"): a
        # label that changes width moves the buttons beside it and can widen a narrow window
        self.time_label.setMinimumWidth(self.time_label.fontMetrics().horizontalAdvance("00:00.0 / 00:00.0") + 8)
        # One button, its arrow offering the per-sentence export: a second button would widen the
        # panel's minimum and make the window scroll sideways at 200 % scaling.
        self.export_button = QToolButton()
        self.export_button.setText("Export…")
        self.export_button.setToolTip("Save the take as WAV (16/24-bit or 32-bit float), FLAC, MP3 or OGG (Ctrl+S); "
                                      "the arrow: each sentence as its own numbered file")
        self.export_button.setPopupMode(QToolButton.ToolButtonPopupMode.MenuButtonPopup)
        self.export_button.setSizePolicy(QSizePolicy.Policy.Minimum, QSizePolicy.Policy.Fixed)
        self.export_button.clicked.connect(self.export_current)
        export_menu = QMenu(self.export_button)
        export_menu.addAction("Export take…", self.export_current)
        self.export_sentences_action = export_menu.addAction("Export sentences… (name-01, name-02, …)",
                                                             self.export_sentences_current)
        self.export_button.setMenu(export_menu)
        row.addWidget(self.play_button)
        row.addWidget(self.time_label)
        row.addStretch(1)
        row.addWidget(self.export_button)
        layout.addLayout(row)
        history_box = QGroupBox("Takes")
        hb = QVBoxLayout(history_box)
        self.history = QListWidget()
        self.history.itemDoubleClicked.connect(lambda item: self.show_take(self.takes[self.history.row(item)], play=True))
        self.history.currentRowChanged.connect(self._on_history_row)
        hb.addWidget(self.history)
        row = QHBoxLayout()
        self.replay_button = QPushButton("Replay")
        self.replay_button.clicked.connect(self._replay_selected)
        self.reexport_button = QPushButton("Export selected…")
        self.reexport_button.clicked.connect(self._export_selected)
        row.addWidget(self.replay_button)
        row.addWidget(self.reexport_button)
        row.addStretch(1)
        hb.addLayout(row)
        layout.addWidget(history_box, 1)
        audio.position_changed.connect(self._on_position)
        audio.playback_stopped.connect(self._on_stopped)
        self._update_buttons()

    # ---- live generation --------------------------------------------------------------------
    def begin_live(self, expected_seconds: float) -> None:
        self.current = None
        self._paused_at = 0
        self.waveform.min_seconds = max(expected_seconds, 2.0)
        self.waveform.set_audio(None)
        self._update_buttons(generating=True)

    def append_live(self, samples: np.ndarray, sample_rate: int) -> None:
        if self.waveform.sample_count == 0:
            self.waveform.sample_rate = sample_rate
        self.waveform.append(samples)
        self.time_label.setText(f"{_clock(self.waveform.duration_seconds)} generated")

    def end_live(self, take: Take | None) -> None:
        """The take is complete, or stopped (``take.stopped``: what was made until Stop, kept like
        any other take), or None (failed, or stopped before any audio: keep what arrived, unsaved)."""
        self.waveform.min_seconds = 0.0
        if take is not None:
            self.takes.append(take)
            item = QListWidgetItem(take.summary())
            item.setToolTip(take.details())
            self.current = take  # before the row changes: the new row is this take, already shown
            self.history.addItem(item)
            self.history.setCurrentRow(self.history.count() - 1)
            playing_live = self.audio.playing_owner == OWNER
            if not playing_live:  # keep the live playhead running; the final audio replaces the preview
                self.waveform.set_audio(take.audio, take.sample_rate)
            else:
                self._pending_final = take
        else:
            self.waveform.set_audio(self.waveform.samples, self.waveform.sample_rate)
        self._update_time()
        self._update_buttons()
        if take is not None:
            self.take_shown.emit(take)

    # ---- the project's takes ------------------------------------------------------------------
    def add_take(self, take: Take) -> None:
        """A take made earlier (a restored project): listed, not shown."""
        self.takes.append(take)
        item = QListWidgetItem(take.summary())
        item.setToolTip(take.details())
        self.history.addItem(item)
        self._update_buttons(self._generating)

    def replace_take(self, take: Take) -> None:
        """The take with ``take.key`` was re-assembled (a sentence regenerated or another version
        chosen): its entry and, if it is on screen, the waveform show the new audio."""
        row = next((i for i, t in enumerate(self.takes) if t.key == take.key), None)
        if row is None:
            return
        was_current = self.current is self.takes[row]
        self.takes[row] = take
        self.history.item(row).setText(take.summary())
        self.history.item(row).setToolTip(take.details())
        if was_current:
            self.show_take(take)

    def remove_take(self, key: str) -> None:
        row = next((i for i, t in enumerate(self.takes) if t.key == key), None)
        if row is None:
            return
        if self.takes[row] is self.current:
            self.audio.stop() if self.audio.playing_owner == OWNER else None
            self.current = None
            self.waveform.set_audio(None)
            self._update_time()
        del self.takes[row]
        self.history.takeItem(row)
        self._update_buttons(self._generating)

    def clear_takes(self) -> None:
        self.audio.stop() if self.audio.playing_owner == OWNER else None
        self.takes.clear()
        self.current = None
        self.history.clear()
        self.waveform.set_audio(None)
        self._update_time()
        self._update_buttons(self._generating)

    def select_take(self, key: str) -> None:
        row = next((i for i, t in enumerate(self.takes) if t.key == key), None)
        if row is not None:
            self.history.setCurrentRow(row)  # shows it (see _on_history_row)

    # ---- transport --------------------------------------------------------------------------
    def show_take(self, take: Take, play: bool = False) -> None:
        self.audio.stop()
        self.current = take
        self._paused_at = 0
        self.waveform.set_audio(take.audio, take.sample_rate)
        self._update_time()
        self._update_buttons()
        self.take_shown.emit(take)
        if play:
            self.toggle_play()

    def _on_history_row(self, row: int) -> None:
        """Selecting a take shows it (its waveform, length and statistics), without playing it."""
        if 0 <= row < len(self.takes) and self.takes[row] is not self.current and not self._generating:
            self.show_take(self.takes[row])

    def toggle_play(self) -> None:
        if self.audio.playing_owner == OWNER:
            buffer = self.audio.live_buffer
            # pausing a finished clip remembers where; stopping live playback starts over next time
            self._paused_at = (self.waveform.playhead or 0) if buffer is None else 0
            self.audio.stop()
            return
        if self.current is None:
            return
        start = self._paused_at if self._paused_at < len(self.current.audio) else 0
        if self.audio.play_clip(OWNER, self.current.audio, self.current.sample_rate, start):
            self.play_button.setText("❚❚ Pause")

    def seek(self, sample: int) -> None:
        self._paused_at = sample
        self.waveform.set_playhead(sample)
        if self.audio.playing_owner == OWNER:
            self.audio.seek(sample)
        self._update_time(sample)

    def _on_position(self, owner: str, sample: int) -> None:
        if owner == OWNER:
            self.waveform.set_playhead(sample)
            self._update_time(sample)

    def _on_stopped(self, owner: str) -> None:
        if owner != OWNER:
            return
        self.play_button.setText("▶ Play")
        pending = self._pending_final
        if pending is not None:
            self._pending_final = None
            self.waveform.set_audio(pending.audio, pending.sample_rate)
        if self.current is not None and self._paused_at == 0:
            self.waveform.set_playhead(None)
        self._update_time()

    def _update_time(self, position: int | None = None) -> None:
        rate = self.waveform.sample_rate or 1
        pos = (position if position is not None else self._paused_at) / rate
        self.time_label.setText(f"{_clock(pos)} / {_clock(self.waveform.duration_seconds)}")

    def _update_buttons(self, generating: bool = False) -> None:
        self._generating = generating
        has = self.current is not None
        self.play_button.setEnabled(has and self.audio.status.can_play and not generating)
        self.export_button.setEnabled(has and not generating)
        self.export_sentences_action.setEnabled(has and not generating)
        self.replay_button.setEnabled(bool(self.takes) and self.audio.status.can_play)
        self.reexport_button.setEnabled(bool(self.takes))

    # ---- export -----------------------------------------------------------------------------
    def ask_save_path(self, suggestion: str) -> str | None:
        """The save dialog; the type chosen in it becomes ``export_format``. A separate method so
        tests can answer it without a modal dialog (they set ``export_format`` themselves)."""
        formats = export.available_formats()
        chosen = export.format_by_key(self.export_format)
        path, selected = QFileDialog.getSaveFileName(self, "Export", suggestion,
                                                     ";;".join(f.file_filter for f in formats), chosen.file_filter)
        picked = export.format_by_filter(selected)
        if path and picked is not None:
            self.export_format = picked.key
        return path or None

    def export_current(self) -> None:
        if self.current is not None:
            self.export_take(self.current)

    def export_sentences_current(self) -> None:
        if self.current is not None:
            self.export_take(self.current, sentences=True)

    def _export_selected(self) -> None:
        row = self.history.currentRow()
        if 0 <= row < len(self.takes):
            self.export_take(self.takes[row])

    def _replay_selected(self) -> None:
        row = self.history.currentRow()
        if 0 <= row < len(self.takes):
            self.show_take(self.takes[row], play=True)

    def export_take(self, take: Take, sentences: bool = False) -> str | None:
        """Ask where, then write the take (or, with ``sentences``, one numbered file per sentence:
        the returned path is the first of them). The name offered is the script's first words."""
        preferred = export.format_by_key(self.export_format)
        folder = export.safe_folder(self.last_export_dir)
        path = self.ask_save_path(str(folder / export.default_file_name(take.text, preferred.extension)))
        if not path:
            return None
        preferred = export.format_by_key(self.export_format)  # the dialog may have changed it
        fmt = export.format_for_path(path, preferred)
        if fmt is None:  # "take.aiff", or a name with a dot and no extension: the chosen type's
            fmt, path = preferred, export.with_extension(path, preferred)
        try:
            # A folder that vanished, a read-only disk, a name that is a folder or a device:
            # one clear sentence before anything is written.
            if sentences:
                written = export.write_sentences(path, take.audio, take.sample_rate, take.segments, fmt)
            else:
                export.write_take(path, take.audio, take.sample_rate, fmt)
                written = [path]
        except OutputPathError as err:
            self.problem.emit(f"Could not export: {err}")
            return None
        except (OSError, ValueError) as err:
            self.problem.emit(f"Could not write {path}: {getattr(err, 'strerror', None) or err}")
            return None
        self.last_export_dir = str(Path(path).parent)
        self.last_written = written
        self.exported.emit(written[0])
        return written[0]
