"""OpenAI's stock voice names mapped onto the server's voices (``serve --voice-map``).

Clients of OpenAI's speech API send one of OpenAI's voice names — the SDK's examples and most
apps' defaults say ``alloy`` — and never a voice of this server, so a stock name must never be
refused. The operator maps names to saved voices (``alloy=hope,nova=anna`` or a file with one
``name=voice`` per line); a stock name without a mapping gets the default voice (``--default-voice``,
else the model's own voice, no reference). Any other name is looked up in the voice folder as
on ``/generate``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from s2studio.errors import InputError

# OpenAI's voices for tts-1, tts-1-hd and gpt-4o-mini-tts (platform.openai.com, 2025).
STOCK_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse",
                "marin", "cedar")
MAX_MAP_ENTRIES = 256
MAX_MAP_FILE_BYTES = 64 * 1024
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class VoiceMap:
    """``entries``: client voice name (lower case) → voice id; ``default``: the voice for a
    stock name without an entry ("" = the model's own voice)."""

    entries: tuple[tuple[str, str], ...] = ()
    default: str = ""

    def resolve(self, name: str) -> str:
        """The voice id a request's ``voice`` means ("" = the model's own voice)."""
        key = name.strip().lower()
        for client_name, voice_id in self.entries:
            if client_name == key:
                return voice_id
        if not key or key in STOCK_VOICES:
            return self.default
        return name

    def describe(self) -> dict[str, str]:
        """Every stock name and mapped name → the voice it means (for ``GET /v1/voices``-like listings)."""
        table = {name: self.default for name in STOCK_VOICES}
        table.update(dict(self.entries))
        return table


def parse_voice_map(value: str) -> tuple[tuple[str, str], ...]:
    """``alloy=hope,echo=anna``, or a path to a file of such pairs (one per line or
    comma-separated; ``#`` starts a comment). Raises ``InputError`` naming the bad entry."""
    text, where = value, "--voice-map"
    if "=" not in value and os.path.isfile(value):
        if os.path.getsize(value) > MAX_MAP_FILE_BYTES:
            raise InputError(f"The voice map {value} is larger than {MAX_MAP_FILE_BYTES // 1024} KB.")
        with open(value, encoding="utf-8") as fh:
            text = fh.read()
        where = f"the voice map {value}"
    elif "=" not in value:
        raise InputError(f"--voice-map {value!r} is neither name=voice pairs nor an existing file.")
    entries: dict[str, str] = {}
    for line_no, line in enumerate(text.splitlines(), 1):
        for item in line.split("#", 1)[0].split(","):
            item = item.strip()
            if not item:
                continue
            name, sep, voice = (part.strip() for part in item.partition("="))
            if not sep or not _NAME.match(name) or not _NAME.match(voice):
                raise InputError(f"{where}, line {line_no}: {item!r} is not name=voice (letters, digits, '-', "
                                 f"'_', '.'; at most 64 characters each).")
            entries[name.lower()] = voice
    if len(entries) > MAX_MAP_ENTRIES:
        raise InputError(f"{where} has {len(entries)} entries; at most {MAX_MAP_ENTRIES} are accepted.")
    return tuple(entries.items())
