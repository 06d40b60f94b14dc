"""Loudness: ITU-R BS.1770 measurement (pyloudnorm), normalisation to a preset with a peak
limiter, the ACX audiobook checks, and room tone (docs/book.md, "Mastering").

Presets:

========== ============================== ================
preset     target                         peak ceiling
========== ============================== ================
acx        RMS −20 dBFS (ACX: −23…−18)    −3.5 dBFS (ACX: ≤ −3; margin for MP3 encoding)
podcast    −16 LUFS integrated            −1 dBFS
ebu-r128   −23 LUFS integrated            −1 dBFS
none       untouched                      —
========== ============================== ================

The gain is found by measuring, applying and limiting, then measuring again (the limiter lowers
loud speech a little, so a second pass corrects it), until the target is met within 0.1 dB/LU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

ROOM_TONE_DBFS = -75.0  # below ACX's −60 dB noise floor, but not digital silence (ACX flags that)


@dataclass(frozen=True)
class LoudnessPreset:
    name: str
    measure: str  # "lufs" | "rms" | "none"
    target: float
    peak_ceiling_dbfs: float


PRESETS = {
    "acx": LoudnessPreset("acx", "rms", -20.0, -3.5),
    "podcast": LoudnessPreset("podcast", "lufs", -16.0, -1.0),
    "ebu-r128": LoudnessPreset("ebu-r128", "lufs", -23.0, -1.0),
    "none": LoudnessPreset("none", "none", 0.0, 0.0),
}


def preset(name: str) -> LoudnessPreset:
    from s2studio.errors import InputError

    if name not in PRESETS:
        raise InputError(f"There is no loudness preset {name!r}; choose one of {', '.join(PRESETS)}.")
    return PRESETS[name]


def db(x: float) -> float:
    return 20 * math.log10(x) if x > 0 else -math.inf


def integrated_lufs(samples: np.ndarray, sample_rate: int) -> float:
    """BS.1770-4 integrated loudness (gated); −inf for silence or audio under 0.4 s."""
    import pyloudnorm

    x = np.asarray(samples, dtype=np.float64)
    if len(x) < int(0.4 * sample_rate) + 1 or not np.any(x):
        return -math.inf
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "possible clipped samples": measured as they are
        return float(pyloudnorm.Meter(sample_rate).integrated_loudness(x))


def rms_dbfs(samples: np.ndarray) -> float:
    x = np.asarray(samples, dtype=np.float64)
    return db(float(np.sqrt(np.mean(x * x)))) if len(x) else -math.inf


def peak_dbfs(samples: np.ndarray) -> float:
    return db(float(np.max(np.abs(samples)))) if len(samples) else -math.inf


def noise_floor_dbfs(samples: np.ndarray, sample_rate: int, window_s: float = 0.5) -> float:
    """The RMS of the quietest ``window_s`` window (hop: half a window): the room tone's level,
    as ACX measures it."""
    x = np.asarray(samples, dtype=np.float64)
    win = max(1, int(window_s * sample_rate))
    if len(x) < win:
        return rms_dbfs(x)
    c = np.concatenate([[0.0], np.cumsum(x * x)])
    starts = np.arange(0, len(x) - win + 1, max(1, win // 2))
    return db(float(np.sqrt(np.min(c[starts + win] - c[starts]) / win)))


def limit_peaks(samples: np.ndarray, sample_rate: int, ceiling_dbfs: float, window_ms: float = 5.0) -> np.ndarray:
    """A look-ahead peak limiter: the gain each sample needs to stay under the ceiling, spread
    by a minimum filter and smoothed by a moving average of the same width (so the smoothed gain
    is never above what any sample needs: no overshoot, no clicks)."""
    from scipy.ndimage import minimum_filter1d, uniform_filter1d

    x = np.asarray(samples, dtype=np.float32)
    ceiling = 10 ** (ceiling_dbfs / 20)
    mag = np.abs(x)
    if not len(x) or mag.max() <= ceiling:
        return x
    need = np.minimum(1.0, ceiling / np.maximum(mag, 1e-12))
    width = max(1, int(window_ms * sample_rate / 1000))
    gain = minimum_filter1d(need, size=2 * width + 1, mode="nearest")
    gain = uniform_filter1d(gain, size=2 * width + 1, mode="nearest")
    gain = np.minimum(gain, need)  # the float rounding of the average must not overshoot either
    return (x * gain).astype(np.float32)


def normalise(samples: np.ndarray, sample_rate: int, target: LoudnessPreset) -> np.ndarray:
    """``samples`` at the preset's loudness with its peaks under the ceiling (RMS over the whole
    file, pauses included, as ACX measures it)."""
    x = np.asarray(samples, dtype=np.float32)
    if target.measure == "none" or not np.any(x):
        return x
    out = x
    gain_db = 0.0
    for _ in range(10):  # the limiter lowers the level a little each time: converges in 2-4
        level = _level(out, sample_rate, target)
        if not math.isfinite(level):
            return out
        error = target.target - level
        if abs(error) <= 0.1:
            break
        gain_db += error
        out = limit_peaks(x * np.float32(10 ** (gain_db / 20)), sample_rate, target.peak_ceiling_dbfs)
    return out


def _level(x: np.ndarray, rate: int, target: LoudnessPreset) -> float:
    if target.measure == "rms":
        return rms_dbfs(x)
    return integrated_lufs(x, rate)


def room_tone(n: int, seed: int = 0, level_dbfs: float = ROOM_TONE_DBFS) -> np.ndarray:
    """``n`` samples of quiet, deterministic noise (low-passed, so it sounds like a room, not hiss)."""
    if n <= 0:
        return np.zeros(0, np.float32)
    rng = np.random.default_rng(seed)
    white = rng.standard_normal(n + 8)
    brown = np.convolve(white, np.ones(8) / 8, mode="valid")[:n]
    brown *= 10 ** (level_dbfs / 20) / max(float(np.sqrt(np.mean(brown * brown))), 1e-12)
    return brown.astype(np.float32)


@dataclass(frozen=True)
class LoudnessReport:
    duration_s: float
    integrated_lufs: float
    rms_dbfs: float
    peak_dbfs: float
    noise_floor_dbfs: float

    @property
    def acx_problems(self) -> list[str]:
        """What fails ACX's audio requirements (empty: it passes)."""
        problems = []
        if not -23.0 <= self.rms_dbfs <= -18.0:
            problems.append(f"RMS {self.rms_dbfs:.1f} dB (ACX: -23 to -18)")
        if self.peak_dbfs > -3.0:
            problems.append(f"peak {self.peak_dbfs:.1f} dBFS (ACX: at most -3)")
        if self.noise_floor_dbfs > -60.0:
            problems.append(f"noise floor {self.noise_floor_dbfs:.1f} dB (ACX: at most -60)")
        return problems

    @property
    def acx_pass(self) -> bool:
        return not self.acx_problems


def measure(samples: np.ndarray, sample_rate: int) -> LoudnessReport:
    x = np.asarray(samples, dtype=np.float32)
    return LoudnessReport(len(x) / sample_rate, integrated_lufs(x, sample_rate), rms_dbfs(x), peak_dbfs(x),
                          noise_floor_dbfs(x, sample_rate))
