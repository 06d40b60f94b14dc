"""Dialogue turns: a script with ``<|speaker:N|>`` tags cut where the speaker changes.

The model clones one reference voice per prompt (the reference is always speaker 0 of the
prompt, see :mod:`s2studio.engine.text.prompt`), so a take with a voice per speaker speaks each
turn as a monologue in that speaker's voice: the turn's text without its tag, with the speaker's
saved voice as the reference. :mod:`s2studio.engine.take` turns the turns into segments.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SPEAKER_TAG_RE = re.compile(r"<\|speaker:(\d+)\|>")


@dataclass(frozen=True)
class Turn:
    speaker: int | None  # None: text before the first speaker tag
    text: str  # the turn's words, its speaker tag removed


def speakers_in(text: str) -> list[int]:
    """The speaker numbers the script's tags name, in order of first appearance."""
    seen: list[int] = []
    for m in SPEAKER_TAG_RE.finditer(text or ""):
        n = int(m.group(1))
        if n not in seen:
            seen.append(n)
    return seen


def split_turns(text: str) -> list[Turn]:
    """The script cut at every speaker change; consecutive turns of one speaker are joined and
    turns with nothing to say are dropped (a bare tag only changes who speaks next)."""
    turns: list[Turn] = []
    speaker: int | None = None
    pos = 0
    pieces: list[tuple[int | None, str]] = []
    for m in SPEAKER_TAG_RE.finditer(text):
        pieces.append((speaker, text[pos:m.start()]))
        speaker, pos = int(m.group(1)), m.end()
    pieces.append((speaker, text[pos:]))
    for who, words in pieces:
        words = words.strip()
        if not words:
            continue
        if turns and turns[-1].speaker == who:
            turns[-1] = Turn(who, f"{turns[-1].text} {words}")
        else:
            turns.append(Turn(who, words))
    return turns
