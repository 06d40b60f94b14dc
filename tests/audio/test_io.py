"""Reading, validating, resampling and writing audio files (s2studio.audio)."""

from __future__ import annotations

import io
import os
import struct
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import s2studio.audio as audio
from s2studio.audio import wav_writing
from s2studio.errors import AudioInputError

SR = 44100
GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"


def sine(freq: float, seconds: float, sr: int, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(int(round(seconds * sr))) / sr
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def dominant_frequency(x: np.ndarray, sr: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(x.size)))
    return float(np.argmax(spectrum) * sr / x.size)


def files_in(directory) -> list[str]:
    return sorted(os.listdir(directory))


# --------------------------------------------------------------------------------- reading


@pytest.mark.parametrize(
    ("name", "subtype", "exact"),
    [
        ("int16.wav", "PCM_16", True),
        ("int24.wav", "PCM_24", True),
        ("float.wav", "FLOAT", True),
        ("lossless.flac", "PCM_16", True),
        ("vorbis.ogg", "VORBIS", False),
    ],
)
def test_reads_supported_formats_at_44k(tmp_path, name, subtype, exact):
    x = sine(440.0, 1.0, SR)
    path = tmp_path / name
    sf.write(path, x, SR, subtype=subtype)
    y = audio.read_audio(path)
    assert y.dtype == np.float32 and y.ndim == 1 and y.shape == x.shape
    if exact:
        # Integer PCM decodes as x / 2^(bits-1), so only quantization error remains.
        assert np.max(np.abs(y - x)) <= 1.0 / 2**15
    else:
        assert abs(dominant_frequency(y, SR) - 440.0) < 2.0
    assert abs(np.sqrt(np.mean(y**2)) - 0.5 / np.sqrt(2)) < 0.01


def test_golden_reference_matches_what_s2cpp_fed_the_codec():
    case = GOLDEN / "clone_f32_qknorm"
    if not (case / "reference.wav").exists():
        pytest.skip("golden data not present")
    expected = np.load(case / "dumps" / "ref_audio.npy").reshape(-1)
    for method in ("linear", "soxr"):  # 44.1 kHz already: neither resampler may touch it
        np.testing.assert_array_equal(audio.read_audio(case / "reference.wav", resampler=method), expected)


def test_int16_wav_decodes_like_dr_wav(tmp_path):
    ints = np.array([0, 1, -1, 16384, -32768, 32767] * 1000, dtype=np.int16)
    path = tmp_path / "ints.wav"
    sf.write(path, ints, SR, subtype="PCM_16")
    y = audio.read_audio(path, check_reference=False)
    np.testing.assert_array_equal(y, ints.astype(np.float32) / np.float32(32768))


def test_reads_mp3(tmp_path):
    if "MP3" not in sf.available_formats():
        pytest.skip(f"this libsndfile ({sf.__libsndfile_version__}) has no MP3 support")
    x = sine(440.0, 1.0, SR)
    path = tmp_path / "voice.mp3"
    sf.write(path, x, SR)
    y = audio.read_audio(path)
    # MP3 decoders may add or drop encoder delay/padding: allow a frame's worth of slack.
    assert abs(y.size - x.size) <= 2304
    assert abs(dominant_frequency(y, SR) - 440.0) < 2.0


def test_stereo_is_averaged_in_float32(tmp_path):
    left = sine(300.0, 0.5, SR, 0.6)
    right = sine(700.0, 0.5, SR, 0.2)
    path = tmp_path / "stereo.wav"
    sf.write(path, np.stack([left, right], axis=1), SR, subtype="FLOAT")
    y = audio.read_audio(path)
    np.testing.assert_array_equal(y, (left + right) / np.float32(2))


def test_downmix_sums_channels_in_order():
    frames = np.array([[1.0, 2.0, 4.0], [0.5, -0.5, 3.0]], dtype=np.float32)
    np.testing.assert_array_equal(audio.downmix_to_mono(frames), np.array([7 / 3, 1.0], dtype=np.float32))


@pytest.mark.parametrize("src_rate", [22050, 48000, 16000])
@pytest.mark.parametrize("method", ["soxr", "linear"])
def test_resamples_to_44k_preserving_length_and_pitch(tmp_path, src_rate, method):
    x = sine(1000.0, 2.0, src_rate)
    path = tmp_path / f"at_{src_rate}.wav"
    sf.write(path, x, src_rate, subtype="FLOAT")
    y = audio.read_audio(path, resampler=method)
    assert abs(y.size - 2.0 * SR) <= 1
    assert abs(dominant_frequency(y, SR) - 1000.0) < 1.0
    assert abs(np.sqrt(np.mean(y**2)) - 0.5 / np.sqrt(2)) < 0.01


def test_linear_read_matches_resample_linear(tmp_path):
    x = sine(220.0, 0.5, 24000)
    path = tmp_path / "at_24k.wav"
    sf.write(path, x, 24000, subtype="FLOAT")
    y = audio.read_audio(path, resampler="linear")
    np.testing.assert_array_equal(y, audio.resample_linear(x, 24000, SR))


def test_target_rate_is_honoured(tmp_path):
    path = tmp_path / "a.wav"
    sf.write(path, sine(440.0, 1.0, SR), SR, subtype="FLOAT")
    assert audio.read_audio(path, 22050).size == 22050


def test_decode_audio_bytes(tmp_path):
    x = sine(440.0, 0.5, 48000)
    path = tmp_path / "upload.flac"
    sf.write(path, x, 48000)
    y = audio.decode_audio_bytes(path.read_bytes(), name="upload.flac")
    assert abs(y.size - SR // 2) <= 1
    with pytest.raises(AudioInputError, match="upload.bin"):
        audio.decode_audio_bytes(b"not audio at all" * 10, name="upload.bin")
    with pytest.raises(AudioInputError, match="0 bytes"):
        audio.decode_audio_bytes(b"", name="empty")


# ----------------------------------------------------------------------------- bad inputs


def assert_rejected(path, match, **kwargs):
    with pytest.raises(AudioInputError, match=match) as info:
        audio.read_audio(path, **kwargs)
    assert info.value.path == os.fspath(path)
    assert os.fspath(path) in str(info.value)


def test_missing_file(tmp_path):
    assert_rejected(tmp_path / "nope.wav", "does not exist")


def test_folder(tmp_path):
    folder = tmp_path / "clip.wav"
    folder.mkdir()
    assert_rejected(folder, "folder")


def test_text_file_renamed_wav(tmp_path):
    path = tmp_path / "notes.wav"
    path.write_text("these are not the samples you are looking for\n" * 20)
    assert_rejected(path, "not a readable audio file")


def test_zero_byte_file(tmp_path):
    path = tmp_path / "empty.wav"
    path.write_bytes(b"")
    assert_rejected(path, "not a readable audio file")


def test_wav_truncated_inside_header(tmp_path):
    path = tmp_path / "cut.wav"
    sf.write(path, sine(440.0, 1.0, SR), SR, subtype="PCM_16")
    path.write_bytes(path.read_bytes()[:30])
    assert_rejected(path, "not a readable audio file")


def test_wav_truncated_inside_data_keeps_what_is_there(tmp_path):
    # Like dr_wav, libsndfile reads the samples that exist; a cut recording is still a voice.
    x = sine(440.0, 1.0, SR)
    path = tmp_path / "cut.wav"
    sf.write(path, x, SR, subtype="PCM_16")
    path.write_bytes(path.read_bytes()[: 44 + 2 * 20000])
    y = audio.read_audio(path)
    assert y.size == 20000
    assert np.max(np.abs(y - x[:20000])) <= 1.0 / 2**15


def test_wav_with_no_samples(tmp_path):
    path = tmp_path / "nothing.wav"
    sf.write(path, np.zeros(0, dtype=np.float32), SR, subtype="PCM_16")
    assert_rejected(path, "no audio")


def test_silent_file(tmp_path):
    path = tmp_path / "silence.wav"
    sf.write(path, np.full(SR, 5e-5, dtype=np.float32), SR, subtype="FLOAT")
    assert_rejected(path, "silent")


def test_nan_samples(tmp_path):
    x = sine(440.0, 1.0, SR)
    x[1234] = np.nan
    path = tmp_path / "nan.wav"
    sf.write(path, x, SR, subtype="FLOAT")
    assert_rejected(path, "NaN")
    # Even without the reference checks, NaN audio is never usable.
    assert_rejected(path, "NaN", check_reference=False)


def test_infinite_samples(tmp_path):
    x = sine(440.0, 1.0, SR)
    x[-1] = np.inf
    path = tmp_path / "inf.wav"
    sf.write(path, x, SR, subtype="FLOAT")
    assert_rejected(path, "infinity")


def test_too_short(tmp_path):
    path = tmp_path / "blip.wav"
    sf.write(path, sine(440.0, 1.0, SR)[:2047], SR, subtype="FLOAT")
    assert_rejected(path, "too short")
    # One full code frame is enough.
    sf.write(path, sine(440.0, 1.0, SR)[:2048], SR, subtype="FLOAT")
    assert audio.read_audio(path).size == 2048


def test_too_short_is_judged_in_time_not_samples(tmp_path):
    # 1000 samples at 16 kHz is 62.5 ms: more than a code frame (46.4 ms) once resampled.
    path = tmp_path / "short16k.wav"
    sf.write(path, sine(440.0, 1.0, 16000)[:1000], 16000, subtype="FLOAT")
    assert audio.read_audio(path).size >= 2048
    sf.write(path, sine(440.0, 1.0, 16000)[:700], 16000, subtype="FLOAT")
    assert_rejected(path, "too short")


def test_too_long(tmp_path):
    # Low rate keeps the file small; the limit is in seconds.
    path = tmp_path / "podcast.wav"
    sf.write(path, sine(100.0, 61.0, 8000), 8000, subtype="PCM_16")
    assert_rejected(path, "too long")
    assert_rejected(path, "limited to 30 s", max_seconds=30)
    assert audio.read_audio(path, max_seconds=None).size == pytest.approx(61 * SR, abs=1)
    assert audio.read_audio(path, check_reference=False).size == pytest.approx(61 * SR, abs=1)


@pytest.mark.parametrize("name", ["voice.aiff", "voice.txt", "voice.m4a"])
def test_unsupported_extension(tmp_path, name):
    path = tmp_path / name
    # Real, readable audio: the refusal is about the format, not the content.
    sf.write(path, sine(440.0, 1.0, SR), SR, format="AIFF", subtype="PCM_16")
    assert_rejected(path, "unsupported format")


def test_unsupported_content_without_extension(tmp_path):
    path = tmp_path / "voice"
    sf.write(path, sine(440.0, 1.0, SR), SR, format="AIFF", subtype="PCM_16")
    assert_rejected(path, "unsupported format")
    sf.write(path, sine(440.0, 1.0, SR), SR, format="WAV", subtype="PCM_16")
    assert audio.read_audio(path).size == SR


def test_validate_reference_in_memory():
    good = sine(440.0, 1.0, SR)
    audio.validate_reference(good, SR)
    for samples, match in [
        (np.zeros(0, np.float32), "no audio"),
        (np.zeros(SR, np.float32), "silent"),
        (good[:100], "too short"),
        (np.concatenate([good, [np.nan]]).astype(np.float32), "NaN"),
        (np.tile(good, 61), "too long"),
    ]:
        with pytest.raises(AudioInputError, match=match) as info:
            audio.validate_reference(samples, SR)
        assert str(info.value).startswith("Audio: ")
    with pytest.raises(AudioInputError, match="mic.wav"):
        audio.validate_reference(np.zeros(SR, np.float32), SR, "mic.wav")
    audio.validate_reference(np.tile(good, 61), SR, max_seconds=None)


# -------------------------------------------------------------------------- linear resampler


def test_linear_resampler_doubles_rate():
    x = np.array([0.0, 1.0, 2.0, 3.0], dtype=np.float32)
    # Positions 0, .5, 1, ..., 3, 3.5; the last one holds x[3].
    np.testing.assert_array_equal(
        audio.resample_linear(x, 1, 2), np.array([0, 0.5, 1, 1.5, 2, 2.5, 3, 3], dtype=np.float32)
    )


def test_linear_resampler_halves_rate():
    x = np.array([0.0, 1.0, 2.0, 3.0, 4.0], dtype=np.float32)
    # out_len = ceil(5 * 0.5) = 3, positions 0, 2, 4.
    np.testing.assert_array_equal(audio.resample_linear(x, 2, 1), np.array([0, 2, 4], dtype=np.float32))


def test_linear_resampler_non_integer_ratio():
    x = np.array([0.0, 4.0, 8.0], dtype=np.float32)
    # ratio 4/3, out_len = 4, positions 0, .75, 1.5, 2.25 (last: hold x[2]).
    np.testing.assert_allclose(
        audio.resample_linear(x, 3, 4), np.array([0, 3, 6, 8], dtype=np.float32), rtol=0, atol=1e-6
    )


def test_linear_resampler_interpolates_in_double():
    # 0.1f and 0.7f mixed at frac 1/3 in double, then rounded once to float32.
    x = np.array([0.1, 0.7], dtype=np.float32)
    out = audio.resample_linear(x, 1, 3)
    assert out.size == 6
    a, b = float(x[0]), float(x[1])
    frac = 1 / 3.0  # position 1 / 3.0
    assert out[1] == np.float32(a * (1 - frac) + b * frac)
    assert out[3] == x[1] and out[4] == x[1] and out[5] == x[1]


def test_resample_identity_and_errors():
    x = np.arange(5, dtype=np.float32)
    y = audio.resample(x, SR, SR)
    np.testing.assert_array_equal(y, x)
    assert y is not x
    assert audio.resample_linear(np.zeros(0, np.float32), 1, 2).size == 0
    with pytest.raises(ValueError):
        audio.resample(x, SR, 22050, method="cubic")


# ----------------------------------------------------------------------------- PCM16


def test_float_to_pcm16_edge_values():
    just_below_one = np.nextafter(np.float32(1.0), np.float32(0.0))
    values = np.array(
        [1.0, 1.5, 100.0, -1.0, -1.5, 0.5, -0.5, 0.99999, -0.99999, just_below_one,
         1 / 32768, -1 / 32768, 2e-5, -2e-5, 0.0, -0.0, np.inf, -np.inf, np.nan],
        dtype=np.float32,
    )  # fmt: skip
    expected = [32767, 32767, 32767, -32768, -32768, 16384, -16384, 32767, -32767, 32767,
                1, -1, 0, 0, 0, 0, 32767, -32768, 0]  # fmt: skip
    out = audio.float_to_pcm16(values)
    assert out.dtype == np.int16
    assert out.tolist() == expected


def test_float_to_pcm16_truncates_toward_zero():
    # 0.75 / 32768 * k lands between integers; truncation, not rounding, decides.
    x = np.array([1.75 / 32768, -1.75 / 32768, 2.5 / 32768, -2.5 / 32768], dtype=np.float32)
    assert audio.float_to_pcm16(x).tolist() == [1, -1, 2, -2]


def test_pcm16_header_layout():
    placeholder = audio.pcm16_wav_header(SR)
    assert len(placeholder) == 44
    assert placeholder[:4] == b"RIFF" and placeholder[8:16] == b"WAVEfmt " and placeholder[36:40] == b"data"
    assert struct.unpack_from("<I", placeholder, 4)[0] == 0x7FFFFFF0
    assert struct.unpack_from("<I", placeholder, 40)[0] == 0x7FFFFFF0
    fmt = struct.unpack_from("<IHHIIHH", placeholder, 16)
    assert fmt == (16, 1, 1, SR, SR * 2, 2, 16)
    sized = audio.pcm16_wav_header(SR, data_bytes=200)
    assert struct.unpack_from("<I", sized, 4)[0] == 236
    assert struct.unpack_from("<I", sized, 40)[0] == 200


# ------------------------------------------------------------------------------ write_wav


def test_write_float_wav_is_lossless_and_unclipped(tmp_path):
    x = np.array([0.0, 0.5, -0.25, 1.5, -2.0, 1e-8], dtype=np.float32)
    path = tmp_path / "out.wav"
    audio.write_wav(path, x)
    info = sf.info(path)
    assert (info.samplerate, info.channels, info.subtype, info.format) == (SR, 1, "FLOAT", "WAV")
    y, sr = sf.read(path, dtype="float32")
    np.testing.assert_array_equal(y, x)
    assert files_in(tmp_path) == ["out.wav"]


def test_write_pcm16_wav_uses_s2cpp_conversion(tmp_path):
    x = np.array([1.0, -1.0, 0.5, 0.99999, 1.75 / 32768, -1.75 / 32768, 2.0], dtype=np.float32)
    path = tmp_path / "out16.wav"
    audio.write_wav(path, x, 22050, subtype="PCM_16")
    info = sf.info(path)
    assert (info.samplerate, info.subtype) == (22050, "PCM_16")
    y, _ = sf.read(path, dtype="int16")
    np.testing.assert_array_equal(y, audio.float_to_pcm16(x))


def test_write_wav_replaces_existing_file(tmp_path):
    path = tmp_path / "out.wav"
    audio.write_wav(path, np.ones(10, np.float32) * 0.1)
    audio.write_wav(path, np.ones(20, np.float32) * 0.2)
    assert sf.info(path).frames == 20
    assert files_in(tmp_path) == ["out.wav"]


def _disk_full_after_first_block(real_write):
    """libsndfile's block write, failing as a full disk does once the first block reached disk."""
    calls = []

    def write(self, data, *args, **kwargs):
        calls.append(len(data))
        if len(calls) > 1:
            raise OSError(28, "No space left on device")
        return real_write(self, data, *args, **kwargs)

    return write


def test_write_wav_failure_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(sf.SoundFile, "write", _disk_full_after_first_block(sf.SoundFile.write))
    with pytest.raises(OSError, match="No space"):
        audio.write_wav(tmp_path / "out.wav", np.ones(3 * wav_writing.WRITE_BLOCK_FRAMES, np.float32) * 0.1)
    assert files_in(tmp_path) == []


def test_write_wav_failure_keeps_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "out.wav"
    audio.write_wav(path, np.full(10, 0.25, np.float32))
    before = path.read_bytes()
    monkeypatch.setattr(wav_writing, "commit_temp", lambda *a: (_ for _ in ()).throw(PermissionError("locked")))
    with pytest.raises(PermissionError):
        audio.write_wav(path, np.full(99, 0.5, np.float32))
    assert path.read_bytes() == before
    assert files_in(tmp_path) == ["out.wav"]


def test_write_wav_rejects_bad_input(tmp_path):
    with pytest.raises(ValueError, match="NaN"):
        audio.write_wav(tmp_path / "a.wav", np.array([0.0, np.nan], np.float32))
    with pytest.raises(ValueError, match="mono"):
        audio.write_wav(tmp_path / "a.wav", np.zeros((10, 2), np.float32))
    with pytest.raises(ValueError, match="subtype"):
        audio.write_wav(tmp_path / "a.wav", np.zeros(10, np.float32), subtype="PCM_U8")
    assert files_in(tmp_path) == []


def test_write_wav_into_missing_folder_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        audio.write_wav(tmp_path / "no" / "such" / "dir.wav", np.zeros(10, np.float32))


def test_wav_bytes_round_trip():
    x = np.array([0.1, -0.2, 0.3], dtype=np.float32)
    y, sr = sf.read(io.BytesIO(audio.wav_bytes(x)), dtype="float32")
    assert sr == SR
    np.testing.assert_array_equal(y, x)


# ------------------------------------------------------------------------- streaming writer


def test_streaming_writer_produces_valid_wav(tmp_path):
    path = tmp_path / "stream.wav"
    chunks = [sine(440.0, 0.1, SR), sine(660.0, 0.05, SR), np.zeros(0, np.float32), np.array([1.0, -1.0], np.float32)]
    with audio.StreamingWavWriter(path) as writer:
        for chunk in chunks:
            writer.write(chunk)
            assert not path.exists()  # only the hidden temp file exists while streaming
        assert writer.samples_written == sum(c.size for c in chunks)
    total = np.concatenate(chunks)
    info = sf.info(path)
    assert (info.samplerate, info.channels, info.subtype, info.frames) == (SR, 1, "PCM_16", total.size)
    y, _ = sf.read(path, dtype="int16")
    np.testing.assert_array_equal(y, audio.float_to_pcm16(total))
    raw = path.read_bytes()
    assert len(raw) == 44 + 2 * total.size
    assert raw[:44] == audio.pcm16_wav_header(SR, data_bytes=2 * total.size)
    assert files_in(tmp_path) == ["stream.wav"]


def test_streaming_writer_with_no_samples(tmp_path):
    path = tmp_path / "empty_stream.wav"
    with audio.StreamingWavWriter(path, 24000):
        pass
    assert sf.info(path).frames == 0
    assert path.read_bytes() == audio.pcm16_wav_header(24000, data_bytes=0)


def test_streaming_writer_abort_leaves_nothing(tmp_path):
    writer = audio.StreamingWavWriter(tmp_path / "stream.wav")
    writer.write(sine(440.0, 0.1, SR))
    assert len(files_in(tmp_path)) == 1  # the temp file
    writer.abort()
    assert files_in(tmp_path) == []
    writer.abort()  # idempotent
    writer.close()  # after abort, close commits nothing
    assert files_in(tmp_path) == []
    with pytest.raises(ValueError, match="closed"):
        writer.write(np.zeros(4, np.float32))


def test_streaming_writer_exception_in_block_aborts(tmp_path):
    with pytest.raises(RuntimeError, match="cancelled"):
        with audio.StreamingWavWriter(tmp_path / "stream.wav") as writer:
            writer.write(sine(440.0, 0.1, SR))
            raise RuntimeError("cancelled")
    assert files_in(tmp_path) == []


def test_streaming_writer_abort_keeps_previous_file(tmp_path):
    path = tmp_path / "stream.wav"
    path.write_bytes(b"previous take")
    with audio.StreamingWavWriter(path) as writer:
        writer.write(sine(440.0, 0.1, SR))
        writer.abort()
    assert path.read_bytes() == b"previous take"
    assert files_in(tmp_path) == ["stream.wav"]


def test_importing_audio_loads_neither_torch_nor_sounddevice():
    # sounddevice raises OSError at import where PortAudio is missing (CI, servers), and torch
    # takes seconds to import; neither may be pulled in by the audio package.
    import subprocess
    import sys

    code = "import sys, s2studio.audio; print(sorted({'torch', 'sounddevice', 'PySide6'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_written_files_get_ordinary_permissions(tmp_path):
    import os
    import stat

    from s2studio.audio import write_wav

    old = os.umask(0o022)
    try:
        write_wav(tmp_path / "perm.wav", np.zeros(100, np.float32))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "perm.wav").st_mode) == 0o644


def test_write_wav_24_bit_clips_instead_of_wrapping(tmp_path):
    x = np.array([0.0, 0.5, 1.7, -2.0, -0.25], np.float32)
    audio.write_wav(tmp_path / "a.wav", x, subtype="PCM_24")
    data, rate = sf.read(tmp_path / "a.wav", dtype="float64")
    assert sf.info(tmp_path / "a.wav").subtype == "PCM_24" and rate == 44100
    np.testing.assert_allclose(data, np.clip(x, -1, 1), atol=2 ** -22)
