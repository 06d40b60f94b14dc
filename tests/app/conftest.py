"""App test fixtures: isolated folders, a fake sound card, and workers that always stop.

The fake ``sounddevice`` has the real module's interface (``query_devices``, ``default``,
``OutputStream``, ``InputStream`` with callbacks on their own threads, at real-time pace) and
is installed in ``sys.modules`` only for tests that ask for it; every other test runs as on a
machine without PortAudio (``import sounddevice`` fails), so no test touches real hardware.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import pathlib
import shutil
import sys
import threading
import time
import types

import numpy as np
import pytest

from s2studio.audio import devices

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "data" / "golden"
TTS_MODEL = GOLDEN / "tts_f32" / "model.gguf"
CLONE_DIR = GOLDEN / "clone_f32_qknorm"


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path, monkeypatch):
    for var, sub in (("S2STUDIO_CONFIG_DIR", "config"), ("S2STUDIO_LOG_DIR", "logs"),
                     ("S2STUDIO_VOICES_DIR", "voices"), ("S2STUDIO_MODELS_DIR", "models"),
                     ("S2STUDIO_PROJECTS_DIR", "projects")):
        monkeypatch.setenv(var, str(tmp_path / sub))
    yield tmp_path


class _NoPortAudio(importlib.abc.MetaPathFinder):
    """Makes ``import sounddevice`` fail exactly as it does on Linux without libportaudio2."""

    def find_spec(self, name, path=None, target=None):
        if name == "sounddevice":
            raise OSError("PortAudio library not found")
        return None


@pytest.fixture(autouse=True)
def no_audio(monkeypatch):
    """Default: behave like a machine without PortAudio."""
    monkeypatch.delitem(sys.modules, "sounddevice", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_NoPortAudio(), *sys.meta_path])
    devices.forget_backend()
    yield
    devices.forget_backend()


class _FakeStream:
    def __init__(self, samplerate, channels, dtype, callback, device=None, blocksize=0, **_):
        self.samplerate, self.channels, self.callback, self.device = int(samplerate), channels, callback, device
        self.blocksize = blocksize or 512
        self._stop = threading.Event()
        self._thread = None
        self.frames = 0

    def start(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        period = self.blocksize / self.samplerate
        while not self._stop.is_set():
            self._tick()
            self.frames += self.blocksize
            time.sleep(period)

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)

    @property
    def active(self):  # as PortAudio's: running, not stopped and not dead
        return self._thread is not None and self._thread.is_alive() and not self._stop.is_set()

    @property
    def latency(self):
        return self.blocksize / self.samplerate

    def close(self):
        self._stop.set()

    abort = stop


class FakeOutputStream(_FakeStream):
    played: list  # every block the player wrote, for assertions

    def _tick(self):
        out = np.zeros((self.blocksize, self.channels), np.float32)
        self.callback(out, self.blocksize, None, None)
        self.played.append(out[:, 0].copy())


class FakeInputStream(_FakeStream):
    def _tick(self):
        t = (self.frames + np.arange(self.blocksize)) / self.samplerate
        block = (0.4 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)[:, None]
        self.callback(block, self.blocksize, None, None)


def make_fake_sounddevice() -> types.ModuleType:
    sd = types.ModuleType("sounddevice")
    device_list = [
        {"name": "Fake Microphone", "max_input_channels": 1, "max_output_channels": 0, "default_samplerate": 48000.0},
        {"name": "Fake Speakers", "max_input_channels": 0, "max_output_channels": 2, "default_samplerate": 44100.0},
    ]
    sd.query_devices = lambda: list(device_list)
    sd.default = types.SimpleNamespace(device=[0, 1])
    sd.played = []
    sd.streams = []

    def output_stream(**kw):
        stream = FakeOutputStream(**kw)
        stream.played = sd.played
        sd.streams.append(stream)
        return stream

    def input_stream(**kw):
        stream = FakeInputStream(**kw)
        sd.streams.append(stream)
        return stream

    sd.OutputStream = output_stream
    sd.InputStream = input_stream
    return sd


@pytest.fixture
def fake_sd(monkeypatch, no_audio):
    sd = make_fake_sounddevice()
    monkeypatch.setitem(sys.modules, "sounddevice", sd)
    devices.forget_backend()
    yield sd
    for stream in sd.streams:
        stream.stop()


@pytest.fixture
def worker_host(isolated_dirs, qapp):
    from s2studio.app.worker import WorkerThread

    host = WorkerThread(str(isolated_dirs / "voices"))
    yield host
    assert host.shutdown(20_000), "the worker thread did not stop"


@pytest.fixture(scope="session")
def tts_model(tmp_path_factory) -> pathlib.Path:
    """The tiny TTS model with its tokenizer, in a folder of its own (one path for the whole
    session, so the worker's pipeline is not reloaded for every test)."""
    folder = tmp_path_factory.mktemp("model")
    shutil.copy(TTS_MODEL, folder / "model.gguf")
    shutil.copy(TTS_MODEL.parent / "tokenizer.json", folder / "tokenizer.json")
    return folder / "model.gguf"


def _fast_settings(model_path="", **overrides):
    """Settings for tests: the tiny model, codec on the CPU, short takes."""
    from s2studio.app.settings import AppSettings

    values = dict(model_path=str(model_path), codec_mode="cpu", threads=2, max_new_tokens=8, temperature=0.8,
                  seed=7, seed_locked=True, segmentation_enabled=False)
    values.update(overrides)
    return AppSettings(**values)


@pytest.fixture
def make_window(qtbot, worker_host, isolated_dirs):
    from s2studio.app.main_window import MainWindow

    windows = []

    def build(settings, **kw):
        window = MainWindow(settings, worker_host.worker, settings_path=isolated_dirs / "config" / "settings.json",
                            **kw)
        qtbot.addWidget(window)
        # Closing while a take runs asks first (a modal question); at teardown the answer is yes.
        window.confirm_quit = lambda: True
        window.show()
        windows.append(window)
        return window

    yield build
    worker_host.worker.cancel()
    for w in windows:
        w.close()


@pytest.fixture
def fast_settings():
    """fast_settings(model_path, **overrides) -> AppSettings for a quick take."""
    return _fast_settings


@pytest.fixture
def clone_dir() -> pathlib.Path:
    return CLONE_DIR


def _reject_visible_dialogs() -> None:
    """Reject every visible dialog (each returns from its own event loop)."""
    from PySide6.QtWidgets import QApplication, QDialog

    for w in QApplication.topLevelWidgets():
        if isinstance(w, QDialog) and w.isVisible():
            w.reject()


@contextlib.contextmanager
def answer_modal(kind, respond, *, give_up_s: float = 20.0):
    """Answer the first modal dialog of type ``kind`` opened inside the ``with`` block, as a
    person would: ``respond(dialog)`` once it is visible. The block holds the action that
    opens the dialog (it blocks in the dialog's own event loop until the dialog is answered)::

        with answer_modal(QFileDialog, choose) as answered:
            open_action.trigger()

    Only a dialog that opens inside the block counts: the ones already there are marked with a
    Qt property (a Python ``id`` of a wrapper can be reused by a new dialog's wrapper, and
    ``activeModalWidget()`` may be a dialog an earlier test left behind). If the block has not
    ended ``give_up_s`` after it began (no such dialog, or the answer opened another modal,
    such as Qt's own "file not found"), every visible dialog is rejected, again and again until
    the action returns: the test then fails instead of hanging the run. ``answered``: the
    dialogs answered (0 or 1)."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    for w in QApplication.topLevelWidgets():
        if isinstance(w, kind):
            w.setProperty("s2test_earlier", True)
    answered: list = []
    running = [True]
    deadline = time.monotonic() + give_up_s

    def poll():
        if not running[0]:
            return
        if not answered:
            fresh = [w for w in QApplication.topLevelWidgets()
                     if isinstance(w, kind) and w.isVisible() and not w.property("s2test_earlier")]
            if fresh:
                answered.append(fresh[0])
                respond(fresh[0])
        if time.monotonic() >= deadline:  # gave up: close whatever is modal so the action returns
            _reject_visible_dialogs()
        QTimer.singleShot(20, poll)

    QTimer.singleShot(0, poll)
    try:
        yield answered
    finally:
        running[0] = False


UNANSWERED_MODAL_S = 60.0  # a modal dialog open this long with nobody answering it fails the test


@pytest.fixture(autouse=True)
def no_dialog_left_open(request):
    """No modal dialog may hang the run: one that stays open ``UNANSWERED_MODAL_S`` (a test
    opened it without answering it, e.g. an unexpected question box) is rejected, so the blocked
    call returns, and the test fails naming it. A test that leaves a dialog open afterwards would
    be the modal every later test's event loop sees: what is left visible is closed."""
    if not {"qtbot", "qapp"} & set(request.fixturenames):
        yield
        return
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QDialog

    request.getfixturevalue("qapp")
    unanswered: list[str] = []
    seen = {"widget": None, "since": 0.0}

    def watch():
        modal = QApplication.activeModalWidget()
        now = time.monotonic()
        if modal is None or modal is not seen["widget"]:
            seen["widget"], seen["since"] = modal, now
        elif now - seen["since"] > UNANSWERED_MODAL_S:
            unanswered.append(f"{type(modal).__name__} {modal.windowTitle()!r}")
            modal.close()
            if isinstance(modal, QDialog):
                modal.reject()
            seen["widget"] = None

    watchdog = QTimer()
    watchdog.setInterval(1000)
    watchdog.timeout.connect(watch)
    watchdog.start()
    yield
    watchdog.stop()
    _reject_visible_dialogs()
    assert not unanswered, f"a modal dialog was left unanswered for {UNANSWERED_MODAL_S:.0f} s: {unanswered}"
