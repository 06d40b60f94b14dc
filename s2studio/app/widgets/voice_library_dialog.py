"""Voices ▸ Voice library…: every saved voice, searchable, with its reference clip and transcript.

Preview (play the clip the voice was made from), rename, delete, import an ``.s2voice`` file
(s2.cpp's format; e.g. shared by someone else or made by ``s2studio voices export``) and export
one. Every change is made on the library folder at once and announced with ``changed`` so the
voice panel and the speaker panel list the same voices. Problems are one sentence in the
dialog's own banner (the main window's is behind the dialog).
"""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from s2studio.app.widgets.error_banner import Banner
from s2studio.audio import CODEC_SAMPLE_RATE, read_audio
from s2studio.audio.atomic_file import atomic_output, check_output_path
from s2studio.engine.voices import (
    SIDECAR_SUFFIX,
    VOICE_SUFFIX,
    encode_s2voice,
    is_voice_sidecar,
    name_sidecar_bytes,
    read_s2voice,
    saved_name_beside,
)
from s2studio.errors import S2Error

OWNER = "library"  # the audio service's owner name for the preview


def matches(info, query: str) -> bool:
    """Search: every word of the query in the voice's name, id or transcript (case-insensitive)."""
    haystack = f"{info.name} {info.id} {info.transcript}".casefold()
    return all(word in haystack for word in query.casefold().split())


class VoiceLibraryDialog(QDialog):
    changed = Signal(str)  # the id to select afterwards ("" if none)
    use_requested = Signal(str)  # "Use this voice": the id

    def __init__(self, library, audio, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Voice library")
        self.resize(760, 460)
        self.library = library
        self.audio = audio
        self.infos = []
        self._preview = None  # (voice id, samples) of the clip loaded for preview
        layout = QVBoxLayout(self)
        self.banner = Banner("error")
        layout.addWidget(self.banner)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search voices by name or transcript")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(lambda _t: self._fill())
        layout.addWidget(self.search)
        splitter = QSplitter(Qt.Orientation.Horizontal)
        self.voice_list = QListWidget()
        self.voice_list.currentItemChanged.connect(lambda *_: self._show_selected())
        self.voice_list.itemDoubleClicked.connect(lambda _item: self._use())
        splitter.addWidget(self.voice_list)
        detail = QWidget()
        dl = QVBoxLayout(detail)
        self.title = QLabel("")
        self.title.setStyleSheet("font-weight: bold;")
        self.facts = QLabel("")
        self.facts.setWordWrap(True)
        dl.addWidget(self.title)
        dl.addWidget(self.facts)
        dl.addWidget(QLabel("Transcript of its reference clip:"))
        self.transcript = QPlainTextEdit()
        self.transcript.setReadOnly(True)
        dl.addWidget(self.transcript, 1)
        row = QHBoxLayout()
        self.play_button = QPushButton("▶ Play clip")
        self.play_button.setToolTip("Play the clip this voice was made from")
        self.play_button.clicked.connect(self.toggle_preview)
        self.use_button = QPushButton("Use this voice")
        self.use_button.clicked.connect(self._use)
        row.addWidget(self.play_button)
        row.addStretch(1)
        row.addWidget(self.use_button)
        dl.addLayout(row)
        splitter.addWidget(detail)
        splitter.setSizes([280, 480])
        layout.addWidget(splitter, 1)
        row = QHBoxLayout()
        self.rename_button = QPushButton("Rename…")
        self.rename_button.clicked.connect(self.rename_selected)
        self.delete_button = QPushButton("Delete…")
        self.delete_button.clicked.connect(self.delete_selected)
        self.import_button = QPushButton("Import .s2voice…")
        self.import_button.clicked.connect(self.import_voice)
        self.export_button = QPushButton("Export .s2voice…")
        self.export_button.clicked.connect(self.export_selected)
        close = QPushButton("Close")
        close.clicked.connect(self.accept)
        for b in (self.rename_button, self.delete_button, self.import_button, self.export_button):
            row.addWidget(b)
        row.addStretch(1)
        row.addWidget(close)
        layout.addLayout(row)
        audio.playback_stopped.connect(self._on_playback_stopped)
        self.reload()

    # ---- list ---------------------------------------------------------------------------------
    def reload(self, select_id: str | None = None) -> None:
        try:
            self.infos = self.library.list()
        except OSError as err:
            self.infos = []
            self.banner.show_message(f"The voice folder {self.library.folder} cannot be read ({err.strerror}).")
        self._fill(select_id)

    def _fill(self, select_id: str | None = None) -> None:
        select_id = select_id or self.selected_id()
        query = self.search.text()
        self.voice_list.blockSignals(True)
        self.voice_list.clear()
        for info in self.infos:
            if not matches(info, query):
                continue
            text = (f"{info.name}  ·  {info.duration_seconds:.1f} s" if info.problem is None
                    else f"{info.name} (unusable)")
            item = QListWidgetItem(text)
            item.setData(Qt.ItemDataRole.UserRole, info.id)
            item.setToolTip(info.problem or info.transcript)
            self.voice_list.addItem(item)
        self.voice_list.blockSignals(False)
        ids = self.visible_ids()
        self.voice_list.setCurrentRow(ids.index(select_id) if select_id in ids else (0 if ids else -1))
        self._show_selected()

    def visible_ids(self) -> list[str]:
        return [self.voice_list.item(i).data(Qt.ItemDataRole.UserRole) for i in range(self.voice_list.count())]

    def selected_id(self) -> str | None:
        item = self.voice_list.currentItem()
        return item.data(Qt.ItemDataRole.UserRole) if item is not None else None

    def selected_info(self):
        vid = self.selected_id()
        return next((i for i in self.infos if i.id == vid), None)

    def _show_selected(self) -> None:
        info = self.selected_info()
        has = info is not None
        usable = has and info.problem is None
        for b in (self.rename_button, self.delete_button):
            b.setEnabled(has)
        self.export_button.setEnabled(usable)
        self.use_button.setEnabled(usable)
        self.play_button.setEnabled(usable and info.reference_audio is not None and self.audio.status.can_play)
        if self.audio.playing_owner == OWNER:
            self.audio.stop()
        if not has:
            self.title.setText("No voices yet" if not self.infos else "No voice matches the search")
            self.facts.setText("")
            self.transcript.setPlainText("")
            return
        self.title.setText(info.name)
        if info.problem is not None:
            self.facts.setText(info.problem)
        else:
            clip = "its reference clip is kept" if info.reference_audio else "no reference clip (imported)"
            created = f" · saved {info.created[:10]}" if info.created else ""
            self.facts.setText(f"id {info.id} · {info.duration_seconds:.1f} s · {clip}{created}")
        self.transcript.setPlainText(info.transcript)

    # ---- preview ------------------------------------------------------------------------------
    def preview_samples(self):
        """The selected voice's reference clip (read once per voice), or None."""
        info = self.selected_info()
        if info is None or info.reference_audio is None:
            return None
        if self._preview is None or self._preview[0] != info.id:
            try:
                samples = read_audio(info.reference_audio, check_reference=False)
            except S2Error as err:
                self.banner.show_message(str(err))
                return None
            self._preview = (info.id, samples)
        return self._preview[1]

    def toggle_preview(self) -> None:
        if self.audio.playing_owner == OWNER:
            self.audio.stop()
            return
        samples = self.preview_samples()
        if samples is not None and self.audio.play_clip(OWNER, samples, CODEC_SAMPLE_RATE):
            self.play_button.setText("■ Stop")

    def _on_playback_stopped(self, owner: str) -> None:
        if owner == OWNER:
            self.play_button.setText("▶ Play clip")

    # ---- changes ------------------------------------------------------------------------------
    def _use(self) -> None:
        info = self.selected_info()
        if info is not None and info.problem is None:
            self.use_requested.emit(info.id)
            self.accept()

    def rename_selected(self) -> None:
        info = self.selected_info()
        if info is None:
            return
        name = self.ask_text("Rename voice", "New name:", info.name)
        if not name:
            return
        try:
            self.library.rename(info.id, name)
        except (S2Error, OSError) as err:
            self.banner.show_message(str(err))
            return
        self._done_change(info.id)

    def delete_selected(self) -> None:
        info = self.selected_info()
        if info is None or not self.confirm(f"Delete the voice “{info.name}”? Its files are removed from the "
                                            "voice folder."):
            return
        if self.audio.playing_owner == OWNER:
            self.audio.stop()
        try:
            self.library.delete(info.id)
        except (S2Error, OSError) as err:
            self.banner.show_message(str(err))
            return
        self._done_change("")

    def import_voice(self, path: str | None = None) -> str | None:
        """Add an .s2voice file to the library; the new id. Its name: the one it was saved under
        (the sidecar an export writes beside it), else the file's; made unique."""
        path = path or self.ask_open_path()
        if not path:
            return None
        try:
            profile = read_s2voice(path)  # validates the whole file first
            info = self.library.save(None, profile.codes, profile.transcript, name=self._free_name(saved_name_beside(path, profile) or Path(path).stem),
                                     sample_rate=profile.sample_rate, codebook_size=profile.codebook_size)
        except (S2Error, OSError) as err:
            self.banner.show_message(str(err) if isinstance(err, S2Error) else
                                     f"Could not import {path}: {err.strerror or err}")
            return None
        self._done_change(info.id)
        return info.id

    def export_selected(self, path: str | None = None) -> str | None:
        info = self.selected_info()
        if info is None or info.problem is not None:
            return None
        path = path or self.ask_save_path(info.id + VOICE_SUFFIX)
        if not path:
            return None
        if not path.lower().endswith(VOICE_SUFFIX):
            path += VOICE_SUFFIX
        try:
            check_output_path(path)
            profile = self.library.get(info.id).profile
            data = encode_s2voice(profile)
            with atomic_output(path) as fh:
                fh.write(data)
            # the name travels beside it (s2.cpp's file has no room for one); never over another .json
            sidecar = str(Path(path).with_suffix(SIDECAR_SUFFIX))
            if is_voice_sidecar(sidecar):
                with atomic_output(sidecar) as fh:
                    fh.write(name_sidecar_bytes(profile, info.name))
        except (S2Error, OSError) as err:
            self.banner.show_message(str(err) if isinstance(err, S2Error) else
                                     f"Could not write {path}: {err.strerror or err}")
            return None
        self.banner.hide()
        return path

    def _free_name(self, name: str) -> str:
        taken = {i.name.casefold() for i in self.infos}
        candidate, n = name, 2
        while candidate.casefold() in taken:
            candidate, n = f"{name} ({n})", n + 1
        return candidate

    def _done_change(self, select_id: str) -> None:
        self.banner.hide()
        self._preview = None
        self.reload(select_id or None)
        self.changed.emit(select_id)

    # Dialog hooks: separate methods so tests can answer them without a modal loop.
    def ask_text(self, title: str, label: str, default: str) -> str | None:
        text, ok = QInputDialog.getText(self, title, label, text=default)
        return text.strip() if ok and text.strip() else None

    def confirm(self, question: str) -> bool:
        return QMessageBox.question(self, "s2studio", question) == QMessageBox.StandardButton.Yes

    def ask_open_path(self) -> str | None:
        path, _ = QFileDialog.getOpenFileName(self, "Import a voice", "", f"s2studio / s2.cpp voice (*{VOICE_SUFFIX})")
        return path or None

    def ask_save_path(self, suggestion: str) -> str | None:
        path, _ = QFileDialog.getSaveFileName(self, "Export the voice", os.path.join(str(Path.home()), suggestion),
                                              f"s2studio / s2.cpp voice (*{VOICE_SUFFIX})")
        return path or None

    def done(self, result: int) -> None:
        if self.audio.playing_owner == OWNER:
            self.audio.stop()
        try:
            self.audio.playback_stopped.disconnect(self._on_playback_stopped)
        except (RuntimeError, TypeError):
            pass
        super().done(result)
