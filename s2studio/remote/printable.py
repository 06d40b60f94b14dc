"""Server-supplied text made safe to show: a hostile server's error message or voice name
reaches a terminal (CLI) or a label (app), and escape sequences in it could move the cursor,
rewrite lines or retitle the window; bidirectional overrides could make it read differently."""

from __future__ import annotations

import re

MAX_TEXT_CHARS = 300  # of one message or name shown to a person
# C0 and C1 controls, DEL, and the bidirectional overrides that reorder what a terminal shows
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# CSI (ESC [ or the C1 CSI ... final), OSC (ESC ] ... BEL or ST) and two-character escapes, removed whole
_ESCAPE_SEQUENCE = re.compile(r"(\x1b\[|\x9b)[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)?|\x1b[@-Z\\-_]")


def printable(text, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` (anything) as one line a person can be shown safely: escape sequences and
    control characters removed, whitespace runs folded, at most ``limit`` characters."""
    text = _ESCAPE_SEQUENCE.sub("", str(text))
    text = _UNPRINTABLE.sub(" ", text)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
