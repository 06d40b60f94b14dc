"""The app's model download: :func:`s2studio.models.download.download_file` on its own QThread.

The download itself (resume, checksum, readable errors) is Qt-free in ``s2studio/models/`` and
shared with ``s2studio models pull``; the names are re-exported here for the app's widgets.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from PySide6.QtCore import QObject, QThread, Signal, Slot

from s2studio.errors import S2Error
from s2studio.models.catalog import MODEL_REPO, TOKENIZER_FILE, VARIANTS  # noqa: F401 - re-exported
from s2studio.models.download import (  # noqa: F401 - re-exported
    OFFLINE_MESSAGE,
    DownloadCancelled,
    DownloadError,
    HubClient,
    HuggingFaceClient,
    RemoteFile,
    download_file,
)

log = logging.getLogger(__name__)


class ModelDownloader(QObject):
    """Downloads the model and tokenizer on its own QThread; ``cancel()`` is thread-safe."""

    progress = Signal(str, int, int)  # file name, bytes done, bytes total
    file_done = Signal(str, str)  # file name, local path
    finished = Signal()
    failed = Signal(str)
    cancelled = Signal()

    def __init__(self, files: list[str], folder: Path, client: HubClient | None = None, repo: str = MODEL_REPO):
        super().__init__()
        self.files, self.folder, self.repo = list(files), folder, repo
        self.client = client or HuggingFaceClient()
        self._cancel = threading.Event()
        self.thread = QThread()
        self.thread.setObjectName("download")
        self.moveToThread(self.thread)
        self.thread.started.connect(self._run)

    def start(self) -> None:
        self.thread.start()

    def cancel(self) -> None:
        self._cancel.set()

    def wait(self, ms: int = 10_000) -> bool:
        self.cancel()
        self.thread.quit()
        return self.thread.wait(ms)

    @Slot()
    def _run(self) -> None:
        try:
            for name in self.files:
                path = download_file(self.client, self.repo, name, self.folder, cancel=self._cancel,
                                     progress=lambda done, total, n=name: self.progress.emit(n, done, total))
                self.file_done.emit(name, str(path))
            self.finished.emit()
        except DownloadCancelled:
            self.cancelled.emit()
        except S2Error as err:
            self.failed.emit(str(err))
        except Exception as err:  # noqa: BLE001 - never let an exception leave the thread
            log.exception("download failed")
            self.failed.emit(f"Unexpected error while downloading: {err}")
        finally:
            self.thread.quit()
