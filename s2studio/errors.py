"""User-facing errors of the engine.

Every error a person can cause (a bad model file, a bad tokenizer, unreadable audio, empty
text) is one of these, with a message that names the file and the problem in one sentence.
The CLI prints ``str(error)``; the app shows it in a banner. Anything else is a bug.
"""

from __future__ import annotations

import os


class S2Error(Exception):
    """Base class: ``str(err)`` is a complete, user-readable sentence."""


class ModelFileError(S2Error):
    """A model (GGUF) file cannot be used."""

    def __init__(self, path: str | os.PathLike[str], problem: str):
        self.path = os.fspath(path)
        self.problem = problem
        super().__init__(f"Model file {self.path}: {problem}")


class TokenizerError(S2Error):
    """A tokenizer.json cannot be used with this model."""

    def __init__(self, path: str | os.PathLike[str], problem: str):
        self.path = os.fspath(path)
        self.problem = problem
        super().__init__(f"Tokenizer {self.path}: {problem}")


class AudioInputError(S2Error):
    """An audio file cannot be used as a reference (unreadable, empty, silent, too long...)."""

    def __init__(self, path: str | os.PathLike[str] | None, problem: str):
        self.path = None if path is None else os.fspath(path)
        self.problem = problem
        where = f"Audio file {self.path}" if self.path is not None else "Audio"
        super().__init__(f"{where}: {problem}")


class InputError(S2Error):
    """A request that cannot be synthesized (empty text, bad parameter...)."""


class GenerationCancelled(S2Error):
    """Raised where a caller asked to stop; generators simply return instead."""

    def __init__(self) -> None:
        super().__init__("Generation was cancelled.")


class GenerationError(S2Error):
    """Synthesis ran but produced nothing usable (e.g. the model ended at once)."""
