"""Model downloads: resume, checksum, cancel, offline — with a fake Hub (no network here)."""

from __future__ import annotations

import hashlib
import threading

import pytest

from s2studio.app.downloads import (
    OFFLINE_MESSAGE,
    DownloadCancelled,
    DownloadError,
    HuggingFaceClient,
    RemoteFile,
    download_file,
)

PAYLOAD = bytes(range(256)) * 40  # 10 KiB


class FakeHub:
    """Serves ``files`` in small chunks; honours Range; can fail after N bytes or be offline."""

    def __init__(self, files, *, chunk=1000, fail_after=None, offline=False, honour_range=True, checksum=None):
        self.files, self.chunk, self.fail_after = files, chunk, fail_after
        self.offline, self.honour_range, self.checksum = offline, honour_range, checksum
        self.ranges = []

    def describe(self, repo, filename):
        if self.offline:
            raise ConnectionError("[Errno -3] Temporary failure in name resolution")
        data = self.files[filename]
        digest = self.checksum or hashlib.sha256(data).hexdigest()
        return RemoteFile(f"fake://{filename}", len(data), digest, "sha256")

    def stream(self, url, start):
        hub, data = self, self.files[url.removeprefix("fake://")]

        class Response:
            resumed = bool(start) and hub.honour_range

            def __enter__(self):
                hub.ranges.append(start)
                return self

            def __exit__(self, *exc):
                return None

            def chunks(self):
                sent = 0
                for i in range(start if self.resumed else 0, len(data), hub.chunk):
                    if hub.fail_after is not None and sent >= hub.fail_after:
                        hub.fail_after = None
                        raise ConnectionResetError("connection reset by peer")
                    sent += hub.chunk
                    yield data[i:i + hub.chunk]

        return Response()


def test_download_verifies_and_renames(tmp_path):
    seen = []
    path = download_file(FakeHub({"m.gguf": PAYLOAD}), "r", "m.gguf", tmp_path, cancel=threading.Event(),
                         progress=lambda d, t: seen.append((d, t)))
    assert path.read_bytes() == PAYLOAD and not (tmp_path / "m.gguf.part").exists()
    assert seen[-1] == (len(PAYLOAD), len(PAYLOAD)) and len(seen) > 5


def test_interrupted_download_resumes_from_the_part(tmp_path):
    hub = FakeHub({"m.gguf": PAYLOAD}, fail_after=4000)
    with pytest.raises(DownloadError, match="offline"):  # a reset connection reads as a network problem
        download_file(hub, "r", "m.gguf", tmp_path, cancel=threading.Event())
    assert (tmp_path / "m.gguf.part").stat().st_size == 4000
    path = download_file(hub, "r", "m.gguf", tmp_path, cancel=threading.Event())
    assert hub.ranges == [0, 4000] and path.read_bytes() == PAYLOAD


def test_server_ignoring_range_restarts_cleanly(tmp_path):
    (tmp_path / "m.gguf.part").write_bytes(PAYLOAD[:3000])
    hub = FakeHub({"m.gguf": PAYLOAD}, honour_range=False)
    assert download_file(hub, "r", "m.gguf", tmp_path, cancel=threading.Event()).read_bytes() == PAYLOAD


def test_checksum_mismatch_deletes_the_file(tmp_path):
    hub = FakeHub({"m.gguf": PAYLOAD}, checksum="0" * 64)
    with pytest.raises(DownloadError, match="checksum"):
        download_file(hub, "r", "m.gguf", tmp_path, cancel=threading.Event())
    assert not list(tmp_path.iterdir())


def test_cancel_keeps_the_part_for_later(tmp_path):
    cancel = threading.Event()
    progress = lambda done, total: cancel.set() if done >= 2000 else None  # noqa: E731
    with pytest.raises(DownloadCancelled):
        download_file(FakeHub({"m.gguf": PAYLOAD}), "r", "m.gguf", tmp_path, cancel=cancel, progress=progress)
    assert 0 < (tmp_path / "m.gguf.part").stat().st_size < len(PAYLOAD)
    assert not (tmp_path / "m.gguf").exists()


def test_offline_says_so_plainly(tmp_path):
    with pytest.raises(DownloadError) as err:
        download_file(FakeHub({}, offline=True), "r", "m.gguf", tmp_path, cancel=threading.Event())
    assert str(err.value) == OFFLINE_MESSAGE


def test_real_client_in_offline_mode_fails_cleanly(tmp_path, monkeypatch):
    """The real huggingface_hub path, without network: HF_HUB_OFFLINE makes it refuse at once."""
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    with pytest.raises(DownloadError, match="HF_HUB_OFFLINE|offline"):
        download_file(HuggingFaceClient(), "rodrigomt/s2-pro-gguf", "tokenizer.json", tmp_path,
                      cancel=threading.Event())


def test_welcome_page_download_with_fake_hub(qtbot, make_window, fast_settings, isolated_dirs):
    files = {"s2-pro-q8_0.gguf": PAYLOAD, "tokenizer.json": b'{"fake": true}'}
    window = make_window(fast_settings(""), client_factory=lambda: FakeHub(files))
    page = window.welcome
    page.download_button.click()
    qtbot.waitUntil(lambda: page.downloader is None and page.download_button.isEnabled(), timeout=10_000)
    assert "complete" in page.status.text()
    assert page.model_path.endswith("s2-pro-q8_0.gguf") and page.continue_button.isEnabled()
    assert (isolated_dirs / "models" / "s2-pro-q8_0.gguf").read_bytes() == PAYLOAD


def test_welcome_page_offline_message(qtbot, make_window, fast_settings):
    window = make_window(fast_settings(""), client_factory=lambda: FakeHub({}, offline=True))
    window.welcome.download_button.click()
    qtbot.waitUntil(lambda: window.welcome.download_button.isEnabled(), timeout=10_000)
    assert window.welcome.status.text() == OFFLINE_MESSAGE
