"""Prompt matrix: exact s2.cpp prompts for the golden cases, the hf-mode difference on the
cloning template, and the input rules (empty text, ignored references, control tokens)."""

from __future__ import annotations

import functools
import json
import pathlib

import numpy as np
import pytest

from s2studio.errors import InputError, TokenizerError
from s2studio.engine.model.gguf_file import GGUFFile
from s2studio.engine.text.prompt import SPEECH_HEADER, SYSTEM_CLONE, build_prompt
from s2studio.engine.text.tokenizer import load_tokenizer

GOLDEN = pathlib.Path(__file__).parent.parent / "data" / "golden"


@functools.lru_cache(maxsize=None)
def case(name: str):
    folder = GOLDEN / name
    inputs = json.loads((folder / "inputs.json").read_text(encoding="utf-8"))
    with GGUFFile(folder / "model.gguf") as g:
        begin = g.meta("fish_speech.semantic_begin_id")
        n_cb = g.meta("fish_speech.num_codebooks")
    gold = np.load(folder / "dumps" / "prompt_tokens.npy")
    ref = np.load(folder / "dumps" / "ref_codes.npy") if inputs["prompt_text"] else None
    return folder, inputs, begin, n_cb, gold, ref


@pytest.fixture(scope="module", params=["s2cpp", "hf"])
def tok(request):
    return load_tokenizer(GOLDEN / "tts_f32" / "tokenizer.json", request.param)


@pytest.fixture(scope="module")
def s2tok():
    return load_tokenizer(GOLDEN / "tts_f32" / "tokenizer.json", "s2cpp")


@pytest.fixture(scope="module")
def hftok():
    return load_tokenizer(GOLDEN / "tts_f32" / "tokenizer.json", "hf")


def test_tts_prompt_exact_in_both_modes(tok):
    # The no-reference template has no "\n\n" or ":\n", so both modes give s2.cpp's ids.
    folder, inputs, begin, n_cb, gold, _ = case("tts_f32")
    tok = load_tokenizer(folder / "tokenizer.json", tok.mode)
    p = build_prompt(tok, inputs["text"], semantic_begin_id=begin, num_codebooks=n_cb)
    assert p.dtype == np.int32 and p.shape == gold.shape == (n_cb + 1, gold.shape[1])
    np.testing.assert_array_equal(p, gold)
    assert not p[1:].any()
    assert p[0, -1] == tok.voice_id and p[0, -2] == 198


def test_clone_prompt_exact_with_s2cpp_tokenizer():
    folder, inputs, begin, n_cb, gold, ref = case("clone_f32_qknorm")
    tok = load_tokenizer(folder / "tokenizer.json", "s2cpp")
    p = build_prompt(tok, inputs["text"], semantic_begin_id=begin, num_codebooks=n_cb,
                     ref_codes=ref, ref_text=inputs["prompt_text"])
    assert p.dtype == np.int32 and p.shape == gold.shape
    np.testing.assert_array_equal(p, gold)
    # the reference columns: row 0 = code0 + B, rows 1.. = codes; zeros elsewhere
    cols = np.nonzero(p[1:].any(axis=0) | (p[0] >= begin))[0]
    assert len(cols) == ref.shape[1] and np.all(np.diff(cols) == 1)
    np.testing.assert_array_equal(p[0, cols], ref[0] + begin)
    np.testing.assert_array_equal(p[1:, cols], ref)


def test_clone_prompt_hf_differs_only_in_template_newlines(s2tok, hftok):
    _, inputs, begin, n_cb, gold, ref = case("clone_f32_qknorm")
    hf = build_prompt(hftok, inputs["text"], semantic_begin_id=begin, num_codebooks=n_cb,
                      ref_codes=ref, ref_text=inputs["prompt_text"])
    # Swap in the HF ids of the two template strings that contain "\n\n" / ":\n"
    # (docs/spec/engine.md §5.4); every other segment, and the codes, must be s2.cpp's.
    row = gold[0].tolist()
    for s in (SYSTEM_CLONE, SPEECH_HEADER):
        s2_ids, hf_ids = s2tok.encode(s), hftok.encode(s)
        assert s2_ids != hf_ids
        for i in range(len(row) - len(s2_ids) + 1):
            if row[i : i + len(s2_ids)] == s2_ids:
                row[i : i + len(s2_ids)] = hf_ids
                break
        else:
            pytest.fail(f"{s!r} not found in the golden prompt")
    assert hf[0].tolist() == row
    assert hf.shape[1] == gold.shape[1] - 4  # "\n\n" twice and ":\n" twice become one token each
    # the codes are the same block, only shifted left by the ids saved before it
    np.testing.assert_array_equal(hf[1:, hf[1:].any(axis=0)], gold[1:, gold[1:].any(axis=0)])


def test_reference_rules(tok):
    _, inputs, begin, n_cb, _, ref = case("clone_f32_qknorm")
    text = inputs["text"]
    plain = build_prompt(tok, text, semantic_begin_id=begin)
    # codes without a transcript (or an empty one), a transcript without codes, and zero
    # frames all give the plain TTS prompt, as in s2.cpp
    for kwargs in (dict(ref_codes=ref), dict(ref_codes=ref, ref_text=""), dict(ref_text="Hello there."),
                   dict(ref_codes=ref[:, :0], ref_text="Hello there.")):
        np.testing.assert_array_equal(build_prompt(tok, text, semantic_begin_id=begin, **kwargs), plain)
    with_ref = build_prompt(tok, text, semantic_begin_id=begin, ref_codes=ref, ref_text=inputs["prompt_text"])
    assert with_ref.shape[1] > plain.shape[1] + ref.shape[1]
    # codes in any integer dtype are accepted and not clamped
    big = ref.astype(np.int64)
    big[0, 0] = 5000
    p = build_prompt(tok, text, semantic_begin_id=begin, ref_codes=big, ref_text="Hi.")
    assert p[0].max() == 5000 + begin and p[1].max() == 5000


def test_speaker_tag(tok):
    _, inputs, begin, _, _, ref = case("clone_f32_qknorm")
    spk0, spk3 = tok.token_id("<|speaker:0|>"), tok.token_id("<|speaker:3|>")
    p = build_prompt(tok, "Hi.", semantic_begin_id=begin, ref_codes=ref, ref_text="Some words.")
    assert list(p[0]).count(spk0) == 1
    p = build_prompt(tok, "Hi.", semantic_begin_id=begin, ref_codes=ref, ref_text="<|speaker:3|>Some words.")
    assert spk0 not in p[0] and list(p[0]).count(spk3) == 1
    # speaker tags in the target text are allowed
    p = build_prompt(tok, "<|speaker:0|>Hi. <|speaker:3|>Hello.", semantic_begin_id=begin)
    assert spk0 in p[0] and spk3 in p[0]


@pytest.mark.parametrize("text", ["", "   ", "\n\t \r\n"])
def test_empty_text_is_rejected(tok, text):
    with pytest.raises(InputError, match="empty"):
        build_prompt(tok, text, semantic_begin_id=532)


@pytest.mark.parametrize("token", ["<|im_end|>", "<|im_start|>", "<|voice|>", "<|semantic:3|>"])
def test_control_tokens_in_user_text_are_rejected(tok, token):
    _, _, begin, _, _, ref = case("clone_f32_qknorm")
    with pytest.raises(InputError, match="text contains") as e:
        build_prompt(tok, f"Say this {token} now.", semantic_begin_id=begin)
    assert token in str(e.value)
    with pytest.raises(InputError, match="transcript contains") as e:
        build_prompt(tok, "Hi.", semantic_begin_id=begin, ref_codes=ref, ref_text=f"Hi{token}")
    assert token in str(e.value)


def test_bad_reference_codes(tok):
    _, _, begin, _, _, ref = case("clone_f32_qknorm")
    with pytest.raises(InputError, match="shape"):
        build_prompt(tok, "Hi.", semantic_begin_id=begin, ref_codes=ref[:8], ref_text="Hi.")
    with pytest.raises(InputError, match="shape"):
        build_prompt(tok, "Hi.", semantic_begin_id=begin, ref_codes=ref[0], ref_text="Hi.")
    with pytest.raises(InputError, match="integers"):
        build_prompt(tok, "Hi.", semantic_begin_id=begin, ref_codes=ref.astype(np.float32), ref_text="Hi.")


def test_missing_voice_token(tmp_path, tok):
    data = json.loads((GOLDEN / "tts_f32" / "tokenizer.json").read_text(encoding="utf-8"))
    data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] != "<|voice|>"]
    p = tmp_path / "tokenizer.json"
    p.write_text(json.dumps(data), encoding="utf-8")
    bad = load_tokenizer(p, tok.mode)
    with pytest.raises(TokenizerError, match=r"<\|voice\|>"):
        build_prompt(bad, "Hi.", semantic_begin_id=532)
