"""First run: what to get, buttons to pick the files, or a download from Hugging Face."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from s2studio.app import paths
from s2studio.app.downloads import MODEL_REPO, TOKENIZER_FILE, VARIANTS, HubClient, ModelDownloader

INTRO = (
    "<h2>Welcome to s2studio</h2>"
    "<p>s2studio speaks any text in a voice you give it, using Fish Audio's <b>S2 Pro</b> model on this "
    "computer. It needs two files once:</p>"
    "<ol>"
    f"<li><b>The model</b>, one <code>.gguf</code> file from the Hugging Face repository "
    f"<code>{MODEL_REPO}</code>. <b>s2-pro-q8_0.gguf</b> (5.6 GB) is a good default. On the CPU the "
    "model needs about <b>its file size in free memory</b> plus 1.5 GB, and a smaller file is also "
    "faster; on a GPU every variant needs about 10 GB of GPU memory.</li>"
    f"<li><b>{TOKENIZER_FILE}</b>, S2 Pro's tokenizer. Put it next to the model file and it is found "
    "automatically.</li>"
    "</ol>"
    "<p>The weights are under the Fish Audio Research License; commercial use needs a licence from Fish Audio.</p>"
)


class WelcomePage(QWidget):
    files_chosen = Signal(str, str)  # model path, tokenizer path ("" = beside the model)
    back_requested = Signal()  # leave without changing the model (shown when one is already set)

    def __init__(self, parent=None, client_factory=None):
        super().__init__(parent)
        self._client_factory = client_factory  # tests inject a fake Hub client
        self.model_path = ""
        self.tokenizer_path = ""
        self.downloader: ModelDownloader | None = None
        outer = QHBoxLayout(self)
        column = QVBoxLayout()
        outer.addStretch(1)
        outer.addLayout(column, 4)
        outer.addStretch(1)
        intro = QLabel(INTRO)
        intro.setWordWrap(True)
        intro.setTextFormat(Qt.TextFormat.RichText)
        column.addWidget(intro)

        row = QHBoxLayout()
        self.choose_model_button = QPushButton("Choose model file…")
        self.choose_model_button.clicked.connect(self._choose_model)
        self.choose_tokenizer_button = QPushButton("Choose tokenizer.json…")
        self.choose_tokenizer_button.clicked.connect(self._choose_tokenizer)
        row.addWidget(self.choose_model_button)
        row.addWidget(self.choose_tokenizer_button)
        row.addStretch(1)
        column.addLayout(row)
        self.chosen_label = QLabel("")
        self.chosen_label.setWordWrap(True)
        column.addWidget(self.chosen_label)

        column.addSpacing(12)
        column.addWidget(QLabel("<b>Or download them</b> (needs an internet connection):"))
        row = QHBoxLayout()
        self.variant = QComboBox()
        for name, size, what in VARIANTS:
            self.variant.addItem(f"{name} — {size}, {what}", name)
        self.download_button = QPushButton("Download")
        self.download_button.clicked.connect(self.start_download)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel_download)
        self.cancel_button.hide()
        row.addWidget(self.variant, 1)
        row.addWidget(self.download_button)
        row.addWidget(self.cancel_button)
        column.addLayout(row)
        self.download_folder = paths.downloads_dir()
        folder_note = QLabel(f"Files are saved in {self.download_folder}. An interrupted download continues "
                             "where it stopped; every file is checked against its published checksum.")
        folder_note.setWordWrap(True)
        column.addWidget(folder_note)
        self.progress = QProgressBar()
        self.progress.hide()
        column.addWidget(self.progress)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        column.addWidget(self.status)
        row = QHBoxLayout()
        row.addStretch(1)
        self.back_button = QPushButton("Back")
        self.back_button.setToolTip("Back to the studio, keeping the current model (Esc)")
        self.back_button.clicked.connect(self.back_requested)
        self.back_button.hide()
        row.addWidget(self.back_button)
        self.continue_button = QPushButton("Start")
        self.continue_button.setEnabled(False)
        self.continue_button.clicked.connect(self._finish)
        row.addWidget(self.continue_button)
        column.addLayout(row)
        column.addStretch(1)

    def set_can_go_back(self, can: bool) -> None:
        """Reached from Model ▸ Choose model files… with a model already set: offer a way back.
        The page is shown afresh: a message left from an earlier visit (e.g. "offline") is stale."""
        self.back_button.setVisible(can)
        if self.downloader is None:  # a download still running keeps its progress line
            self.status.setText("")

    # ---- picking files ----------------------------------------------------------------------
    def ask_open_path(self, title: str, pattern: str) -> str | None:
        path, _ = QFileDialog.getOpenFileName(self, title, "", pattern)
        return path or None

    def _choose_model(self) -> None:
        path = self.ask_open_path("Choose the S2 Pro model", "GGUF model (*.gguf)")
        if path:
            self.set_model(path)

    def _choose_tokenizer(self) -> None:
        path = self.ask_open_path("Choose tokenizer.json", "Tokenizer (tokenizer.json *.json)")
        if path:
            self.tokenizer_path = path
            self._update_chosen()

    def set_model(self, path: str) -> None:
        self.model_path = path
        self._update_chosen()

    def _tokenizer_found(self) -> bool:
        if self.tokenizer_path:
            return Path(self.tokenizer_path).is_file()
        if not self.model_path:
            return False
        folder = Path(self.model_path).parent
        return (folder / TOKENIZER_FILE).is_file() or (folder.parent / TOKENIZER_FILE).is_file()

    def _update_chosen(self) -> None:
        lines = []
        if self.model_path:
            lines.append(f"Model: {self.model_path}")
        if self.tokenizer_path:
            lines.append(f"Tokenizer: {self.tokenizer_path}")
        elif self.model_path:
            lines.append("Tokenizer: " + ("found beside the model" if self._tokenizer_found() else
                                          "not found beside the model — choose tokenizer.json"))
        self.chosen_label.setText("\n".join(lines))
        self.continue_button.setEnabled(bool(self.model_path) and self._tokenizer_found())

    def _finish(self) -> None:
        self.files_chosen.emit(self.model_path, self.tokenizer_path)

    # ---- downloading ------------------------------------------------------------------------
    def start_download(self) -> None:
        variant = self.variant.currentData()
        client: HubClient | None = self._client_factory() if self._client_factory else None
        self.downloader = ModelDownloader([variant, TOKENIZER_FILE], self.download_folder, client)
        self.downloader.progress.connect(self._on_progress)
        self.downloader.file_done.connect(self._on_file_done)
        self.downloader.finished.connect(self._on_finished)
        self.downloader.failed.connect(self._on_failed)
        self.downloader.cancelled.connect(self._on_cancelled)
        self.download_button.setEnabled(False)
        self.cancel_button.show()
        self.progress.setRange(0, 0)
        self.progress.show()
        self.status.setText(f"Connecting to Hugging Face ({MODEL_REPO})…")
        self.downloader.start()

    def cancel_download(self) -> None:
        if self.downloader is not None:
            self.downloader.cancel()

    def _on_progress(self, name: str, done: int, total: int) -> None:
        self.progress.setRange(0, 1000)
        self.progress.setValue(int(1000 * done / total) if total else 0)
        self.progress.setFormat(f"{name}: %p%")
        self.status.setText(f"Downloading {name}: {done / 1e9:.2f} of {total / 1e9:.2f} GB")

    def _on_file_done(self, name: str, path: str) -> None:
        if name.endswith(".gguf"):
            self.model_path = path
        else:
            self.tokenizer_path = path
        self._update_chosen()

    def _end_download(self, message: str) -> None:
        self.download_button.setEnabled(True)
        self.cancel_button.hide()
        self.progress.hide()
        self.status.setText(message)
        if self.downloader is not None:
            self.downloader.wait()
            self.downloader = None

    def _on_finished(self) -> None:
        self._end_download("Download complete and verified. Press Start.")

    def _on_failed(self, message: str) -> None:
        self._end_download(message)

    def _on_cancelled(self) -> None:
        self._end_download("Download cancelled. Press Download again to continue where it stopped.")
