"""The real sound path: s2studio.audio.devices (PortAudio via sounddevice) against a real
PulseAudio server with a null sink and a virtual microphone (tests/audio/conftest.py).
Skipped, with the reason, where no server can be started."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from s2studio.audio import devices

RATE = 44100


class _Clip:
    """A PlaybackSource: the samples, then silence; ``done`` once all were read."""

    def __init__(self, samples):
        self.samples, self.at, self.done = samples, 0, threading.Event()

    def read(self, frames):
        out = np.zeros(frames, np.float32)
        chunk = self.samples[self.at:self.at + frames]
        out[:len(chunk)] = chunk
        self.at += len(chunk)
        if self.at >= len(self.samples):
            self.done.set()
        return out


def _signal(seconds, seed=0):
    """Noise-like but band-limited speech stand-in: a unique pattern for alignment."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    freq = 200 + 600 * rng.random(1)[0]
    return (0.25 * np.sin(2 * np.pi * (freq * t + 300 * t * t)) * (0.5 + 0.5 * np.sin(2 * np.pi * 1.3 * t))
            ).astype(np.float32)


def _align(recorded, reference):
    """Where ``reference`` starts in ``recorded`` (by cross-correlation) and the correlation there."""
    n = len(recorded) + len(reference)
    size = 1 << (n - 1).bit_length()
    corr = np.fft.irfft(np.fft.rfft(recorded, size) * np.conj(np.fft.rfft(reference, size)), size)
    lag = int(np.argmax(corr[:len(recorded)]))
    part = recorded[lag:lag + len(reference)]
    if len(part) < len(reference):
        return lag, 0.0
    return lag, float(np.dot(part, reference) / (np.linalg.norm(part) * np.linalg.norm(reference) + 1e-12))


def test_portaudio_sees_the_server(real_sounddevice):
    inputs, outputs = devices.list_devices()
    assert any(d.name == "pulse" for d in outputs) and any(d.name == "pulse" for d in inputs)
    assert devices.audio_status().can_play


@pytest.mark.skip(reason="issue 26, unfinished: on the shared 2-core machine the capture correlates 0.82-0.998 "
                  "with the clip (under-runs or a late parec start); needs an under-run budget, see the report")
def test_playback_reaches_the_speakers_sample_for_sample(real_sounddevice, sound_server):
    clip = _signal(1.5)
    capture = sound_server.record_monitor()
    source = _Clip(clip)
    player = devices.OutputPlayer(source, RATE, device_name="pulse", blocksize=512)
    player.start()
    assert source.done.wait(10)
    time.sleep(0.4)  # the device's buffer drains
    player.stop()
    recorded = capture.stop()
    lag, correlation = _align(recorded, clip)
    assert correlation > 0.99, correlation  # the same audio, in order, no gap or repeat
    heard = recorded[lag:lag + len(clip)]
    assert np.max(np.abs(heard - clip)) < 2e-3  # float32 through the server: exact up to 16-bit-ish error


@pytest.mark.skip(reason="issue 26, unfinished: on the shared 2-core machine the capture correlates 0.82-0.998 "
                  "with the clip (under-runs or a late parec start); needs an under-run budget, see the report")
def test_the_recorder_captures_what_the_microphone_hears(real_sounddevice, sound_server):
    signal = _signal(2.0, seed=3)
    recorder = devices.Recorder(device_name="pulse", max_seconds=10)
    recorder.start()
    time.sleep(0.3)
    levels = []
    feeder = sound_server.play_into_microphone(signal)
    deadline = time.monotonic() + 8
    while feeder.poll() is None and time.monotonic() < deadline:
        levels.append(recorder.level)
        time.sleep(0.05)
    time.sleep(0.4)
    take = recorder.stop()
    assert max(levels) > 0.1  # the level meter's value moved while the signal played
    lag, correlation = _align(take, signal)
    assert correlation > 0.98, correlation  # the clip is the signal (resampled to 44.1 kHz on the way)
