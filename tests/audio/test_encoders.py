"""The streaming encoders of the compat routes: every format decoded back (FFmpeg and
libsndfile), streamed in pieces equals encoded whole, the time-stretch keeps the pitch."""

from __future__ import annotations

import io

import av
import numpy as np
import pytest
import soundfile as sf

from s2studio.audio.encoders import FORMATS, EncodeOptions, EncoderError, StreamEncoder, encode_whole

RATE = 44100


def tone(seconds: float = 1.0, hz: float = 440.0) -> np.ndarray:
    t = np.arange(int(RATE * seconds)) / RATE
    return (0.4 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def decode(data: bytes) -> tuple[np.ndarray, int, str]:
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        pieces = []
        for frame in container.decode(stream):
            scale = 32768.0 if frame.format.name.startswith("s16") else 2.0 ** 31 if frame.format.name.startswith(
                "s32") else 1.0
            pieces.append(frame.to_ndarray().astype(np.float32)[0] / np.float32(scale))
        return np.concatenate(pieces), stream.rate, container.format.name


def pitch(x: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.argmax(spectrum) * rate / len(x))


def streamed(x: np.ndarray, options: EncodeOptions, piece: int = 4 * 2048) -> list[bytes]:
    encoder = StreamEncoder(options, RATE)
    return [encoder.write(x[i:i + piece]) for i in range(0, len(x), piece)] + [encoder.finish()]


@pytest.mark.parametrize("fmt, container", [("mp3", "mp3"), ("opus", "ogg"), ("aac", "aac"), ("flac", "flac"),
                                            ("wav", "wav")])
def test_each_format_streams_a_file_ffmpeg_reads(fmt, container):
    x = tone()
    parts = streamed(x, EncodeOptions(fmt))
    assert parts[0], "the first piece already sends bytes (a header, audio): nothing waits for the end"
    y, rate, name = decode(b"".join(parts))
    assert container in name
    assert rate == (48000 if fmt == "opus" else RATE)
    assert abs(len(y) / rate - 1.0) < 0.06
    assert abs(pitch(y, rate) - 440.0) < 3.0
    assert abs(np.sqrt(np.mean(y ** 2)) - 0.4 / np.sqrt(2)) < 0.03


def test_pcm_and_wav_are_s2cpps_pcm16():
    from s2studio.audio import float_to_pcm16, pcm16_wav_header

    x = tone(0.2)
    pcm = b"".join(streamed(x, EncodeOptions("pcm"), piece=1000))
    assert pcm == float_to_pcm16(x).astype("<i2").tobytes()
    wav = b"".join(streamed(x, EncodeOptions("wav"), piece=1000))
    assert wav == pcm16_wav_header(RATE, data_bytes=None) + pcm


@pytest.mark.parametrize("fmt", ["wav", "flac", "mp3"])
def test_whole_takes_go_through_libsndfile(fmt):
    x = tone(0.5)
    data = encode_whole(x, EncodeOptions(fmt), RATE)
    info = sf.info(io.BytesIO(data))
    assert info.format == fmt.upper() and info.samplerate == RATE
    y, _ = sf.read(io.BytesIO(data), dtype="float32")
    if fmt != "mp3":
        assert len(y) == len(x)
        np.testing.assert_allclose(y, x, atol=1.5 / 32768)


@pytest.mark.parametrize("speed", [0.25, 0.5, 1.5, 2.0, 4.0])
def test_time_stretch_keeps_the_pitch_and_divides_the_length(speed):
    x = tone(1.0)
    y, rate, _ = decode(encode_whole(x, EncodeOptions("wav", speed=speed), RATE))
    assert len(y) == round(len(x) / speed)
    assert abs(pitch(y, rate) - 440.0) < 3.0  # a resampler would give 440 × speed
    streamed_y, _, _ = decode(b"".join(streamed(x, EncodeOptions("wav", speed=speed), piece=3000)))
    assert len(streamed_y) == len(y)


def test_sample_rate_and_gain():
    x = tone(0.5)
    y, rate, _ = decode(encode_whole(x, EncodeOptions("wav", sample_rate=24000), RATE))
    assert rate == 24000 and abs(len(y) - 12000) <= 1 and abs(pitch(y, rate) - 440.0) < 3.0
    pcm = b"".join(streamed(x, EncodeOptions("pcm", sample_rate=24000)))
    assert abs(len(pcm) // 2 - 12000) <= 1
    louder = np.frombuffer(b"".join(streamed(x, EncodeOptions("pcm", gain_db=6.0))), "<i2").astype(np.float64)
    assert abs(np.abs(louder).max() / 32768 - 0.4 * 10 ** (6 / 20)) < 0.01


@pytest.mark.parametrize("options, words", [(dict(fmt="ogg"), "not supported"), (dict(speed=0.2), "speed"),
                                            (dict(speed=4.5), "speed"), (dict(sample_rate=96000), "sample_rate"),
                                            (dict(gain_db=30), "volume"), (dict(fmt="mp3", bitrate=10**6), "bitrate"),
                                            (dict(fmt="opus", sample_rate=44100), "Opus runs at")])
def test_out_of_range_options_are_refused(options, words):
    with pytest.raises(EncoderError, match=words):
        EncodeOptions(**options)


def test_formats_are_openais():
    assert set(FORMATS) == {"mp3", "opus", "aac", "flac", "wav", "pcm"}
