"""s2studio.audio.devices: lazy import, friendly errors, native-rate recording, player."""

from __future__ import annotations

import importlib.abc
import sys
import threading
import time
import types

import numpy as np
import pytest

from s2studio.audio import devices


class _Raise(importlib.abc.MetaPathFinder):
    def __init__(self, exc):
        self.exc = exc

    def find_spec(self, name, path=None, target=None):
        if name == "sounddevice":
            raise self.exc
        return None


@pytest.fixture
def install(monkeypatch):
    def _install(module=None, import_error=None):
        monkeypatch.delitem(sys.modules, "sounddevice", raising=False)
        if import_error is not None:
            monkeypatch.setattr(sys, "meta_path", [_Raise(import_error), *sys.meta_path])
        else:
            monkeypatch.setitem(sys.modules, "sounddevice", module)
        devices.forget_backend()

    yield _install
    devices.forget_backend()


class _Stream:
    def __init__(self, samplerate, channels, dtype, callback, device=None, blocksize=256, **_):
        self.samplerate, self.callback, self.device, self.blocksize = samplerate, callback, device, blocksize or 256
        self.running = threading.Event()
        self.opened_with = dict(samplerate=samplerate, device=device)

    def start(self):
        self.running.set()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while self.running.is_set():
            self.tick()
            time.sleep(0.002)

    def stop(self):
        self.running.clear()
        time.sleep(0.01)

    def close(self):
        self.running.clear()


def fake_module(rate_in=48000.0):
    sd = types.ModuleType("sounddevice")
    sd.query_devices = lambda: [
        {"name": "Mic", "max_input_channels": 2, "max_output_channels": 0, "default_samplerate": rate_in},
        {"name": "Out", "max_input_channels": 0, "max_output_channels": 2, "default_samplerate": 44100.0},
    ]
    sd.default = types.SimpleNamespace(device=[0, 1])
    sd.opened = []

    class In(_Stream):
        def tick(self):
            self.callback(np.full((self.blocksize, 1), 0.25, np.float32), self.blocksize, None, None)

    class Out(_Stream):
        def tick(self):
            out = np.zeros((self.blocksize, 1), np.float32)
            self.callback(out, self.blocksize, None, None)
            sd.written.append(out[:, 0].copy())

    sd.written = []
    sd.InputStream = lambda **kw: sd.opened.append(In(**kw)) or sd.opened[-1]
    sd.OutputStream = lambda **kw: sd.opened.append(Out(**kw)) or sd.opened[-1]
    return sd


def test_missing_portaudio_is_a_friendly_error(install):
    install(import_error=OSError("PortAudio library not found"))
    with pytest.raises(devices.AudioDeviceError, match="PortAudio"):
        devices.list_devices()
    status = devices.audio_status()
    assert not status.can_play and not status.can_record and "PortAudio" in status.reason


def test_device_lists_and_status(install):
    install(fake_module())
    inputs, outputs = devices.list_devices()
    assert [d.name for d in inputs] == ["Mic"] and inputs[0].is_default and inputs[0].default_samplerate == 48000
    assert [d.name for d in outputs] == ["Out"]
    assert devices.audio_status() == devices.AudioStatus(True, True, "")


def test_recorder_opens_at_the_native_rate_and_returns_44k(install):
    sd = fake_module(rate_in=48000.0)
    install(sd)
    rec = devices.Recorder()
    rec.start()
    time.sleep(0.1)
    assert rec.level == pytest.approx(0.25)
    take = rec.stop()
    assert sd.opened[0].opened_with == {"samplerate": 48000, "device": 0}  # not a fixed 44.1 kHz (-9997)
    assert take.dtype == np.float32 and len(take) > 0
    assert abs(len(take) / 44100 - rec.elapsed_seconds) < 0.01


def test_unknown_device_name_falls_back_to_default(install):
    install(fake_module())
    player = devices.OutputPlayer(source=types.SimpleNamespace(read=lambda n: np.ones(n, np.float32)),
                                  device_name="Gone Headphones")
    player.start()
    time.sleep(0.05)
    player.stop()
    assert player.active is False


def test_player_pulls_from_its_source(install):
    sd = fake_module()
    install(sd)
    player = devices.OutputPlayer(source=types.SimpleNamespace(read=lambda n: np.full(n, 0.5, np.float32)))
    player.start()
    time.sleep(0.05)
    player.stop()
    assert sd.written and np.all(np.concatenate(sd.written) == 0.5)


def test_stream_open_failure_becomes_audio_device_error(install):
    sd = fake_module()

    def refuse(**kw):
        raise RuntimeError("Error opening InputStream: Invalid sample rate [PaErrorCode -9997]")

    sd.InputStream = refuse
    install(sd)
    with pytest.raises(devices.AudioDeviceError, match="-9997"):
        devices.Recorder().start()
