"""Checks that a reference recording can usefully be given to the codec.

s2.cpp checks nothing: an unreadable, empty or silent reference makes it warn and synthesize
*without* the voice, which a user only notices after waiting for the result. We refuse such
input up front with an :class:`AudioInputError` that names the file and the problem.

The limits, and why:

* **At least one code frame of audio** (2048 samples at 44.1 kHz, about 46 ms). The codec turns
  every 2048 samples into one code frame and pads the tail with zeros; anything shorter is
  encoded as a single frame that is mostly padding, which carries no usable voice.
  (The S2 README recommends 5-30 s; :data:`RECOMMENDED_REFERENCE_SECONDS` lets the app warn
  about short or long references without refusing them.)
* **Not silent**: the peak must reach 1e-4 (-80 dBFS, about 3 LSB of 16-bit audio). Below that
  the file is digital silence or dither, e.g. a recording made with a muted microphone.
* **Finite**: float files can hold NaN/Inf, which would poison every code the encoder computes.
* **At most 60 s by default** (``max_seconds``). Each second of reference becomes ~21.5 prompt
  columns; every column costs KV-cache memory (~144 KiB each on the real model) and prefill
  attention grows with the square of the prompt length. 60 s (~1300 columns) is twice the
  README's upper recommendation, which still leaves room for a long, varied sample while
  stopping someone from dropping in a whole podcast by mistake. Callers may pass another limit,
  or ``None`` for none.
"""

from __future__ import annotations

import math
import os

import numpy as np

from s2studio.errors import AudioInputError

CODEC_SAMPLE_RATE = 44100
# 512 (hop) x 2 x 2 (quantizer downsampling): samples per code frame at 44.1 kHz.
SAMPLES_PER_CODE_FRAME = 2048
MIN_REFERENCE_SECONDS = SAMPLES_PER_CODE_FRAME / CODEC_SAMPLE_RATE
DEFAULT_MAX_REFERENCE_SECONDS = 60.0
SILENCE_PEAK_THRESHOLD = 1e-4
RECOMMENDED_REFERENCE_SECONDS = (5.0, 30.0)


def min_reference_samples(sample_rate: int) -> int:
    """Fewest samples at ``sample_rate`` that still make one full code frame at 44.1 kHz."""
    return int(math.ceil(SAMPLES_PER_CODE_FRAME * sample_rate / CODEC_SAMPLE_RATE))


def check_duration(
    n_samples: int,
    sample_rate: int,
    path: str | os.PathLike[str] | None,
    max_seconds: float | None = DEFAULT_MAX_REFERENCE_SECONDS,
) -> None:
    """Length checks only, so a file header can be judged before decoding the whole file."""
    if n_samples == 0:
        raise AudioInputError(path, "contains no audio (0 samples).")
    seconds = n_samples / sample_rate
    if n_samples < min_reference_samples(sample_rate):
        raise AudioInputError(
            path,
            f"is too short ({seconds * 1000:.0f} ms); a reference needs at least "
            f"{MIN_REFERENCE_SECONDS * 1000:.0f} ms of audio, ideally 5-30 s.",
        )
    if max_seconds is not None and seconds > max_seconds:
        raise AudioInputError(
            path,
            f"is too long ({seconds:.1f} s); references are limited to {max_seconds:g} s "
            f"(5-30 s is recommended). Cut it to a shorter clip.",
        )


def validate_reference(
    samples: np.ndarray,
    sample_rate: int,
    path: str | os.PathLike[str] | None = None,
    *,
    max_seconds: float | None = DEFAULT_MAX_REFERENCE_SECONDS,
) -> None:
    """Raise :class:`AudioInputError` unless ``samples`` (mono) is a usable reference.

    ``path`` is only used in the message; pass ``None`` for in-memory (recorded) audio.
    """
    x = np.asarray(samples)
    if x.ndim != 1:
        raise ValueError(f"reference samples must be mono (1-D), got shape {x.shape}")
    if sample_rate <= 0:
        raise AudioInputError(path, f"has an invalid sample rate ({sample_rate} Hz).")
    check_duration(x.shape[0], sample_rate, path, max_seconds)
    if not np.all(np.isfinite(x)):
        raise AudioInputError(path, "contains invalid samples (NaN or infinity).")
    peak = float(np.max(np.abs(x)))
    if peak < SILENCE_PEAK_THRESHOLD:
        raise AudioInputError(path, "is silent; record or choose a clip where the voice is audible.")
