"""Voice profiles: s2.cpp's ``.s2voice`` file, and the studio's voice library folder.

A voice is a reference clip encoded once into codec codes plus its transcript; reusing the
stored codes means a voice is never re-encoded. The ``.s2voice`` layout (spec §8.2, s2.cpp
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

The library folder holds, per voice id, ``<id>.s2voice`` (usable by s2.cpp's ``--voice-dir``
as it is), ``<id>.json`` (what s2.cpp has no room for: display name, language, notes,
creation time, transcript) and optionally ``<id>.ref.wav`` (the original reference clip).
``.s2voice`` files copied in from s2.cpp, without a sidecar, are listed too.

Ids are file stems, so they are checked hard (:func:`validate_voice_id`). Two levels: a *new*
id must be portable (ASCII letters, digits, ``. _ -``, starting with a letter or digit, not a
Windows reserved name, ≤ 64 chars); an *existing* id (one s2.cpp created, say "my voice")
only has to be a safe single file-name component (:func:`check_existing_voice_id`).
"""

from __future__ import annotations

import json
import os
import re
import struct
import unicodedata
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from s2studio.audio import CODEC_SAMPLE_RATE, SAMPLES_PER_CODE_FRAME, read_audio, resample, write_wav
from s2studio.audio.atomic_file import atomic_output, remove_quietly
from s2studio.engine.errors import InputError, S2Error

MAGIC = b"S2VOICE\x00"
VERSION = 1
HEADER = struct.Struct("<8sIiiiiQQ")  # = 44 bytes, the order s2.cpp's save() writes
VOICE_SUFFIX = ".s2voice"
SIDECAR_SUFFIX = ".json"
REFERENCE_SUFFIX = ".ref.wav"
SIDECAR_FORMAT = "s2studio-voice"
SIDECAR_VERSION = 1

DEFAULT_NUM_CODEBOOKS = 10
DEFAULT_CODEBOOK_SIZE = 4096
# Sanity bounds for header counts, so a corrupt header cannot make us allocate gigabytes.
MAX_NUM_CODEBOOKS = 64
MAX_CODEBOOK_SIZE = 1 << 20
MAX_SAMPLE_RATE = 1_000_000
MAX_ID_LENGTH = 64
MAX_EXISTING_ID_LENGTH = 200  # leaves room for ".ref.wav" within a 255-byte file name

_NEW_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# Separators, drive colon, and what Windows forbids in file names.
_FORBIDDEN_IN_NAMES = frozenset('/\\:<>"|?*')
_WINDOWS_RESERVED = frozenset(
    ["CON", "PRN", "AUX", "NUL"] + [f"COM{i}" for i in range(1, 10)] + [f"LPT{i}" for i in range(1, 10)]
)


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


class InvalidVoiceIdError(InputError):
    """A voice id that is not a safe file name, or a voice path outside the voice folder."""


class VoiceNotFoundError(S2Error):
    def __init__(self, voice_id: str, folder: str | os.PathLike[str]):
        self.voice_id = voice_id
        self.folder = os.fspath(folder)
        super().__init__(f"There is no voice {voice_id!r} in {self.folder}.")


class VoiceExistsError(S2Error):
    def __init__(self, voice_id: str, path: str | os.PathLike[str]):
        self.voice_id = voice_id
        self.path = os.fspath(path)
        super().__init__(f"A voice {voice_id!r} already exists ({self.path}); choose another id or overwrite it.")


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


def decode_s2voice(data: bytes, path: str | os.PathLike[str] = "<memory>") -> VoiceProfile:
    """Parse .s2voice bytes; any problem is a :class:`VoiceFileError` naming ``path``."""
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
    expected_size = HEADER.size + transcript_len + codes_size
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
    return VoiceProfile(codes=codes, transcript=transcript, sample_rate=sample_rate, codebook_size=codebook_size)


def read_s2voice(path: str | os.PathLike[str]) -> VoiceProfile:
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise VoiceFileError(path, "does not exist.") from None
    except IsADirectoryError:
        raise VoiceFileError(path, "is a folder, not a voice profile.") from None
    except OSError as err:
        raise VoiceFileError(path, f"cannot be read ({err.strerror or err}).") from err
    return decode_s2voice(data, path)


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


def _utc_now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _write_atomic(dest: str, data: bytes) -> None:
    with atomic_output(dest) as f:
        f.write(data)


# ---------------------------------------------------------------------------------------------
# ids and paths


def validate_voice_id(voice_id: object) -> str:
    """Return ``voice_id`` if it is a valid id for a *new* voice, else raise InvalidVoiceIdError.

    Portable on every OS and safe on a command line: ASCII letters, digits, ``.``, ``_``, ``-``;
    starts with a letter or digit (so never ``..`` nor ``-flag``); does not end with a dot;
    at most 64 characters; not a Windows device name (CON, PRN, AUX, NUL, COM1-9, LPT1-9,
    in any case and with any extension, since ``con.txt`` is also the device).
    """
    check_existing_voice_id(voice_id)
    assert isinstance(voice_id, str)
    if len(voice_id) > MAX_ID_LENGTH:
        raise InvalidVoiceIdError(f"The voice id {voice_id[:20]!r}… is too long (at most {MAX_ID_LENGTH} characters).")
    if not _NEW_ID_RE.fullmatch(voice_id):
        raise InvalidVoiceIdError(
            f"The voice id {voice_id!r} may only use ASCII letters, digits, '.', '_' and '-', "
            "and must start with a letter or digit."
        )
    if voice_id.endswith("."):
        raise InvalidVoiceIdError(f"The voice id {voice_id!r} cannot end with a dot.")
    if _is_windows_reserved(voice_id):
        raise InvalidVoiceIdError(f"The voice id {voice_id!r} is a reserved device name on Windows.")
    return voice_id


def check_existing_voice_id(voice_id: object) -> str:
    """Looser check for looking up an existing voice (s2.cpp allows "my voice"): the id must
    be one safe file-name component — non-empty, no separator, no drive, no NUL or control
    character, not ``.``/``..``, no leading/trailing space or dot."""
    if not isinstance(voice_id, str):
        raise InvalidVoiceIdError(f"A voice id must be text, not {type(voice_id).__name__}.")
    if not voice_id:
        raise InvalidVoiceIdError("The voice id is empty.")
    if len(voice_id) > MAX_EXISTING_ID_LENGTH:
        raise InvalidVoiceIdError(f"The voice id {voice_id[:20]!r}… is too long.")
    if any(c in _FORBIDDEN_IN_NAMES for c in voice_id):
        raise InvalidVoiceIdError(
            f"The voice id {voice_id!r} cannot contain any of {' '.join(sorted(_FORBIDDEN_IN_NAMES))}."
        )
    if any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in voice_id):
        raise InvalidVoiceIdError(f"The voice id {voice_id!r} contains a control character.")
    if voice_id != voice_id.strip() or voice_id.startswith(".") or voice_id.endswith("."):
        raise InvalidVoiceIdError(f"The voice id {voice_id!r} cannot start or end with a space or a dot.")
    if _is_windows_reserved(voice_id):  # opening "CON.s2voice" on Windows opens the console
        raise InvalidVoiceIdError(f"The voice id {voice_id!r} is a reserved device name on Windows.")
    return voice_id


def _is_windows_reserved(name: str) -> bool:
    return name.split(".", 1)[0].rstrip(" ").upper() in _WINDOWS_RESERVED


def slugify(name: str, fallback: str = "voice") -> str:
    """A valid new id derived from a display name: accents dropped, other characters turned
    into '-', lower-case, ≤ 64 chars. Names with nothing ASCII left (e.g. "小明") give
    ``fallback``; :meth:`VoiceLibrary.save` then adds a counter to make it unique."""
    ascii_name = unicodedata.normalize("NFKD", str(name)).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", ascii_name).lower()
    slug = re.sub(r"-{2,}", "-", slug).lstrip("._-")[:MAX_ID_LENGTH].rstrip(".-_")
    if not slug:
        return fallback
    if _is_windows_reserved(slug):
        slug = f"{slug}-voice"[:MAX_ID_LENGTH]
    return slug


def default_voice_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("s2studio", appauthor=False)) / "voices"


def resolve_voice_path(voice_dir: str | os.PathLike[str], value: str, *, must_exist: bool = True) -> Path:
    """The .s2voice file named by ``value`` — an id (``alice``) or a path ending in .s2voice
    (relative paths are taken relative to ``voice_dir``) — as a real path that must lie inside
    ``voice_dir`` once every symlink is resolved. For servers and CLIs taking untrusted input."""
    if not isinstance(value, str) or not value or "\x00" in value:
        raise InvalidVoiceIdError(f"{value!r} is not a voice id or .s2voice path.")
    folder = Path(os.path.realpath(voice_dir))
    if value.lower().endswith(VOICE_SUFFIX) or any(sep in value for sep in ("/", "\\")) or os.path.isabs(value):
        if not value.lower().endswith(VOICE_SUFFIX):
            raise InvalidVoiceIdError(f"The voice {value!r} must be an id or a path to a {VOICE_SUFFIX} file.")
        candidate = Path(voice_dir) / value.replace("\\", "/")  # an absolute value replaces voice_dir
    else:
        candidate = Path(voice_dir) / f"{check_existing_voice_id(value)}{VOICE_SUFFIX}"
    real = Path(os.path.realpath(candidate))
    if real.parent != folder and folder not in real.parents:
        raise InvalidVoiceIdError(f"The voice {value!r} is outside the voice folder {folder}.")
    if real.suffix.lower() != VOICE_SUFFIX:
        raise InvalidVoiceIdError(f"The voice {value!r} does not lead to a {VOICE_SUFFIX} file.")
    if must_exist and not real.is_file():
        raise VoiceNotFoundError(value, folder)
    return real


# ---------------------------------------------------------------------------------------------
# the library folder


@dataclass(frozen=True)
class VoiceInfo:
    """What a voice list shows; ``problem`` is set (and the rest partly empty) for a broken file."""

    id: str
    name: str
    path: Path
    transcript: str = ""
    language: str = ""
    notes: str = ""
    created: str | None = None  # ISO 8601 UTC, None for files without a sidecar
    num_frames: int = 0
    sample_rate: int = CODEC_SAMPLE_RATE
    reference_audio: Path | None = None
    has_sidecar: bool = False
    problem: str | None = None

    @property
    def duration_seconds(self) -> float:
        return self.num_frames * SAMPLES_PER_CODE_FRAME / self.sample_rate if self.sample_rate else 0.0


@dataclass(frozen=True, eq=False)
class Voice:
    id: str
    codes: np.ndarray  # int32 [num_codebooks, num_frames]
    transcript: str
    info: VoiceInfo
    profile: VoiceProfile

    @property
    def reference_audio(self) -> Path | None:
        return self.info.reference_audio


class VoiceLibrary:
    """A folder of voices (see the module docstring). Every write is atomic."""

    def __init__(self, folder: str | os.PathLike[str] | None = None):
        self.folder = Path(folder) if folder is not None else default_voice_dir()

    # -- paths ---------------------------------------------------------------------------
    def path_for(self, voice_id: str) -> Path:
        return self.folder / f"{check_existing_voice_id(voice_id)}{VOICE_SUFFIX}"

    def _sidecar_path(self, voice_id: str) -> Path:
        return self.folder / f"{voice_id}{SIDECAR_SUFFIX}"

    def _reference_path(self, voice_id: str) -> Path:
        return self.folder / f"{voice_id}{REFERENCE_SUFFIX}"

    def exists(self, voice_id: str) -> bool:
        return self.path_for(voice_id).is_file()

    # -- reading -------------------------------------------------------------------------
    def list(self) -> list[VoiceInfo]:
        """Every ``*.s2voice`` in the folder, sorted by display name (case-insensitive).
        A broken file is listed with ``problem`` set rather than hiding the others."""
        if not self.folder.is_dir():
            return []
        infos = []
        for entry in self.folder.iterdir():
            if not entry.name.endswith(VOICE_SUFFIX) or entry.name.startswith("."):
                continue
            voice_id = entry.name[: -len(VOICE_SUFFIX)]
            try:
                check_existing_voice_id(voice_id)
                infos.append(self._info(voice_id, read_s2voice(entry)))
            except (VoiceFileError, InvalidVoiceIdError) as err:
                infos.append(VoiceInfo(id=voice_id, name=voice_id, path=entry, problem=str(err)))
        return sorted(infos, key=lambda v: (v.name.casefold(), v.id))

    def get(self, voice_id: str) -> Voice:
        path = self.path_for(voice_id)
        if not path.is_file():
            raise VoiceNotFoundError(voice_id, self.folder)
        profile = read_s2voice(path)
        info = self._info(voice_id, profile)
        return Voice(id=voice_id, codes=profile.codes, transcript=profile.transcript, info=info, profile=profile)

    def _info(self, voice_id: str, profile: VoiceProfile) -> VoiceInfo:
        meta = self._read_sidecar(voice_id)
        ref = self._reference_path(voice_id)
        return VoiceInfo(
            id=voice_id,
            name=str(meta.get("name") or voice_id),
            path=self.path_for(voice_id),
            transcript=profile.transcript,  # the .s2voice is the truth s2.cpp also uses
            language=str(meta.get("language") or ""),
            notes=str(meta.get("notes") or ""),
            created=meta.get("created") if isinstance(meta.get("created"), str) else None,
            num_frames=profile.num_frames,
            sample_rate=profile.sample_rate,
            reference_audio=ref if ref.is_file() else None,
            has_sidecar=bool(meta),
        )

    def _read_sidecar(self, voice_id: str) -> dict:
        """The sidecar's fields, or {} when it is missing or unreadable: the .s2voice alone is
        a complete voice, so a damaged sidecar only costs the display metadata."""
        try:
            with open(self._sidecar_path(voice_id), encoding="utf-8") as f:
                meta = json.load(f)
        except (OSError, ValueError):
            return {}
        return meta if isinstance(meta, dict) else {}

    # -- writing -------------------------------------------------------------------------
    def save(
        self,
        voice_id: str | None,
        codes: np.ndarray,
        transcript: str,
        *,
        name: str,
        language: str = "",
        notes: str = "",
        reference_audio: np.ndarray | str | os.PathLike[str] | None = None,
        sample_rate: int = CODEC_SAMPLE_RATE,
        codebook_size: int = DEFAULT_CODEBOOK_SIZE,
        overwrite: bool = False,
    ) -> VoiceInfo:
        """Store encoded ``codes`` [codebooks, frames] and their ``transcript`` as a voice.

        ``voice_id=None`` derives the id from ``name`` (:func:`slugify`), adding ``-2``, ``-3``…
        until it is free. An explicit id that exists (case-insensitively, as on Windows/macOS)
        raises :class:`VoiceExistsError` unless ``overwrite``. ``sample_rate`` is the codec
        rate recorded in the .s2voice; ``reference_audio`` (mono samples at that rate, or an
        audio file path) is kept as ``<id>.ref.wav`` at 44.1 kHz. The .s2voice is written
        last, so a voice only shows up once all its files are complete.
        """
        profile = VoiceProfile(
            codes=np.asarray(codes), transcript=transcript, sample_rate=sample_rate, codebook_size=codebook_size
        )
        encoded = encode_s2voice(profile)  # validates before anything touches the disk
        display_name = str(name).strip()
        if voice_id is None:
            voice_id = self._unique_id(slugify(display_name))
        else:
            validate_voice_id(voice_id)
            clash = self._existing_id_like(voice_id)
            if clash is not None and not overwrite:
                raise VoiceExistsError(clash, self.path_for(clash))
            if clash is not None and clash != voice_id:
                self.delete(clash)  # "Alice" over "alice": one file name on case-insensitive disks
        ref_samples = self._reference_samples(reference_audio, sample_rate)
        self.folder.mkdir(parents=True, exist_ok=True)
        ref_path = self._reference_path(voice_id)
        if ref_samples is not None:
            write_wav(ref_path, ref_samples, CODEC_SAMPLE_RATE)
        else:
            remove_quietly(str(ref_path))  # an overwritten voice must not keep another clip
        sidecar = {
            "format": SIDECAR_FORMAT,
            "version": SIDECAR_VERSION,
            "id": voice_id,
            "name": display_name or voice_id,
            "language": language,
            "notes": notes,
            # an overwrite keeps the voice's original creation time
            "created": self._read_sidecar(voice_id).get("created") or _utc_now_iso(),
            "transcript": transcript,
            "num_frames": profile.num_frames,
            "sample_rate": sample_rate,
            "reference_audio": ref_path.name if ref_samples is not None else None,
        }
        self._write_sidecar(voice_id, sidecar)
        _write_atomic(str(self.path_for(voice_id)), encoded)
        return self._info(voice_id, profile)

    def rename(self, voice_id: str, new_name: str) -> VoiceInfo:
        """Change the display name only; the id and files keep their names (s2.cpp and
        projects refer to the id)."""
        new_name = str(new_name).strip()
        if not new_name:
            raise InputError("A voice name cannot be empty.")
        voice = self.get(voice_id)
        meta = self._read_sidecar(voice_id) or {
            "format": SIDECAR_FORMAT,
            "version": SIDECAR_VERSION,
            "id": voice_id,
            "language": "",
            "notes": "",
            "created": None,
            "transcript": voice.transcript,
        }
        meta["name"] = new_name
        self._write_sidecar(voice_id, meta)
        return self._info(voice_id, voice.profile)

    def delete(self, voice_id: str) -> None:
        """Remove the voice's .s2voice, sidecar and reference clip."""
        path = self.path_for(voice_id)
        if not path.is_file():
            raise VoiceNotFoundError(voice_id, self.folder)
        # The .s2voice goes first: if we are interrupted, no half-deleted voice is listed.
        os.unlink(path)
        remove_quietly(str(self._sidecar_path(voice_id)))
        remove_quietly(str(self._reference_path(voice_id)))

    # -- helpers -------------------------------------------------------------------------
    def _write_sidecar(self, voice_id: str, meta: dict) -> None:
        data = json.dumps(meta, ensure_ascii=False, indent=2).encode("utf-8") + b"\n"
        _write_atomic(str(self._sidecar_path(voice_id)), data)

    def _existing_ids_folded(self) -> dict[str, str]:
        if not self.folder.is_dir():
            return {}
        return {
            e.name[: -len(VOICE_SUFFIX)].casefold(): e.name[: -len(VOICE_SUFFIX)]
            for e in self.folder.iterdir()
            if e.name.endswith(VOICE_SUFFIX)
        }

    def _existing_id_like(self, voice_id: str) -> str | None:
        return self._existing_ids_folded().get(voice_id.casefold())

    def _unique_id(self, base: str) -> str:
        taken = self._existing_ids_folded()
        if base.casefold() not in taken:
            return base
        n = 2
        while True:
            suffix = f"-{n}"
            candidate = base[: MAX_ID_LENGTH - len(suffix)] + suffix
            if candidate.casefold() not in taken:
                return candidate
            n += 1

    @staticmethod
    def _reference_samples(reference_audio, sample_rate: int) -> np.ndarray | None:
        if reference_audio is None:
            return None
        if isinstance(reference_audio, (str, os.PathLike)):
            return read_audio(reference_audio, CODEC_SAMPLE_RATE)
        samples = np.asarray(reference_audio, dtype=np.float32)
        if samples.ndim != 1 or samples.size == 0:
            raise InputError(f"The reference clip must be non-empty mono samples, not shape {samples.shape}.")
        if sample_rate != CODEC_SAMPLE_RATE:
            samples = resample(samples, sample_rate, CODEC_SAMPLE_RATE)
        return samples
