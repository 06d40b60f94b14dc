"""The reference workbench's measurements (s2studio/audio/reference_check.py): warnings that name
their numbers, levelling to the stated target, and the choice of the best window among given
speech regions (the detection itself: tests/engine/test_voice_activity.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from s2studio.audio import loudness, reference_check as rc

RATE = 44100


def tone(seconds: float, amplitude: float = 0.2) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (amplitude * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


def test_clipped_samples_are_counted_and_located():
    x = tone(2.0)
    x[int(0.4 * RATE):int(0.4 * RATE) + 3] = 1.0
    check = rc.check_clip(x, RATE)
    assert check.clipped_samples == 3 and check.first_clip_s == pytest.approx(0.4, abs=1e-3)
    assert any("3 clipped samples, the first at 0.4 s" in w for w in check.warnings), check.warnings


def test_a_noisy_room_is_named_with_its_level():
    rng = np.random.default_rng(1)
    x = tone(3.0) + (rng.standard_normal(3 * RATE) * 10 ** (-38 / 20)).astype(np.float32)  # noise at -38 dBFS
    x[RATE:2 * RATE] = (rng.standard_normal(RATE) * 10 ** (-38 / 20)).astype(np.float32)  # a pause: noise alone
    check = rc.check_clip(x, RATE)
    assert check.noise_floor_dbfs == pytest.approx(-38, abs=1.0)
    assert any("Noise floor -38 dBFS" in w and "quieter room" in w for w in check.warnings), check.warnings


def test_a_clean_quiet_clip_has_no_warnings_and_a_level_note():
    x = np.concatenate([tone(2.0, 0.05), np.zeros(RATE, np.float32), tone(2.0, 0.05)])
    check = rc.check_clip(x, RATE)
    assert check.warnings == []
    measured = loudness.integrated_lufs(x, RATE)
    assert check.integrated_lufs == pytest.approx(measured)
    assert f"Loudness {measured:.1f} LUFS" in check.level_note
    assert f"raised by {-20 - measured:.1f} dB" in check.level_note and "-20 LUFS" in check.level_note


def test_levelling_reaches_the_target_with_peaks_under_the_ceiling():
    for amplitude in (0.02, 0.9):
        out = rc.level_reference(np.concatenate([tone(3.0, amplitude), tone(2.0, amplitude / 3)]), RATE)
        assert loudness.integrated_lufs(out, RATE) == pytest.approx(rc.REFERENCE_TARGET_LUFS, abs=0.2)
        assert loudness.peak_dbfs(out) <= rc.REFERENCE_PEAK_CEILING_DBFS + 1e-3
    silent = np.zeros(RATE, np.float32)
    assert np.array_equal(rc.level_reference(silent, RATE), silent)
    assert not math.isfinite(rc.check_clip(silent, RATE).integrated_lufs)
    assert "saved as it is" in rc.check_clip(silent, RATE).level_note


def sec(s: float) -> int:
    return int(s * RATE)


def test_the_best_window_avoids_clipping_and_noise_and_keeps_within_5_to_30_s(long_reference_clip):
    clip = long_reference_clip
    x = clip.samples
    # speech everywhere the clip has it: 1 s words with the clip's own pauses
    speech = []
    for part, pause in (("noisy", 0.4), ("clipped", 0.4), ("clean", 0.3)):
        start, end = clip.parts[part]
        t = start
        while t + 1.0 <= end + 1e-9:
            speech.append((sec(t), sec(t + 1.0)))
            t += 1.0 + pause
    proposal = rc.best_window(x, RATE, speech)
    clean_start, clean_end = clip.parts["clean"]
    assert proposal is not None
    assert clean_start - rc.EDGE_PAD_S - 0.01 <= proposal.start / RATE and proposal.end / RATE <= clean_end + 0.01
    assert rc.MIN_WINDOW_S <= (proposal.end - proposal.start) / RATE <= rc.MAX_WINDOW_S
    assert "no clipping" in proposal.reason and "digital silence" in proposal.reason


def test_long_pauses_break_runs_and_a_30_s_run_is_cut():
    x = tone(80.0)
    words = [(sec(t), sec(t + 0.8)) for t in np.arange(0.0, 4.0, 1.0)]  # 4 s of speech: too short
    words += [(sec(t), sec(t + 0.8)) for t in np.arange(10.0, 70.0, 1.0)]  # 60 s with 0.2 s pauses
    proposal = rc.best_window(x, RATE, words)
    assert proposal is not None and proposal.start >= sec(10.0) - sec(rc.EDGE_PAD_S)
    assert (proposal.end - proposal.start) / RATE <= rc.MAX_WINDOW_S
    assert rc.best_window(x, RATE, words[:4]) is None  # no 5 s run: nothing proposed
    spread = [(sec(t), sec(t + 0.8)) for t in np.arange(0.0, 40.0, 2.5)]  # 1.7 s pauses everywhere
    assert rc.best_window(x, RATE, spread) is None
