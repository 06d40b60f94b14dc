"""The studio's voice library: a folder of ``.s2voice`` files with sidecar metadata.

The library folder holds, per voice id, ``<id>.s2voice`` (usable by s2.cpp's ``--voice-dir``
as it is), ``<id>.json`` (what s2.cpp has no room for: display name, language, notes,
creation time, transcript) and optionally ``<id>.ref.wav`` (the original reference clip).
``.s2voice`` files copied in from s2.cpp, without a sidecar, are listed too.

Ids are file stems, so they are checked hard (:func:`validate_voice_id`). Two levels: a *new*
id must be portable (ASCII letters, digits, ``. _ -``, starting with a letter or digit, not a
Windows reserved name, ≤ 64 chars); an *existing* id (one s2.cpp created, say "my voice")
only has to be a safe single file-name component (:func:`check_existing_voice_id`). Ids are
case-insensitive everywhere, as on Windows and macOS: "Alice" finds ``alice.s2voice`` on a
case-sensitive disk too, and saving "Alice" over "alice" replaces that voice.

Replacing a voice is one unit. Its new files are first written in full under hidden staging
names, then a commit record ``.<id>.commit.json`` listing the renames is written (atomically),
then the files are renamed into place and the record removed. A crash before the record leaves
the old voice untouched (the staged files are swept at the next start); a crash after it is
finished by the next :class:`VoiceLibrary` (roll forward), so a voice is never left with a new
clip and old codes. The sidecar carries a hash of its ``.s2voice``, so a reader that raced a
replace and got an old ``.s2voice`` with a new sidecar notices and reads again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import time
import unicodedata
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from s2studio.audio import CODEC_SAMPLE_RATE, SAMPLES_PER_CODE_FRAME, read_audio, resample, wav_bytes
from s2studio.audio.atomic_file import (
    UnreadableFileError,
    read_regular_file,
    remove_quietly,
    remove_stale_temp_files,
)
from s2studio.engine.voices.voice_commit import (
    commit_files,
    commit_record_path,
    finish_pending_commits,
    sweep_staged_files,
)
from s2studio.engine.voices.voice_file import (
    DEFAULT_CODEBOOK_SIZE,
    VOICE_SUFFIX,
    VoiceFileError,
    VoiceProfile,
    _write_atomic,
    encode_s2voice,
    read_s2voice,
)
from s2studio.errors import InputError, S2Error

SIDECAR_SUFFIX = ".json"
REFERENCE_SUFFIX = ".ref.wav"
SIDECAR_FORMAT = "s2studio-voice"
SIDECAR_VERSION = 1
MAX_ID_LENGTH = 64
MAX_EXISTING_ID_LENGTH = 200  # leaves room for ".ref.wav" within a 255-byte file name
MAX_SIDECAR_BYTES = 4 << 20  # a transcript and a few fields; anything larger is not ours

# temp files of versions before the pid was in the name: ".<final name>.<random>.part"
_OLD_TEMP_RE = re.compile(r"^\.(.+\.(?:s2voice|json|ref\.wav))\.[A-Za-z0-9_]{8}\.part$")
_OLD_TEMP_STALE_SECONDS = 3600

_NEW_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# Separators, drive colon, and what Windows forbids in file names.
_FORBIDDEN_IN_NAMES = frozenset('/\\:<>"|?*')
_WINDOWS_RESERVED = frozenset(
    ["CON", "PRN", "AUX", "NUL"] + [f"COM{i}" for i in range(1, 10)] + [f"LPT{i}" for i in range(1, 10)]
)



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



def _utc_now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")



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
    """The app's voice folder (``S2STUDIO_VOICES_DIR`` overrides it, for the CLI as for the app)."""
    from s2studio.user_folders import voices_dir

    return voices_dir()


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
        if not candidate.is_file():  # ids ignore case, on case-sensitive disks too
            candidate = _case_insensitive_match(Path(voice_dir), candidate.name) or candidate
    real = Path(os.path.realpath(candidate))
    if real.parent != folder and folder not in real.parents:
        raise InvalidVoiceIdError(f"The voice {value!r} is outside the voice folder {folder}.")
    if real.suffix.lower() != VOICE_SUFFIX:
        raise InvalidVoiceIdError(f"The voice {value!r} does not lead to a {VOICE_SUFFIX} file.")
    if must_exist and not real.is_file():
        raise VoiceNotFoundError(value, folder)
    return real


def _case_insensitive_match(folder: Path, file_name: str) -> Path | None:
    want = file_name.casefold()
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    matches = sorted(n for n in names if n.casefold() == want and not n.startswith("."))
    return folder / matches[0] if matches else None


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
    """A folder of voices (see the module docstring). Every write is atomic, a replace is one
    unit, and opening the library finishes or sweeps what a crashed writer left."""

    def __init__(self, folder: str | os.PathLike[str] | None = None):
        self.folder = Path(folder) if folder is not None else default_voice_dir()
        self.recover()

    # -- paths ---------------------------------------------------------------------------
    def path_for(self, voice_id: str) -> Path:
        """The voice's .s2voice file: the stored spelling when the id exists in another case."""
        exact = self._exact_path(voice_id)
        if exact.is_file():
            return exact
        stored = self._existing_id_like(voice_id)
        return self._exact_path(stored) if stored is not None else exact

    def _exact_path(self, voice_id: str) -> Path:
        return self.folder / f"{check_existing_voice_id(voice_id)}{VOICE_SUFFIX}"

    def _sidecar_path(self, voice_id: str) -> Path:
        return self.folder / f"{voice_id}{SIDECAR_SUFFIX}"

    def _reference_path(self, voice_id: str) -> Path:
        return self.folder / f"{voice_id}{REFERENCE_SUFFIX}"

    def _commit_path(self, voice_id: str) -> Path:
        return commit_record_path(self.folder, voice_id)

    def exists(self, voice_id: str) -> bool:
        return self._resolve_id(voice_id) is not None

    def _resolve_id(self, voice_id: str) -> str | None:
        """The stored id ``voice_id`` names: itself when that file exists, else the one
        existing id equal to it ignoring case (on case-sensitive disks too), else None."""
        if self._exact_path(voice_id).is_file():
            return voice_id
        return self._existing_id_like(voice_id)

    # -- reading -------------------------------------------------------------------------
    def list(self) -> list[VoiceInfo]:
        """Every ``*.s2voice`` in the folder, sorted by display name (case-insensitive).
        A broken file is listed with ``problem`` set rather than hiding the others."""
        if not self.folder.is_dir():
            return []
        self._finish_pending_commits()
        infos = []
        for entry in self.folder.iterdir():
            if not entry.name.endswith(VOICE_SUFFIX) or entry.name.startswith("."):
                continue
            voice_id = entry.name[: -len(VOICE_SUFFIX)]
            try:
                check_existing_voice_id(voice_id)
                infos.append(self._read_voice(voice_id)[1])
            except (VoiceFileError, InvalidVoiceIdError) as err:
                infos.append(VoiceInfo(id=voice_id, name=voice_id, path=entry, problem=str(err)))
        return sorted(infos, key=lambda v: (v.name.casefold(), v.id))

    def get(self, voice_id: str) -> Voice:
        self._finish_pending_commits()
        stored = self._resolve_id(voice_id)
        if stored is None:
            raise VoiceNotFoundError(voice_id, self.folder)
        profile, info = self._read_voice(stored)
        return Voice(id=stored, codes=profile.codes, transcript=profile.transcript, info=info, profile=profile)

    def _read_voice(self, voice_id: str) -> tuple[VoiceProfile, VoiceInfo]:
        """The voice's profile and info, from files of one generation: a sidecar written for
        another .s2voice (a replace ran between our reads) is read again, then ignored."""
        for _attempt in range(3):
            profile = read_s2voice(self.path_for(voice_id))
            meta = self._read_sidecar(voice_id)
            if _sidecar_matches(meta, profile):
                return profile, self._info(voice_id, profile, meta)
            self._finish_pending_commits()
        return profile, self._info(voice_id, profile, {})

    def _info(self, voice_id: str, profile: VoiceProfile, meta: dict) -> VoiceInfo:
        ref = self._reference_path(voice_id)
        ref_ok = ref.is_file() and (
            not meta or not isinstance(meta.get("reference_bytes"), int) or ref.stat().st_size == meta["reference_bytes"]
        )
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
            reference_audio=ref if ref_ok else None,
            has_sidecar=bool(meta),
        )

    def _read_sidecar(self, voice_id: str) -> dict:
        """The sidecar's fields, or {} when it is missing or unreadable: the .s2voice alone is
        a complete voice, so a damaged sidecar only costs the display metadata."""
        try:
            data = read_regular_file(self._sidecar_path(voice_id), MAX_SIDECAR_BYTES, what="voice sidecar")
            meta = json.loads(data.decode("utf-8"))
        except (OSError, ValueError, RecursionError, UnreadableFileError):  # RecursionError: [[[[... too deep
            return {}
        return checked_sidecar(meta)

    # -- writing -------------------------------------------------------------------------
    def save_profile(self, voice_id: str | None, profile: VoiceProfile, *, name: str, language: str = "",
                     notes: str = "", reference_audio: np.ndarray | str | os.PathLike[str] | None = None,
                     overwrite: bool = False) -> VoiceInfo:
        """:meth:`save` of a profile an engine encoded (``SynthesisEngine.encode_voice``): the one
        way every front end stores a new voice, whichever engine (local or a server) encoded it."""
        return self.save(voice_id, profile.codes, profile.transcript, name=name, language=language, notes=notes,
                         reference_audio=reference_audio, sample_rate=profile.sample_rate,
                         codebook_size=profile.codebook_size, overwrite=overwrite)

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
        raises :class:`VoiceExistsError` unless ``overwrite``; overwriting keeps the stored
        id's spelling ("Alice" over "alice" replaces ``alice``). ``sample_rate`` is the codec
        rate recorded in the .s2voice; ``reference_audio`` (mono samples at that rate, or an
        audio file path) is kept as ``<id>.ref.wav`` at 44.1 kHz. The old voice stays whole
        until the new one is complete on disk (see the module docstring).
        """
        profile = VoiceProfile(
            codes=np.asarray(codes), transcript=transcript, sample_rate=sample_rate, codebook_size=codebook_size
        )
        encoded = encode_s2voice(profile)  # validates before anything touches the disk
        display_name = str(name).strip()
        self._finish_pending_commits()
        if voice_id is None:
            voice_id = self._unique_id(slugify(display_name))
        else:
            validate_voice_id(voice_id)
            clash = self._existing_id_like(voice_id)
            if clash is not None and not overwrite:
                raise VoiceExistsError(clash, self.path_for(clash))
            if clash is not None:
                voice_id = clash  # one voice, one spelling: never two files differing in case
        ref_samples = self._reference_samples(reference_audio, sample_rate)
        ref_data = wav_bytes(ref_samples, CODEC_SAMPLE_RATE) if ref_samples is not None else None
        ref_path = self._reference_path(voice_id)
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
            "reference_audio": ref_path.name if ref_data is not None else None,
            "reference_bytes": len(ref_data) if ref_data is not None else None,
            "s2voice_sha256": hashlib.sha256(encoded).hexdigest(),
        }
        files = {}
        if ref_data is not None:
            files[ref_path.name] = ref_data
        files[self._sidecar_path(voice_id).name] = _sidecar_bytes(sidecar)
        files[self.path_for(voice_id).name] = encoded  # last: the voice appears complete
        # an overwritten voice must not keep another clip
        self._commit(voice_id, files, remove=[] if ref_data is not None else [ref_path.name])
        return self._info(voice_id, profile, sidecar)

    def rename(self, voice_id: str, new_name: str) -> VoiceInfo:
        """Change the display name only; the id and files keep their names (s2.cpp and
        projects refer to the id). Two voices never share a name (ignoring case): lists, Delete
        and the speaker choices show names, and could not tell them apart."""
        new_name = str(new_name).strip()
        if not new_name:
            raise InputError("A voice name cannot be empty.")
        voice = self.get(voice_id)
        voice_id = voice.id
        clash = next((info for info in self.list()
                      if info.id != voice_id and info.name.casefold() == new_name.casefold()), None)
        if clash is not None:
            raise InputError(f"Another voice is already named “{clash.name}” (file {clash.path.name}); "
                             "choose another name.")
        meta = self._read_sidecar(voice_id)
        if not _sidecar_matches(meta, voice.profile):
            meta = {}
        meta = meta or {
            "format": SIDECAR_FORMAT,
            "version": SIDECAR_VERSION,
            "id": voice_id,
            "language": "",
            "notes": "",
            "created": None,
            "transcript": voice.transcript,
        }
        meta["name"] = new_name
        meta["s2voice_sha256"] = hashlib.sha256(encode_s2voice(voice.profile)).hexdigest()
        _write_atomic(str(self._sidecar_path(voice_id)), _sidecar_bytes(meta))
        return self._info(voice_id, voice.profile, meta)

    def delete(self, voice_id: str) -> None:
        """Remove the voice's .s2voice, sidecar and reference clip."""
        self.path_for(voice_id)  # validates the id
        self._finish_pending_commits()
        stored = self._resolve_id(voice_id)
        if stored is None:
            raise VoiceNotFoundError(voice_id, self.folder)
        # The .s2voice goes first: if we are interrupted, no half-deleted voice is listed, and
        # the next start removes the orphaned sidecar and clip.
        os.unlink(self.path_for(stored))
        remove_quietly(str(self._sidecar_path(stored)))
        remove_quietly(str(self._reference_path(stored)))

    # -- one-unit replace (see voice_commit) --------------------------------------------------
    def _commit(self, voice_id: str, files: dict[str, bytes], remove: list[str]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        commit_files(self.folder, self._commit_path(voice_id), files, remove)

    def _finish_pending_commits(self) -> None:
        finish_pending_commits(self.folder)

    def recover(self) -> None:
        """Finish interrupted replaces, then remove what crashed writers left: staged and temp
        files of processes that are gone, and sidecars/clips whose .s2voice was deleted."""
        if not self.folder.is_dir():
            return
        self._finish_pending_commits()
        remove_stale_temp_files(self.folder)
        try:
            names = os.listdir(self.folder)
        except OSError:
            return
        sweep_staged_files(self.folder)
        name_set = set(names)
        for name in names:
            path = self.folder / name
            old = _OLD_TEMP_RE.match(name)
            if old is not None:
                try:
                    if time.time() - os.lstat(path).st_mtime > _OLD_TEMP_STALE_SECONDS:
                        _remove_regular(path)
                except OSError:
                    pass
                continue
            if name.startswith("."):
                continue  # staging files, commit records, temp files: handled above
            if name.endswith(REFERENCE_SUFFIX):
                voice_id = name[: -len(REFERENCE_SUFFIX)]
            elif name.endswith(SIDECAR_SUFFIX):
                voice_id = name[: -len(SIDECAR_SUFFIX)]
            else:
                continue
            if f"{voice_id}{VOICE_SUFFIX}" in name_set:
                continue
            if name.endswith(SIDECAR_SUFFIX) and self._read_sidecar(voice_id).get("format") != SIDECAR_FORMAT:
                continue  # some other JSON file: not ours to remove
            # Commit record first, then the .s2voice: a writer renames the sidecar and clip
            # before the .s2voice, and removes its record only after.
            if self._commit_path(voice_id).exists() or (self.folder / f"{voice_id}{VOICE_SUFFIX}").exists():
                continue
            _remove_regular(path)

    # -- helpers -------------------------------------------------------------------------
    def _existing_ids_folded(self) -> dict[str, str]:
        if not self.folder.is_dir():
            return {}
        return {
            e.name[: -len(VOICE_SUFFIX)].casefold(): e.name[: -len(VOICE_SUFFIX)]
            for e in self.folder.iterdir()
            if e.name.endswith(VOICE_SUFFIX) and not e.name.startswith(".")
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


# The sidecar's schema: its known fields, their types and lengths. Voices come from others: a
# field that breaks it is dropped (the display falls back to the .s2voice), others are kept as
# they are so a rename writes them back.
SIDECAR_FIELDS = {"name": (str, 200), "language": (str, 64), "notes": (str, 10_000), "created": (str, 64),
                  "reference_bytes": (int, 1 << 40), "s2voice_sha256": (str, 64)}


def checked_sidecar(meta) -> dict:
    """``meta`` with every known field that is of the wrong type or too long left out."""
    if not isinstance(meta, dict):
        return {}
    out = {}
    for key, value in meta.items():
        kind, limit = SIDECAR_FIELDS.get(key, (None, None))
        if kind is None:
            out[key] = value
        elif kind is str and isinstance(value, str) and len(value) <= limit:
            out[key] = value
        elif kind is int and isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= limit:
            out[key] = value
    return out


def _sidecar_bytes(meta: dict) -> bytes:
    return json.dumps(meta, ensure_ascii=False, indent=2).encode("utf-8") + b"\n"


def name_sidecar_bytes(profile: VoiceProfile, name: str) -> bytes:
    """A sidecar holding only ``name`` for this profile: written beside an exported .s2voice so
    that importing it again (:func:`saved_name_beside`) keeps the name."""
    return _sidecar_bytes({"format": SIDECAR_FORMAT, "version": SIDECAR_VERSION, "name": str(name),
                           "s2voice_sha256": hashlib.sha256(encode_s2voice(profile)).hexdigest()})


def is_voice_sidecar(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is missing or a voice sidecar (so writing one there overwrites nothing else)."""
    try:
        meta = json.loads(read_regular_file(path, MAX_SIDECAR_BYTES, what="voice sidecar").decode("utf-8"))
    except FileNotFoundError:
        return True
    except (OSError, ValueError, UnreadableFileError):
        return False
    return isinstance(meta, dict) and meta.get("format") == SIDECAR_FORMAT


def saved_name_beside(path: str | os.PathLike[str], profile: VoiceProfile) -> str | None:
    """The display name an s2studio library saved for the .s2voice at ``path`` (its ``.json``
    sidecar beside it, written for this very profile), or None: an imported voice keeps the name
    it was saved under instead of taking its file's name. The sidecar is read as untrusted input
    (size-bounded, a regular file, the name plain text of at most 200 characters)."""
    sidecar = Path(path).with_suffix(SIDECAR_SUFFIX)
    try:
        meta = json.loads(read_regular_file(sidecar, MAX_SIDECAR_BYTES, what="voice sidecar").decode("utf-8"))
    except (OSError, ValueError, UnreadableFileError):
        return None
    if not isinstance(meta, dict) or not isinstance(meta.get("s2voice_sha256"), str):
        return None  # without the hash it could describe another voice of that file name
    name = meta.get("name")
    if not isinstance(name, str) or not _sidecar_matches(meta, profile):
        return None
    name = " ".join(name.split())
    return name if 0 < len(name) <= 200 and name.isprintable() else None


def _sidecar_matches(meta: dict, profile: VoiceProfile) -> bool:
    """Whether ``meta`` was written with this .s2voice. Sidecars without the hash (older
    versions, hand-made ones) are taken as they are."""
    want = meta.get("s2voice_sha256")
    if not isinstance(want, str):
        return True
    return hashlib.sha256(encode_s2voice(profile)).hexdigest() == want


def _remove_regular(path: Path) -> None:
    try:
        if stat.S_ISREG(os.lstat(path).st_mode):
            os.unlink(path)
    except OSError:
        pass
