"""The real app against a real sound server (tests/sound_server.py: a private PulseAudio with a
null sink whose monitor the test records, and a virtual microphone the test plays into).
Skipped, with the reason, where no server can be started.

The audio is compared block by block (``follow``: 50 ms blocks sample for sample, in order,
with a stated budget for under-runs on a busy machine); latencies are printed, not asserted."""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest

import s2test_sound_server as server_kit

RATE = server_kit.RATE
GLITCH_BUDGET = 0.85  # share of 50 ms blocks that must come out sample for sample
UNDERRUN_BUDGET = 1.0  # seconds of inserted silence allowed in a recording
STOP_SILENCE_SECONDS = 0.1


@pytest.fixture
def real_sound(no_audio, sound_server, monkeypatch, request):
    """Undo tests/app's "no PortAudio" default, then use the real sounddevice on the server."""
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if type(f).__name__ != "_NoPortAudio"])
    request.getfixturevalue("real_sounddevice")
    yield sound_server
    sound_server.replug()


def _window(make_window, fast_settings, tts_model, **overrides):
    window = make_window(fast_settings(tts_model, output_device="pulse", input_device="pulse", **overrides))
    assert window.audio.status.can_play and window.audio.status.can_record, window.audio.status.reason
    return window


def _warm_up(window, qtbot):
    """One take without sound first: the model loads, so the take under test is not late by that."""
    window.audio.status, status = type(window.audio.status)(False, False, "warming up"), window.audio.status
    window.editor.set_text("Warm up.")
    window.generate()
    qtbot.waitUntil(lambda: not window.generating, timeout=120_000)
    window.audio.status = status


def _noise(seconds, seed):
    rng = np.random.default_rng(seed)
    x = np.convolve(rng.standard_normal(int(seconds * RATE)), np.ones(4) / 4, mode="same")
    return (0.3 * x / np.max(np.abs(x))).astype(np.float32)


def test_live_playback_while_generating_reaches_the_speakers_in_order(real_sound, make_window, fast_settings,
                                                                    tts_model, qtbot):
    window = _window(make_window, fast_settings, tts_model, max_new_tokens=48)
    _warm_up(window, qtbot)
    chunks, buffers = [], []
    window.audio.position_changed.connect(lambda owner, _pos: buffers.append(window.audio.live_buffer))
    window.worker.chunk.connect(lambda samples, rate: chunks.append(np.array(samples, np.float32)))
    window.editor.set_text("Hello there, this is a test.")
    capture = real_sound.record_monitor()
    window.generate()
    qtbot.waitUntil(lambda: not window.generating, timeout=120_000)
    qtbot.waitUntil(lambda: window.audio.playing_owner == "", timeout=30_000)  # plays out, then stops by itself
    recorded = capture.stop()
    sent = np.concatenate(chunks)
    take = window.output.current.audio
    assert len(take) == len(sent) and np.array_equal(take, sent)  # the take is what was played
    delivery = server_kit.follow(recorded, sent)
    underruns = max((b.underruns for b in buffers if b is not None), default=0)
    print(f"\nlive playback: {delivery.summary()} ({len(sent) / RATE:.2f} s take, "
          f"{underruns} jitter-buffer under-runs, i.e. times the model fell behind real time)")
    assert delivery.matched >= GLITCH_BUDGET * delivery.blocks > 10, delivery.summary()
    # The stated budget: a pause only where the jitter buffer ran dry (the model behind real time on
    # this machine; it then waits for its pre-roll, however long that takes) plus two device glitches.
    assert delivery.in_order and delivery.gap_count <= underruns + 2, delivery.summary()


def test_stop_silences_the_speakers_within_100_ms(real_sound, make_window, fast_settings, tts_model, qtbot,
                                                   tmp_path):
    """A clip of noise (every block unique) plays; Stop. By content: nothing after the samples
    handed to the device before Stop is heard. By time: the monitor is silent from 100 ms after
    Stop (the mark comes from the recording's own clock, see Capture.sample_at)."""
    import soundfile as sf

    window = _window(make_window, fast_settings, tts_model)
    clip = _noise(4.0, seed=9)
    sf.write(tmp_path / "noise.wav", clip, RATE, subtype="FLOAT")
    panel = window.voice_panel
    assert panel.load_reference_file(tmp_path / "noise.wav")
    capture = real_sound.record_monitor()
    panel.play_button.click()
    assert window.audio.playing_owner == "reference"
    qtbot.waitUntil(lambda: window.audio._source.position > RATE, timeout=20_000)
    handed = window.audio._source.position  # read by the device's callback so far
    stopped_at = time.monotonic()
    panel.play_button.click()  # Stop
    assert window.audio.playing_owner == ""
    qtbot.wait(1000)  # the recording goes on well past the stop
    mark = capture.sample_at(stopped_at)
    recorded = capture.stop()
    delivery = server_kit.follow(recorded, clip)
    after = np.flatnonzero(np.abs(recorded[mark:]) > 1e-4)
    last_sound = (after[-1] / RATE) if len(after) else 0.0
    print(f"\nstop: {handed / RATE:.2f} s handed to the device before Stop, heard until "
          f"{delivery.heard_until / RATE:.2f} s of the clip; sound until {last_sound * 1000:.0f} ms after Stop")
    assert delivery.matched >= 0.5 * RATE / (0.05 * RATE)  # it was playing the clip
    assert delivery.heard_until <= handed + int(0.05 * RATE)  # nothing after Stop (one 50 ms block of slack)
    assert last_sound <= STOP_SILENCE_SECONDS


def test_stop_during_live_playback_keeps_the_take(real_sound, make_window, fast_settings, tts_model, qtbot):
    """Stop while a take plays as it is made: playback ends at once and the take so far is kept.
    (The tiny model's random audio repeats itself, so it cannot show by content what was heard
    after Stop; the clip test above does that.)"""
    window = _window(make_window, fast_settings, tts_model, max_new_tokens=200)
    _warm_up(window, qtbot)
    window.editor.set_text("Hello there, this is a longer test of the stop button.")
    window.generate()
    qtbot.waitUntil(lambda: window.audio.live_buffer is not None and window.audio.live_buffer.played > RATE // 2,
                    timeout=120_000)
    if window.generating:
        window.stop()
    else:  # a fast machine made the whole take already: Stop is then the output's Pause
        window.output.toggle_play()
    assert window.audio.playing_owner == ""  # at once, before the worker even sees the cancel
    qtbot.waitUntil(lambda: not window.generating, timeout=60_000)
    assert window.output.current is not None and len(window.output.current.audio)  # the take is kept


def test_playback_from_a_sentence_starts_there(real_sound, make_window, fast_settings, tts_model, qtbot):
    window = _window(make_window, fast_settings, tts_model, max_new_tokens=24, segmentation_enabled=True)
    window.editor.set_text("First one here. Second one there. Third one last.")
    window.generate()
    qtbot.waitUntil(lambda: not window.generating, timeout=120_000)
    qtbot.waitUntil(lambda: window.audio.playing_owner == "", timeout=30_000)
    view = window.segments_view
    take = window.output.current.audio
    spans = view.take.spans()
    assert len(spans) == 3
    capture = real_sound.record_monitor()
    view.table.selectRow(1)
    view.play_button.click()  # ▶ From here
    assert window.audio.playing_owner == "output"
    qtbot.waitUntil(lambda: window.audio.playing_owner == "", timeout=30_000)
    recorded = capture.stop()
    start, _end = spans[1]
    delivery = server_kit.follow(recorded, take[start:])
    first_sound = int(np.flatnonzero(np.abs(recorded) > 1e-4)[0])
    print(f"\nfrom sentence 2 (sample {start}): {delivery.summary()}; first sound at {first_sound / RATE * 1000:.0f} ms")
    # what is heard is the take from sentence 2 on, sample for sample, in order ...
    assert delivery.matched >= GLITCH_BUDGET * delivery.blocks > 10, delivery.summary()
    assert delivery.in_order and delivery.gap_count <= 2, delivery.summary()
    # ... and it is the first thing heard (one 50 ms block of slack: a stream's first block may be torn)
    assert abs(delivery.start - first_sound) <= 0.06 * RATE


def test_unplugging_the_speakers_mid_play_gives_a_banner_and_keeps_the_take(real_sound, make_window,
                                                                           fast_settings, tts_model, qtbot):
    window = _window(make_window, fast_settings, tts_model, max_new_tokens=120)
    window.editor.set_text("Hello there, this is a test of a speaker pulled out.")
    window.generate()
    qtbot.waitUntil(lambda: window.audio.playing_owner == "output", timeout=120_000)
    real_sound.unplug_all_speakers()
    qtbot.waitUntil(lambda: window.notice_banner.isVisible(), timeout=10_000)
    assert "sound output stopped" in window.notice_banner.text
    assert window.audio.playing_owner == ""
    qtbot.waitUntil(lambda: not window.generating, timeout=120_000)
    assert window.output.current is not None and len(window.output.current.audio) > 0  # generation went on


def test_the_recorder_captures_the_microphone(real_sound, make_window, fast_settings, tts_model, qtbot):
    window = _window(make_window, fast_settings, tts_model)
    panel = window.voice_panel
    signal = _noise(2.0, seed=5)
    panel.record_button.click()
    assert window.audio.recording
    qtbot.waitUntil(lambda: float(panel.elapsed_label.text().split()[0]) >= 0.2, timeout=10_000)
    levels = []
    feeder = real_sound.play_into_microphone(signal)
    deadline = time.monotonic() + 15
    while feeder.poll() is None and time.monotonic() < deadline:
        qtbot.wait(40)
        levels.append(panel.level_meter.level)
    qtbot.wait(1000)
    panel.record_button.click()
    assert not window.audio.recording
    assert max(levels) > 0.1  # the meter moved
    delivery = server_kit.follow(panel.reference, signal)
    print(f"\napp recording: {delivery.summary()}")
    assert delivery.matched >= GLITCH_BUDGET * delivery.blocks > 30, delivery.summary()
    assert delivery.in_order and delivery.gap_seconds <= UNDERRUN_BUDGET, delivery.summary()


def test_unplugging_the_microphone_mid_record_gives_a_banner_and_keeps_the_recording(real_sound, make_window,
                                                                                     fast_settings, tts_model, qtbot):
    window = _window(make_window, fast_settings, tts_model)
    panel = window.voice_panel
    panel.record_button.click()
    qtbot.waitUntil(lambda: float(panel.elapsed_label.text().split()[0]) >= 0.5, timeout=10_000)
    real_sound.unplug_all_microphones()
    qtbot.waitUntil(lambda: not window.audio.recording, timeout=10_000)
    assert window.notice_banner.isVisible() and "microphone stopped" in window.notice_banner.text
    assert not panel.record_button.isChecked()
    assert panel.reference is not None and len(panel.reference) >= 0.4 * RATE  # the recording so far
