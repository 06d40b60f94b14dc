"""Splitting long text into independently synthesised segments.

S2 Pro degrades on long inputs (one prompt, one 1024-token budget), so the pipeline speaks a
long text sentence by sentence: every segment is generated on its own with the same reference
and joined with a short pause (docs/spec/engine.md §8.1). Two modes:

``mode="sentences"`` (default) — the studio's splitter:
  * Counts **characters** (code points), never bytes, and never cuts inside a ``[tag]``, a
    ``<|...|>`` marker, or between a character and a combining mark / ZWJ that follows it.
  * Sentence ends: ``. ! ? …`` (and runs like ``?!`` or ``...``), newlines, CJK ``。！？．｡``,
    ``‼ ⁇ ⁈ ⁉``, Arabic ``؟ ۔``, Devanagari ``। ॥``, Armenian ``։``, Ethiopic ``። ፧``,
    Burmese ``။``. Closing quotes/brackets right after the terminator stay with the sentence
    (``"' ) ] } 」 』 ” ’ » › ）］》〉】〕``).
  * ``.`` and ``…`` only end a sentence when followed by whitespace, the end, or markup; so
    ``3.14``, ``.5``, ``example.com`` and ``e.g`` never split. An ellipsis followed by a
    lower-case word (``Well... maybe``) does not split either.
  * Abbreviations (``Mr. Dr. e.g. etc.``...; see :data:`ALWAYS_ABBREVIATIONS` and
    :data:`ABBREVIATIONS_BEFORE_LOWERCASE`, dotted acronyms like ``U.S.A.``) and single-capital
    initials (``J. R. R.``, but not ``I.``) do not end a sentence. Limits: the list is small and English-centric; ``plan B. Then`` is kept as
    one sentence (an unsplit sentence only costs a longer segment, a wrong split breaks the
    prosody mid-sentence, so we err on the side of not splitting).
  * ``<|speaker:N|>`` always starts a new segment (a turn boundary), and the speaker stays
    active for the following segments until the next marker. Every segment's ``speaker`` is
    the one active at its start and its text starts with that marker, because segments are
    synthesised independently and would otherwise lose the voice.
  * ``[tags]`` are kept intact. A tag at the start of a sentence belongs to that sentence
    (``Hi. [laugh] Next.`` → ``Hi.`` / ``[laugh] Next.``). A piece with no letter or digit
    (a tag after the last terminator, ``Hi! [laugh]``, or stray punctuation) is appended to the
    previous segment of the same speaker; before the first segment it is prepended to the next
    one. Tags after a speaker switch with no text (``<|speaker:1|>[laugh]``) stay a segment of
    their own (that speaker laughs); a bare marker with nothing after it is dropped.
  * ``max_chars`` > 0: a longer sentence is cut at the last clause mark (``, ; : ，、；： ، ؛``,
    not a comma between digits) within the limit if it lies in the second half, else at the
    last whitespace in the second half, else hard at the limit (moved back to a safe
    position). Cuts never leave a piece without a letter or digit. The limit counts the
    segment body, tags included, but not the ``<|speaker:N|>`` prefix added to it. A piece
    can exceed it only when no safe cut exists (e.g. one very long tag).

``mode="s2cpp"`` — s2.cpp server parity (``split_sentences_basic`` + ``split_long_segment``):
ASCII ``. ! ?`` and LF rules and a **byte** limit exactly as docs/spec/engine.md §8.1; texts are left untouched
(no speaker prefix, no tag handling). One deliberate deviation: a hard cut that would fall
inside a multi-byte UTF-8 character moves back to that character's start (s2.cpp would emit
invalid UTF-8, which our tokenizer cannot even represent).

Each segment also gets a seed derived from a base seed and its index
(:func:`derive_segment_seed`), so regenerating one segment leaves the others identical.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from s2studio.engine.modes import SegmentationMode
from s2studio.errors import InputError

DEFAULT_SENTENCE_PAUSE_MS = 180  # s2.cpp server's sentence_pause_ms
MODES = tuple(SegmentationMode.choices())

# `[tag]` (S2 inline control like [laugh], [whisper], [pause], [professional broadcast tone])
# and `<|...|>` special markers. Bounded length and no newline, so a stray "[" cannot swallow
# a whole paragraph.
MARKUP_RE = re.compile(r"<\|[^|<>\n]{1,64}\|>|\[[^\[\]\n]{1,80}\]")
SPEAKER_MARKER_RE = re.compile(r"<\|speaker:(\d+)\|>")

# Terminators that end a sentence whatever follows (CJK has no spaces after them).
STRONG_TERMINATORS = frozenset("!?。！？｡‼⁇⁈⁉؟۔।॥։።፧။")
# Terminators that end a sentence only before whitespace/end/markup (3.14, e.g, a.m).
WEAK_TERMINATORS = frozenset(".…．")
TERMINATORS = STRONG_TERMINATORS | WEAK_TERMINATORS
CLOSERS = frozenset("\"')]}」』”’»›）］》〉】〕〗〙〛＂＇")
# Unicode line breaks that end a sentence like "\n" (str.splitlines' set minus the
# group/record separators that are not line breaks in prose).
NEWLINES = frozenset("\n\r\x0b\x0c\x85\u2028\u2029")
CLAUSE_MARKS = frozenset(",;:，、；：،؛")

# Never end a sentence: titles precede a name, and "e.g."/"i.e."/"vs." are always followed
# by more of the same sentence. Compared lower-case, without the final dot.
ALWAYS_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st mt rev fr gen col capt lt sgt hon vs e.g i.e cf approx incl "
    "fig".split()
)
# End a sentence only when the next word starts with a capital: "etc. Then" splits,
# "etc. and more" does not.
ABBREVIATIONS_BEFORE_LOWERCASE = frozenset("etc a.m p.m inc ltd co corp jan feb mar apr jun jul aug sep sept oct nov dec".split())

# "U.S.A." / "U.K.": like "etc.", ends a sentence only before a capital.
_DOTTED_ACRONYM_RE = re.compile(r"(?:[^\W\d_]\.)+[^\W\d_]")

_MASK64 = (1 << 64) - 1


def derive_segment_seed(base_seed: int, index: int) -> int:
    """Seed of segment ``index`` for a request seeded with ``base_seed``.

    ``splitmix64(splitmix64(base_seed mod 2**64) + index) >> 1``: SplitMix64 (Steele et al.)
    is a bijection with full avalanche, so neighbouring indices and neighbouring base seeds
    give unrelated seeds, and a segment's seed depends on nothing but (base_seed, index) —
    which is what lets one segment be regenerated alone. The shift keeps the result in
    [0, 2**63), valid for torch.Generator.manual_seed and numpy alike.
    """
    return _splitmix64((_splitmix64(base_seed & _MASK64) + index) & _MASK64) >> 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


@dataclass(frozen=True)
class Segment:
    """One independently synthesised piece of a text."""

    index: int
    text: str  # what to synthesise; starts with "<|speaker:N|>" when a speaker is active
    speaker: int | None = None  # speaker active at the segment's start
    pause_after_ms: int = DEFAULT_SENTENCE_PAUSE_MS  # silence after it; 0 for the last
    seed: int | None = None  # derive_segment_seed(base_seed, index); None if unseeded


def split_text(
    text: str,
    *,
    max_chars: int = 0,
    mode: str = "sentences",
    pause_ms: int = DEFAULT_SENTENCE_PAUSE_MS,
    seed: int | None = None,
) -> list[Segment]:
    """Split ``text`` into segments (see the module docstring for the rules).

    ``max_chars`` 0 = no length limit (characters in "sentences" mode, UTF-8 bytes in
    "s2cpp" mode). ``pause_ms`` goes after every segment but the last. ``seed`` is the base
    seed; each segment gets ``derive_segment_seed(seed, index)``. Returns [] for blank text.
    """
    if not isinstance(text, str):
        raise InputError(f"The text to split must be a string, not {type(text).__name__}.")
    if mode not in MODES:
        raise InputError(SegmentationMode.unknown_message(mode))
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 0:
        raise InputError(f"max_chars must be a whole number ≥ 0 (0 = no limit), not {max_chars!r}.")
    if isinstance(pause_ms, bool) or not isinstance(pause_ms, int) or pause_ms < 0:
        raise InputError(f"The pause between segments must be a whole number of ms ≥ 0, not {pause_ms!r}.")
    if mode == "s2cpp":
        pieces = _split_s2cpp(text, max_chars)
    else:
        pieces = _split_sentences(text, max_chars)
    last = len(pieces) - 1
    return [
        Segment(
            index=i,
            text=piece_text,
            speaker=speaker,
            pause_after_ms=0 if i == last else pause_ms,
            seed=None if seed is None else derive_segment_seed(seed, i),
        )
        for i, (piece_text, speaker) in enumerate(pieces)
    ]


def pack_segments(segments: list[Segment], max_chars: int, *, pause_ms: int = DEFAULT_SENTENCE_PAUSE_MS,
                  seed: int | None = None) -> list[Segment]:
    """Join consecutive segments of the same speaker while the joined text stays within
    ``max_chars`` characters (its ``<|speaker:N|>`` prefix not counted), renumbered with their
    seeds derived again. Used when a text too long for the model's context must be cut into as
    few pieces as fit: one per sentence would make a long text thousands of prompts."""
    groups: list[tuple[int | None, list[str]]] = []
    size = 0
    for seg in segments:
        prefix = _with_speaker(seg.speaker, "")
        body = seg.text[len(prefix):] if prefix and seg.text.startswith(prefix) else seg.text
        if groups and groups[-1][0] == seg.speaker and size + 1 + len(body) <= max_chars:
            groups[-1][1].append(body)
            size += 1 + len(body)
        else:
            groups.append((seg.speaker, [body]))
            size = len(body)
    last = len(groups) - 1
    return [
        Segment(
            index=i,
            text=_with_speaker(speaker, " ".join(bodies)),
            speaker=speaker,
            pause_after_ms=0 if i == last else pause_ms,
            seed=None if seed is None else derive_segment_seed(seed, i),
        )
        for i, (speaker, bodies) in enumerate(groups)
    ]


# ---------------------------------------------------------------------------------------------
# "sentences" mode


class _Scan:
    """Per-text lookup tables: where markup atoms are and where a cut is allowed."""

    def __init__(self, text: str):
        self.text = text
        n = len(text)
        self.markup_end: dict[int, int] = {}  # start -> end of each markup atom
        self.speaker_at: dict[int, int] = {}  # start of each speaker marker -> N
        inside = bytearray(n + 1)  # 1 where a cut would split a markup atom
        for m in MARKUP_RE.finditer(text):
            self.markup_end[m.start()] = m.end()
            inside[m.start() + 1 : m.end()] = b"\x01" * (m.end() - m.start() - 1)
            sp = SPEAKER_MARKER_RE.fullmatch(m.group())
            if sp:
                self.speaker_at[m.start()] = int(sp.group(1))
        self.inside_markup = inside
        self.markup_ends = frozenset(self.markup_end.values())
        # speakable_before[i] = number of letters/digits (outside markup) in text[:i]
        counts = [0] * (n + 1)
        running = 0
        i = 0
        while i < n:
            counts[i] = running
            end = self.markup_end.get(i)
            if end is not None:
                for k in range(i + 1, end + 1):
                    counts[k] = running
                i = end
                continue
            if _is_speakable(text[i]):
                running += 1
            i += 1
        counts[n] = running
        self.speakable_before = counts

    def has_speakable(self, start: int, end: int) -> bool:
        return self.speakable_before[end] > self.speakable_before[start]

    def can_cut(self, pos: int) -> bool:
        """A cut before text[pos] keeps markup, combining marks and ZWJ sequences whole."""
        text = self.text
        if pos <= 0 or pos >= len(text):
            return True
        if self.inside_markup[pos]:
            return False
        if unicodedata.category(text[pos]).startswith("M") or text[pos] in "\u200d\ufe0f\ufe0e":
            return False
        return text[pos - 1] != "\u200d"


def _is_speakable(ch: str) -> bool:
    cat = unicodedata.category(ch)
    return cat[0] in "LN"


def _split_sentences(text: str, max_chars: int) -> list[tuple[str, int | None]]:
    scan = _Scan(text)
    sentences = _sentence_spans(scan)
    # (speaker, body start, body end) with the leading speaker marker taken off the body.
    pieces: list[tuple[int | None, int, int]] = []
    speaker: int | None = None
    for start, end in sentences:
        start, end = _trim(text, start, end)
        if start >= end:
            continue
        if start in scan.speaker_at:
            speaker = scan.speaker_at[start]
            start, end = _trim(text, scan.markup_end[start], end)
        if max_chars > 0 and end - start > max_chars and scan.has_speakable(start, end):
            for s, e in _split_long(scan, start, end, max_chars):
                pieces.append((speaker, s, e))
        else:
            pieces.append((speaker, start, end))
    return _attach_textless_pieces(scan, pieces)


def _attach_textless_pieces(scan: _Scan, pieces: list[tuple[int | None, int, int]]) -> list[tuple[str, int | None]]:
    """Fold pieces without a letter or digit into a neighbour (see module docstring)."""
    text = scan.text
    out: list[list] = []  # [speaker, body]
    pending = ""  # text-less pieces seen before the first real segment
    for speaker, start, end in pieces:
        body = text[start:end]
        if scan.has_speakable(start, end):
            if pending:
                body = f"{pending} {body}"
                pending = ""
            out.append([speaker, body])
            continue
        if start >= end:
            continue  # a bare speaker marker: it only changes the active speaker
        has_tag = any(s in scan.markup_end for s in range(start, end))
        if out and out[-1][0] == speaker:
            out[-1][1] = f"{out[-1][1]} {body}"
        elif out and has_tag:
            out.append([speaker, body])  # e.g. "<|speaker:1|>[laugh]": that speaker laughs
        elif not out:
            pending = f"{pending} {body}".strip()
    if pending:  # the whole text had no letters or digits: speak it as it is
        out.append([pieces[0][0] if pieces else None, pending])
    return [(_with_speaker(speaker, body), speaker) for speaker, body in out]


def _with_speaker(speaker: int | None, body: str) -> str:
    return body if speaker is None else f"<|speaker:{speaker}|>{body}"


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _sentence_spans(scan: _Scan) -> list[tuple[int, int]]:
    text = scan.text
    n = len(text)
    spans: list[tuple[int, int]] = []
    start = 0
    i = 0
    while i < n:
        end = scan.markup_end.get(i)
        if end is not None:
            if i in scan.speaker_at and i > start:
                spans.append((start, i))  # a speaker marker opens a new turn
                start = i
            i = end
            continue
        ch = text[i]
        if ch in NEWLINES:
            spans.append((start, i + 1))
            start = i = i + 1
            continue
        if ch in TERMINATORS:
            run_end = _terminator_run_end(scan, i)
            if _ends_sentence(scan, start, i, run_end):
                spans.append((start, run_end))
                start = run_end
            i = run_end
            continue
        i += 1
    spans.append((start, n))
    return spans


def _terminator_run_end(scan: _Scan, i: int) -> int:
    """End of the run of terminators and closing quotes/brackets starting at i."""
    text = scan.text
    j = i
    while j < len(text) and (text[j] in TERMINATORS or text[j] in CLOSERS) and j not in scan.markup_end:
        j += 1
    return j


def _ends_sentence(scan: _Scan, sentence_start: int, i: int, run_end: int) -> bool:
    text = scan.text
    run = text[i:run_end]
    if any(c in STRONG_TERMINATORS for c in run):
        return True
    if run_end >= len(text):
        return True
    nxt = text[run_end]
    if not (nxt.isspace() or run_end in scan.markup_end):
        return False  # 3.14, .5, e.g, example.com, "...and"
    next_word = _next_word_start(scan, run_end)
    dots = sum(1 for c in run if c in WEAK_TERMINATORS)
    if dots >= 2 or "…" in run:
        # "Well... maybe": an ellipsis before a lower-case word is a hesitation, not an end.
        return not (next_word and next_word.islower())
    if text[sentence_start:i].strip().isdigit():
        return False  # a list number: "1. Preheat the oven."
    word = _word_before(text, i).lower()
    if not word:
        return True
    if word in ALWAYS_ABBREVIATIONS:
        return False
    if len(word) == 1 and text[i - 1].isupper() and word != "i":
        return False  # an initial: "J. R. R. Tolkien"
    if word in ABBREVIATIONS_BEFORE_LOWERCASE or _DOTTED_ACRONYM_RE.fullmatch(word):
        return bool(next_word) and next_word.isupper()
    return True


def _word_before(text: str, i: int) -> str:
    """The letters-and-dots token that ends right before position i ("e.g" for "e.g.")."""
    k = i
    while k > 0 and (text[k - 1].isalpha() or text[k - 1] == "."):
        k -= 1
    return text[k:i]


def _next_word_start(scan: _Scan, i: int) -> str:
    """First character of the next word after i, skipping whitespace and markup ('' at end)."""
    text = scan.text
    while i < len(text):
        end = scan.markup_end.get(i)
        if end is not None:
            i = end
        elif text[i].isspace() or text[i] in CLOSERS:
            i += 1
        else:
            return text[i]
    return ""


def _split_long(scan: _Scan, start: int, end: int, limit: int) -> list[tuple[int, int]]:
    """Cut text[start:end] into pieces of at most ``limit`` characters where possible."""
    text = scan.text
    parts: list[tuple[int, int]] = []
    while end - start > limit:
        cut = _choose_cut(scan, start, end, limit)
        if cut is None:
            break
        head = _trim(text, start, cut)
        if head[0] < head[1]:
            parts.append(head)
        start, end = _trim(text, cut, end)
    if start < end:
        parts.append((start, end))
    return parts


def _choose_cut(scan: _Scan, start: int, end: int, limit: int) -> int | None:
    text = scan.text
    half = start + limit // 2

    def usable(pos: int) -> bool:
        return (
            start < pos < end
            and scan.can_cut(pos)
            and scan.has_speakable(start, pos)
            and scan.has_speakable(pos, end)
            and not _head_ends_with_markup(scan, start, pos)
        )

    # 1. after the last clause mark within the limit (head = text[start:q+1], closers kept)
    for q in range(start + limit - 1, half - 1, -1):
        ch = text[q]
        if ch not in CLAUSE_MARKS or scan.inside_markup[q] or _between_digits(text, q):
            continue
        cut = q + 1
        while cut < min(end, start + limit) and text[cut] in CLOSERS and not scan.inside_markup[cut]:
            cut += 1
        if usable(cut):
            return cut
    # 2. at the last whitespace within the limit
    for q in range(min(start + limit, end - 1), half - 1, -1):
        if text[q].isspace() and usable(q):
            return q
    # 3. hard cut at the limit, moved back to a safe position, else forward
    for pos in range(start + limit, start, -1):
        if usable(pos):
            return pos
    for pos in range(start + limit + 1, end):
        if usable(pos):
            return pos
    return None


def _head_ends_with_markup(scan: _Scan, start: int, pos: int) -> bool:
    """A tag acts on what follows it, so a cut must not strand it at the end of a piece."""
    h = pos
    while h > start and scan.text[h - 1].isspace():
        h -= 1
    return h in scan.markup_ends


def _between_digits(text: str, q: int) -> bool:
    return 0 < q < len(text) - 1 and text[q - 1].isdigit() and text[q + 1].isdigit()


# ---------------------------------------------------------------------------------------------
# "s2cpp" mode: byte-exact port of s2_server.cpp split_text_for_segmented_synthesis

_C_SPACE = b" \t\n\v\f\r"  # C isspace() in the "C" locale; bytes.strip() strips the same set


def _split_s2cpp(text: str, max_chars: int) -> list[tuple[str, int | None]]:
    data = text.encode("utf-8", "surrogatepass")
    spans = [p for sentence in _s2cpp_sentences(data) for p in _s2cpp_long(data, sentence, max_chars)]
    markers = [(m.start(), int(m.group(1))) for m in re.finditer(rb"<\|speaker:(\d+)\|>", data)]
    out = []
    for s, e in spans:
        speaker = None
        for pos, n in markers:  # the speaker active at the segment's start (informational)
            if pos <= s:
                speaker = n
        out.append((data[s:e].decode("utf-8", "surrogatepass"), speaker))
    return out


def _strip_span(data: bytes, s: int, e: int) -> tuple[int, int]:
    while s < e and data[s] in _C_SPACE:
        s += 1
    while e > s and data[e - 1] in _C_SPACE:
        e -= 1
    return s, e


def _s2cpp_sentences(data: bytes) -> list[tuple[int, int]]:
    """split_sentences_basic: cut after . ! ? LF, absorbing . ! ? " ' ) ] and one space."""
    spans = []
    start = 0
    i = 0
    n = len(data)
    while i < n:
        if data[i] in b".!?\n":
            while i + 1 < n:
                nxt = data[i + 1]
                if nxt in b".!?\"')]":
                    i += 1
                    continue
                if nxt in _C_SPACE:
                    i += 1  # at most one whitespace byte is absorbed
                break
            s, e = _strip_span(data, start, i + 1)
            if s < e:
                spans.append((s, e))
            start = i + 1
        i += 1
    s, e = _strip_span(data, start, n)
    if s < e:
        spans.append((s, e))
    return spans


def _s2cpp_long(data: bytes, span: tuple[int, int], max_chars: int) -> list[tuple[int, int]]:
    """split_long_segment: clause mark, else space/tab, else hard cut (byte limit)."""
    s, e = span
    if max_chars == 0 or e - s <= max_chars:
        return [span]
    parts = []
    s, e = _strip_span(data, s, e)
    while s < e and e - s > max_chars:
        window = data[s : s + max_chars + 1]  # find_last_of(set, max_chars) includes max_chars
        pos = max(window.rfind(b","), window.rfind(b";"), window.rfind(b":"))
        if pos < 0 or pos < max_chars // 2:
            pos = max(window.rfind(b" "), window.rfind(b"\t"))
        if pos < 0 or pos < max_chars // 2:
            pos = _utf8_boundary_at_or_before(data, s, s + max_chars) - s
        else:
            pos += 1
        hs, he = _strip_span(data, s, s + pos)
        if hs < he:
            parts.append((hs, he))
        s, e = _strip_span(data, s + pos, e)
    if s < e:
        parts.append((s, e))
    return parts


def _utf8_boundary_at_or_before(data: bytes, start: int, pos: int) -> int:
    """pos, moved back over UTF-8 continuation bytes (forward if that reaches start)."""
    p = pos
    while p > start and (data[p] & 0xC0) == 0x80:
        p -= 1
    if p > start:
        return p
    p = pos
    while p < len(data) and (data[p] & 0xC0) == 0x80:
        p += 1
    return p
