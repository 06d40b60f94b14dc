"""Text normalisation for a manuscript, applied once at import (docs/book.md, "Normalisation").

Each rule is one function and runs in this order over a chapter's raw text:

1. ``unify_newlines``: CRLF / CR → LF; form feeds and other page breaks → blank lines.
2. ``drop_page_numbers``: a line that holds only a page number (``12``, ``- 12 -``, ``Page 12``,
   ``[12]``, roman ``xii``) is removed; numbers inside sentences are kept.
3. ``join_hyphenated_line_ends``: ``exam-\\nple`` → ``example`` when a lower-case letter follows
   the line break (a word broken by typesetting); ``well-\\nKnown`` keeps its hyphen and line.
4. ``normalise_quotes``: curly and low/prime quotes → ``"`` and ``'`` (the model reads one kind;
   apostrophes in ``don't`` stay apostrophes), guillemets kept (they are language, not typography).
5. ``normalise_dashes``: ``--`` and ``---`` → em dash ``—``; a spaced hyphen `` - `` between words
   → `` — ``; figure/minus/en dashes between digits kept as ``–`` (ranges read as "to").
6. ``normalise_spaces``: non-breaking and other Unicode spaces → a space, runs of spaces → one,
   soft hyphens and zero-width characters removed, each line stripped.

Paragraphs are then the blocks between blank lines, each joined into one line.
"""

from __future__ import annotations

import re
import unicodedata

_PAGE_NUMBER_LINE = re.compile(
    r"^\s*(?:[-–—]\s*)?(?:page\s+|p\.\s*)?(?:\[\s*)?(?:\d{1,4}|[ivxlcdm]{1,7})(?:\s*\])?(?:\s*[-–—])?\s*$",
    re.IGNORECASE)
_HYPHEN_AT_LINE_END = re.compile(r"(\w)-\n[ \t]*([a-zß-ÿ])")
_QUOTES = {
    "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u2033": '"', "\u301d": '"', "\u301e": '"',
    "\uff02": '"',
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'", "\uff07": "'",
}
_SPACES = re.compile(r"[\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000\t]")
_INVISIBLE = re.compile(r"[\u00ad\u200b\u200c\u200d\u2060\ufeff]")


def unify_newlines(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return re.sub(r"[\f\v\u2028\u2029\x85]", "\n\n", text)


def drop_page_numbers(text: str) -> str:
    # "I" alone on a line is a word (or a part number) more often than page one: keep it.
    return "\n".join(line for line in text.split("\n")
                     if not (_PAGE_NUMBER_LINE.match(line) and line.strip().upper() != "I"))


def join_hyphenated_line_ends(text: str) -> str:
    return _HYPHEN_AT_LINE_END.sub(r"\1\2", text)


def normalise_quotes(text: str) -> str:
    return text.translate(str.maketrans(_QUOTES))


def normalise_dashes(text: str) -> str:
    text = re.sub(r"(?<=\d)[\u2012\u2212\u2013](?=\d)", "\u2013", text)
    text = re.sub(r"-{2,3}", "\u2014", text)
    text = re.sub(r"(?<=\w) - (?=\w)", " \u2014 ", text)
    return text


def normalise_spaces(text: str) -> str:
    text = _INVISIBLE.sub("", _SPACES.sub(" ", text))
    return "\n".join(re.sub(r" {2,}", " ", line).strip() for line in text.split("\n"))


def normalise_text(text: str) -> str:
    """All rules above, in order, and Unicode NFC (so a dictionary entry matches however the
    book encoded its accents)."""
    text = unicodedata.normalize("NFC", text)
    for rule in (unify_newlines, drop_page_numbers, join_hyphenated_line_ends, normalise_quotes, normalise_dashes,
                 normalise_spaces):
        text = rule(text)
    return text


def paragraphs_of(text: str) -> list[str]:
    """The normalised text's paragraphs: blocks between blank lines, each on one line."""
    blocks = re.split(r"\n\s*\n", normalise_text(text))
    return [" ".join(line for line in block.split("\n") if line) for block in blocks if block.strip()]
