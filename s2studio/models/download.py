"""Model downloads from Hugging Face: resume and checksum (Qt-free; the app and ``s2studio models``).

The file is streamed into ``<name>.part`` beside its destination. Cancelling (or losing the
connection) keeps the part, and the next attempt continues from its end with an HTTP Range
request. When all bytes are there the whole file is hashed and compared with what the Hub
publishes (the LFS sha256 for model files, the git blob sha1 for small files); only a match is
renamed to the final name, so a partial or corrupt file never looks complete.

``huggingface_hub`` is imported lazily and only inside :class:`HuggingFaceClient`, which asks
the Hub at ``HF_ENDPOINT`` (``huggingface_hub``'s own setting; the tests point it at a fake Hub
on loopback). Unit tests pass a fake client with the same two methods.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Protocol

from s2studio.errors import S2Error

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20


class DownloadError(S2Error):
    """A download that failed; the message says why and what to do."""


class DownloadCancelled(S2Error):
    def __init__(self) -> None:
        super().__init__("The download was cancelled; starting it again continues where it stopped.")


@dataclass(frozen=True)
class RemoteFile:
    url: str
    size: int
    checksum: str  # hex digest
    algorithm: str  # "sha256" (LFS files) | "git-sha1" (small files stored in git)


class HubClient(Protocol):
    def describe(self, repo: str, filename: str) -> RemoteFile: ...

    def stream(self, url: str, start: int) -> "StreamResponse": ...


class StreamResponse(Protocol):
    resumed: bool  # True when the server honoured the Range request

    def __enter__(self) -> "StreamResponse": ...

    def __exit__(self, *exc) -> None: ...

    def chunks(self) -> Iterator[bytes]: ...


OFFLINE_MESSAGE = ("Could not reach huggingface.co: this computer seems to be offline (or a firewall blocks it). "
                   "Try again when you are online, or download the files on another computer and choose them "
                   "(in the app: “Choose model file…” and “Choose tokenizer.json…” above; on the command line: -m FILE).")


def _explain(err: BaseException) -> str:
    name = type(err).__name__
    detail = " ".join(str(err).split())  # the Hub's messages span lines; ours are one sentence
    if name == "OfflineModeIsEnabled":
        return "Downloads are switched off (HF_HUB_OFFLINE is set). Choose files that are already on this computer."
    if name in ("RepositoryNotFoundError", "EntryNotFoundError", "RemoteEntryNotFoundError", "RevisionNotFoundError"):
        return f"The file is not on Hugging Face where expected ({detail}). Download it by hand and choose it (in the app: the buttons above; on the command line: -m FILE)."
    if name == "GatedRepoError":
        return "This Hugging Face repository needs you to log in and accept its licence first."
    if name in ("RemoteProtocolError", "ReadError") or "peer closed" in str(err):
        return ("The connection to huggingface.co broke off during the download; start it again to continue "
                "where it stopped.")
    if isinstance(err, OSError) or "Connect" in name or "Timeout" in name or "Network" in name or "Proxy" in name:
        return OFFLINE_MESSAGE
    return f"The download failed: {detail}"


class HuggingFaceClient:
    """The real Hub, through ``huggingface_hub`` (imported only when a download starts)."""

    def describe(self, repo: str, filename: str) -> RemoteFile:
        from huggingface_hub import get_hf_file_metadata, hf_hub_url

        meta = get_hf_file_metadata(hf_hub_url(repo, filename))
        etag = (meta.etag or "").strip('"').lower()
        algorithm = "sha256" if len(etag) == 64 else "git-sha1" if len(etag) == 40 else ""
        if not algorithm or meta.size is None:
            raise DownloadError(f"Hugging Face did not publish a checksum for {filename}; refusing to download "
                                "a file that cannot be verified.")
        return RemoteFile(meta.location or hf_hub_url(repo, filename), int(meta.size), etag, algorithm)

    def stream(self, url: str, start: int) -> StreamResponse:
        return _HttpxStream(url, start)


class _HttpxStream:
    def __init__(self, url: str, start: int):
        self._url, self._start = url, start
        self._ctx = None
        self._response = None
        self.resumed = False

    def __enter__(self):
        from huggingface_hub.utils import get_session

        headers = {"Range": f"bytes={self._start}-"} if self._start else {}
        self._ctx = get_session().stream("GET", self._url, headers=headers, follow_redirects=True, timeout=30)
        self._response = self._ctx.__enter__()
        self._response.raise_for_status()
        self.resumed = self._start > 0 and self._response.status_code == 206
        return self

    def __exit__(self, *exc):
        if self._ctx is not None:
            self._ctx.__exit__(*exc)

    def chunks(self) -> Iterator[bytes]:
        return self._response.iter_bytes(CHUNK_BYTES)


def _new_hasher(algorithm: str, size: int):
    h = hashlib.sha256() if algorithm == "sha256" else hashlib.sha1()
    if algorithm == "git-sha1":
        h.update(f"blob {size}\0".encode())  # git hashes a header before the content
    return h


def download_file(client: HubClient, repo: str, filename: str, folder: Path, *, cancel: threading.Event,
                  progress: Callable[[int, int], None] = lambda done, total: None) -> Path:
    """Download ``filename`` from ``repo`` into ``folder``; returns the verified file's path.

    Raises :class:`DownloadCancelled` (the ``.part`` is kept for resuming) or
    :class:`DownloadError` with a readable reason (offline, not found, checksum mismatch)."""
    final = folder / filename
    part = folder / (filename + ".part")
    try:
        remote = client.describe(repo, filename)
        folder.mkdir(parents=True, exist_ok=True)
        if final.is_file() and final.stat().st_size == remote.size and _digest_of(final, remote) == remote.checksum:
            progress(remote.size, remote.size)
            return final
        have = part.stat().st_size if part.is_file() else 0
        if have > remote.size:
            have = 0  # a part from another version of the file: start over
        hasher = _new_hasher(remote.algorithm, remote.size)
        with client.stream(remote.url, have) as response:
            if have and not response.resumed:
                have = 0  # the server ignored the Range request: it sends everything again
            if have:
                _hash_existing(part, have, hasher)
            with open(part, "r+b" if have else "wb") as out:
                out.seek(have)
                out.truncate()
                done = have
                progress(done, remote.size)
                for block in response.chunks():
                    if cancel.is_set():
                        raise DownloadCancelled()
                    out.write(block)
                    hasher.update(block)
                    done += len(block)
                    progress(done, remote.size)
                out.flush()
                os.fsync(out.fileno())
        if done != remote.size:
            raise DownloadError(f"The download of {filename} stopped early ({done} of {remote.size} bytes); "
                                "start it again to continue.")
        if hasher.hexdigest() != remote.checksum:
            part.unlink(missing_ok=True)
            raise DownloadError(f"{filename} was downloaded but its checksum does not match what Hugging Face "
                                "publishes, so it was deleted. Please try again.")
        os.replace(part, final)
        return final
    except (DownloadCancelled, DownloadError):
        raise
    except Exception as err:  # network/library errors of any kind become one sentence
        # info, not warning: the caller shows the sentence; the log (the app's file) keeps the cause
        log.info("download of %s/%s failed: %r", repo, filename, err)
        raise DownloadError(_explain(err)) from err


def _hash_existing(path: Path, length: int, hasher) -> None:
    with open(path, "rb") as f:
        remaining = length
        while remaining:
            block = f.read(min(CHUNK_BYTES, remaining))
            if not block:
                break
            hasher.update(block)
            remaining -= len(block)


def _digest_of(path: Path, remote: RemoteFile) -> str:
    h = _new_hasher(remote.algorithm, remote.size)
    _hash_existing(path, remote.size, h)
    return h.hexdigest()
