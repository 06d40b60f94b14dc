"""Projects on disk: ``project.json`` plus one float WAV per sentence version.

Two containers hold the same layout:

* the **autosave folder** (``paths.autosave_dir()``): written after every change while the app
  runs. A version's WAV is written once (its name is the version's id and its audio never
  changes), ``project.json`` is rewritten atomically last, and WAVs no longer referenced are
  removed after it, so a crash at any point leaves a readable project;
* a **project file** (``.s2project``, File ▸ Save project…): one zip (stored, not compressed:
  float audio does not shrink) with the same members, written to a temp file and renamed.

Float WAV keeps the samples exactly, so a take found after a restart is sample-identical.
Reading checks everything and raises :class:`ProjectFileError` with one sentence naming the
file and the problem; a damaged file is never modified.
"""

from __future__ import annotations

import json
import os
import re
import stat
import zipfile
import zlib
from pathlib import Path

import numpy as np

from s2studio.app import project_schema as schema
from s2studio.app.project import Project, ProjectTake, Sentence, SentenceVersion
from s2studio.app.project_schema import MAX_PROJECT_SAMPLES
from s2studio.audio import decode_exact_wav, wav_bytes
from s2studio.audio.atomic_file import UnreadableFileError, atomic_output, read_regular_file, remove_quietly
from s2studio.engine.limits import LIMITS, MAX_DIALOGUE_SPEAKERS, MAX_TEXT_CHARS
from s2studio.errors import AudioInputError, InputError

FORMAT = "s2studio-project"
FORMAT_VERSION = 1
PROJECT_SUFFIX = ".s2project"
MANIFEST = "project.json"
AUDIO_FOLDER = "audio"
MAX_MANIFEST_BYTES = 64 << 20
WAV_HEADER_SLACK = 1 << 16  # a float WAV's header and extra chunks (fact, PEAK...) on top of 4 bytes a sample
MAX_VERSION_BYTES = 4 * schema.MAX_VERSION_SAMPLES + WAV_HEADER_SLACK
_MEMBER_RE = re.compile(AUDIO_FOLDER + r"/[A-Za-z0-9_-]{1,64}\.wav")  # no path can leave the project


class ProjectFileError(InputError):
    def __init__(self, path, problem: str):
        self.path = os.fspath(path)
        self.problem = problem
        super().__init__(f"The project {self.path} cannot be opened: {problem}")


# ---- to and from JSON ---------------------------------------------------------------------
def _audio_name(version: SentenceVersion) -> str:
    """The member (and, in the autosave folder, the relative path) of a version's WAV. The id
    is checked here too, not only when a file is read: no id may make a path leave the project."""
    if not isinstance(version.id, str) or not schema.ID_RE.fullmatch(version.id):
        raise ValueError(f"a version id {str(version.id)[:40]!r} is not a safe file name")
    return f"{AUDIO_FOLDER}/{version.id}.wav"


def _inside(folder: Path, relative: str) -> Path:
    """``folder / relative``, resolved, refused unless it lies in ``folder``'s audio folder
    (a symlinked ``audio`` folder or file planted in the autosave folder must not redirect a write)."""
    base = (folder / AUDIO_FOLDER).resolve()
    target = (folder / relative).resolve()
    if target.parent != base or (folder / AUDIO_FOLDER).is_symlink() or (folder / relative).is_symlink():
        raise ProjectFileError(folder, f"{relative} would be written outside the project's folder.")
    return target


def manifest_of(project: Project) -> dict:
    return {
        "format": FORMAT, "version": FORMAT_VERSION,
        "script": project.script, "voice_id": project.voice_id, "voice_label": project.voice_label,
        "speaker_voices": dict(project.speaker_voices), "current_take": project.current_take,
        "takes": [{
            "id": t.id, "created": t.created, "text": t.text, "base_seed": t.base_seed, "voice_id": t.voice_id,
            "voice_label": t.voice_label, "settings": t.settings, "stopped": t.stopped, "stats": t.stats,
            "sentences": [{
                "text": s.text, "pause_after_ms": s.pause_after_ms, "chosen": s.chosen, "locked": s.locked,
                "versions": [{"id": v.id, "seed": v.seed, "sample_rate": v.sample_rate, "samples": len(v.audio),
                              "stop_reason": v.stop_reason, "created": v.created, "file": _audio_name(v)}
                             for v in s.versions],
            } for s in t.sentences],
        } for t in project.takes],
    }


def versions_of(project: Project) -> list[SentenceVersion]:
    return [v for t in project.takes for s in t.sentences for v in s.versions]


class _AudioMembers:
    """The audio members of one project, each decoded at most once (several versions may name
    one member; a crafted file used that to decode one highly compressible member again and
    again), and all of them together bounded by :data:`MAX_PROJECT_SAMPLES` *before* decoding:
    a member's stored size must fit the samples its version declares."""

    def __init__(self, read_member, member_size):
        self._read = read_member
        self._size = member_size
        self._decoded: dict[str, tuple[int, int, np.ndarray]] = {}
        self.total_samples = 0

    def audio(self, name: str, rate: int, samples: int, where: str) -> np.ndarray:
        if name in self._decoded:
            known_rate, known_samples, audio = self._decoded[name]
            if (known_rate, known_samples) != (rate, samples):
                raise ValueError(f"{where}: its audio {name} is also declared with another length or rate")
            return audio
        self.total_samples += samples
        if self.total_samples > MAX_PROJECT_SAMPLES:
            raise ValueError(f"its audio is longer than a project may hold ({MAX_PROJECT_SAMPLES} samples, "
                             f"{MAX_PROJECT_SAMPLES / 48000 / 3600:g} hours at 48 kHz)")
        try:
            size = self._size(name)
        except KeyError:
            raise ValueError(f"{where}: its audio {name} is missing") from None
        if size > 4 * samples + WAV_HEADER_SLACK:
            raise ValueError(f"{where}: its audio {name} is larger than the {samples} samples it declares")
        try:
            audio = decode_exact_wav(self._read(name), rate, samples, name=name)
        except AudioInputError as err:
            raise ValueError(f"{where}: its audio {name} {err.problem.rstrip('.')}") from None
        self._decoded[name] = (rate, samples, audio)
        return audio


def _check_declared_total(data: dict) -> None:
    """The samples all distinct members declare, summed before one is read: a project that
    asks for more audio than any project may hold is refused without decoding anything. (The
    shapes are checked properly afterwards; here whatever is not a number is skipped.)"""
    declared: dict[str, int] = {}
    for t in data.get("takes") if isinstance(data.get("takes"), list) else ():
        for s in (t.get("sentences") if isinstance(t, dict) and isinstance(t.get("sentences"), list) else ()):
            for v in (s.get("versions") if isinstance(s, dict) and isinstance(s.get("versions"), list) else ()):
                if isinstance(v, dict) and isinstance(v.get("samples"), int) and isinstance(v.get("file"), str):
                    declared[v["file"]] = max(declared.get(v["file"], 0), v["samples"])
    if sum(declared.values()) > MAX_PROJECT_SAMPLES:
        raise ValueError(f"its audio is longer than a project may hold ({MAX_PROJECT_SAMPLES} samples, "
                         f"{MAX_PROJECT_SAMPLES / 48000 / 3600:g} hours at 48 kHz)")


def _version(v, where: str, members: _AudioMembers) -> SentenceVersion:
    f = schema.Fields(v, where)
    version_id = f.ident("id")
    name = f.text("file", 100)
    if not _MEMBER_RE.fullmatch(name):
        raise ValueError(f"{where}: '{name[:80]}' is not an audio file of the project")
    rate = f.integer("sample_rate", 1, 10**6)
    if rate not in schema.SAMPLE_RATES:
        raise ValueError(f"{where}: its sample rate {rate} Hz is not one s2studio uses "
                         f"({', '.join(map(str, schema.SAMPLE_RATES))})")
    samples = f.integer("samples", 0, schema.MAX_VERSION_SAMPLES)
    seed = f.integer("seed", 0, LIMITS["seed"].max)
    stop_reason = f.choice("stop_reason", schema.STOP_REASONS, "end")
    created = f.number("created", 0, schema.MAX_TIME, 0.0)
    audio = members.audio(name, rate, samples, where)
    return SentenceVersion(seed=seed, audio=audio, sample_rate=rate, stop_reason=stop_reason, created=created,
                           id=version_id)


def _sentence(s, where: str, members: _AudioMembers) -> Sentence:
    f = schema.Fields(s, where)
    text = f.text("text", MAX_TEXT_CHARS)
    pause = f.integer("pause_after_ms", LIMITS["pause_ms"].min, LIMITS["pause_ms"].max, 0)
    raw_versions = f.items("versions", schema.MAX_VERSIONS)
    versions = [_version(v, f"{where}, version {vi + 1}", members) for vi, v in enumerate(raw_versions)]
    chosen = f.integer("chosen", -1, len(versions) - 1, len(versions) - 1) if versions else \
        f.integer("chosen", -1, -1, -1)
    return Sentence(text=text, pause_after_ms=pause, versions=versions, chosen=chosen, locked=f.flag("locked", False))


def _take(t, where: str, members: _AudioMembers) -> ProjectTake:
    f = schema.Fields(t, where)
    take_id = f.ident("id")
    raw_sentences = f.items("sentences", schema.MAX_SENTENCES)
    sentences = [_sentence(s, f"{where}, sentence {si + 1}", members) for si, s in enumerate(raw_sentences)]
    rates = {s.current.sample_rate for s in sentences if s.current is not None}
    if len(rates) > 1:
        raise ValueError(f"{where}: its sentences have different sample rates ({sorted(rates)})")
    return ProjectTake(text=f.text("text", MAX_TEXT_CHARS), sentences=sentences,
                       base_seed=f.integer("base_seed", 0, LIMITS["seed"].max), voice_id=f.voice_id("voice_id"),
                       voice_label=f.text("voice_label", schema.MAX_LABEL_CHARS, "", multiline=False),
                       settings=schema.take_settings(t.get("settings"), where), stopped=f.flag("stopped", False),
                       stats=f.text("stats", schema.MAX_LABEL_CHARS, ""),
                       created=f.number("created", 0, schema.MAX_TIME, 0.0), id=take_id)


def project_from_manifest(data, read_member, member_size=None) -> Project:
    """The project ``data`` (parsed ``project.json``) describes, every field checked against
    :mod:`s2studio.app.project_schema`. ``read_member(name) -> bytes`` reads an audio member,
    ``member_size(name) -> int`` its stored size (both raise KeyError for a missing one).
    Raises ValueError (wording for the user)."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError("it is not an s2studio project")
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"its format version {str(version)[:20]!r} is not one s2studio knows")
    if version > FORMAT_VERSION:
        raise ValueError(f"it was saved by a newer s2studio (format {version}); update the app")
    schema.check_shape(data, MANIFEST)
    if member_size is None:
        def member_size(name):
            return len(read_member(name))
    _check_declared_total(data)
    members = _AudioMembers(read_member, member_size)
    f = schema.Fields(data, "the project")
    takes = [_take(t, f"take {ti + 1}", members) for ti, t in enumerate(f.items("takes", schema.MAX_TAKES))]
    ids = [t.id for t in takes]
    if len(set(ids)) != len(ids):
        raise ValueError("two of its takes have the same id")
    voices = f.fields("speaker_voices")
    if len(voices.data) > MAX_DIALOGUE_SPEAKERS:
        raise ValueError(f"it names more than {MAX_DIALOGUE_SPEAKERS} speakers")
    speaker_voices = {}
    for key in voices.data:
        if not schema.ID_RE.fullmatch(key):
            raise ValueError(f"its speaker_voices name a speaker {key[:20]!r} that is not a speaker number")
        speaker_voices[key] = voices.text(key, schema.MAX_VOICE_ID_CHARS, multiline=False)
    current = f.text("current_take", 64, "", multiline=False)
    return Project(script=f.text("script", schema.MAX_SCRIPT_CHARS, ""), voice_id=f.voice_id("voice_id"),
                   voice_label=f.text("voice_label", schema.MAX_LABEL_CHARS, "", multiline=False),
                   speaker_voices=speaker_voices, takes=takes, current_take=current)


def _manifest_bytes(manifest: dict) -> bytes:
    return json.dumps(manifest, ensure_ascii=False, indent=1).encode("utf-8")


def _parse_manifest(raw: bytes) -> dict:
    return schema.parse_json(raw, MANIFEST)


# ---- the single-file project -----------------------------------------------------------------
def save_project_file(project: Project, path: str | os.PathLike) -> None:
    """Write ``path`` atomically: it is the complete project or the old file, never half of one."""
    manifest = manifest_of(project)
    with atomic_output(os.fspath(path)) as fh:
        with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_STORED) as z:
            z.writestr(MANIFEST, _manifest_bytes(manifest))
            for v in versions_of(project):
                z.writestr(_audio_name(v), wav_bytes(v.audio, v.sample_rate))


def load_project_file(path: str | os.PathLike) -> Project:
    path = Path(path)
    try:
        st = os.stat(path)
    except OSError as err:
        raise ProjectFileError(path, f"{err.strerror or err}.") from None
    if not stat.S_ISREG(st.st_mode):
        raise ProjectFileError(path, "it is not a file.")
    try:
        with zipfile.ZipFile(path) as z:
            info = z.getinfo(MANIFEST)
            if info.file_size > MAX_MANIFEST_BYTES:
                raise ValueError(f"its {MANIFEST} is too large")

            def member_size(name: str) -> int:
                return z.getinfo(name).file_size

            def member(name: str) -> bytes:
                if member_size(name) > MAX_VERSION_BYTES:
                    raise ValueError(f"{name} is too large")
                return z.read(name)

            return project_from_manifest(_parse_manifest(z.read(info)), member, member_size)
    except KeyError:
        raise ProjectFileError(path, f"it has no {MANIFEST} (not an s2studio project).") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, zlib.error, NotImplementedError, RuntimeError):
        # RuntimeError: an encrypted member; NotImplementedError: a compression zipfile lacks
        raise ProjectFileError(path, "it is damaged or not an s2studio project (not a readable zip file).") from None
    except ValueError as err:
        raise ProjectFileError(path, f"{err}.") from None
    except OSError as err:
        raise ProjectFileError(path, f"{err.strerror or err}.") from None


# ---- the autosave folder ---------------------------------------------------------------------
def save_project_folder(project: Project, folder: str | os.PathLike, removable: set[str] | None = None) -> None:
    """New versions' WAVs first (each written once), then the manifest (atomic), then the WAVs
    no take uses any more: every state on disk is a complete project. ``removable``: the only
    WAV names that may be removed (those this session knew); None: any unused one."""
    folder = Path(folder)
    audio_dir = folder / AUDIO_FOLDER
    audio_dir.mkdir(parents=True, exist_ok=True)
    versions = versions_of(project)
    for v in versions:
        target = _inside(folder, _audio_name(v))
        if not target.exists():
            with atomic_output(str(target)) as fh:
                fh.write(wav_bytes(v.audio, v.sample_rate))
    with atomic_output(str(folder / MANIFEST)) as fh:
        fh.write(_manifest_bytes(manifest_of(project)))
    used = {Path(_audio_name(v)).name for v in versions}
    for entry in audio_dir.iterdir():
        if entry.suffix == ".wav" and entry.name not in used and (removable is None or entry.name in removable):
            remove_quietly(str(entry))


def load_project_folder(folder: str | os.PathLike) -> Project | None:
    """The autosaved project, or None when there is none yet."""
    folder = Path(folder)
    manifest = folder / MANIFEST
    if not manifest.exists():
        return None

    def member_path(name: str) -> Path:
        p = folder / name
        # lstat, not is_file: a symlink in the folder must not read (or size) a file elsewhere
        if not p.parent.is_dir() or p.parent.is_symlink() or not stat.S_ISREG(p.lstat().st_mode):
            raise KeyError(name)
        return p

    def member_size(name: str) -> int:
        try:
            return member_path(name).lstat().st_size
        except FileNotFoundError:
            raise KeyError(name) from None

    def member(name: str) -> bytes:
        return read_regular_file(member_path(name), MAX_VERSION_BYTES, what="project audio file")

    try:
        if manifest.stat().st_size > MAX_MANIFEST_BYTES:
            raise ValueError(f"its {MANIFEST} is too large")
        raw = read_regular_file(manifest, MAX_MANIFEST_BYTES, what=MANIFEST)
        return project_from_manifest(_parse_manifest(raw), member, member_size)
    except (ValueError, UnreadableFileError) as err:
        raise ProjectFileError(folder, f"{err}.") from None
    except OSError as err:
        raise ProjectFileError(folder, f"{err.strerror or err}.") from None
