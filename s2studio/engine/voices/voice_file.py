"""s2.cpp's ``.s2voice`` file: one voice's codec codes and transcript.

A voice is a reference clip encoded once into codec codes plus its transcript; reusing the
stored codes means a voice is never re-encoded. The ``.s2voice`` layout (docs/spec/engine.md §8.2, s2.cpp
``s2_voice.cpp``) is, little-endian and unpadded (s2.cpp writes each field on its own)::

    0   8  magic "S2VOICE\\0"          28  8  u64 transcript_len (UTF-8 bytes + 1 for the NUL)
    8   4  u32 version = 1             36  8  u64 codes_size in bytes (= 4·num_codebooks·T)
    12  4  i32 num_codebooks           44     transcript bytes, NUL-terminated
    16  4  i32 T_prompt (frames)       ..     int32 codes, codebook-major: codes[cb·T + t]
    20  4  i32 sample_rate
    24  4  i32 codebook_size

Loading checks what s2.cpp checks (magic, version, transcript_len ≠ 0, NUL terminator,
truncation) and what it does not (codes_size vs num_codebooks·T, T > 0, sane counts, sizes
that match the file exactly, valid UTF-8, no NUL inside the transcript, codes within
[0, codebook_size)). Every problem is a :class:`VoiceFileError` naming the file.
"""

from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass

import numpy as np

from s2studio.audio import CODEC_SAMPLE_RATE
from s2studio.audio.atomic_file import atomic_output
from s2studio.engine.limits import MAX_REFERENCE_FRAMES, MAX_REFERENCE_SECONDS, SAMPLES_PER_CODE_FRAME
from s2studio.errors import InputError, S2Error

MAGIC = b"S2VOICE\x00"
VERSION = 1
HEADER = struct.Struct("<8sIiiiiQQ")  # = 44 bytes, the order s2.cpp's save() writes
VOICE_SUFFIX = ".s2voice"
DEFAULT_NUM_CODEBOOKS = 10
DEFAULT_CODEBOOK_SIZE = 4096
# Sanity bounds for header counts, so a corrupt header cannot make us allocate gigabytes.
MAX_NUM_CODEBOOKS = 64
MAX_CODEBOOK_SIZE = 1 << 20
MAX_SAMPLE_RATE = 1_000_000
# File-size bounds checked on the header before the body is read. A reference clip is
# seconds long (30 s is ~650 frames = 26 KB of codes); 64 MiB is hours of codes.
MAX_TRANSCRIPT_BYTES = 1 << 20
MAX_CODES_BYTES = 64 << 20
# A voice is a reference clip of at most 60 s (the limit on reference audio): 1292 frames. Its
# codes become prompt columns, so a longer one (a 20 000-frame file once) exhausts memory.
MAX_VOICE_FRAMES = MAX_REFERENCE_FRAMES


# ---------------------------------------------------------------------------------------------
# errors


class VoiceFileError(S2Error):
    """A .s2voice file (or its sidecar) cannot be read, written or used."""

    def __init__(self, path: str | os.PathLike[str], problem: str):
        self.path = os.fspath(path)
        self.problem = problem
        super().__init__(f"Voice profile {self.path}: {problem}")


class IncompatibleVoiceError(VoiceFileError):
    """A valid voice profile that was made for another model or codec."""




# ---------------------------------------------------------------------------------------------
# the .s2voice file


@dataclass(frozen=True, eq=False)
class VoiceProfile:
    """The content of one .s2voice file."""

    codes: np.ndarray  # int32 [num_codebooks, num_frames], codebook-major
    transcript: str
    sample_rate: int = CODEC_SAMPLE_RATE
    codebook_size: int = DEFAULT_CODEBOOK_SIZE

    @property
    def num_codebooks(self) -> int:
        return int(self.codes.shape[0])

    @property
    def num_frames(self) -> int:
        return int(self.codes.shape[1])


def encode_s2voice(profile: VoiceProfile) -> bytes:
    """The exact bytes s2.cpp's ``VoiceProfile::save`` writes for this profile."""
    codes, transcript_bytes = _checked_profile(profile)
    header = HEADER.pack(
        MAGIC,
        VERSION,
        codes.shape[0],
        codes.shape[1],
        profile.sample_rate,
        profile.codebook_size,
        len(transcript_bytes) + 1,
        codes.size * 4,
    )
    return header + transcript_bytes + b"\x00" + codes.astype("<i4", copy=False).tobytes(order="C")


def _checked_profile(profile: VoiceProfile) -> tuple[np.ndarray, bytes]:
    codes = np.asarray(profile.codes)
    if codes.ndim != 2 or codes.shape[0] < 1 or codes.shape[1] < 1:
        raise InputError(f"Voice codes must be a non-empty [codebooks, frames] array, not shape {codes.shape}.")
    if codes.shape[0] > MAX_NUM_CODEBOOKS:
        raise InputError(f"Voice codes have {codes.shape[0]} codebooks; at most {MAX_NUM_CODEBOOKS} are supported.")
    if codes.shape[1] > MAX_VOICE_FRAMES:
        raise InputError(f"Voice codes have {codes.shape[1]} frames; a voice holds at most {MAX_VOICE_FRAMES} "
                         f"({MAX_REFERENCE_SECONDS:g} s of reference audio).")
    if not np.issubdtype(codes.dtype, np.integer):
        raise InputError(f"Voice codes must be integers, not {codes.dtype}.")
    for name, value, high in (
        ("sample rate", profile.sample_rate, MAX_SAMPLE_RATE),
        ("codebook size", profile.codebook_size, MAX_CODEBOOK_SIZE),
    ):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 < value <= high:
            raise InputError(f"Voice {name} must be a whole number in 1..{high}, not {value!r}.")
    if codes.min() < 0 or codes.max() >= profile.codebook_size:
        raise InputError(
            f"Voice codes must lie in [0, {profile.codebook_size}); got {int(codes.min())}..{int(codes.max())}."
        )
    transcript = profile.transcript
    if not isinstance(transcript, str) or not transcript.strip():
        raise InputError("A voice needs the transcript of its reference clip; it is empty.")
    if "\x00" in transcript:
        raise InputError("A voice transcript cannot contain a NUL character.")
    try:
        transcript_bytes = transcript.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError("The voice transcript contains a character that is not valid Unicode.") from None
    return np.ascontiguousarray(codes, dtype=np.int32), transcript_bytes


def _checked_header(data: bytes, path: str | os.PathLike[str]) -> int:
    """Check the 44-byte header at the start of ``data``; return the file size it announces."""
    size = len(data)

    def fail(problem: str) -> VoiceFileError:
        return VoiceFileError(path, problem)

    if size < len(MAGIC) or data[: len(MAGIC)] != MAGIC:
        raise fail('is not an s2 voice profile (it does not start with "S2VOICE").')
    if size < HEADER.size:
        raise fail(f"is truncated: {size} bytes, shorter than the {HEADER.size}-byte header.")
    _magic, version, n_cb, n_frames, sample_rate, codebook_size, transcript_len, codes_size = HEADER.unpack_from(data)
    if version != VERSION:
        raise fail(f"has format version {version}; only version {VERSION} is supported.")
    if not 0 < n_cb <= MAX_NUM_CODEBOOKS:
        raise fail(f"has an invalid number of codebooks ({n_cb}).")
    if n_frames <= 0:
        raise fail(f"has an invalid number of frames ({n_frames}); a voice needs at least one.")
    if n_frames > MAX_VOICE_FRAMES:
        seconds = n_frames * SAMPLES_PER_CODE_FRAME / CODEC_SAMPLE_RATE
        raise fail(f"has {n_frames} frames ({seconds:.0f} s of audio); a voice holds at most {MAX_VOICE_FRAMES} "
                   f"frames ({MAX_REFERENCE_SECONDS:g} s). Re-create it from a shorter clip.")
    if not 0 < sample_rate <= MAX_SAMPLE_RATE:
        raise fail(f"has an invalid sample rate ({sample_rate}).")
    if not 0 < codebook_size <= MAX_CODEBOOK_SIZE:
        raise fail(f"has an invalid codebook size ({codebook_size}).")
    if transcript_len == 0:
        raise fail("has a transcript length of 0 (even an empty transcript has its NUL byte).")
    expected_codes = 4 * n_cb * n_frames
    if codes_size != expected_codes:
        raise fail(
            f"says its codes take {codes_size} bytes, but {n_cb} codebooks × {n_frames} frames "
            f"need {expected_codes}."
        )
    return HEADER.size + transcript_len + codes_size


def decode_s2voice(data: bytes, path: str | os.PathLike[str] = "<memory>") -> VoiceProfile:
    """Parse .s2voice bytes; any problem is a :class:`VoiceFileError` naming ``path``."""
    size = len(data)

    def fail(problem: str) -> VoiceFileError:
        return VoiceFileError(path, problem)

    expected_size = _checked_header(data, path)
    _magic, _version, n_cb, n_frames, _rate, codebook_size, transcript_len, _codes_size = HEADER.unpack_from(data)
    if size < expected_size:
        raise fail(f"is truncated: {size} bytes, the header announces {expected_size}.")
    if size > expected_size:
        raise fail(f"has {size - expected_size} unexpected bytes after the codes (the header announces {expected_size}).")
    raw = data[HEADER.size : HEADER.size + transcript_len]
    if raw[-1] != 0:
        raise fail("has a transcript that is not NUL-terminated.")
    raw = raw[:-1]
    if b"\x00" in raw:
        raise fail("has a NUL byte inside its transcript (s2.cpp would silently cut the transcript there).")
    try:
        transcript = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise fail(f"has a transcript that is not valid UTF-8 (byte {err.start}).") from None
    if not transcript.strip():
        raise fail("has an empty transcript, so s2.cpp would ignore its codes.")
    codes = np.frombuffer(data, dtype="<i4", count=n_cb * n_frames, offset=HEADER.size + transcript_len)
    codes = codes.astype(np.int32).reshape(n_cb, n_frames)
    bad = (codes < 0) | (codes >= codebook_size)
    if bad.any():
        cb, t = (int(v) for v in np.argwhere(bad)[0])
        raise fail(f"has code {int(codes[cb, t])} at codebook {cb}, frame {t}, outside [0, {codebook_size}).")
    return VoiceProfile(codes=codes, transcript=transcript, sample_rate=_rate, codebook_size=codebook_size)


def read_s2voice(path: str | os.PathLike[str]) -> VoiceProfile:
    """Read and validate one .s2voice file.

    Only a regular file is opened (a FIFO named ``x.s2voice`` would block ``open`` until a
    writer comes, and with it every voice list and server request), non-blocking in case one
    is swapped in. The header is read first: the file must be exactly as long as the header
    says, and the header may not announce more than :data:`MAX_TRANSCRIPT_BYTES` of text or
    :data:`MAX_CODES_BYTES` of codes, so a huge or sparse file is refused unread.
    """
    path = os.fspath(path)
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            raise VoiceFileError(path, "is a folder, not a voice profile.")
        if not stat.S_ISREG(st.st_mode):
            raise VoiceFileError(path, "is not a regular file (a pipe, device or socket), so it is not read.")
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise VoiceFileError(path, "is not a regular file (a pipe, device or socket), so it is not read.")
            header = _read_up_to(fd, HEADER.size)
            expected = _checked_header(header, path)
            if st.st_size < expected:
                raise VoiceFileError(path, f"is truncated: {st.st_size} bytes, the header announces {expected}.")
            if st.st_size > expected:
                raise VoiceFileError(path, f"has {st.st_size - expected} unexpected bytes after the codes "
                                           f"(the header announces {expected}).")
            _announced_size_is_sane(header, path)  # a file really that large: refuse it unread
            data = header + _read_up_to(fd, expected - len(header))
        finally:
            os.close(fd)
    except FileNotFoundError:
        raise VoiceFileError(path, "does not exist.") from None
    except IsADirectoryError:
        raise VoiceFileError(path, "is a folder, not a voice profile.") from None
    except OSError as err:
        raise VoiceFileError(path, f"cannot be read ({err.strerror or err}).") from err
    return decode_s2voice(data, path)


def _read_up_to(fd: int, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _announced_size_is_sane(header: bytes, path: str) -> None:
    """Refuse a (valid) header announcing more text or codes than any voice has."""
    transcript_len, codes_size = HEADER.unpack_from(header)[6:8]
    if transcript_len > MAX_TRANSCRIPT_BYTES:
        raise VoiceFileError(path, f"announces a {transcript_len}-byte transcript; at most "
                                   f"{MAX_TRANSCRIPT_BYTES} bytes are accepted.")
    if codes_size > MAX_CODES_BYTES:
        raise VoiceFileError(path, f"announces {codes_size} bytes of codes; at most {MAX_CODES_BYTES} "
                                   "bytes are accepted.")


def write_s2voice(path: str | os.PathLike[str], profile: VoiceProfile) -> None:
    """Atomically write ``profile`` in s2.cpp's layout (temp file + rename)."""
    _write_atomic(os.fspath(path), encode_s2voice(profile))


def check_compatible(
    profile: VoiceProfile,
    *,
    num_codebooks: int,
    codebook_size: int,
    sample_rate: int,
    path: str | os.PathLike[str] = "<memory>",
) -> None:
    """Raise :class:`IncompatibleVoiceError` unless the profile fits this model and codec
    (s2.cpp's ``is_compatible``: the same three values must be equal)."""
    problems = [
        f"{label} {have} (the model needs {want})"
        for label, have, want in (
            ("codebooks", profile.num_codebooks, num_codebooks),
            ("codebook size", profile.codebook_size, codebook_size),
            ("sample rate", profile.sample_rate, sample_rate),
        )
        if have != want
    ]
    if problems:
        raise IncompatibleVoiceError(
            path, "was made for a different model: " + ", ".join(problems) + ". Re-create the voice from its reference clip."
        )



def _write_atomic(dest: str, data: bytes) -> None:
    with atomic_output(dest) as f:
        f.write(data)
