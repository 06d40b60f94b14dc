"""A book's cast: named characters, each spoken with a saved voice (or the model's own).

A paragraph can be given to a character, and a ``<|speaker:N|>`` turn in the text is spoken by
the character that speaker number is mapped to. Saved with the book (book.json)."""

from __future__ import annotations

from dataclasses import dataclass, field

from s2studio.errors import InputError

MAX_CHARACTERS = 200
MAX_NAME_CHARS = 80


@dataclass
class Cast:
    characters: dict[str, str | None] = field(default_factory=dict)  # name -> saved voice id (None: the model's)
    speakers: dict[int, str] = field(default_factory=dict)  # <|speaker:N|> -> character name

    def set_character(self, name: str, voice: str | None) -> None:
        name = " ".join(str(name).split())
        if not name or len(name) > MAX_NAME_CHARS:
            raise InputError(f"A character's name is 1 to {MAX_NAME_CHARS} characters, not {name!r}.")
        if voice is not None and (not isinstance(voice, str) or not voice.strip()):
            raise InputError(f"Character {name!r}: the voice must be a saved voice's id.")
        if name not in self.characters and len(self.characters) >= MAX_CHARACTERS:
            raise InputError(f"A cast holds at most {MAX_CHARACTERS} characters.")
        self.characters[name] = voice.strip() if voice else None

    def assign_speaker(self, speaker: int, name: str) -> None:
        if isinstance(speaker, bool) or not isinstance(speaker, int) or not 0 <= speaker <= 999:
            raise InputError(f"A speaker is a number from 0 to 999, not {speaker!r}.")
        if name not in self.characters:
            raise InputError(f"There is no character {name!r} in the cast; add it first.")
        self.speakers[speaker] = name

    def voice_of(self, name: str | None) -> tuple[bool, str | None]:
        """(known, voice): whether ``name`` is a character of the cast, and its voice."""
        if name is None or name not in self.characters:
            return False, None
        return True, self.characters[name]

    def to_json(self) -> dict:
        return {"characters": dict(self.characters), "speakers": {str(k): v for k, v in self.speakers.items()}}

    @classmethod
    def from_json(cls, data, where: str) -> "Cast":
        if not isinstance(data, dict):
            raise InputError(f"{where}: the cast must be an object.")
        cast = cls()
        characters, speakers = data.get("characters", {}), data.get("speakers", {})
        if not isinstance(characters, dict) or not isinstance(speakers, dict):
            raise InputError(f"{where}: the cast's characters and speakers must be objects.")
        for name, voice in characters.items():
            cast.set_character(name, voice)
        for number, name in speakers.items():
            if not str(number).isdigit():
                raise InputError(f"{where}: speaker {number!r} is not a number.")
            cast.assign_speaker(int(number), name)
        return cast
