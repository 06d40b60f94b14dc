"""The app's settings: one dataclass, stored as JSON in the user config folder.

Why not QSettings: its backends hand bools and ints back as strings on some platforms (ANCHORS
§5.11). Loading is forgiving field by field (unknown keys ignored, a missing or wrongly-typed
key takes its default) and a file that is not JSON at all is moved aside and reported, so the
app always starts. Saving is atomic (temp file, fsync, rename), so a crash never leaves half a
settings file.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from dataclasses import dataclass, field, fields
from pathlib import Path

from s2studio.app import paths
from s2studio.audio.atomic_file import atomic_output

log = logging.getLogger(__name__)

TOKENIZER_MODES = ("hf", "s2cpp")
CODEC_MODES = ("auto", "cpu", "follow")
ENGINES = ("local", "server")  # the model on this computer, or on `s2studio serve` elsewhere


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

    def copy(self) -> "AppSettings":
        return dataclasses.replace(self, recent_texts=list(self.recent_texts))

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
    return settings, bad


def load_settings(path: Path | None = None) -> LoadedSettings:
    path = path or paths.settings_file()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return LoadedSettings(AppSettings(), None)
    except OSError as err:
        return LoadedSettings(AppSettings(), f"Could not read the settings file {path} ({err.strerror}); "
                                             "using the default settings.")
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
    except ValueError:
        backup = path.with_name(path.name + ".corrupt")
        try:
            os.replace(path, backup)
            where = f" It was kept as {backup}."
        except OSError:
            where = ""
        log.warning("settings file %s is corrupt; using defaults", path)
        return LoadedSettings(AppSettings(), f"The settings file {path} was damaged, so the default settings "
                                             f"are in use.{where}")
    settings, bad = settings_from_dict(data)
    notice = None
    if bad:
        notice = f"Some settings could not be read and were reset to their defaults: {', '.join(sorted(bad))}."
        log.warning("settings %s: unusable fields %s", path, bad)
    return LoadedSettings(settings, notice)


def save_settings(settings: AppSettings, path: Path | None = None) -> None:
    """Atomic write: a temp file beside the target, fsync, rename over it."""
    path = path or paths.settings_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(dataclasses.asdict(settings), indent=2, ensure_ascii=False).encode("utf-8") + b"\n"
    with atomic_output(str(path)) as f:
        f.write(data)
