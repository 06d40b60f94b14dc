"""Loudness presets, the peak limiter, the ACX checks and room tone, on real signals."""

from __future__ import annotations

import math

import numpy as np
import pyloudnorm
import pytest

from s2studio.audio.loudness import PRESETS, limit_peaks, measure, noise_floor_dbfs, normalise, peak_dbfs, preset, \
    rms_dbfs, room_tone
from s2studio.errors import InputError

RATE = 44100


def speech_like(seconds: float = 6.0, seed: int = 0) -> np.ndarray:
    """A voiced tone (harmonics of a wavering 140 Hz) with a syllable-rate envelope, a little
    noise, pauses and one click far above the rest: a crest factor like speech's."""
    rng = np.random.default_rng(seed)
    n = int(seconds * RATE)
    t = np.arange(n) / RATE
    phase = 2 * np.pi * np.cumsum(140 + 20 * np.sin(2 * np.pi * 0.7 * t)) / RATE
    voiced = sum(np.sin(k * phase) / k for k in range(1, 8))
    envelope = np.clip(np.sin(2 * np.pi * 4 * t), 0, None) * (np.sin(2 * np.pi * 0.5 * t) > -0.3)
    x = (voiced + 0.05 * rng.standard_normal(n)) * envelope * 0.05 + 1e-4 * rng.standard_normal(n)
    x[int(1.2 * RATE)] = 0.9
    return x.astype(np.float32)


@pytest.mark.parametrize("name, target", [("podcast", -16.0), ("ebu-r128", -23.0)])
def test_lufs_presets_reach_their_target_with_peaks_under_the_ceiling(name, target):
    out = normalise(speech_like(), RATE, preset(name))
    assert abs(pyloudnorm.Meter(RATE).integrated_loudness(out.astype(np.float64)) - target) <= 0.5
    assert peak_dbfs(out) <= PRESETS[name].peak_ceiling_dbfs + 1e-3


def test_the_acx_preset_passes_acx():
    x = speech_like()
    x[: RATE // 2] = 0  # a pause that becomes room tone
    mask = np.zeros(len(x), bool)
    mask[: RATE // 2] = True
    out = normalise(x, RATE, preset("acx"))
    out[mask] += room_tone(int(mask.sum()))
    report = measure(out, RATE)
    assert report.acx_pass, report.acx_problems
    assert abs(report.rms_dbfs - (-20.0)) <= 0.5 and report.peak_dbfs <= -3.0
    assert report.noise_floor_dbfs == pytest.approx(-75.0, abs=1.0)


def test_acx_names_what_fails():
    loud = np.sin(np.arange(RATE * 2) / 5).astype(np.float32) * 0.99
    problems = measure(loud, RATE).acx_problems
    assert any("peak" in p for p in problems) and any("RMS" in p for p in problems)
    assert any("noise floor" in p for p in problems)  # no quiet part at all


def test_the_limiter_keeps_every_sample_under_the_ceiling_without_touching_quiet_parts():
    y = speech_like() * 12
    out = limit_peaks(y, RATE, -3.0)
    assert peak_dbfs(out) <= -3.0 + 1e-4
    # Samples further than two limiter windows (5 ms each) from any sample over the ceiling pass unchanged.
    over = (np.abs(y) > 10 ** (-3.0 / 20)).astype(float)
    near = np.convolve(over, np.ones(2 * 2 * 221 + 1), mode="same") > 0
    assert (~near).sum() > RATE  # the test means something
    np.testing.assert_array_equal(out[~near], y[~near])


def test_room_tone_is_quiet_deterministic_noise():
    a, b = room_tone(RATE, seed=3), room_tone(RATE, seed=3)
    np.testing.assert_array_equal(a, b)
    assert rms_dbfs(a) == pytest.approx(-75.0, abs=0.01) and np.count_nonzero(a) == len(a)
    assert noise_floor_dbfs(np.concatenate([a, speech_like(2) + 0.01]), RATE) == pytest.approx(-75.0, abs=1.0)


def test_silence_and_presets():
    assert normalise(np.zeros(RATE, np.float32), RATE, preset("podcast")).max() == 0
    assert math.isinf(measure(np.zeros(10, np.float32), RATE).integrated_lufs)
    x = speech_like(2)
    np.testing.assert_array_equal(normalise(x, RATE, preset("none")), x)
    with pytest.raises(InputError, match="acx, podcast, ebu-r128, none"):
        preset("loud")
