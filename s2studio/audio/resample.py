"""Sample-rate conversion of mono float32 audio.

Two methods:

* ``"soxr"`` (default): band-limited, very-high-quality resampling. Use this for real work: it
  does not alias, so a 48 kHz reference reaches the codec without folded-back high frequencies.
* ``"linear"``: s2.cpp's ``audio_resample`` reproduced bit for bit (docs/spec/codec.md §8.1). It has no
  anti-alias filter; it exists so parity tests against s2.cpp's golden dumps can feed the codec
  exactly the samples s2.cpp fed it. Verified bit-identical to s2.cpp's compiled function
  for 8/16/22.05/24/48 kHz -> 44.1 kHz and 44.1 kHz -> 16/22.05 kHz.
"""

from __future__ import annotations

import math

import numpy as np
import soxr

RESAMPLERS = ("soxr", "linear")
MAX_RATE = 192_000  # s2studio.audio.reading.MAX_SAMPLE_RATE


def resample_linear(samples: np.ndarray, src_rate: int, dst_rate: int) -> np.ndarray:
    """s2.cpp's linear-interpolation resampler, exactly.

    out_len = ceil(n * ratio) with ratio = dst/src in double. Output sample i reads source
    position i / ratio (double): it interpolates x[floor] and x[floor+1] in double and rounds
    to float32; where floor+1 is past the end the last sample is held, and positions past the
    end give 0.
    """
    x = np.ascontiguousarray(samples, dtype=np.float32)
    n = x.shape[0]
    if src_rate == dst_rate or n == 0:
        return x.copy()
    ratio = float(dst_rate) / float(src_rate)
    out_len = int(math.ceil(n * ratio))
    pos = np.arange(out_len, dtype=np.float64) / ratio
    idx = pos.astype(np.int64)  # truncation == floor, positions are >= 0
    frac = pos - idx
    out = np.zeros(out_len, dtype=np.float32)

    interp = idx + 1 < n
    i0 = idx[interp]
    f = frac[interp]
    # float32 samples promoted to double, as in the C++ expression.
    out[interp] = (x[i0].astype(np.float64) * (1.0 - f) + x[i0 + 1].astype(np.float64) * f).astype(
        np.float32
    )
    hold = (~interp) & (idx < n)
    out[hold] = x[idx[hold]]
    return out


def resample(samples: np.ndarray, src_rate: int, dst_rate: int, method: str = "soxr") -> np.ndarray:
    """Resample mono float32 ``samples`` from ``src_rate`` to ``dst_rate`` Hz."""
    if method not in RESAMPLERS:
        raise ValueError(f"unknown resampler {method!r}; expected one of {RESAMPLERS}")
    if not (0 < src_rate <= MAX_RATE and 0 < dst_rate <= MAX_RATE):
        # An unbounded target (a project file asking for 2 GHz) would be a memory request of
        # any size; no audio this project handles needs more than a studio master's rate.
        raise ValueError(f"sample rates must be in 1..{MAX_RATE} Hz, got {src_rate} -> {dst_rate}")
    x = np.ascontiguousarray(samples, dtype=np.float32)
    if src_rate == dst_rate or x.shape[0] == 0:
        return x.copy()
    if method == "linear":
        return resample_linear(x, src_rate, dst_rate)
    return np.ascontiguousarray(soxr.resample(x, src_rate, dst_rate, quality="VHQ"), dtype=np.float32)
