"""Writing WAV files and converting float audio to 16-bit PCM the way s2.cpp does.

* Offline output is 32-bit IEEE float mono WAV, samples written as they are, **not clipped**
  (s2.cpp ``audio_write_wav``). ``subtype="PCM_16"`` writes 16-bit instead, converted with
  :func:`float_to_pcm16` rather than libsndfile's own rounding so the bytes match s2.cpp's
  streaming output.
* Writes are atomic (see :mod:`s2studio.audio.atomic_file`).
* Equal samples give equal bytes: libsndfile stamps the wall clock into a float WAV's PEAK
  chunk, and we zero that stamp, so two takes with the same seed have the same checksum.
* :func:`write_audio_file` writes the format the file name's extension names (WAV, FLAC, OGG
  Vorbis, MP3, as far as this libsndfile supports them); :func:`check_output_format` refuses
  any other extension before a caller starts slow work.
"""

from __future__ import annotations

import io
import os
import struct

import numpy as np
import soundfile as sf

from s2studio.audio.atomic_file import OutputPathError, commit_temp, fsync_path, make_temp_beside, remove_quietly
from s2studio.audio.validation import CODEC_SAMPLE_RATE

WAV_SUBTYPES = ("FLOAT", "PCM_16", "PCM_24")
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


def _clear_peak_timestamp(fh) -> None:
    """Zero the time stamp in a WAV's PEAK chunk (libsndfile writes one for float data), so
    the file depends on the samples only. ``fh`` is a seekable binary file, read-write."""
    fh.seek(0)
    riff = fh.read(12)
    if len(riff) < 12 or riff[:4] != b"RIFF" or riff[8:] != b"WAVE":
        return
    pos = 12
    while True:
        fh.seek(pos)
        head = fh.read(8)
        if len(head) < 8:
            return
        chunk_id, size = struct.unpack("<4sI", head)
        if chunk_id == b"data":
            return  # the PEAK chunk comes before the samples
        if chunk_id == b"PEAK" and size >= 8:
            fh.seek(pos + 8 + 4)  # after dwVersion: dwTimeStamp
            fh.write(b"\0\0\0\0")
            return
        pos += 8 + size + (size & 1)


# Frames handed to libsndfile per call. Its Vorbis encoder crashed the process (a segfault)
# when given a take of about a minute at once; every format is written in blocks of this size,
# which also keeps the converted copy (PCM16, clipped) one block long instead of the take's.
WRITE_BLOCK_FRAMES = 1 << 16


def write_blocks(target, x: np.ndarray, sample_rate: int, *, fmt: str, subtype: str, convert=None) -> None:
    """Write mono float32 ``x`` to ``target`` (a path or a binary file object) with libsndfile,
    :data:`WRITE_BLOCK_FRAMES` frames at a time; ``convert`` maps each block first."""
    with sf.SoundFile(target, "w", samplerate=sample_rate, channels=1, subtype=subtype, format=fmt) as f:
        for start in range(0, len(x), WRITE_BLOCK_FRAMES):
            block = x[start:start + WRITE_BLOCK_FRAMES]
            f.write(convert(block) if convert is not None else block)


def _write_to(target, x: np.ndarray, sample_rate: int, subtype: str) -> None:
    if subtype == "PCM_16":
        convert = float_to_pcm16
    elif subtype == "PCM_24":
        def convert(block):
            return np.clip(block, -1.0, 1.0)  # libsndfile would wrap a sample past full scale, not clip it
    else:
        convert = None
    write_blocks(target, x, sample_rate, fmt="WAV", subtype=subtype, convert=convert)
    if isinstance(target, io.BytesIO):
        _clear_peak_timestamp(target)
    else:
        with open(target, "r+b") as fh:
            _clear_peak_timestamp(fh)


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


# ------------------------------------------------------------------------------ other formats

# extension -> (libsndfile format, subtype). WAV keeps s2.cpp's float samples; the others
# are what people share: FLAC lossless at 24 bits, OGG Vorbis and MP3 lossy.
_FORMAT_BY_EXTENSION = {
    ".wav": ("WAV", "FLOAT"),
    ".wave": ("WAV", "FLOAT"),
    ".flac": ("FLAC", "PCM_24"),
    ".ogg": ("OGG", "VORBIS"),
    ".mp3": ("MP3", "MPEG_LAYER_III"),
}


def supported_output_extensions() -> tuple[str, ...]:
    """The extensions :func:`write_audio_file` can write with this libsndfile build (MP3
    needs libsndfile 1.1 or newer)."""
    formats = sf.available_formats()
    return tuple(ext for ext, (fmt, subtype) in _FORMAT_BY_EXTENSION.items()
                 if fmt in formats and subtype in sf.available_subtypes(fmt))


def check_output_format(path: str | os.PathLike[str]) -> tuple[str, str]:
    """(format, subtype) for an output file name, from its extension; raises
    :class:`OutputPathError` naming the supported extensions for anything else."""
    dest = os.fspath(path)
    ext = os.path.splitext(dest)[1].lower()
    supported = supported_output_extensions()
    if ext not in supported:
        named = f"the extension {ext!r}" if ext else "no extension"
        raise OutputPathError(dest, f"has {named}; the audio formats that can be written are "
                                    f"{', '.join(supported)}.")
    return _FORMAT_BY_EXTENSION[ext]


def write_audio_file(path: str | os.PathLike[str], samples: np.ndarray, sample_rate: int = CODEC_SAMPLE_RATE) -> None:
    """Atomically write mono ``samples`` in the format ``path``'s extension names (see
    :func:`check_output_format`): WAV as :func:`write_wav` (32-bit float), the others through
    libsndfile with the samples clipped to [-1, 1] (integer and lossy formats cannot hold
    more). Same failure guarantees as :func:`write_wav`."""
    dest = os.fspath(path)
    fmt, subtype = check_output_format(dest)
    if fmt == "WAV":
        write_wav(dest, samples, sample_rate, subtype=subtype)
        return
    x = _checked_mono(samples, sample_rate, "FLOAT")
    fd, temp_path = make_temp_beside(dest)
    try:
        os.close(fd)
        write_blocks(temp_path, x, sample_rate, fmt=fmt, subtype=subtype,
                     convert=lambda block: np.clip(block, -1.0, 1.0))
        if fmt == "OGG":
            with open(temp_path, "r+b") as fh:
                fix_ogg_serial(fh)
        fsync_path(temp_path)
        commit_temp(temp_path, dest)
    except BaseException:
        remove_quietly(temp_path)
        raise


# ------------------------------------------------------------------------------ Ogg serial numbers

_OGG_SERIAL = 0x53325354  # "S2ST": any fixed value; one logical stream per file


def _ogg_crc_table() -> list[int]:
    table = []
    for i in range(256):
        r = i << 24
        for _ in range(8):
            r = ((r << 1) ^ 0x04C11DB7) if r & 0x80000000 else (r << 1)
        table.append(r & 0xFFFFFFFF)
    return table


_OGG_CRC = _ogg_crc_table()


def _ogg_crc(data: bytes) -> int:
    crc = 0
    for b in data:
        crc = ((crc << 8) & 0xFFFFFFFF) ^ _OGG_CRC[((crc >> 24) & 0xFF) ^ b]
    return crc


def fix_ogg_serial(fh) -> None:
    """libsndfile gives each Ogg stream a random serial number, so equal audio gave different
    files; set one fixed serial on every page and redo each page's CRC."""
    data = bytearray(fh.read())
    pos = 0
    while pos + 27 <= len(data) and data[pos:pos + 4] == b"OggS":
        n_segments = data[pos + 26]
        body = sum(data[pos + 27: pos + 27 + n_segments])
        end = pos + 27 + n_segments + body
        struct.pack_into("<I", data, pos + 14, _OGG_SERIAL)
        struct.pack_into("<I", data, pos + 22, 0)
        struct.pack_into("<I", data, pos + 22, _ogg_crc(bytes(data[pos:end])))
        pos = end
    fh.seek(0)
    fh.write(data)
