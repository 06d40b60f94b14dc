"""Reading audio files (WAV, FLAC, OGG, MP3) into mono float32 at the codec's sample rate.

Everything is decoded with libsndfile through ``soundfile``. s2.cpp reads only WAV (dr_wav) and
MP3 (dr_mp3); we accept FLAC and OGG too because they are common and lossless/compact.

Decoding follows s2.cpp where the formats overlap:

* integer PCM becomes float by dividing by 2^(bits-1) (16/24/32-bit match dr_wav exactly;
  libsndfile maps unsigned 8-bit as (x-128)/128 where dr_wav uses x*2/255-1);
* channels are averaged to mono by summing them in order in float32 and dividing by the count;
* MP3 goes through libsndfile's mpg123 decoder, not dr_mp3, so MP3 samples need not match
  s2.cpp bit for bit (encoder delay handling may differ).
"""

from __future__ import annotations

import io
import os

import numpy as np
import soundfile as sf

from s2studio.audio.resample import resample
from s2studio.audio.validation import (
    CODEC_SAMPLE_RATE,
    DEFAULT_MAX_REFERENCE_SECONDS,
    check_duration,
    validate_reference,
)
from s2studio.errors import AudioInputError

# File extensions we try to open. A file without an extension is judged by its content alone.
SUPPORTED_EXTENSIONS = (".wav", ".wave", ".flac", ".ogg", ".oga", ".opus", ".mp3")
# libsndfile container formats we accept once the file is open (content wins over the name).
_SUPPORTED_CONTAINERS = {"WAV", "WAVEX", "RF64", "FLAC", "OGG", "MP3"}
_FORMAT_HINT = "use WAV, FLAC, OGG or MP3"
# What a file may declare before a single sample is decoded. Decoding allocates frames x
# channels float32 at once, and a compressed file can declare far more than its size: a 330 KB
# FLAC of 8 channels at 655 kHz for 59 s decodes to 1.2 GB. No voice recording needs more than
# stereo or than 192 kHz (studio masters' highest common rate); the length limit is the
# caller's max_seconds (60 s for references).
MAX_SAMPLE_RATE = 192_000
MAX_CHANNELS = 2

# soundfile >= 0.12 raises LibsndfileError (a RuntimeError); SoundFileError is its newer base.
# OSError covers a disk error while libsndfile reads through our file object.
# Deliberately not ValueError/TypeError: those would be our bugs, not a bad file.
_DECODE_ERRORS = (RuntimeError, getattr(sf, "SoundFileError", RuntimeError), OSError)


def downmix_to_mono(frames: np.ndarray) -> np.ndarray:
    """Average (frames, channels) float32 to mono exactly as s2.cpp: in-order float32 sum / count."""
    frames = np.asarray(frames, dtype=np.float32)
    if frames.ndim == 1:
        return frames
    channels = frames.shape[1]
    if channels == 1:
        return np.ascontiguousarray(frames[:, 0])
    total = frames[:, 0].copy()
    for ch in range(1, channels):
        total += frames[:, ch]
    return total / np.float32(channels)


def check_declared_size(frames: int, channels: int, sample_rate: int, path_for_errors,
                        max_seconds: float | None, *, estimated: bool = False) -> None:
    """Refuse, from a file's header alone, audio whose decoding would take unreasonable memory:
    more than ``MAX_CHANNELS`` channels, a rate above ``MAX_SAMPLE_RATE``, or longer than
    ``max_seconds`` (``None``: no length limit). ``estimated`` frame counts (MP3's) are only
    refused when far over the limit; the exact length is checked after decoding."""
    if channels > MAX_CHANNELS:
        raise AudioInputError(path_for_errors, f"has {channels} channels; at most {MAX_CHANNELS} (mono or stereo) "
                                               "are accepted. Convert it to mono or stereo first.")
    if sample_rate <= 0:
        raise AudioInputError(path_for_errors, f"has an invalid sample rate ({sample_rate} Hz).")
    if sample_rate > MAX_SAMPLE_RATE:
        raise AudioInputError(path_for_errors, f"has a sample rate of {sample_rate} Hz; at most {MAX_SAMPLE_RATE} Hz "
                                               "is accepted.")
    if frames > 0 and max_seconds is not None:
        if not estimated or frames > 2 * max_seconds * sample_rate:
            check_duration(frames, sample_rate, path_for_errors, max_seconds)


def _decode(source, path_for_errors, max_seconds):
    """Open ``source`` with soundfile and return (mono float32, sample rate)."""
    try:
        with sf.SoundFile(source) as f:
            if f.format not in _SUPPORTED_CONTAINERS:
                raise AudioInputError(
                    path_for_errors, f"is in an unsupported format ({f.format_info}); {_FORMAT_HINT}."
                )
            # Judge the size from the header first, so a three-hour file (or 8 channels at
            # 655 kHz) is refused without decoding it. An MP3's frame count is only an estimate
            # (from a Xing header or the bit rate); the exact length is checked after decoding.
            check_declared_size(f.frames, f.channels, f.samplerate, path_for_errors, max_seconds,
                                estimated=f.format == "MP3")
            frames = f.read(dtype="float32", always_2d=True)
            rate = f.samplerate
    except AudioInputError:
        raise
    except _DECODE_ERRORS as err:
        raise AudioInputError(
            path_for_errors, f"is not a readable audio file ({_describe(err)}); {_FORMAT_HINT}."
        ) from err
    return downmix_to_mono(frames), rate


def _describe(err: BaseException) -> str:
    text = str(err).strip()
    # libsndfile messages start with the file name we already print; keep only the reason.
    if ": " in text:
        text = text.rsplit(": ", 1)[-1]
    return text.rstrip(".") or type(err).__name__


def _finish(
    mono: np.ndarray,
    rate: int,
    path_for_errors,
    target_sr: int,
    max_seconds: float | None,
    resampler: str,
    check_reference: bool,
) -> np.ndarray:
    if check_reference:
        # Validate at the source rate: resampling a bad file first would only waste time.
        validate_reference(mono, rate, path_for_errors, max_seconds=max_seconds)
    elif not np.all(np.isfinite(mono)):
        raise AudioInputError(path_for_errors, "contains invalid samples (NaN or infinity).")
    return resample(mono, rate, target_sr, resampler)


def read_audio(
    path: str | os.PathLike[str],
    target_sr: int = CODEC_SAMPLE_RATE,
    *,
    max_seconds: float | None = DEFAULT_MAX_REFERENCE_SECONDS,
    resampler: str = "soxr",
    check_reference: bool = True,
) -> np.ndarray:
    """Read a WAV/FLAC/OGG/MP3 file as mono float32 at ``target_sr`` Hz.

    With ``check_reference`` (the default) the audio must also pass :func:`validate_reference`:
    not empty, at least one code frame long, not silent, finite, and no longer than
    ``max_seconds`` (default 60 s; ``None`` disables the limit). With ``check_reference=False``
    only decodability and finiteness are checked (for reading back generated output).

    ``resampler="soxr"`` (default) is band-limited; ``"linear"`` is s2.cpp's exact resampler.

    Raises :class:`AudioInputError` naming ``path`` for any file that cannot be used.
    """
    path_str = os.fspath(path)
    if not os.path.exists(path_str):
        raise AudioInputError(path_str, "does not exist.")
    if os.path.isdir(path_str):
        raise AudioInputError(path_str, "is a folder, not an audio file.")
    ext = os.path.splitext(path_str)[1].lower()
    if ext and ext not in SUPPORTED_EXTENSIONS:
        raise AudioInputError(path_str, f"has an unsupported format ({ext}); {_FORMAT_HINT}.")
    try:
        handle = open(path_str, "rb")
    except OSError as err:
        raise AudioInputError(path_str, f"cannot be opened ({err.strerror or err}).") from err
    # Passing an open file object, not the path, makes libsndfile judge the file by its content
    # and sidesteps non-ASCII path problems on Windows.
    with handle:
        mono, rate = _decode(handle, path_str, max_seconds if check_reference else None)
    return _finish(mono, rate, path_str, target_sr, max_seconds, resampler, check_reference)


def decode_audio_bytes(
    data: bytes,
    target_sr: int = CODEC_SAMPLE_RATE,
    *,
    name: str | None = None,
    max_seconds: float | None = DEFAULT_MAX_REFERENCE_SECONDS,
    resampler: str = "soxr",
    check_reference: bool = True,
) -> np.ndarray:
    """Like :func:`read_audio`, for an encoded file held in memory (e.g. an HTTP upload).

    ``name`` is only used in error messages.
    """
    if not data:
        raise AudioInputError(name, "contains no data (0 bytes).")
    mono, rate = _decode(io.BytesIO(data), name, max_seconds if check_reference else None)
    return _finish(mono, rate, name, target_sr, max_seconds, resampler, check_reference)


# A clip longer than a reference may be is trimmed to its first DEFAULT_MAX_REFERENCE_SECONDS,
# as the app opens it; longer than this, it is refused (a whole audiobook is not a voice sample).
MAX_TRIM_SOURCE_SECONDS = 15 * 60


def read_reference_clip(path: str | os.PathLike[str], target_sr: int = CODEC_SAMPLE_RATE) -> tuple[np.ndarray, float]:
    """A reference recording for cloning: ``(samples, seconds in the file)``. A file longer than
    :data:`DEFAULT_MAX_REFERENCE_SECONDS` (and at most :data:`MAX_TRIM_SOURCE_SECONDS`) gives its
    first 60 s, as the app's trim view selects; the caller tells the user it was trimmed."""
    samples = read_audio(path, target_sr, max_seconds=MAX_TRIM_SOURCE_SECONDS)
    seconds = len(samples) / target_sr
    keep = int(DEFAULT_MAX_REFERENCE_SECONDS * target_sr)
    return (samples[:keep].copy() if len(samples) > keep else samples), seconds


def decode_exact_wav(data: bytes, sample_rate: int, samples: int, *, name: str) -> np.ndarray:
    """A mono WAV held in memory that must be exactly ``samples`` samples at ``sample_rate``
    (a project's own audio): anything else, including a WAV that merely decodes, is an
    :class:`AudioInputError`. Its header is judged before a sample is decoded, and nothing is
    resampled, so the memory used is the size the caller already accepted."""
    if data[:4] not in (b"RIFF", b"RF64") or data[8:12] != b"WAVE":
        raise AudioInputError(name, "is not a WAV file.")
    try:
        with sf.SoundFile(io.BytesIO(data)) as f:
            if f.channels != 1 or f.samplerate != sample_rate:
                raise AudioInputError(name, f"is {f.channels} channel(s) at {f.samplerate} Hz; "
                                            f"mono at {sample_rate} Hz was declared.")
            if f.frames != samples:
                raise AudioInputError(name, f"holds {f.frames} samples; {samples} were declared (truncated?).")
            mono = f.read(dtype="float32")
    except AudioInputError:
        raise
    except _DECODE_ERRORS as err:
        raise AudioInputError(name, f"is not a readable audio file ({_describe(err)}).") from err
    if len(mono) != samples:
        raise AudioInputError(name, f"holds {len(mono)} samples; {samples} were declared (truncated?).")
    if not np.all(np.isfinite(mono)):
        raise AudioInputError(name, "contains invalid samples (NaN or infinity).")
    return mono
