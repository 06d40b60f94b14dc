"""A book's pronunciation dictionary: a word or phrase → how the model should say it.

Applied to what the model reads, never to the text a person sees (docs/book.md,
"Pronunciation"). Rules:

* Whole words only: ``Ann`` does not touch ``Anne`` or ``Annals``. An entry that begins or ends
  with a non-word character (``C++``, ``.NET``) has no word boundary to respect on that side.
* Case-insensitive unless the entry says ``match_case``; the replacement is inserted as written.
* All entries are applied in one pass, longest first, so ``New York City`` wins over ``New
  York`` and a replacement is never itself replaced again.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from s2studio.errors import InputError

MAX_ENTRIES = 10_000
MAX_ENTRY_CHARS = 200


@dataclass(frozen=True)
class Pronunciation:
    phrase: str
    say: str
    match_case: bool = False

    def to_json(self) -> dict:
        return {"phrase": self.phrase, "say": self.say, "match_case": self.match_case}


class PronunciationDictionary:
    def __init__(self, entries: list[Pronunciation] | None = None):
        self._entries: dict[tuple[str, bool], Pronunciation] = {}
        self._pattern: re.Pattern | None = None
        self._order: list[Pronunciation] = []
        for e in entries or []:
            self.add(e.phrase, e.say, match_case=e.match_case)

    @property
    def entries(self) -> list[Pronunciation]:
        return list(self._entries.values())

    def add(self, phrase: str, say: str, *, match_case: bool = False) -> None:
        phrase = unicodedata.normalize("NFC", " ".join(str(phrase).split()))
        say = " ".join(str(say).split())
        if not phrase or not say:
            raise InputError("A pronunciation needs both the phrase and how to say it.")
        if len(phrase) > MAX_ENTRY_CHARS or len(say) > MAX_ENTRY_CHARS:
            raise InputError(f"A pronunciation entry is at most {MAX_ENTRY_CHARS} characters a side.")
        key = (phrase if match_case else phrase.casefold(), match_case)
        if key not in self._entries and len(self._entries) >= MAX_ENTRIES:
            raise InputError(f"A book's dictionary holds at most {MAX_ENTRIES} entries.")
        self._entries[key] = Pronunciation(phrase, say, match_case)
        self._pattern = None

    def remove(self, phrase: str, *, match_case: bool = False) -> bool:
        phrase = unicodedata.normalize("NFC", " ".join(str(phrase).split()))
        removed = self._entries.pop((phrase if match_case else phrase.casefold(), match_case), None)
        self._pattern = None
        return removed is not None

    def apply(self, text: str) -> str:
        """``text`` as the model should read it."""
        if not self._entries:
            return text
        if self._pattern is None:
            self._compile()
        order = self._order

        def replace(m: re.Match) -> str:
            return order[m.lastindex - 1].say

        return self._pattern.sub(replace, text)

    def _compile(self) -> None:
        # Longest first; case-sensitive before insensitive at equal length (the exact entry wins).
        self._order = sorted(self._entries.values(), key=lambda e: (-len(e.phrase), not e.match_case))
        parts = []
        for e in self._order:
            body = r"\s+".join(re.escape(w) for w in e.phrase.split(" "))
            left = r"(?<!\w)" if re.match(r"\w", e.phrase[0]) else ""
            right = r"(?!\w)" if re.match(r"\w", e.phrase[-1]) else ""
            flags = "" if e.match_case else "(?i)"
            parts.append(f"({left}{'(?i:' if flags else '(?:'}{body}){right})")
        self._pattern = re.compile("|".join(parts))

    def to_json(self) -> list[dict]:
        return [e.to_json() for e in self._entries.values()]

    @classmethod
    def from_json(cls, data, where: str) -> "PronunciationDictionary":
        if not isinstance(data, list):
            raise InputError(f"{where}: the dictionary must be a list of entries.")
        out = cls()
        for i, e in enumerate(data):
            if not isinstance(e, dict) or not isinstance(e.get("phrase"), str) or not isinstance(e.get("say"), str):
                raise InputError(f"{where}: dictionary entry {i} needs text 'phrase' and 'say'.")
            out.add(e["phrase"], e["say"], match_case=bool(e.get("match_case", False)))
        return out
