"""The app's settings: one dataclass, stored as JSON in the user config folder.

Why not QSettings: its backends hand bools and ints back as strings on some platforms.
Loading is forgiving field by field (unknown keys ignored, a missing or wrongly-typed
key takes its default) and a file that cannot be used at all (not UTF-8, not JSON, absurdly
large) is moved aside to a dated backup and reported, so the app always starts. A UTF-8 byte
order mark (Notepad adds one) is accepted. Backups are ``settings.json.corrupt`` for the first,
then ``settings.json.corrupt-<date>-<time>``; only the newest few are kept. Saving is atomic
(temp file, fsync, rename), so a crash never leaves half a settings file.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

from s2studio.app import paths
from s2studio.audio.atomic_file import UnreadableFileError, atomic_output, read_regular_file
from s2studio.engine.modes import CodecMode, TokenizerMode

log = logging.getLogger(__name__)

# A settings file is a few KB; recent texts could make it larger, never this large.
MAX_SETTINGS_BYTES = 16 << 20
# Damaged files kept for the user to look at; older ones are removed.
MAX_CORRUPT_BACKUPS = 5
_BACKUP_RE = r"\.corrupt(?:-(\d{8}-\d{6})(?:-(\d+))?)?"

# Stored as their words (the settings file is JSON); checked against the engine's enums.
TOKENIZER_MODES = tuple(TokenizerMode.choices())
CODEC_MODES = tuple(CodecMode.choices())
ENGINES = ("local", "server")  # the model on this computer, or on `s2studio serve` elsewhere
THEMES = ("system", "light", "dark")  # app/theme.py; "system" follows the OS colour scheme
MAX_SPEAKER_VOICES = 64  # remembered speaker -> voice choices (a script has a handful of speakers)
MAX_RECENT_SCRIPTS = 10  # File ▸ Recent scripts


@dataclass
class AppSettings:
    # model
    model_path: str = ""
    tokenizer_path: str = ""  # "" = look beside the model
    tokenizer_mode: str = "hf"
    device: str = "cpu"
    gpu_layers: int = -1  # -1 = all layers on the GPU device
    threads: int = 0  # 0 = all cores
    codec_mode: str = "auto"
    # where the model runs: "local" or "server" (server_url; its API key is never stored here,
    # see app/server_engine.py)
    engine: str = "local"
    server_url: str = ""
    # sampling
    temperature: float = 0.8
    top_p: float = 0.8
    top_k: int = 30
    max_new_tokens: int = 1024
    seed: int = 0
    seed_locked: bool = False  # False: a fresh random seed for every take
    # long text: on by default in the app (s2.cpp's CLI has it off), so long scripts start
    # playing after the first sentence instead of after the whole text
    segmentation_enabled: bool = True
    segment_max_chars: int = 300
    pause_ms: int = 180
    # post-processing of the finished take
    trim_silence: bool = False
    normalize: bool = False
    dynamic_normalize: bool = False
    # audio devices by name ("" = the system default)
    input_device: str = ""
    output_device: str = ""
    # where saved voices live ("" = the default folder)
    voices_folder: str = ""
    last_export_dir: str = ""
    recent_texts: list = field(default_factory=list)
    # export: the format key last chosen (see app/export.py); File ▸ Recent scripts, newest first
    export_format: str = "wav32f"
    recent_scripts: list = field(default_factory=list)
    # the window as it was left: Qt's saveGeometry / QSplitter.saveState, hex-encoded ("" = default)
    # the Book view's open book project folder ("" = none), restored after a restart
    book_folder: str = ""
    window_geometry: str = ""
    splitter_states: list = field(default_factory=list)
    # look: "system", "light" or "dark" (app/theme.py)
    theme: str = "system"
    # the Speakers panel's choices: speaker number (as text, JSON keys are strings) -> voice id
    speaker_voices: dict = field(default_factory=dict)

    def copy(self) -> "AppSettings":
        return dataclasses.replace(self, recent_texts=list(self.recent_texts),
                                   recent_scripts=list(self.recent_scripts),
                                   splitter_states=list(self.splitter_states),
                                   speaker_voices=dict(self.speaker_voices))

    @property
    def uses_server(self) -> bool:
        return self.engine == "server"

    @property
    def engine_chosen(self) -> bool:
        """Something to synthesize with: a model file here, or a server address."""
        return bool(self.server_url.strip()) if self.uses_server else bool(self.model_path)

    @property
    def model_configured(self) -> bool:
        return bool(self.model_path) and Path(self.model_path).is_file()


@dataclass(frozen=True)
class LoadedSettings:
    settings: AppSettings
    notice: str | None  # a sentence to show the user when the file could not be used


def _coerce(value, default):
    """``value`` if it has the type of ``default`` (ints accepted for floats), else None."""
    if isinstance(default, bool):
        return value if isinstance(value, bool) else None
    if isinstance(default, int):
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if isinstance(default, float):
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if isinstance(default, str):
        return value if isinstance(value, str) else None
    if isinstance(default, list):
        return list(value) if isinstance(value, list) else None
    if isinstance(default, dict):
        return dict(value) if isinstance(value, dict) else None
    return None


def settings_from_dict(data: dict) -> tuple[AppSettings, list[str]]:
    """Build settings from parsed JSON; returns the names of fields that were unusable."""
    defaults = AppSettings()
    values, bad = {}, []
    for f in fields(AppSettings):
        if f.name not in data:
            continue
        coerced = _coerce(data[f.name], getattr(defaults, f.name))
        if coerced is None:
            bad.append(f.name)
        else:
            values[f.name] = coerced
    settings = dataclasses.replace(defaults, **values)
    if settings.tokenizer_mode not in TOKENIZER_MODES:
        settings.tokenizer_mode, bad = "hf", bad + ["tokenizer_mode"]
    if settings.codec_mode not in CODEC_MODES:
        settings.codec_mode, bad = "auto", bad + ["codec_mode"]
    if settings.engine not in ENGINES:
        settings.engine, bad = "local", bad + ["engine"]
    if not all(isinstance(p, str) for p in settings.recent_scripts):
        bad.append("recent_scripts")
    settings.recent_scripts = [p for p in settings.recent_scripts if isinstance(p, str)][:MAX_RECENT_SCRIPTS]
    if settings.theme not in THEMES:
        settings.theme, bad = "system", bad + ["theme"]
    speaker_voices = valid_speaker_voices(settings.speaker_voices)
    if speaker_voices != settings.speaker_voices:
        bad.append("speaker_voices")
    settings.speaker_voices = speaker_voices
    return settings, bad


def valid_speaker_voices(data: dict) -> dict:
    """The usable entries of a speaker -> voice id mapping: a speaker number 0..9999 as text, a
    voice id as non-empty text of at most 200 characters (the library checks it when used)."""
    kept = {}
    for speaker, voice_id in data.items():
        if (isinstance(speaker, str) and speaker.isascii() and speaker.isdigit() and len(speaker) <= 4
                and isinstance(voice_id, str) and 0 < len(voice_id) <= 200):
            kept[str(int(speaker))] = voice_id
    return dict(list(kept.items())[:MAX_SPEAKER_VOICES])


def load_settings(path: Path | None = None) -> LoadedSettings:
    """The saved settings, or the defaults plus a sentence for the user: never raises for
    anything the file holds, so the app always starts."""
    path = path or paths.settings_file()
    try:
        raw = read_regular_file(path, MAX_SETTINGS_BYTES, what="settings file")
    except FileNotFoundError:
        return LoadedSettings(AppSettings(), None)
    except UnreadableFileError as err:
        if "larger than" in err.problem:
            return _damaged(path, f"it is too large ({MAX_SETTINGS_BYTES} bytes at most)")
        # a pipe or device: not ours to move aside
        return LoadedSettings(AppSettings(), f"The settings file {path} {err.problem} Using the default settings.")
    except OSError as err:
        return LoadedSettings(AppSettings(), f"Could not read the settings file {path} "
                                             f"({err.strerror or err}); using the default settings.")
    try:
        text = raw.decode("utf-8-sig")  # -sig: a leading byte order mark is fine
    except UnicodeDecodeError as err:
        return _damaged(path, f"it is not UTF-8 text (byte {err.start})")
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
    except (ValueError, RecursionError):  # RecursionError: [[[[... deeper than the parser's stack (fuzzing found it)
        return _damaged(path, "it is not a JSON object")
    settings, bad = settings_from_dict(data)
    notice = None
    if bad:
        notice = f"Some settings could not be read and were reset to their defaults: {', '.join(sorted(bad))}."
        log.warning("settings %s: unusable fields %s", path, bad)
    return LoadedSettings(settings, notice)


def _damaged(path: Path, why: str) -> LoadedSettings:
    log.warning("settings file %s is damaged (%s); using defaults", path, why)
    try:
        backup = _backup_damaged(path)
        where = f" It was kept as {backup}."
    except OSError:
        where = ""
    return LoadedSettings(AppSettings(), f"The settings file {path} was damaged ({why}), so the default "
                                         f"settings are in use.{where}")


def _existing_backups(path: Path) -> list[Path]:
    """Our backups of ``path``, oldest first (the plain ``.corrupt`` is always the first made)."""
    pattern = re.compile(re.escape(path.name) + _BACKUP_RE + "$")
    found = []
    for entry in path.parent.iterdir():
        m = pattern.match(entry.name)
        if m is not None:
            found.append(((m.group(1) or ""), int(m.group(2) or 0), entry))
    return [entry for _stamp, _n, entry in sorted(found)]


def _backup_damaged(path: Path) -> Path:
    """Move a damaged settings file aside without overwriting an earlier backup; keep the
    newest :data:`MAX_CORRUPT_BACKUPS`."""
    existing = _existing_backups(path)
    if not existing:
        backup = path.with_name(path.name + ".corrupt")
    else:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        # Several in one second: count past the highest number in use, so the names keep
        # sorting oldest-first even after older ones were removed.
        pattern = re.compile(re.escape(f"{path.name}.corrupt-{stamp}") + r"(?:-(\d+))?$")
        used = [int(m.group(1) or 1) for m in (pattern.match(p.name) for p in existing) if m]
        n = max(used, default=0) + 1
        backup = path.with_name(f"{path.name}.corrupt-{stamp}" + (f"-{n}" if n > 1 else ""))
    os.replace(path, backup)
    for old in _existing_backups(path)[:-MAX_CORRUPT_BACKUPS]:
        try:
            old.unlink()
        except OSError:
            pass
    return backup


def save_settings(settings: AppSettings, path: Path | None = None) -> None:
    """Atomic write: a temp file beside the target, fsync, rename over it."""
    path = path or paths.settings_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(dataclasses.asdict(settings), indent=2, ensure_ascii=False).encode("utf-8") + b"\n"
    with atomic_output(str(path)) as f:
        f.write(data)
