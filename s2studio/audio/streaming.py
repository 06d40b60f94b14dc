"""Incremental PCM16 WAV writer for streamed synthesis (``--stream-file``).

Mirrors s2.cpp's file streaming sink: a 44-byte PCM16 header with placeholder sizes goes out
first, each decoded chunk is converted with :func:`float_to_pcm16` and appended, and the real
RIFF/data sizes are patched in at the end. Unlike s2.cpp, the bytes go to a hidden temp file
that is renamed to the destination only by :meth:`close`, so a cancelled or failed generation
leaves no half-written WAV under the user's file name. The price is that the destination only
appears when the stream ends; live listening goes through the player, not the file.
"""

from __future__ import annotations

import os
import struct

import numpy as np

from s2studio.audio.atomic_file import commit_temp, make_temp_beside, remove_quietly
from s2studio.audio.validation import CODEC_SAMPLE_RATE
from s2studio.audio.wav_writing import PCM16_HEADER_BYTES, float_to_pcm16, pcm16_wav_header

# The RIFF size field is 32-bit: data beyond this no longer fits (about 13.5 h at 44.1 kHz).
_MAX_DATA_BYTES = 0xFFFFFFFF - (PCM16_HEADER_BYTES - 8)


class StreamingWavWriter:
    """Append float chunks to a mono PCM16 WAV; ``close()`` commits, ``abort()`` discards.

    Use as a context manager: leaving the block normally closes (commits) the file, leaving
    it with an exception aborts it.
    """

    def __init__(self, path: str | os.PathLike[str], sample_rate: int = CODEC_SAMPLE_RATE):
        if sample_rate <= 0:
            raise ValueError(f"sample rate must be positive, got {sample_rate}")
        self.path = os.fspath(path)
        self.sample_rate = sample_rate
        self._data_bytes = 0
        self._finished = False
        fd, self._temp_path = make_temp_beside(self.path)
        self._file = os.fdopen(fd, "wb")
        try:
            self._file.write(pcm16_wav_header(sample_rate))
        except BaseException:
            self.abort()
            raise

    @property
    def samples_written(self) -> int:
        return self._data_bytes // 2

    @property
    def closed(self) -> bool:
        return self._finished

    def write(self, samples: np.ndarray) -> None:
        """Append one chunk of mono float samples."""
        if self._finished:
            raise ValueError("write() on a closed StreamingWavWriter")
        x = np.asarray(samples, dtype=np.float32)
        if x.ndim != 1:
            raise ValueError(f"expected mono (1-D) samples, got shape {x.shape}")
        pcm = float_to_pcm16(x).astype("<i2", copy=False)
        if self._data_bytes + pcm.nbytes > _MAX_DATA_BYTES:
            raise ValueError("stream exceeds the 4 GiB WAV size limit")
        self._file.write(pcm.tobytes())
        self._data_bytes += pcm.nbytes

    def close(self) -> None:
        """Patch the real sizes into the header, fsync, and move the file into place."""
        if self._finished:
            return
        try:
            self._file.seek(4)
            self._file.write(struct.pack("<I", PCM16_HEADER_BYTES - 8 + self._data_bytes))
            self._file.seek(40)
            self._file.write(struct.pack("<I", self._data_bytes))
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            commit_temp(self._temp_path, self.path)
        except BaseException:
            self.abort()
            raise
        self._finished = True

    def abort(self) -> None:
        """Discard everything written; the destination is left as it was."""
        if self._finished:
            return
        self._finished = True
        try:
            self._file.close()
        finally:
            remove_quietly(self._temp_path)

    def __enter__(self) -> StreamingWavWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
