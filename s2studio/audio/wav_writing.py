"""Writing WAV files and converting float audio to 16-bit PCM the way s2.cpp does.

* Offline output is 32-bit IEEE float mono WAV, samples written as they are, **not clipped**
  (s2.cpp ``audio_write_wav``). ``subtype="PCM_16"`` writes 16-bit instead, converted with
  :func:`float_to_pcm16` rather than libsndfile's own rounding so the bytes match s2.cpp's
  streaming output.
* Writes are atomic (see :mod:`s2studio.audio.atomic_file`).
"""

from __future__ import annotations

import io
import os
import struct

import numpy as np
import soundfile as sf

from s2studio.audio.atomic_file import commit_temp, fsync_path, make_temp_beside, remove_quietly
from s2studio.audio.validation import CODEC_SAMPLE_RATE

WAV_SUBTYPES = ("FLOAT", "PCM_16")
PCM16_HEADER_BYTES = 44
# s2.cpp writes this in both size fields of a streaming header whose length is not yet known.
STREAMING_PLACEHOLDER_SIZE = 0x7FFFFFF0


def float_to_pcm16(samples: np.ndarray) -> np.ndarray:
    """Float samples to int16 exactly as s2.cpp ``audio_to_pcm16``.

    Clamp to [-1, 1]; exactly 1.0 becomes 32767; anything else becomes ``int(s * 32768)`` in
    float32, truncated toward zero (so -1.0 -> -32768, 0.5 -> 16384, -0.99999 -> -32767).
    NaN becomes 0 (in C++ it is undefined behaviour).
    """
    x = np.asarray(samples, dtype=np.float32)
    clamped = np.clip(np.nan_to_num(x, nan=0.0), np.float32(-1.0), np.float32(1.0))
    scaled = clamped * np.float32(32768.0)
    # 1.0 * 32768 does not fit in int16; s2.cpp special-cases it to INT16_MAX.
    scaled = np.where(clamped >= np.float32(1.0), np.float32(32767.0), scaled)
    return scaled.astype(np.int16)  # float -> int casts truncate toward zero, like C


def pcm16_wav_header(sample_rate: int = CODEC_SAMPLE_RATE, data_bytes: int | None = None) -> bytes:
    """44-byte mono PCM16 WAV header.

    With ``data_bytes=None`` both size fields hold s2.cpp's placeholder 0x7FFFFFF0, for a
    stream whose length is unknown (the HTTP server sends this). Otherwise RIFF size =
    36 + data_bytes and data size = data_bytes, i.e. file bytes - 8 and file bytes - 44.
    """
    if data_bytes is None:
        riff_size = data_size = STREAMING_PLACEHOLDER_SIZE
    else:
        riff_size = PCM16_HEADER_BYTES - 8 + data_bytes
        data_size = data_bytes
    channels, bits = 1, 16
    block_align = channels * bits // 8
    return struct.pack(
        "<4sI4s4sIHHIIHH4sI",
        b"RIFF", riff_size, b"WAVE",
        b"fmt ", 16, 1, channels, sample_rate, sample_rate * block_align, block_align, bits,
        b"data", data_size,
    )  # fmt: skip


def _checked_mono(samples: np.ndarray, sample_rate: int, subtype: str) -> np.ndarray:
    if subtype not in WAV_SUBTYPES:
        raise ValueError(f"unknown WAV subtype {subtype!r}; expected one of {WAV_SUBTYPES}")
    if sample_rate <= 0:
        raise ValueError(f"sample rate must be positive, got {sample_rate}")
    x = np.asarray(samples, dtype=np.float32)
    if x.ndim != 1:
        raise ValueError(f"expected mono (1-D) samples, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        # NaN/Inf output means an engine bug; a file full of it would only hide the bug.
        raise ValueError("refusing to write audio containing NaN or infinity")
    return x


def _write_to(target, x: np.ndarray, sample_rate: int, subtype: str) -> None:
    data = float_to_pcm16(x) if subtype == "PCM_16" else x
    sf.write(target, data, sample_rate, subtype=subtype, format="WAV")


def write_wav(
    path: str | os.PathLike[str],
    samples: np.ndarray,
    sample_rate: int = CODEC_SAMPLE_RATE,
    *,
    subtype: str = "FLOAT",
) -> None:
    """Atomically write mono ``samples`` to ``path`` as a WAV file.

    ``subtype="FLOAT"`` (default) is s2.cpp's 32-bit float output; ``"PCM_16"`` converts with
    :func:`float_to_pcm16`. On any error the destination is untouched (an existing file keeps
    its old content) and no temporary file is left behind; the error is re-raised.
    """
    dest = os.fspath(path)
    x = _checked_mono(samples, sample_rate, subtype)
    fd, temp_path = make_temp_beside(dest)
    try:
        os.close(fd)
        _write_to(temp_path, x, sample_rate, subtype)
        fsync_path(temp_path)
        commit_temp(temp_path, dest)
    except BaseException:
        remove_quietly(temp_path)
        raise


def wav_bytes(samples: np.ndarray, sample_rate: int = CODEC_SAMPLE_RATE, *, subtype: str = "FLOAT") -> bytes:
    """The WAV file :func:`write_wav` would write, as bytes (for HTTP responses)."""
    x = _checked_mono(samples, sample_rate, subtype)
    buffer = io.BytesIO()
    _write_to(buffer, x, sample_rate, subtype)
    return buffer.getvalue()
