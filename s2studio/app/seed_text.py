"""Seeds as lists and titles show them: short.

A random seed has up to 19 digits; in the Takes list and the take's title that pushed the text
out of view (the list needed a horizontal scroll bar). They show the first and last digits, like
a short commit hash; the tooltip, "Reuse seed" and the project keep the whole number.
"""

from __future__ import annotations

SHORT_SEED_DIGITS = 6  # seeds up to this long are shown whole


def short_seed(seed: int) -> str:
    text = str(int(seed))
    if len(text) <= SHORT_SEED_DIGITS:
        return text
    return f"{text[:4]}…{text[-2:]}"
