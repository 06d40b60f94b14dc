"""Output post-processing, reproducing s2.cpp's float32 arithmetic (docs/spec/codec.md §8.3).

All steps are off by default. Each function takes mono float32 audio and returns a new array;
the input is never modified. The constants are s2.cpp's.

Checked against s2.cpp's own ``s2_audio.cpp`` compiled with ``g++ -O2``: trim and dynamic
normalization are bit-identical at 16/22.05/44.1 kHz. A ``-march=native`` build lets the
compiler fuse multiply-adds in dynamic normalization, which moves a few percent of samples by
one float32 ulp (6e-8); no numpy code can follow that.
"""

from __future__ import annotations

import numpy as np

from s2studio.audio.validation import CODEC_SAMPLE_RATE

TRIM_THRESHOLD = 0.01
TRIM_MIN_SILENCE_SECONDS = 0.08
PEAK_TARGET = 0.95

_f32 = np.float32


def _as_f32(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 1:
        raise ValueError(f"expected mono (1-D) samples, got shape {x.shape}")
    return x


def _seconds_to_samples(seconds: float, sample_rate: int) -> int:
    # s2.cpp computes these as a float32 product, then truncates: (size_t)(0.08f * sr).
    return int(_f32(seconds) * _f32(sample_rate))


def peak_normalize(samples: np.ndarray, target: float = PEAK_TARGET) -> np.ndarray:
    """Scale so the largest |sample| is ``target``; scales up as well as down.

    Audio whose peak is <= 1e-6 (silence) is returned unchanged rather than amplified to noise.
    """
    x = _as_f32(samples)
    if x.size == 0:
        return x.copy()
    peak = np.max(np.abs(x))
    if not peak > _f32(1e-6):
        return x.copy()
    scale = _f32(target) / peak
    return x * scale


def trim_trailing_silence(
    samples: np.ndarray,
    sample_rate: int = CODEC_SAMPLE_RATE,
    *,
    threshold: float = TRIM_THRESHOLD,
    min_silence_seconds: float = TRIM_MIN_SILENCE_SECONDS,
) -> np.ndarray:
    """Cut a silent tail, as s2.cpp ``audio_trim_trailing_silence`` and its callers.

    Finds the last sample with |x| > ``threshold``, scanning down to index 1 (s2.cpp never
    tests index 0). If at least ``min_silence_seconds`` of samples follow it, the audio is cut
    10 ms after it, but never to less than 0.1 s (or the whole input, if shorter). Otherwise,
    and when nothing exceeds the threshold, the audio is returned unchanged. (s2.cpp's function
    returns an empty vector for the all-quiet case, and every caller then keeps the original.)
    """
    x = _as_f32(samples)
    n = x.size
    if sample_rate <= 0:
        sample_rate = CODEC_SAMPLE_RATE
    min_silence = _seconds_to_samples(min_silence_seconds, sample_rate)
    keep_tail = _seconds_to_samples(0.01, sample_rate)
    min_length = _seconds_to_samples(0.1, sample_rate)

    loud = np.flatnonzero(np.abs(x[1:]) > _f32(threshold))
    if loud.size == 0:
        return x.copy()
    last_loud = int(loud[-1]) + 1  # +1: the scan started at index 1
    if n - 1 - last_loud < min_silence:
        return x.copy()
    cut = min(n, last_loud + 1 + keep_tail)
    if cut < min_length:
        cut = min(min_length, n)
    return x[:cut].copy()


def _window_rms(x: np.ndarray, win: int, hop: int) -> np.ndarray:
    """RMS of windows [pos, pos+win) for pos = 0, hop, 2*hop, ... < n (the last ones shorter)."""
    squares = x * x
    env = []
    for pos in range(0, x.size, hop):
        window = squares[pos : pos + win]
        # cumsum accumulates left to right in float32, like s2.cpp's loop (np.sum would use
        # pairwise summation and round differently).
        total = np.cumsum(window, dtype=np.float32)[-1]
        env.append(np.sqrt(total / _f32(window.size)))
    return np.asarray(env, dtype=np.float32)


def dynamic_normalize(samples: np.ndarray, sample_rate: int = CODEC_SAMPLE_RATE) -> np.ndarray:
    """Even out loudness over time, as s2.cpp ``audio_normalize_dynamic`` (window 1 s, auto target).

    RMS is measured in 1 s windows every 0.5 s; the target is the mean window RMS. Each sample is
    multiplied by target / RMS, the RMS linearly interpolated between window starts (past the
    last window the last value is held). The gain is 1 where that RMS is <= 1e-6 (silence is
    not blown up), at most 4, with no lower bound. The result is clipped to [-1, 1].
    """
    x = _as_f32(samples)
    n = x.size
    if n == 0:
        return x.copy()
    win = max(1, int(_f32(1.0) * _f32(sample_rate)))
    # s2.cpp uses win // 2 and would loop forever for sample_rate < 2; one sample is the floor.
    hop = max(1, win // 2)
    env = _window_rms(x, win, hop)
    target = np.cumsum(env, dtype=np.float32)[-1] / _f32(env.size)

    pos_hops = np.arange(n, dtype=np.int64).astype(np.float32) / _f32(hop)
    idx0 = pos_hops.astype(np.int64)
    t = pos_hops - idx0.astype(np.float32)
    last = env.size - 1
    r0 = env[np.minimum(idx0, last)]
    r1 = env[np.minimum(idx0 + 1, last)]
    rms = r0 + t * (r1 - r0)

    audible = rms > _f32(1e-6)
    gain = np.ones(n, dtype=np.float32)
    np.divide(target, rms, out=gain, where=audible)
    gain = np.minimum(gain, _f32(4.0))
    return np.clip(x * gain, _f32(-1.0), _f32(1.0))


# apply_postprocess's keyword argument of the same name hides the function inside it.
_dynamic_normalize = dynamic_normalize


def apply_postprocess(
    samples: np.ndarray,
    sample_rate: int = CODEC_SAMPLE_RATE,
    *,
    trim_silence: bool = False,
    normalize: bool = False,
    dynamic_normalize: bool = False,
) -> np.ndarray:
    """The CLI's offline chain: trim, then dynamic normalization, then peak normalization.

    Dynamic and peak normalization can both apply (dynamic first), as in s2.cpp's CLI. (s2.cpp's
    in-memory/HTTP path applies only one of the two, dynamic taking precedence; a server that
    wants that should pass ``normalize=not dynamic_normalize``.) Streaming output gets no
    post-processing at all.
    """
    out = _as_f32(samples)
    if out.size == 0:
        return out.copy()
    if trim_silence:
        out = trim_trailing_silence(out, sample_rate)
    if dynamic_normalize:
        out = _dynamic_normalize(out, sample_rate)
    if normalize:
        out = peak_normalize(out)
    # Never hand back the caller's own array: callers may modify the result in place.
    return out.copy() if out is samples else out
