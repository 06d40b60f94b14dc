"""Post-processing matches s2.cpp's arithmetic on hand-computed signals."""

from __future__ import annotations

import math

import numpy as np
import pytest

from s2studio.audio import apply_postprocess, dynamic_normalize, peak_normalize, trim_trailing_silence

SR = 44100
f32 = np.float32


# ------------------------------------------------------------------------- peak normalize


def test_peak_normalize_scales_down_to_095():
    x = np.array([0.1, -2.0, 0.5], dtype=f32)
    y = peak_normalize(x)
    scale = f32(0.95) / f32(2.0)
    np.testing.assert_array_equal(y, x * scale)
    assert np.max(np.abs(y)) == pytest.approx(0.95)
    assert x[1] == -2.0  # input untouched


def test_peak_normalize_scales_up():
    y = peak_normalize(np.array([0.01, -0.02], dtype=f32))
    np.testing.assert_allclose(y, [0.475, -0.95], rtol=1e-6)


def test_peak_normalize_leaves_near_silence_alone():
    x = np.array([1e-6, -5e-7, 0.0], dtype=f32)  # peak not > 1e-6
    np.testing.assert_array_equal(peak_normalize(x), x)
    np.testing.assert_array_equal(peak_normalize(np.zeros(0, f32)), np.zeros(0, f32))


def test_peak_normalize_custom_target():
    np.testing.assert_allclose(peak_normalize(np.array([0.5, -0.25], f32), target=1.0), [1.0, -0.5])


# ----------------------------------------------------------------------- trailing silence
# At 44.1 kHz: min silence (size_t)(0.08f*44100) = 3528, tail kept 441, minimum length 4410.


def loud_then_quiet(n_loud: int, n_quiet: int, quiet_level: float = 0.0) -> np.ndarray:
    return np.concatenate([np.full(n_loud, 0.5, f32), np.full(n_quiet, quiet_level, f32)])


def test_trim_cuts_10ms_after_last_loud_sample():
    x = loud_then_quiet(10000, 5000, quiet_level=0.009)  # 0.009 is below the 0.01 threshold
    y = trim_trailing_silence(x, SR)
    assert y.size == 10000 + 441
    np.testing.assert_array_equal(y, x[:10441])


def test_trim_needs_at_least_3528_silent_samples():
    assert trim_trailing_silence(loud_then_quiet(10000, 3528), SR).size == 10441
    x = loud_then_quiet(10000, 3527)
    np.testing.assert_array_equal(trim_trailing_silence(x, SR), x)


def test_trim_tail_is_capped_at_input_length():
    # 3528 quiet samples but keep_tail (441) fits: cut = min(n, last+1+441).
    x = loud_then_quiet(5000, 3600)
    assert trim_trailing_silence(x, SR).size == 5441


def test_trim_keeps_at_least_100ms():
    x = loud_then_quiet(100, 20000)
    # cut would be 100 + 441 = 541 < 4410, so 4410 samples are kept.
    assert trim_trailing_silence(x, SR).size == 4410


def test_trim_minimum_is_capped_by_input_length():
    # Loud up to index 9, then 3990 silent samples (>= 3528): cut 451 < 4410 -> min(4410, 4000).
    x = loud_then_quiet(10, 3990)
    np.testing.assert_array_equal(trim_trailing_silence(x, SR), x)


def test_trim_threshold_is_strict():
    x = loud_then_quiet(10000, 5000, quiet_level=0.01)  # exactly the threshold: not loud
    assert trim_trailing_silence(x, SR).size == 10441
    x[-1] = 0.0101  # a loud last sample: nothing follows it, no cut
    np.testing.assert_array_equal(trim_trailing_silence(x, SR), x)


def test_trim_never_looks_at_index_zero():
    # Only x[0] is loud: the scan (n-1 down to 1) finds nothing, and s2.cpp's callers keep
    # the audio unchanged because the full "any sample loud" check does see x[0].
    x = np.zeros(10000, f32)
    x[0] = 0.9
    np.testing.assert_array_equal(trim_trailing_silence(x, SR), x)
    # With x[1] loud instead, the cut happens.
    x[0], x[1] = 0.0, 0.9
    assert trim_trailing_silence(x, SR).size == 4410


def test_trim_all_quiet_returns_input_unchanged():
    x = np.full(20000, 0.005, f32)
    y = trim_trailing_silence(x, SR)
    np.testing.assert_array_equal(y, x)
    assert y is not x
    assert trim_trailing_silence(np.zeros(0, f32), SR).size == 0
    assert trim_trailing_silence(np.array([0.5], f32), SR).size == 1


def test_trim_uses_sample_rate_and_falls_back_to_44k():
    # At 1 kHz: min silence 80, tail 10, minimum 100 samples.
    x = loud_then_quiet(300, 80)
    assert trim_trailing_silence(x, 1000).size == 310
    x = loud_then_quiet(300, 79)
    assert trim_trailing_silence(x, 1000).size == 379
    # sample_rate <= 0 means 44100.
    x = loud_then_quiet(10000, 5000)
    assert trim_trailing_silence(x, 0).size == 10441


# ---------------------------------------------------------------------- dynamic normalize


def test_dynamic_normalize_hand_computed():
    # sr = 4: window 4 samples, hop 2. Windows start at 0, 2, 4, 6 (the last holds 2 samples).
    x = np.array([0.1] * 4 + [0.4] * 4, dtype=f32)
    env = [0.1, math.sqrt((2 * 0.01 + 2 * 0.16) / 4), 0.4, 0.4]
    target = sum(env) / 4
    # Sample i reads position i / 2 between window RMS values; past the end the last is held.
    rms = [env[0], (env[0] + env[1]) / 2, env[1], (env[1] + env[2]) / 2, env[2], 0.4, 0.4, 0.4]
    expected = [xi * (target / r) for xi, r in zip(x.tolist(), rms)]
    np.testing.assert_allclose(dynamic_normalize(x, 4), expected, rtol=1e-6)


def test_dynamic_normalize_gain_is_capped_at_4():
    # Window RMS: 0.01, sqrt((2e-4 + 2) / 4), 1, 1 -> target ~0.679, so sample 0 (RMS 0.01)
    # would get gain ~68; it gets 4.
    x = np.array([0.01] * 4 + [1.0] * 4, dtype=f32)
    y = dynamic_normalize(x, 4)
    env1 = math.sqrt((2 * 0.0001 + 2) / 4)
    target = (0.01 + env1 + 1 + 1) / 4
    np.testing.assert_allclose(y[0], 0.04, rtol=1e-6)
    # Sample 1 sits half way between windows 0 and 1: gain target / mean(0.01, env1) < 4.
    np.testing.assert_allclose(y[1], 0.01 * target / ((0.01 + env1) / 2), rtol=1e-5)
    np.testing.assert_allclose(y[4:], target, rtol=1e-6)


def test_dynamic_normalize_clips_to_unit_range():
    # A lone loud click in a quiet stretch, followed by loud audio that lifts the target.
    x = np.array([0.9] + [0.0] * 7 + [0.9] * 8, dtype=f32)
    env = [0.45, 0.0, 0.0, math.sqrt(2 * 0.81 / 4), 0.9, 0.9, 0.9, 0.9]
    target = sum(env) / len(env)
    assert 0.9 * target / env[0] > 1.0  # the gain pushes the click past full scale...
    y = dynamic_normalize(x, 4)
    assert y[0] == 1.0  # ...so it is clipped
    assert np.all(y[1:8] == 0.0)
    np.testing.assert_allclose(y[8:], target, rtol=1e-5)


def test_dynamic_normalize_keeps_gain_1_where_rms_is_tiny():
    # The first windows have RMS 1e-7 (<= 1e-6): those samples pass through untouched, even
    # though the target (pulled up by the loud end) is far above them.
    x = np.array([1e-7] * 6 + [0.5] * 2, dtype=f32)
    y = dynamic_normalize(x, 4)
    np.testing.assert_array_equal(y[:2], x[:2])


def test_dynamic_normalize_can_attenuate():
    x = np.array([0.8] * 4 + [0.1] * 4, dtype=f32)
    y = dynamic_normalize(x, 4)
    assert abs(y[0]) < 0.8  # no lower bound on the gain


def test_dynamic_normalize_evens_out_speech_level():
    t = np.arange(4 * SR) / SR
    carrier = np.sin(2 * np.pi * 220 * t)
    level = np.where(t < 2.0, 0.1, 0.4)
    x = (carrier * level).astype(f32)
    y = dynamic_normalize(x, SR)
    assert y.dtype == np.float32 and y.shape == x.shape

    def rms(a):
        return float(np.sqrt(np.mean(a.astype(np.float64) ** 2)))

    # Away from the transition, both halves end up near the same loudness (input ratio 4).
    quiet, loud = y[int(0.2 * SR) : int(0.8 * SR)], y[int(3.2 * SR) : int(3.8 * SR)]
    assert rms(loud) / rms(quiet) == pytest.approx(1.0, abs=0.15)


def test_dynamic_normalize_empty_and_tiny_rates():
    assert dynamic_normalize(np.zeros(0, f32), SR).size == 0
    # s2.cpp would divide by a zero hop for sample_rate 1; we use a hop of one sample.
    assert dynamic_normalize(np.array([0.5, 0.25], f32), 1).shape == (2,)


# --------------------------------------------------------------------------- the chain


def test_apply_postprocess_defaults_change_nothing():
    x = np.array([0.3, -0.2] * 3000 + [0.0] * 5000, dtype=f32)
    y = apply_postprocess(x, SR)
    np.testing.assert_array_equal(y, x)
    assert y is not x


def test_apply_postprocess_order_trim_dynamic_peak():
    t = np.arange(3 * SR) / SR
    speech = (np.sin(2 * np.pi * 180 * t) * np.where(t < 1.5, 0.05, 0.3)).astype(f32)
    x = np.concatenate([speech, np.zeros(SR, f32)])
    y = apply_postprocess(x, SR, trim_silence=True, normalize=True, dynamic_normalize=True)
    expected = peak_normalize(dynamic_normalize(trim_trailing_silence(x, SR), SR))
    np.testing.assert_array_equal(y, expected)
    # Peak runs last, so the peak is exactly 0.95 however dynamic left it.
    assert float(np.max(np.abs(y))) == pytest.approx(0.95, rel=1e-6)
    # And trimming ran first: the second of silence is gone (dynamic would not shorten it).
    assert y.size < x.size - SR // 2
    # The other order would not give the same samples.
    assert not np.array_equal(y, dynamic_normalize(peak_normalize(trim_trailing_silence(x, SR)), SR))


def test_apply_postprocess_single_steps():
    x = np.concatenate([np.full(10000, 0.2, f32), np.zeros(5000, f32)])
    assert apply_postprocess(x, SR, trim_silence=True).size == 10441
    np.testing.assert_array_equal(apply_postprocess(x, SR, normalize=True), peak_normalize(x))
    np.testing.assert_array_equal(apply_postprocess(x, SR, dynamic_normalize=True), dynamic_normalize(x, SR))


def test_postprocess_rejects_multichannel():
    with pytest.raises(ValueError, match="mono"):
        peak_normalize(np.zeros((4, 2), f32))
