"""The models on this computer: one models folder and one default, shared by the app and the CLI.

* **The folder** is ``user_folders.models_dir()`` (``S2STUDIO_MODELS_DIR`` overrides it): the
  app's first-run download and ``s2studio models pull`` both put files there, the tokenizer beside
  the model files.
* **The default** is the app's own choice: ``model_path`` (and ``tokenizer_path``) in the app's
  settings file. Choosing a model in the app makes it the CLI's default too, and
  ``s2studio models default q6_k`` changes what the app opens. Only those two keys are read or
  written here; the rest of the file is left exactly as the app wrote it.
* **Which model a command uses** (:func:`resolve_model`): ``-m`` (a file, or a variant name such
  as ``q8_0``), else the default, else the only model installed; else an error that says the
  exact ``s2studio models pull`` command to run.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from s2studio.errors import InputError, S2Error
from s2studio.models.catalog import DEFAULT_VARIANT, FILE_SUFFIX, TOKENIZER_FILE, variant_named, variant_of_file
from s2studio.user_folders import models_dir, settings_file

# The app refuses settings files larger than this (app/settings.py); so do we.
MAX_SETTINGS_BYTES = 16 << 20
PULL_HINT = f"s2studio models pull {DEFAULT_VARIANT}"


class NoModelError(S2Error):
    """No model to load: none given, none set as default, none (or several) installed."""


@dataclass(frozen=True)
class InstalledModel:
    path: Path
    size: int  # bytes
    variant: str | None  # "q8_0" for a published file, None for another name
    is_default: bool

    @property
    def label(self) -> str:
        return self.variant or self.path.name


class ModelStore:
    def __init__(self, folder: str | os.PathLike[str] | None = None, settings: str | os.PathLike[str] | None = None):
        self.folder = Path(folder) if folder is not None else models_dir()
        self.settings_path = Path(settings) if settings is not None else settings_file()

    # ---- what is here ------------------------------------------------------------------------
    def installed(self) -> list[InstalledModel]:
        """Complete model files in the folder (``.part`` downloads are not models yet), plus the
        default when it lies elsewhere; published variants first, in catalogue order."""
        default = self.default_path()
        found: dict[Path, Path] = {}  # resolved -> as shown
        if self.folder.is_dir():
            for entry in sorted(self.folder.iterdir()):
                if entry.name.lower().endswith(FILE_SUFFIX) and entry.is_file():
                    found.setdefault(entry.resolve(), entry)
        if default is not None and default.is_file():
            found.setdefault(default.resolve(), default)
        models = [InstalledModel(shown, shown.stat().st_size, variant_of_file(shown.name),
                                 default is not None and real == default.resolve())
                  for real, shown in found.items()]
        return sorted(models, key=lambda m: (m.variant is None, m.path.name))

    def installed_variant(self, name: str) -> Path | None:
        v = variant_named(name)
        if v is None:
            return None
        path = self.folder / v.filename
        return path if path.is_file() else None

    def partial_downloads(self) -> list[Path]:
        return sorted(self.folder.glob(f"*{FILE_SUFFIX}.part")) if self.folder.is_dir() else []

    # ---- the default (the app's settings file) ---------------------------------------------------
    def _read_settings(self) -> dict:
        try:
            with open(self.settings_path, "rb") as f:
                raw = f.read(MAX_SETTINGS_BYTES + 1)
        except FileNotFoundError:
            return {}
        except OSError as err:
            raise InputError(f"Settings file {self.settings_path}: cannot be read ({err.strerror or err}).") from err
        try:
            data = json.loads(raw.decode("utf-8-sig")) if len(raw) <= MAX_SETTINGS_BYTES else None
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise InputError(f"Settings file {self.settings_path}: is damaged (not a JSON object); open the app once "
                             "to set it aside, or delete it.")
        return data

    def default_path(self) -> Path | None:
        """The default model file as configured (it may no longer exist), or None. A damaged
        settings file means no default here; the app reports and repairs it."""
        try:
            value = self._read_settings().get("model_path")
        except InputError:
            return None
        return Path(value) if isinstance(value, str) and value.strip() else None

    def set_default(self, model: Path | None) -> None:
        """Make ``model`` the default (the app opens it too); None clears it. The tokenizer is
        then looked for beside the model, as the app does for a downloaded one."""
        from s2studio.audio.atomic_file import atomic_output

        data = self._read_settings()
        data["model_path"] = str(model.resolve()) if model is not None else ""
        data["tokenizer_path"] = ""
        self.settings_path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_output(str(self.settings_path)) as f:
            f.write(json.dumps(data, indent=2, ensure_ascii=False).encode("utf-8") + b"\n")

    # ---- removing ------------------------------------------------------------------------------
    def remove(self, name: str) -> list[Path]:
        """Delete an installed variant (and its partial download); clears the default if it was
        that file. The tokenizer stays while other models use it. Returns what was deleted."""
        v = variant_named(name)
        if v is None:
            raise InputError(f"{name!r} is not a model variant; `s2studio models list` shows what is installed.")
        path, part = self.folder / v.filename, self.folder / (v.filename + ".part")
        if not path.is_file() and not part.is_file():
            raise InputError(f"Model {v.name} is not installed in {self.folder}.")
        default = self.default_path()
        was_default = default is not None and path.is_file() and default.resolve() == path.resolve()
        removed = []
        for p in (path, part):
            if p.is_file():
                p.unlink()
                removed.append(p)
        if was_default:
            self.set_default(None)
        others = [m for m in self.installed() if m.path.parent.resolve() == self.folder.resolve()]
        tokenizer = self.folder / TOKENIZER_FILE
        if not others and tokenizer.is_file():
            tokenizer.unlink()
            removed.append(tokenizer)
        return removed


def resolve_model(given: str | None, store: ModelStore | None = None) -> str:
    """The model file a command loads: ``given`` (``-m``: a path, or a variant name such as
    ``q8_0``), else the configured default, else the only model installed.

    Raises :class:`NoModelError` with the exact command to run when none can be chosen."""
    store = store or ModelStore()
    if given:
        if Path(given).exists():
            return given
        v = variant_named(given)
        if v is not None:
            path = store.installed_variant(given)
            if path is None:
                raise NoModelError(f"Model {v.name} is not installed; get it with: s2studio models pull {v.name}")
            return str(path)
        return given  # the engine says the file does not exist, naming it
    default = store.default_path()
    if default is not None:
        if default.is_file():
            return str(default)
        raise NoModelError(f"The default model {default} no longer exists; get one with: {PULL_HINT} "
                           "(or choose another with: s2studio models default VARIANT)")
    models = [m for m in store.installed() if m.path.parent.resolve() == store.folder.resolve()]
    if len(models) == 1:
        return str(models[0].path)
    if not models:
        raise NoModelError(f"No model installed; get one with: {PULL_HINT} (or give a .gguf file with -m)")
    names = ", ".join(m.label for m in models)
    raise NoModelError(f"Several models are installed ({names}); choose one with -m, or set the default "
                       f"with: s2studio models default {models[0].label}")
