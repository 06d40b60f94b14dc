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
from pathlib import Path

import numpy as np

from s2studio.app.project import Project, ProjectTake, Sentence, SentenceVersion
from s2studio.audio import decode_audio_bytes, wav_bytes
from s2studio.audio.atomic_file import atomic_output, remove_quietly
from s2studio.errors import InputError

FORMAT = "s2studio-project"
FORMAT_VERSION = 1
PROJECT_SUFFIX = ".s2project"
MANIFEST = "project.json"
AUDIO_FOLDER = "audio"
MAX_MANIFEST_BYTES = 64 << 20
MAX_VERSION_BYTES = 1 << 30  # a float WAV of about an hour and a half
_MEMBER_RE = re.compile(AUDIO_FOLDER + r"/[A-Za-z0-9_-]{1,64}\.wav")  # no path can leave the project


class ProjectFileError(InputError):
    def __init__(self, path, problem: str):
        self.path = os.fspath(path)
        self.problem = problem
        super().__init__(f"The project {self.path} cannot be opened: {problem}")


# ---- to and from JSON ---------------------------------------------------------------------
def _audio_name(version: SentenceVersion) -> str:
    return f"{AUDIO_FOLDER}/{version.id}.wav"


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


def _get(d: dict, key: str, kind, where: str):
    value = d.get(key)
    ok = isinstance(value, kind) and not (kind in (int, (int, float)) and isinstance(value, bool))
    if not ok:
        raise ValueError(f"{where}: '{key}' is missing or not {getattr(kind, '__name__', 'a number')}")
    return value


def project_from_manifest(data, read_member) -> Project:
    """``read_member(name) -> bytes`` reads an audio member. Raises ValueError (wording for the user)."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError("it is not an s2studio project")
    if not isinstance(data.get("version"), int) or data["version"] > FORMAT_VERSION:
        raise ValueError(f"it was saved by a newer s2studio (format {data.get('version')}); update the app")
    takes = []
    for ti, t in enumerate(_get(data, "takes", list, "project")):
        where = f"take {ti + 1}"
        if not isinstance(t, dict):
            raise ValueError(f"{where} is not an object")
        sentences = []
        for si, s in enumerate(_get(t, "sentences", list, where)):
            sw = f"{where}, sentence {si + 1}"
            if not isinstance(s, dict):
                raise ValueError(f"{sw} is not an object")
            versions = []
            for vi, v in enumerate(_get(s, "versions", list, sw)):
                vw = f"{sw}, version {vi + 1}"
                if not isinstance(v, dict):
                    raise ValueError(f"{vw} is not an object")
                rate = _get(v, "sample_rate", int, vw)
                name = _get(v, "file", str, vw)
                if not _MEMBER_RE.fullmatch(name):
                    raise ValueError(f"{vw}: '{name}' is not an audio file of the project")
                try:
                    audio = decode_audio_bytes(read_member(name), rate, name=name, max_seconds=None,
                                               check_reference=False)
                except KeyError:
                    raise ValueError(f"{vw}: its audio {name} is missing") from None
                except InputError as err:
                    raise ValueError(f"{vw}: {err}") from None
                if len(audio) != _get(v, "samples", int, vw):
                    raise ValueError(f"{vw}: its audio {name} is truncated")
                versions.append(SentenceVersion(seed=_get(v, "seed", int, vw), audio=audio.astype(np.float32),
                                                sample_rate=rate, stop_reason=str(v.get("stop_reason", "end")),
                                                created=float(v.get("created") or 0.0),
                                                id=_get(v, "id", str, vw)))
            chosen = s.get("chosen", len(versions) - 1)
            if not isinstance(chosen, int) or not -1 <= chosen < len(versions):
                raise ValueError(f"{sw}: 'chosen' is not one of its versions")
            sentences.append(Sentence(text=_get(s, "text", str, sw), pause_after_ms=int(s.get("pause_after_ms") or 0),
                                      versions=versions, chosen=chosen, locked=bool(s.get("locked"))))
        settings = t.get("settings") if isinstance(t.get("settings"), dict) else {}
        takes.append(ProjectTake(text=_get(t, "text", str, where), sentences=sentences,
                                 base_seed=_get(t, "base_seed", int, where), voice_id=t.get("voice_id"),
                                 voice_label=str(t.get("voice_label") or ""), settings=settings,
                                 stopped=bool(t.get("stopped")), stats=str(t.get("stats") or ""),
                                 created=float(t.get("created") or 0.0), id=_get(t, "id", str, where)))
    voices = data.get("speaker_voices") if isinstance(data.get("speaker_voices"), dict) else {}
    return Project(script=str(data.get("script") or ""), voice_id=data.get("voice_id"),
                   voice_label=str(data.get("voice_label") or ""),
                   speaker_voices={str(k): str(v) for k, v in voices.items()}, takes=takes,
                   current_take=str(data.get("current_take") or ""))


def _manifest_bytes(manifest: dict) -> bytes:
    return json.dumps(manifest, ensure_ascii=False, indent=1).encode("utf-8")


def _parse_manifest(raw: bytes) -> dict:
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ValueError(f"its {MANIFEST} is damaged (not JSON text)") from None


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

            def member(name: str) -> bytes:
                if z.getinfo(name).file_size > MAX_VERSION_BYTES:
                    raise ValueError(f"{name} is too large")
                return z.read(name)

            return project_from_manifest(_parse_manifest(z.read(info)), member)
    except KeyError:
        raise ProjectFileError(path, f"it has no {MANIFEST} (not an s2studio project).") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError):
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
        target = folder / _audio_name(v)
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

    def member(name: str) -> bytes:
        p = folder / name
        if not p.is_file():
            raise KeyError(name)
        if p.stat().st_size > MAX_VERSION_BYTES:
            raise ValueError(f"{name} is too large")
        return p.read_bytes()

    try:
        if manifest.stat().st_size > MAX_MANIFEST_BYTES:
            raise ValueError(f"its {MANIFEST} is too large")
        return project_from_manifest(_parse_manifest(manifest.read_bytes()), member)
    except ValueError as err:
        raise ProjectFileError(folder, f"{err}.") from None
    except OSError as err:
        raise ProjectFileError(folder, f"{err.strerror or err}.") from None
