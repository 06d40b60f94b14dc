"""Text segmentation: sentence rules, markup, speakers, length limits, seeds, s2.cpp parity."""

from __future__ import annotations

import pytest

from s2studio.errors import InputError
from s2studio.engine.text.segmentation import (
    DEFAULT_SENTENCE_PAUSE_MS,
    MARKUP_RE,
    Segment,
    derive_segment_seed,
    split_text,
)


def texts(text: str, **kw) -> list[str]:
    return [s.text for s in split_text(text, **kw)]


# -- sentence ends ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Hello world. How are you? Fine!", ["Hello world.", "How are you?", "Fine!"]),
        ("Really?! Yes!!! Ok?", ["Really?!", "Yes!!!", "Ok?"]),
        ("Wait… What? Hmm...", ["Wait…", "What?", "Hmm..."]),
        ("Well... maybe later. Fine.", ["Well... maybe later.", "Fine."]),
        ("Line one\nLine two\r\nLine three", ["Line one", "Line two", "Line three"]),
        ("Para one.\n\n\nPara two.", ["Para one.", "Para two."]),
        ("  lots   of space .  ", ["lots   of space ."]),
        ("no terminator at all", ["no terminator at all"]),
    ],
)
def test_basic_sentence_ends(text, expected):
    assert texts(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ('He said "Stop." Then left.', ['He said "Stop."', "Then left."]),
        ("(Quietly.) Then loud!", ["(Quietly.)", "Then loud!"]),
        ("She asked 'why?' and left.", ["She asked 'why?'", "and left."]),
        ("「你好。」他说。", ["「你好。」", "他说。"]),
        ("『はい！』と言った。", ["『はい！』", "と言った。"]),
        ("“Yes.” ‘No.’ Maybe.", ["“Yes.”", "‘No.’", "Maybe."]),
        ("[Done.] Next.", ["[Done.] Next."]),  # a bracketed span is markup, never split inside
    ],
)
def test_closing_quotes_and_brackets_stay_with_their_sentence(text, expected):
    assert texts(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("你好。今天天气很好！是吗？好", ["你好。", "今天天气很好！", "是吗？", "好"]),
        ("こんにちは。元気ですか？", ["こんにちは。", "元気ですか？"]),
        ("안녕하세요. 반갑습니다!", ["안녕하세요.", "반갑습니다!"]),
        ("هل أنت بخير؟ نعم۔ شكرا", ["هل أنت بخير؟", "نعم۔", "شكرا"]),
        ("नमस्ते। आप कैसे हैं॥ ठीक", ["नमस्ते।", "आप कैसे हैं॥", "ठीक"]),
        ("ሰላም። ደህና", ["ሰላም።", "ደህና"]),
        ("半角｡全角．", ["半角｡", "全角．"]),
    ],
)
def test_non_latin_terminators(text, expected):
    assert texts(text) == expected


def test_cjk_comma_and_semicolon_do_not_end_a_sentence():
    assert texts("我们去了公园，然后去了商店；最后回家。") == ["我们去了公园，然后去了商店；最后回家。"]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Pi is 3.14159 exactly. Yes.", ["Pi is 3.14159 exactly.", "Yes."]),
        ("It costs .5 dollars. Cheap.", ["It costs .5 dollars.", "Cheap."]),
        ("Version 1.2.3 is out. Update.", ["Version 1.2.3 is out.", "Update."]),
        ("Visit example.com today. Now.", ["Visit example.com today.", "Now."]),
        ("I have 3. You have 4.", ["I have 3.", "You have 4."]),
        ("1. Preheat the oven.\n2. Bake it.", ["1. Preheat the oven.", "2. Bake it."]),
    ],
)
def test_numbers(text, expected):
    assert texts(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Mr. Smith met Dr. Jones. They talked.", ["Mr. Smith met Dr. Jones.", "They talked."]),
        ("Mrs. and Ms. Lee came. Prof. X too.", ["Mrs. and Ms. Lee came.", "Prof. X too."]),
        ("Fruit, e.g. Apples, i.e. red ones. Done.", ["Fruit, e.g. Apples, i.e. red ones.", "Done."]),
        ("Cats vs. Dogs is old. Yes.", ["Cats vs. Dogs is old.", "Yes."]),
        ("Apples, pears etc. and more. End.", ["Apples, pears etc. and more.", "End."]),
        ("Apples, pears etc. Then we left.", ["Apples, pears etc.", "Then we left."]),
        ("At 5 p.m. we ate. Good.", ["At 5 p.m. we ate.", "Good."]),
        ("J. R. R. Tolkien wrote it. Read it.", ["J. R. R. Tolkien wrote it.", "Read it."]),
        ("So did I. Then we went.", ["So did I.", "Then we went."]),
        ("The U.S.A. is big.", ["The U.S.A. is big."]),  # dotted acronym before lower case
        ("We flew to the U.S. Then home.", ["We flew to the U.S.", "Then home."]),
    ],
)
def test_abbreviations_and_initials(text, expected):
    assert texts(text) == expected


def test_blank_input_gives_no_segments():
    assert split_text("") == []
    assert split_text("  \n\t \n") == []
    assert split_text(" \n ", mode="s2cpp") == []


# -- markup: tags and speakers ------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Hi! [laugh] Next one.", ["Hi!", "[laugh] Next one."]),  # a leading tag opens its sentence
        ("Hi! [laugh]", ["Hi! [laugh]"]),  # nothing to speak after it: joins the previous one
        ("Hi! [laugh]\nNext.", ["Hi! [laugh]", "Next."]),
        ("[whisper] Quiet now. Loud!", ["[whisper] Quiet now.", "Loud!"]),
        ("[laugh]\nHello.", ["[laugh] Hello."]),  # before any text: goes to the next one
        ("[laugh]", ["[laugh]"]),  # only a tag: kept, it is what was asked for
        ("Wait [pause] for it. Done.", ["Wait [pause] for it.", "Done."]),
        ("Stop [excited, loud!] now. Ok.", ["Stop [excited, loud!] now.", "Ok."]),
        ("Yes.\n***\nNext.", ["Yes. ***", "Next."]),  # punctuation-only piece joins the previous
    ],
)
def test_tags_attach_to_the_right_sentence(text, expected):
    assert texts(text) == expected


def test_speaker_markers_carry_over_to_following_segments():
    segs = split_text("<|speaker:0|>Hi there. How are you?\n<|speaker:1|>Good. Thanks! <|speaker:0|>Great.")
    assert [(s.text, s.speaker) for s in segs] == [
        ("<|speaker:0|>Hi there.", 0),
        ("<|speaker:0|>How are you?", 0),
        ("<|speaker:1|>Good.", 1),
        ("<|speaker:1|>Thanks!", 1),
        ("<|speaker:0|>Great.", 0),
    ]


def test_speaker_marker_mid_sentence_starts_a_new_segment():
    segs = split_text("<|speaker:0|>Hi <|speaker:12|>hello back.")
    assert [(s.text, s.speaker) for s in segs] == [("<|speaker:0|>Hi", 0), ("<|speaker:12|>hello back.", 12)]


def test_text_before_any_marker_has_no_speaker():
    segs = split_text("Intro. <|speaker:2|>Talk.")
    assert [(s.text, s.speaker) for s in segs] == [("Intro.", None), ("<|speaker:2|>Talk.", 2)]


def test_tags_and_speakers_together():
    segs = split_text("[laugh]<|speaker:1|>Hi. Bye. [sigh] <|speaker:0|>[laugh]")
    assert [(s.text, s.speaker) for s in segs] == [
        ("<|speaker:1|>[laugh] Hi.", 1),
        ("<|speaker:1|>Bye. [sigh]", 1),
        ("<|speaker:0|>[laugh]", 0),  # that speaker's laugh is content of its own
    ]
    # a bare marker with nothing after it is dropped
    assert texts("<|speaker:0|>Hi. <|speaker:1|>") == ["<|speaker:0|>Hi."]


def test_other_special_markers_are_kept_intact():
    assert texts("A <|im_end|> b. C.") == ["A <|im_end|> b.", "C."]


# -- length limits ------------------------------------------------------------------------


def _markup_intact(segment_text: str, source: str) -> bool:
    return all(m.group() in source for m in MARKUP_RE.finditer(segment_text)) and segment_text.count("[") == segment_text.count("]")


def test_long_sentence_cut_at_clause_then_space():
    text = "This is a long sentence, with clauses; and more words that go on and on without end."
    out = texts(text, max_chars=30)
    assert out == ["This is a long sentence,", "with clauses; and more words", "that go on and on without end."]
    assert all(len(s) <= 30 for s in out)


def test_max_chars_counts_characters_not_bytes():
    text = "ééééé ééééé ééééé"  # 17 characters, 32 bytes
    assert texts(text, max_chars=17) == [text]
    assert texts(text, max_chars=12) == ["ééééé ééééé", "ééééé"]


def test_cjk_without_spaces_is_hard_cut_at_the_limit():
    text = "这是一个非常长的句子没有任何标点符号但是需要被切开"
    out = texts(text, max_chars=10)
    assert "".join(out) == text and all(len(s) <= 10 for s in out)
    assert texts("我们去了公园，然后去了商店，最后回家了。", max_chars=12) == ["我们去了公园，", "然后去了商店，", "最后回家了。"]


def test_comma_between_digits_is_not_a_clause_break():
    out = texts("The total was 1,234,567 dollars and more words here", max_chars=24)
    assert out[0] == "The total was 1,234,567"


@pytest.mark.parametrize("limit", range(4, 40))
def test_max_chars_never_breaks_a_tag_or_marker(limit):
    text = (
        "<|speaker:3|>[whisper] Some words [professional broadcast tone] that keep going, [laugh] and then "
        "more [pause] words until the very end of a long line"
    )
    segs = split_text(text, max_chars=limit)
    for s in segs:
        assert s.speaker == 3 and s.text.startswith("<|speaker:3|>")
        body = s.text[len("<|speaker:3|>") :]
        assert "<|" not in body
        assert _markup_intact(s.text, text), s.text
        assert not body.rstrip().endswith("]"), "a tag must not be stranded at the end of a piece"
        assert any(c.isalnum() for c in MARKUP_RE.sub("", body)), "every piece has something to say"
    flat = "".join(s.text[len("<|speaker:3|>") :] for s in segs).replace(" ", "")
    assert flat == text[len("<|speaker:3|>") :].replace(" ", "")  # nothing lost or reordered


def test_combining_marks_and_zwj_sequences_are_not_split():
    text = "नमस्ते" * 6  # Devanagari with combining vowel signs and virama
    for limit in range(2, 12):
        for piece in texts(text, max_chars=limit):
            assert not piece[0] in "\u093e\u094d\u0947"  # never starts with a combining mark
    family = "\U0001F468\u200d\U0001F469\u200d\U0001F467"
    for piece in texts(("a" + family) * 5, max_chars=3):
        assert not piece.startswith("\u200d") and not piece.endswith("\u200d")


# -- segment fields and seeds -------------------------------------------------------------


def test_segment_fields_pauses_and_indices():
    segs = split_text("One. Two. Three.", pause_ms=250, seed=7)
    assert [s.index for s in segs] == [0, 1, 2]
    assert [s.pause_after_ms for s in segs] == [250, 250, 0]
    assert split_text("One. Two.")[0].pause_after_ms == DEFAULT_SENTENCE_PAUSE_MS == 180
    assert split_text("One.")[0].pause_after_ms == 0
    assert all(s.seed is None for s in split_text("One. Two."))
    with pytest.raises(AttributeError):
        segs[0].text = "x"  # frozen


def test_seeds_are_deterministic_distinct_and_local():
    a = split_text("One. Two. Three. Four.", seed=42)
    b = split_text("One. Two. Three. Four.", seed=42)
    assert [s.seed for s in a] == [s.seed for s in b]
    assert [s.seed for s in a] == [derive_segment_seed(42, i) for i in range(4)]
    assert len({s.seed for s in a}) == 4
    # a segment's seed depends only on (base, index): editing one sentence keeps the others
    edited = split_text("One. Two changed. Three. Four.", seed=42)
    assert [s.seed for s in edited] == [s.seed for s in a]
    assert split_text("One. Two.", seed=43)[0].seed != a[0].seed
    seeds = {derive_segment_seed(base, i) for base in range(20) for i in range(200)}
    assert len(seeds) == 4000 and all(0 <= s < 2**63 for s in seeds)
    assert derive_segment_seed(-1, 0) == derive_segment_seed(2**64 - 1, 0)
    assert derive_segment_seed(0, 0) == 0x53836E97A68CBF37  # pinned: changing the mix changes takes


def test_bad_arguments():
    for kwargs in ({"mode": "words"}, {"max_chars": -1}, {"max_chars": 2.5}, {"pause_ms": -1}):
        with pytest.raises(InputError):
            split_text("a. b.", **kwargs)
    with pytest.raises(InputError):
        split_text(b"bytes")  # type: ignore[arg-type]


# -- s2.cpp parity mode (docs/spec/engine.md §8.1) -------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Hello world. How are you? Fine!", ["Hello world.", "How are you?", "Fine!"]),
        ("Pi is 3.14 ok", ["Pi is 3.", "14 ok"]),  # ASCII rules: decimals do split
        ("Mr. Smith", ["Mr.", "Smith"]),
        ("你好。世界", ["你好。世界"]),  # 。 is not a terminator for s2.cpp
        ('He said "Stop!" (Really.) Then', ['He said "Stop!"', "(Really.)", "Then"]),
        ("Wow?!... ok", ["Wow?!...", "ok"]),
        ("a.\n\nb", ["a.", "b"]),  # the LF after '.' is the one absorbed whitespace byte
        ("line1\nline2", ["line1", "line2"]),
        ("[laugh] Hi. [sigh]", ["[laugh] Hi.", "[sigh]"]),  # tags are plain text there
        ("a.b", ["a.", "b"]),
        ("  \t", []),
    ],
)
def test_s2cpp_sentences(text, expected):
    assert texts(text, mode="s2cpp") == expected


def test_s2cpp_absorbs_at_most_one_whitespace_then_trims():
    # after "a." one space is absorbed; the rest starts the next segment and is trimmed away
    assert texts("a.   b", mode="s2cpp") == ["a.", "b"]
    assert texts("a.)] b", mode="s2cpp") == ["a.)]", "b"]


def test_s2cpp_max_chars_rules():
    # clause mark at or before the limit (find_last_of includes index max_chars) in the second half
    assert texts("aaaaaaa, bbbbbbbbbbbbbbbb", mode="s2cpp", max_chars=10) == ["aaaaaaa,", "bbbbbbbbbb", "bbbbbb"]
    assert texts("aaaaaaaaaa,bbbb", mode="s2cpp", max_chars=10) == ["aaaaaaaaaa,", "bbbb"]  # 11 bytes: s2.cpp's off-by-one
    # clause mark in the first half is ignored; the last space in the second half wins
    assert texts("aa, bbbbbb cccccc", mode="s2cpp", max_chars=12) == ["aa, bbbbbb", "cccccc"]
    # nothing usable: hard cut at the limit
    assert texts("abcdefghijklmnop", mode="s2cpp", max_chars=5) == ["abcde", "fghij", "klmno", "p"]
    # the limit counts bytes: 5 × 2-byte chars = 10 bytes
    assert texts("ééééé", mode="s2cpp", max_chars=10) == ["ééééé"]
    assert texts("ééééé", mode="s2cpp", max_chars=9) == ["éééé", "é"]  # never cut inside a char
    assert texts("ééééé", mode="s2cpp", max_chars=1) == ["é"] * 5


def test_s2cpp_mode_keeps_text_untouched_but_reports_speaker():
    segs = split_text("<|speaker:1|>Hi. There.", mode="s2cpp", seed=3, pause_ms=100)
    assert [(s.text, s.speaker) for s in segs] == [("<|speaker:1|>Hi.", 1), ("There.", 1)]
    assert [s.pause_after_ms for s in segs] == [100, 0]
    assert isinstance(segs[0], Segment) and segs[1].seed == derive_segment_seed(3, 1)


# -- packing (a text too long for the model's context) ---------------------------------------


def test_pack_segments_joins_neighbours_of_one_speaker_up_to_the_limit():
    from s2studio.engine.text.segmentation import derive_segment_seed, pack_segments, split_text

    text = "One two. Three four. Five six. <|speaker:1|>Seven. Eight nine. Ten."
    packed = pack_segments(split_text(text), 20, pause_ms=50, seed=9)
    assert [s.text for s in packed] == ["One two. Three four.", "Five six.", "<|speaker:1|>Seven. Eight nine.",
                                        "<|speaker:1|>Ten."]
    assert [s.speaker for s in packed] == [None, None, 1, 1]
    assert [s.index for s in packed] == [0, 1, 2, 3]
    assert [s.pause_after_ms for s in packed] == [50, 50, 50, 0]
    assert [s.seed for s in packed] == [derive_segment_seed(9, i) for i in range(4)]
    assert len(pack_segments(split_text("Hi. " * 1000), 100_000)) == 1
