"""Text tokenizer for S2 Pro: one interface, two ways of turning text into ids.

* ``hf`` (the default) runs the HuggingFace ``tokenizers`` library on ``tokenizer.json``
  with ``add_special_tokens=False``, exactly as fish-speech does. This is how the model saw
  text during training (NFC, the Qwen2 pre-split regex, byte-level BPE).
* ``s2cpp`` is a faithful port of s2.cpp's own tokenizer (docs/spec/engine.md §5.2), quirks included, so
  that prompts can be compared id-for-id with s2.cpp and its golden dumps. It differs from
  ``hf`` on runs of newlines, punctuation followed by a newline, repeated spaces, NFC, and a
  few rarer cases (docs/spec/engine.md §5.4).

``tokenizer.json`` itself is not in the GGUF; :func:`find_tokenizer` does s2.cpp's lookup
next to the model, and :func:`check_tokenizer_matches_model` catches a tokenizer that belongs
to a different model before it produces garbage prompts.

User text and control tokens: see :meth:`Tokenizer.check_user_text`. Text that contains a
special token other than ``<|speaker:N|>`` (``<|im_end|>``, ``<|voice|>``,
``<|semantic:N|>``, ...) is **rejected** with an :class:`InputError` naming the token. We
reject rather than silently neutralise because neither outcome the user could have meant is
available: as a control id it would break the chat structure of the prompt, and as plain
characters the model would try to *speak* ``<|im_end|>``. A clear message lets the user fix
the text. The check is separate from :meth:`Tokenizer.encode` because the prompt's own
template strings (``"<|im_start|>system"``) must still produce the special ids.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Iterable

from s2studio.engine.modes import TokenizerMode
from s2studio.errors import InputError, TokenizerError

MODES = tuple(TokenizerMode.choices())
DEFAULT_MODE = TokenizerMode.HF.value

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
VOICE = "<|voice|>"
NEWLINE_TOKEN = "\u010a"  # "Ċ", byte-level "\n"
NEWLINE_ID = 198  # s2.cpp hard-codes this id in build_prompt, so the tokenizer must agree

# fish-speech recognises speaker tags with this regex; they are the one kind of special
# token a user may type (multi-speaker text, or a transcript that names its speaker).
SPEAKER_TAG_RE = re.compile(r"<\|speaker:\d+\|>")

# s2.cpp's word boundaries: exactly these four ASCII whitespace characters (not NBSP etc.).
# A word is an optional leading whitespace character followed by a run of non-whitespace,
# so "a  b" -> "a", " ", " b".
_WORD_RE = re.compile(r"[ \t\n\r][^ \t\n\r]*|[^ \t\n\r]+")

_WORD_CACHE_MAX = 200_000  # words; cleared when full (cheap, and text vocabularies are small)


def _byte_to_unicode() -> list[str]:
    """GPT-2 / HF ByteLevel byte -> printable character table (s2.cpp's byte_to_cp_table)."""
    table = [""] * 256
    for b in [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]:
        table[b] = chr(b)
    extra = 0x100
    for b in [*range(0x00, 0x21), *range(0x7F, 0xA1), 0xAD]:
        table[b] = chr(extra)
        extra += 1
    return table


BYTE_TO_UNICODE = _byte_to_unicode()
UNICODE_TO_BYTE = {c: b for b, c in enumerate(BYTE_TO_UNICODE)}


def _to_utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:  # lone surrogates: no valid UTF-8 exists for them
        raise InputError(
            f"The text contains a character that is not valid Unicode (U+{ord(text[e.start]):04X}); "
            "remove it and try again."
        ) from None


class Tokenizer:
    """Common interface. Use :func:`load_tokenizer` to make one."""

    mode: str = ""

    def __init__(self, path: str | os.PathLike[str], added: list[tuple[str, int, bool]], size: int):
        self.path = Path(path)
        self._size = size
        # Special added tokens a user must not type (everything but speaker tags), longest
        # first so that an error names "<|im_end|>" rather than a shorter token inside it.
        specials = {content for content, _id, special in added if special}
        self._forbidden = sorted(
            (s for s in specials if not SPEAKER_TAG_RE.fullmatch(s)), key=lambda s: (-len(s), s)
        )

    # -- to implement -------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def token_id(self, token: str) -> int | None:
        """Id of an exact token string (added tokens first, then the BPE vocab), or None."""
        raise NotImplementedError

    def decode(self, ids: Iterable[int]) -> str:
        """Best-effort text of ``ids`` for logs and debugging (special tokens kept)."""
        raise NotImplementedError

    # -- shared ---------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """Number of ids: the largest id + 1, i.e. the embedding rows the model needs."""
        return self._size

    def _required(self, token: str) -> int:
        tid = self.token_id(token)
        if tid is None:
            raise TokenizerError(self.path, f"it has no {token} token, so it is not an S2 Pro tokenizer")
        return tid

    @property
    def im_start_id(self) -> int:
        return self._required(IM_START)

    @property
    def im_end_id(self) -> int:
        return self._required(IM_END)

    @property
    def voice_id(self) -> int:
        return self._required(VOICE)

    def control_tokens_in(self, text: str) -> list[str]:
        """Special tokens (other than speaker tags) that occur in ``text``, in order of appearance."""
        found = [s for s in self._forbidden if s in text]
        found.sort(key=text.index)
        return found

    def check_user_text(self, text: str, what: str = "text") -> None:
        """Raise :class:`InputError` if user ``text`` contains a control token (see module doc).

        Control tokens are the ``added_tokens`` marked ``special`` in tokenizer.json, except
        ``<|speaker:N|>``. The same set is used in both modes. Non-special added tokens (Qwen's
        ``<think>`` and the like) are not part of the S2 prompt structure and are left alone.
        """
        _to_utf8(text)
        found = self.control_tokens_in(text)
        if found:
            names = ", ".join(found[:3]) + (" ..." if len(found) > 3 else "")
            raise InputError(
                f"The {what} contains the control token {names}. Control tokens would break the "
                "prompt; remove them (only speaker tags like <|speaker:0|> are allowed)."
            )

    def __repr__(self) -> str:
        return f"<{type(self).__name__} mode={self.mode} path={str(getattr(self, 'path', '?'))!r}>"


# ---------------------------------------------------------------------------------------
# s2.cpp port
# ---------------------------------------------------------------------------------------

class S2CppTokenizer(Tokenizer):
    """s2.cpp's whitespace-split byte-level BPE (docs/spec/engine.md §5.2), ported quirk for quirk."""

    mode = "s2cpp"

    def __init__(self, path: str | os.PathLike[str], data: dict):
        added = _parse_added(path, data)
        model_vocab, merges = _model_vocab_merges(path, data)

        # 1. Vocab: added tokens first (a later duplicate overwrites an earlier one, as
        #    std::map operator[] does), then model.vocab only where the key is still free.
        added_map: dict[str, int] = {}
        specials: dict[str, int] = {}
        for content, tid, special in added:
            added_map[content] = tid
            if special:
                specials[content] = tid
        vocab = dict(model_vocab)
        vocab.update(added_map)
        self._vocab = vocab
        self._id_to_token: dict[int, str] | None = None

        # 2. Merge ranks keyed by the *concatenation* a+b; a later merge with the same
        #    concatenation overwrites (keeps the higher rank). Unparseable merges take no rank.
        ranks: dict[str, int] = {}
        rank = 0
        for m in merges:
            if type(m) is str:
                a, sep, b = m.partition(" ")
                if not sep:
                    continue
            elif type(m) is list and len(m) >= 2:
                a, b = m[0], m[1]
                if type(a) is not str or type(b) is not str:
                    raise TokenizerError(path, f"model.merges entry {rank} is not a pair of strings")
            else:
                continue
            ranks[a + b] = rank
            rank += 1
        self._ranks = ranks

        # s2.cpp tries special strings longest first; the match order below makes that moot
        # except for the id of duplicate contents, where the vocab map's (last) id is used.
        self._specials = sorted(((s, vocab[s]) for s in specials), key=lambda p: -len(p[0]))
        # Quick reject: a special can only match where its first character occurs.
        self._special_first_chars = frozenset(s[0] for s, _ in self._specials)
        self._cache: dict[str, list[int]] = {}

        size = max(vocab.values(), default=-1) + 1
        super().__init__(path, added, size)

    def token_id(self, token: str) -> int | None:
        return self._vocab.get(token)

    def encode(self, text: str) -> list[int]:
        if not text:
            return []
        _to_utf8(text)
        ids: list[int] = []
        pos = 0
        for start, end, tid in self._special_matches(text):
            if start > pos:
                self._encode_plain(text[pos:start], ids)
            ids.append(tid)
            pos = end
        if pos < len(text):
            self._encode_plain(text[pos:], ids)
        return ids

    def _special_matches(self, text: str) -> list[tuple[int, int, int]]:
        """s2.cpp split_on_specials: per-string non-overlapping finds, sort, greedy accept."""
        if not self._special_first_chars.intersection(text):
            return []
        matches = []
        for s, tid in self._specials:
            p = text.find(s)
            while p != -1:
                matches.append((p, -len(s), tid))
                p = text.find(s, p + len(s))
        # Sorted by position, then longest first. (Positions in characters order the same
        # way as s2.cpp's byte positions for valid UTF-8.)
        matches.sort(key=lambda m: (m[0], m[1]))
        out = []
        last_end = 0
        for p, neg_len, tid in matches:
            if p >= last_end:
                last_end = p - neg_len
                out.append((p, last_end, tid))
        return out

    def _encode_plain(self, segment: str, ids: list[int]) -> None:
        cache = self._cache
        for word in _WORD_RE.findall(segment):
            w_ids = cache.get(word)
            if w_ids is None:
                w_ids = self._bpe_word(word)
                if len(cache) >= _WORD_CACHE_MAX:
                    cache.clear()
                cache[word] = w_ids
            ids.extend(w_ids)

    def _bpe_word(self, word: str) -> list[int]:
        bl = "".join([BYTE_TO_UNICODE[b] for b in word.encode("utf-8")])
        vocab = self._vocab
        # Whole-word shortcut: if the mapped word is a key (added tokens included), use it,
        # even where the merges would never build it.
        whole = vocab.get(bl)
        if whole is not None:
            return [whole]
        ranks = self._ranks
        symbols = list(bl)
        while len(symbols) > 1:
            best_rank = None
            best_pos = -1
            for i in range(len(symbols) - 1):
                r = ranks.get(symbols[i] + symbols[i + 1])
                if r is not None and (best_rank is None or r < best_rank):
                    best_rank, best_pos = r, i  # strict < keeps the leftmost on ties
            if best_pos < 0:
                break
            symbols[best_pos : best_pos + 2] = [symbols[best_pos] + symbols[best_pos + 1]]
        # Symbols missing from the vocab are silently dropped, as in s2.cpp.
        return [vocab[s] for s in symbols if s in vocab]

    def decode(self, ids: Iterable[int]) -> str:
        if self._id_to_token is None:
            inv: dict[int, str] = {}
            for tok, tid in self._vocab.items():
                inv.setdefault(tid, tok)
            for tok, tid in self._specials:  # prefer the special spelling for its id
                inv[tid] = tok
            self._id_to_token = inv
        special_ids = {tid for _, tid in self._specials}
        out: list[str] = []
        buf = bytearray()
        for i in ids:
            tok = self._id_to_token.get(int(i))
            if tok is None:
                tok, is_special = f"<|unknown:{int(i)}|>", True
            else:
                is_special = int(i) in special_ids
            if is_special or any(c not in UNICODE_TO_BYTE for c in tok):
                out.append(buf.decode("utf-8", "replace"))
                buf.clear()
                out.append(tok)
            else:
                buf.extend(UNICODE_TO_BYTE[c] for c in tok)
        out.append(buf.decode("utf-8", "replace"))
        return "".join(out)


# ---------------------------------------------------------------------------------------
# HF tokenizers
# ---------------------------------------------------------------------------------------

class HFTokenizer(Tokenizer):
    """HuggingFace ``tokenizers`` on the same file, as fish-speech uses it."""

    mode = "hf"

    def __init__(self, path: str | os.PathLike[str], data: dict | None = None):
        from tokenizers import Tokenizer as _HFTok  # imported here: only this mode needs it

        try:
            tok = _HFTok.from_file(os.fspath(path))
        except Exception as e:  # noqa: BLE001 - the library raises plain Exception
            # Re-read to say *what* is wrong where we can; otherwise pass the library's words.
            if data is None:
                data = _read_json(path)
                _model_vocab_merges(path, data)
                _parse_added(path, data)
            raise TokenizerError(path, f"the tokenizers library cannot load it ({e})") from None
        if type(tok.model).__name__ != "BPE":
            raise TokenizerError(
                path, f"it is a {type(tok.model).__name__} tokenizer, but S2 Pro uses a byte-level BPE one"
            )
        self._tok = tok
        decoder = tok.get_added_tokens_decoder()
        added = [(t.content, tid, bool(t.special)) for tid, t in decoder.items()]
        size = max(tok.get_vocab(with_added_tokens=True).values(), default=-1) + 1
        super().__init__(path, added, size)

    def token_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def encode(self, text: str) -> list[int]:
        if not text:
            return []
        _to_utf8(text)
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Iterable[int]) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)


# ---------------------------------------------------------------------------------------
# Loading and checks
# ---------------------------------------------------------------------------------------

def _read_json(path: str | os.PathLike[str]) -> dict:
    p = Path(path)
    if not p.exists():
        raise TokenizerError(p, "the file does not exist")
    if not p.is_file():
        raise TokenizerError(p, "it is not a file")
    try:
        with open(p, "rb") as fh:
            data = json.loads(fh.read())
    except OSError as e:
        raise TokenizerError(p, f"cannot read it ({e.strerror or e})") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise TokenizerError(p, f"it is not a valid JSON file ({e})") from None
    if not isinstance(data, dict):
        raise TokenizerError(p, "it is JSON but not a tokenizer.json (the top level is not an object)")
    return data


def _model_vocab_merges(path, data: dict) -> tuple[dict[str, int], list]:
    model = data.get("model")
    if not isinstance(model, dict) or "vocab" not in model or "merges" not in model:
        raise TokenizerError(path, "it is JSON but not a BPE tokenizer.json (no model.vocab / model.merges)")
    vocab, merges = model["vocab"], model["merges"]
    if not isinstance(vocab, dict) or not isinstance(merges, list):
        raise TokenizerError(path, "model.vocab must be an object and model.merges a list")
    for k, v in vocab.items():
        if type(v) is not int or v < 0:
            raise TokenizerError(path, f"model.vocab entry {k!r} has id {v!r}, not a non-negative integer")
    return vocab, merges


def _parse_added(path, data: dict) -> list[tuple[str, int, bool]]:
    """``added_tokens`` as (content, id, special), keeping s2.cpp's filter (content, id >= 0)."""
    raw = data.get("added_tokens") or []
    if not isinstance(raw, list):
        raise TokenizerError(path, "added_tokens is not a list")
    out = []
    for i, t in enumerate(raw):
        if not isinstance(t, dict):
            raise TokenizerError(path, f"added_tokens[{i}] is not an object")
        content, tid = t.get("content", ""), t.get("id", -1)
        if not isinstance(content, str) or type(tid) is not int:
            raise TokenizerError(path, f"added_tokens[{i}] has a bad content or id")
        if content and tid >= 0:
            out.append((content, tid, t.get("special") is True))
    return out


def load_tokenizer(path: str | os.PathLike[str], mode: str = DEFAULT_MODE) -> Tokenizer:
    """Load ``tokenizer.json`` in ``mode`` ``"hf"`` (default, as trained) or ``"s2cpp"``.

    Raises :class:`TokenizerError` for a missing file, a file that is not JSON, or JSON that
    is not a BPE tokenizer. Missing S2 control tokens are reported when first needed (the
    ``im_end_id``/``voice_id`` properties) or by :func:`check_tokenizer_matches_model`.
    """
    if mode not in MODES:
        raise ValueError(f"tokenizer mode must be one of {MODES}, not {mode!r}")
    if mode == "s2cpp":
        data = _read_json(path)
        return S2CppTokenizer(path, data)
    # hf: check existence ourselves so the message is ours, not the library's
    p = Path(path)
    if not p.exists():
        raise TokenizerError(p, "the file does not exist")
    if not p.is_file():
        raise TokenizerError(p, "it is not a file")
    return HFTokenizer(p)


def check_tokenizer_matches_model(
    tok: Tokenizer, semantic_begin_id: int, semantic_end_id: int, vocab_size: int
) -> None:
    """Raise :class:`TokenizerError` unless ``tok`` can drive a model with these GGUF values.

    s2.cpp never checks this: a tokenizer from another model gives a prompt of wrong ids
    and the model talks nonsense (or indexes past its embedding table).
    """
    def wrong(problem: str) -> TokenizerError:
        return TokenizerError(tok.path, f"the tokenizer does not belong to this model: {problem}")

    tok.im_start_id, tok.im_end_id, tok.voice_id  # noqa: B018 - each raises if missing
    nl = tok.token_id(NEWLINE_TOKEN)
    if nl != NEWLINE_ID:
        raise TokenizerError(
            tok.path, f'the newline token "\\u010a" has id {nl}, but S2 prompts hard-code {NEWLINE_ID}'
        )
    if tok.size > vocab_size:
        raise wrong(f"it has {tok.size} token ids but the model's vocabulary has only {vocab_size}")
    for name, tid in (("<|im_start|>", tok.im_start_id), ("<|im_end|>", tok.im_end_id), ("<|voice|>", tok.voice_id)):
        if semantic_begin_id <= tid <= semantic_end_id:
            raise wrong(f"{name} has id {tid}, inside the model's semantic token range")
    first = tok.token_id("<|semantic:0|>")
    if first is None:
        return  # s2.cpp only needs the GGUF's range; a tokenizer without the names is usable
    n = semantic_end_id - semantic_begin_id + 1
    last = tok.token_id(f"<|semantic:{n - 1}|>")
    if first != semantic_begin_id or last != semantic_end_id:
        raise wrong(
            f"its semantic tokens are <|semantic:0|>={first}, <|semantic:{n - 1}|>={last}, "
            f"but the model expects {semantic_begin_id}..{semantic_end_id}"
        )
    extra = tok.token_id(f"<|semantic:{n}|>")
    if extra is not None:  # fish-speech derives the range from the names: it must agree too
        raise wrong(f"it has more semantic tokens (<|semantic:{n}|>={extra}) than the model's {n}")


def find_tokenizer(model_path: str | os.PathLike[str]) -> Path | None:
    """s2.cpp's default lookup when no tokenizer is given: next to the model, one folder up,
    then the current directory. Returns the first existing file, or None.

    (s2.cpp skips the parent folder for a relative path with a single directory component;
    we use the absolute path, so the parent is always tried.)
    """
    model_dir = Path(os.path.abspath(os.fspath(model_path))).parent
    candidates = [model_dir / "tokenizer.json", model_dir.parent / "tokenizer.json", Path.cwd() / "tokenizer.json"]
    for c in candidates:
        if c.is_file():
            return c
    return None
