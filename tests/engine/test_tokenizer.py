"""Tokenizer: golden ids from s2.cpp (s2cpp mode) and HF tokenizers (hf mode), s2.cpp's
quirks on hand-made tokenizers, error messages, control-token safety, model cross-check and
the tokenizer.json lookup."""

from __future__ import annotations

import json
import pathlib
import re
import time

import numpy as np
import pytest

from s2studio.devtools.full_tokenizer import make_full_tokenizer
from s2studio.errors import InputError, TokenizerError
from s2studio.engine.model.gguf_file import GGUFFile
from s2studio.engine.text.tokenizer import (
    BYTE_TO_UNICODE,
    HFTokenizer,
    S2CppTokenizer,
    check_tokenizer_matches_model,
    find_tokenizer,
    load_tokenizer,
)

GOLDEN = pathlib.Path(__file__).parent.parent / "data" / "golden"
TOK_PATH = GOLDEN / "tts_f32" / "tokenizer.json"
CASES = json.loads((GOLDEN / "tts_f32" / "tokenizer_cases.json").read_text(encoding="utf-8"))
MODES = ("s2cpp", "hf")


@pytest.fixture(scope="module", params=MODES)
def tok(request):
    return load_tokenizer(TOK_PATH, request.param)


@pytest.fixture(scope="module")
def s2tok():
    return load_tokenizer(TOK_PATH, "s2cpp")


@pytest.fixture(scope="module")
def hftok():
    return load_tokenizer(TOK_PATH, "hf")


def golden_json() -> dict:
    return json.loads(TOK_PATH.read_text(encoding="utf-8"))


def write_json(path: pathlib.Path, data) -> pathlib.Path:
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


# -- golden ids --------------------------------------------------------------------------

def test_golden_has_cases_that_differ_between_modes():
    assert len(CASES) == 19
    assert sum(not c["same_as_hf"] for c in CASES) == 6
    for c in CASES:
        assert (c["ids"] == c["hf_tokenizers_ids"]) == c["same_as_hf"]


@pytest.mark.parametrize("case", CASES, ids=[repr(c["text"])[:40] for c in CASES])
def test_s2cpp_mode_reproduces_s2cpp_ids(s2tok, case):
    assert s2tok.encode(case["text"]) == case["ids"]


@pytest.mark.parametrize("case", CASES, ids=[repr(c["text"])[:40] for c in CASES])
def test_hf_mode_reproduces_hf_ids(hftok, case):
    assert hftok.encode(case["text"]) == case["hf_tokenizers_ids"]


def test_text_tokens_dump(s2tok):
    inputs = json.loads((GOLDEN / "tts_f32" / "inputs.json").read_text(encoding="utf-8"))
    want = np.load(GOLDEN / "tts_f32" / "dumps" / "text_tokens.npy")
    assert s2tok.encode(inputs["text"]) == want.tolist()


def test_mode_default_and_properties(tok):
    assert load_tokenizer(TOK_PATH).mode == "hf"
    assert isinstance(load_tokenizer(TOK_PATH), HFTokenizer)
    assert tok.path == TOK_PATH
    assert (tok.im_start_id, tok.im_end_id, tok.voice_id) == (513, 514, 518)
    assert tok.size == 660
    assert tok.token_id("<|semantic:0|>") == 532
    assert tok.token_id("\u010a") == 198
    assert tok.token_id("no such token") is None
    assert tok.encode("") == []
    # template strings still produce the special ids
    assert tok.encode("<|im_start|>system")[0] == 513
    assert tok.encode("<|im_start|>assistant")[0] == 513


def test_decode_round_trips(tok):
    for text in ["Hello world", "Café naïve résumé", "你好，世界", "emoji 😀 test", "<|speaker:1|>Hi there"]:
        assert tok.decode(tok.encode(text)) == text


def test_bad_mode():
    with pytest.raises(ValueError):
        load_tokenizer(TOK_PATH, "sentencepiece")


# -- errors ----------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_missing_file(tmp_path, mode):
    with pytest.raises(TokenizerError, match="does not exist") as e:
        load_tokenizer(tmp_path / "nope.json", mode)
    assert e.value.path.endswith("nope.json")
    with pytest.raises(TokenizerError, match="not a file"):
        load_tokenizer(tmp_path, mode)


@pytest.mark.parametrize("mode", MODES)
def test_not_json(tmp_path, mode):
    p = tmp_path / "tokenizer.json"
    p.write_text("{ this is not json", encoding="utf-8")
    with pytest.raises(TokenizerError, match="JSON"):
        load_tokenizer(p, mode)
    p.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(TokenizerError, match="JSON"):
        load_tokenizer(p, mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("data", [[1, 2, 3], {"version": "1.0"}, {"model": {"type": "BPE", "vocab": {}}}])
def test_json_but_not_a_tokenizer(tmp_path, mode, data):
    p = write_json(tmp_path / "tokenizer.json", data)
    with pytest.raises(TokenizerError, match="not a (BPE )?tokenizer"):
        load_tokenizer(p, mode)


def test_bad_vocab_entry(tmp_path):
    data = golden_json()
    data["model"]["vocab"]["a"] = "zero"
    with pytest.raises(TokenizerError, match="'a'"):
        load_tokenizer(write_json(tmp_path / "t.json", data), "s2cpp")


def test_hf_rejects_non_bpe_model(tmp_path):
    data = {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": None,
            "post_processor": None, "decoder": None, "truncation": None, "padding": None,
            "model": {"type": "WordLevel", "vocab": {"a": 0, "[UNK]": 1}, "unk_token": "[UNK]"}}
    with pytest.raises(TokenizerError, match="BPE"):
        load_tokenizer(write_json(tmp_path / "t.json", data), "hf")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("missing", ["<|im_start|>", "<|im_end|>", "<|voice|>"])
def test_missing_control_token_is_named(tmp_path, mode, missing):
    data = golden_json()
    data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] != missing]
    tok = load_tokenizer(write_json(tmp_path / "t.json", data), mode)
    prop = {"<|im_start|>": "im_start_id", "<|im_end|>": "im_end_id", "<|voice|>": "voice_id"}[missing]
    with pytest.raises(TokenizerError) as e:
        getattr(tok, prop)
    assert missing in str(e.value) and "t.json" in str(e.value)
    with pytest.raises(TokenizerError, match=re.escape(missing)):
        check_tokenizer_matches_model(tok, 532, 659, 664)


# -- s2.cpp quirks on hand-made tokenizers -------------------------------------------------------

def quirk_tokenizer(tmp_path, vocab: dict, merges: list, added: list | None = None) -> pathlib.Path:
    """A golden-format tokenizer.json with our own BPE part (byte alphabet kept so HF loads it)."""
    data = golden_json()
    base = {c: i for c, i in data["model"]["vocab"].items() if len(c) == 1}  # the 256 byte symbols
    assert len(base) == 256
    full = dict(base)
    for k in vocab:
        full.setdefault(k, len(full) + 1000)
    data["model"]["vocab"] = full
    data["model"]["merges"] = merges
    data["added_tokens"] = added or []
    return write_json(tmp_path / "quirk.json", data)


def test_merge_rank_keyed_by_concatenation_later_wins(tmp_path):
    # "a bc" and "ab c" both concatenate to "abc"; s2.cpp keeps the later rank (4), so
    # "bc d" (3) wins on "a|bc|d". HF ranks pairs, so ("a","bc") (2) wins there.
    merges = [["b", "c"], ["c", "d"], ["a", "bc"], ["bc", "d"], ["ab", "c"]]  # HF wants one form
    p = quirk_tokenizer(tmp_path, {"ab": 0, "bc": 0, "cd": 0, "abc": 0, "bcd": 0}, merges)
    s2, hf = load_tokenizer(p, "s2cpp"), load_tokenizer(p, "hf")
    v = s2.token_id
    assert s2.encode("abcd") == [v("a"), v("bcd")]
    assert hf.encode("abcd") == [v("abc"), v("d")]


def test_unparseable_merges_are_skipped(tmp_path):
    p = quirk_tokenizer(tmp_path, {"xy": 0}, ["nospace", ["x"], "x y"])
    s2 = load_tokenizer(p, "s2cpp")
    assert s2.encode("xy") == [s2.token_id("xy")]  # whole word
    assert s2.encode("xxy") == [s2.token_id("x"), s2.token_id("xy")]  # via the merge


def test_whole_word_shortcut_and_dropped_symbols(tmp_path):
    # "qz" is in the vocab but no merge builds it: s2.cpp still emits it for the whole word.
    p = quirk_tokenizer(tmp_path, {"qz": 0}, [])
    s2 = load_tokenizer(p, "s2cpp")
    v = s2.token_id
    assert s2.encode("qz") == [v("qz")]
    assert s2.encode("qzq") == [v("q"), v("z"), v("q")]
    assert s2.encode(" qz") == [v("\u0120"), v("q"), v("z")]
    # merge products missing from the vocab are dropped silently
    p2 = quirk_tokenizer(tmp_path, {}, ["q z"])
    s2b = load_tokenizer(p2, "s2cpp")
    assert s2b.encode("aqz") == [s2b.token_id("a")]


def test_added_tokens_win_over_vocab(tmp_path):
    added = [{"id": 900, "content": "qz", "special": False}, {"id": 901, "content": "<|x|>", "special": True}]
    p = quirk_tokenizer(tmp_path, {"qz": 0, "<|x|>": 0}, [], added)
    s2 = load_tokenizer(p, "s2cpp")
    assert s2.token_id("qz") == 900 and s2.token_id("<|x|>") == 901
    # a non-special added token only matches as a whole word in s2.cpp
    assert s2.encode("qz") == [900]
    assert 900 not in s2.encode("aqz")
    assert s2.encode("a<|x|>b") == [s2.token_id("a"), 901, s2.token_id("b")]
    assert s2.size == 902


def test_special_matching_longest_first_and_greedy(tmp_path):
    added = [
        {"id": 900, "content": "<|a|>", "special": True},
        {"id": 901, "content": "<|a|><|b|>", "special": True},
        {"id": 902, "content": "|><|b|>", "special": True},
        {"id": 903, "content": "<|b|>", "special": True},
    ]
    s2 = load_tokenizer(quirk_tokenizer(tmp_path, {}, [], added), "s2cpp")
    assert s2.encode("<|a|><|b|>") == [901]
    assert s2.encode("<|a|> <|b|>") == [900, s2.token_id("\u0120"), 903]
    assert s2.encode("<|a|><|a|><|b|>") == [900, 901]


def test_whitespace_split(s2tok):
    v = s2tok.token_id
    nl, sp, tab, cr = v("\u010a"), v("\u0120"), v("\u0109"), v("\u010d")
    assert s2tok.encode("\n") == [198] == [nl]
    assert s2tok.encode("\r\n") == [cr, nl]
    assert s2tok.encode("\t\t") == [tab, tab]
    assert s2tok.encode("   ") == [sp, sp, sp]


def test_non_ascii_whitespace_does_not_split(tmp_path):
    # s2.cpp splits only at ' ', TAB, LF, CR: "a<NBSP>b" is one word, so a vocab entry for
    # its byte-level form is used whole. HF splits at NBSP and never sees that entry.
    word = "".join(BYTE_TO_UNICODE[b] for b in "a\u00a0b".encode())
    p = quirk_tokenizer(tmp_path, {word: 0}, [])
    s2, hf = load_tokenizer(p, "s2cpp"), load_tokenizer(p, "hf")
    assert s2.encode("a\u00a0b") == [s2.token_id(word)]
    assert s2.token_id(word) not in hf.encode("a\u00a0b")


def test_word_cache_gives_same_result(s2tok):
    text = "the studio, the studio. the studio!"
    assert s2tok.encode(text) == s2tok.encode(text)
    fresh = load_tokenizer(TOK_PATH, "s2cpp")
    assert fresh.encode(text) == s2tok.encode(text)


def test_lone_surrogate_is_an_input_error(tok):
    with pytest.raises(InputError):
        tok.encode("bad \ud800 char")


# -- control-token safety ------------------------------------------------------------------------

@pytest.mark.parametrize("token", ["<|im_end|>", "<|im_start|>", "<|voice|>", "<|semantic:5|>", "<|endoftext|>"])
def test_control_tokens_in_user_text_are_rejected(tok, token):
    with pytest.raises(InputError) as e:
        tok.check_user_text(f"Hello {token} world", "text")
    assert token in str(e.value)


def test_speaker_tags_and_lookalikes_are_allowed(tok):
    tok.check_user_text("<|speaker:1|>Hi there <|speaker:0|>and you")
    tok.check_user_text("a < b | c > d, <|not a token|>, <|im_end")
    assert tok.control_tokens_in("x <|voice|> y <|im_end|>") == ["<|voice|>", "<|im_end|>"]


# -- cross-check against the model -----------------------------------------------------------------

def gguf_ids(case: str) -> tuple[int, int, int]:
    with GGUFFile(GOLDEN / case / "model.gguf") as g:
        return (g.meta("fish_speech.semantic_begin_id"), g.meta("fish_speech.semantic_end_id"),
                g.meta("fish-speech.vocab_size"))


def test_matches_golden_model(tok):
    begin, end, vocab = gguf_ids("tts_f32")
    check_tokenizer_matches_model(tok, begin, end, vocab)


def test_mismatch_is_reported(tok):
    begin, end, vocab = gguf_ids("tts_f32")
    with pytest.raises(TokenizerError, match="does not belong"):
        check_tokenizer_matches_model(tok, 151678, 155773, 155776)  # the real S2 Pro layout
    with pytest.raises(TokenizerError, match="does not belong"):
        check_tokenizer_matches_model(tok, begin, end, tok.size - 1)
    with pytest.raises(TokenizerError, match="does not belong"):
        check_tokenizer_matches_model(tok, begin, end - 1, vocab)


def test_tokenizer_without_semantic_names_is_accepted(tmp_path):
    data = golden_json()
    data["added_tokens"] = [t for t in data["added_tokens"] if not t["content"].startswith("<|semantic")]
    tok = load_tokenizer(write_json(tmp_path / "t.json", data), "s2cpp")
    check_tokenizer_matches_model(tok, 532, 659, 664)


def test_newline_must_be_198(tmp_path):
    data = golden_json()
    v = data["model"]["vocab"]
    v["\u010a"], v["\u0109"] = v["\u0109"], v["\u010a"]
    tok = load_tokenizer(write_json(tmp_path / "t.json", data), "s2cpp")
    with pytest.raises(TokenizerError, match="198"):
        check_tokenizer_matches_model(tok, 532, 659, 664)


# -- find_tokenizer ---------------------------------------------------------------------------------

def test_find_tokenizer(tmp_path, monkeypatch):
    model_dir = tmp_path / "models" / "s2pro"
    model_dir.mkdir(parents=True)
    model = model_dir / "model.gguf"
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert find_tokenizer(model) is None
    (elsewhere / "tokenizer.json").write_text("{}")
    assert find_tokenizer(model) == elsewhere / "tokenizer.json"
    (tmp_path / "models" / "tokenizer.json").write_text("{}")
    assert find_tokenizer(model) == tmp_path / "models" / "tokenizer.json"
    (model_dir / "tokenizer.json").write_text("{}")
    assert find_tokenizer(model) == model_dir / "tokenizer.json"
    # relative model paths resolve against the current directory
    monkeypatch.chdir(tmp_path)
    assert find_tokenizer("models/s2pro/model.gguf") == model_dir / "tokenizer.json"


# -- full-size tokenizer ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def full_tokenizer_path(tmp_path_factory):
    out = tmp_path_factory.mktemp("full") / "tokenizer.json"
    make_full_tokenizer(out)
    return out


@pytest.mark.parametrize("mode", MODES)
def test_full_size_tokenizer_loads_fast_and_matches_layout(full_tokenizer_path, mode):
    t0 = time.perf_counter()
    tok = load_tokenizer(full_tokenizer_path, mode)
    elapsed = time.perf_counter() - t0
    assert elapsed < 2.0, f"loading took {elapsed:.2f}s"
    assert tok.size == 155774
    assert (tok.im_start_id, tok.im_end_id) == (151644, 151645)
    check_tokenizer_matches_model(tok, 151678, 155773, 155776)
    text = "Good evening, and welcome to the studio.\n\nThe quick brown fox jumps over the lazy dog."
    t0 = time.perf_counter()
    ids = tok.encode(text * 20)
    assert time.perf_counter() - t0 < 0.5
    assert tok.decode(ids) == text * 20
    assert isinstance(tok, S2CppTokenizer if mode == "s2cpp" else HFTokenizer)
