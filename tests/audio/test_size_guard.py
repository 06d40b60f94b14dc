"""The declared-size guard: a file whose header declares more than a voice recording needs
(channels, sample rate, length) is refused before any sample is decoded."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile as sf

from s2studio import audio
from s2studio.errors import AudioInputError


def encoded(frames: int, channels: int, rate: int, fmt: str = "FLAC") -> bytes:
    buf = io.BytesIO()
    t = np.arange(frames, dtype=np.float32) / rate
    tone = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    sf.write(buf, np.repeat(tone[:, None], channels, axis=1), rate, format=fmt)
    return buf.getvalue()


def test_eight_channels_at_655_khz_is_refused_before_decoding(tmp_path):
    # The shape of the 330 KB FLAC that decoded to 1.5 GB (here 0.1 s of it: the header is the point).
    data = encoded(65_535, 8, 655_350)
    with pytest.raises(AudioInputError, match="8 channels"):
        audio.decode_audio_bytes(data, name="upload.flac")
    path = tmp_path / "many.flac"
    path.write_bytes(data)
    with pytest.raises(AudioInputError, match="8 channels"):
        audio.read_audio(path)
    with pytest.raises(AudioInputError, match="8 channels"):
        audio.read_audio(path, max_seconds=None, check_reference=False)  # the CLI's unlimited read too


def test_sample_rate_above_192_khz_is_refused():
    with pytest.raises(AudioInputError, match="384000 Hz"):
        audio.decode_audio_bytes(encoded(38_400, 1, 384_000, "WAV"), name="hi-rate.wav")


def test_stereo_at_192_khz_is_accepted():
    samples = audio.decode_audio_bytes(encoded(192_000, 2, 192_000), name="ok.flac")
    assert samples.dtype == np.float32 and abs(samples.size - 44_100) <= 1


def test_declared_length_is_judged_from_the_header():
    # A guard the CLI can call on a header it read itself.
    with pytest.raises(AudioInputError, match="limited to 60 s"):
        audio.check_declared_size(59 * 60 * 48_000, 1, 48_000, "long.flac", 60.0)
    audio.check_declared_size(59 * 48_000, 2, 48_000, "fine.flac", 60.0)
    with pytest.raises(AudioInputError, match="3 channels"):
        audio.check_declared_size(100, 3, 48_000, None, None)
