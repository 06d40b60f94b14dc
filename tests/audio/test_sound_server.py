"""The real sound path: s2studio.audio.devices (PortAudio via sounddevice) against a real
PulseAudio server with a null sink and a virtual microphone (tests/sound_server.py).
Skipped, with the reason, where no server can be started.

What is compared: the audio itself, block by block (``follow``): every block of the clip must
come out sample for sample, in order, with at most UNDERRUN_BUDGET seconds of silence inserted
between blocks (the machine running the tests may be busy). Latency is measured and printed,
bounded only loosely: these are not timing tests."""

from __future__ import annotations

import threading
import time

import numpy as np

import s2test_sound_server as server_kit
from s2studio.audio import devices

RATE = server_kit.RATE
UNDERRUN_BUDGET = 0.5  # seconds of inserted silence or dropped audio allowed over a clip (a loaded machine)
GLITCH_BUDGET = 0.85  # share of 50 ms blocks that must come out exact (one straddling each glitch fails)
LATENCY_BOUND = 2.0  # seconds; generous on purpose, the measured value is reported


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


def noise_signal(seconds, seed=0):
    """Band-limited noise at speech level: every 50 ms block is unique, so it can be found."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(int(seconds * RATE)).astype(np.float32)
    x = np.convolve(x, np.ones(4, np.float32) / 4, mode="same")  # a little smoother, still unique
    return (0.3 * x / np.max(np.abs(x))).astype(np.float32)


def test_portaudio_sees_the_server(real_sounddevice):
    inputs, outputs = devices.list_devices()
    assert any(d.name == "pulse" for d in outputs) and any(d.name == "pulse" for d in inputs)
    assert devices.audio_status().can_play


def test_playback_reaches_the_speakers_sample_for_sample(real_sounddevice, sound_server):
    clip = noise_signal(2.0)
    capture = sound_server.record_monitor()
    source = _Clip(clip)
    player = devices.OutputPlayer(source, RATE, device_name="pulse", blocksize=512)
    started_at = time.monotonic()
    player.start()
    assert source.done.wait(10)
    time.sleep(player.latency_seconds + 0.5)  # the device's buffer drains
    stream_latency = player.latency_seconds
    player.stop()
    recorded = capture.stop()
    delivery = server_kit.follow(recorded, clip)
    latency = (delivery.start - capture.sample_at(started_at)) / RATE
    print(f"\nplayback: {delivery.summary()}; start() to sound ≈ {latency * 1000:.0f} ms "
          f"(±50 ms: the null sink renders ahead and parec delivers in blocks) "
          f"(PortAudio says {stream_latency * 1000:.0f} ms)")
    assert delivery.matched >= GLITCH_BUDGET * delivery.blocks > 30, delivery.summary()  # the same audio
    assert delivery.in_order and delivery.gap_seconds <= UNDERRUN_BUDGET, delivery.summary()
    assert -0.1 < latency < LATENCY_BOUND


def test_the_recorder_captures_what_the_microphone_hears(real_sounddevice, sound_server):
    signal = noise_signal(2.0, seed=3)
    recorder = devices.Recorder(device_name="pulse", max_seconds=10)
    recorder.start()
    deadline = time.monotonic() + 5  # the stream delivers its first blocks (slow on a busy machine)
    while recorder.elapsed_seconds < 0.2 and time.monotonic() < deadline:
        time.sleep(0.02)
    levels = []
    feeder = sound_server.play_into_microphone(signal)
    deadline = time.monotonic() + 10
    while feeder.poll() is None and time.monotonic() < deadline:
        levels.append(recorder.level)
        time.sleep(0.05)
    time.sleep(1.0)  # pacat has written its last sample; the server and the recorder still hold some
    take = recorder.stop()
    assert max(levels) > 0.1  # the level meter's value moved while the signal played
    delivery = server_kit.follow(take, signal)
    print(f"\nrecording: {delivery.summary()}")
    # the microphone is opened at its own rate and resampled to 44.1 kHz: exact when that is 44.1 kHz
    assert delivery.matched >= GLITCH_BUDGET * delivery.blocks > 30, delivery.summary()
    # two real-time streams in a row here (pacat into the microphone, the recorder out of it): twice the budget
    assert delivery.in_order and delivery.gap_seconds <= 2 * UNDERRUN_BUDGET, delivery.summary()


def test_a_vanished_output_device_is_noticed(real_sounddevice, sound_server):
    player = devices.OutputPlayer(_Clip(noise_signal(5.0)), RATE, device_name="pulse")
    player.start()
    try:
        time.sleep(0.3)
        assert not player.device_lost
        sound_server.unplug_all_speakers()
        deadline = time.monotonic() + 5
        while not player.device_lost and time.monotonic() < deadline:
            time.sleep(0.05)
        assert player.device_lost
    finally:
        player.stop()  # closing a dead stream neither raises nor hangs
        sound_server.replug()
    assert not player.device_lost


def test_a_vanished_microphone_is_noticed_and_the_recording_kept(real_sounddevice, sound_server):
    recorder = devices.Recorder(device_name="pulse")
    recorder.start()
    try:
        deadline = time.monotonic() + 5
        while recorder.elapsed_seconds < 0.5 and time.monotonic() < deadline:
            time.sleep(0.05)
        sound_server.unplug_all_microphones()
        deadline = time.monotonic() + 5
        while not recorder.device_lost and time.monotonic() < deadline:
            time.sleep(0.05)
        assert recorder.device_lost
    finally:
        take = recorder.stop()
        sound_server.replug()
    assert len(take) >= 0.4 * RATE  # what was recorded before the microphone went
