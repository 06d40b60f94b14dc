"""Speakers: the mapping panel follows the script's <|speaker:N|> tags, and a dialogue renders
each speaker's turns with that speaker's saved voice as the reference (real tiny model)."""

from __future__ import annotations

import re

import numpy as np

from s2studio.engine.text.dialogue import Turn, speakers_in, split_turns


def _voice(library, name, seed):
    codes = np.random.default_rng(seed).integers(0, 128, size=(10, 30), dtype=np.int32)
    return library.save(None, codes, f"This is {name} speaking.", name=name, codebook_size=128), codes


def test_turns_split_at_speaker_changes():
    text = "Intro. <|speaker:0|>Hi. <|speaker:0|> Still me. <|speaker:1|>[laugh] Hello!<|speaker:2|>  <|speaker:0|>Bye."
    assert speakers_in(text) == [0, 1, 2]
    assert split_turns(text) == [Turn(None, "Intro."), Turn(0, "Hi. Still me."), Turn(1, "[laugh] Hello!"),
                                 Turn(0, "Bye.")]
    assert split_turns("No tags at all.") == [Turn(None, "No tags at all.")]


def test_the_panel_appears_with_speaker_tags_and_keeps_the_choices(make_window, fast_settings):
    window = make_window(fast_settings())
    window.pages.setCurrentIndex(1)  # the studio page
    window.editor.set_text("<|speaker:0|>Hello.")
    assert window.speakers.hint_shown  # no saved voice to choose: it says how to make one
    a, _ = _voice(window.library, "Alice", 1)
    window.speakers.reload_voices()
    assert not window.speakers.hint_shown
    window.editor.set_text("")
    assert not window.speakers.isVisible()
    window.editor.set_text("<|speaker:0|>Hello. <|speaker:1|>Hi!")
    assert window.speakers.isVisible() and sorted(window.speakers.combos) == [0, 1]
    assert window.speakers.combos[0].itemText(1) == "Alice"
    window.speakers.set_voice(1, a.id)
    assert window.speakers.mapping() == ((1, a.id),)
    window.editor.set_text("No more tags.")
    assert not window.speakers.isVisible() and window.speakers.mapping() == ()
    window.editor.set_text("<|speaker:1|>Back again.")  # the speaker comes back with its voice
    assert window.speakers.combos[1].currentData() == a.id and window.speakers.mapping() == ((1, a.id),)


def test_a_dialogue_speaks_each_part_with_its_speakers_voice(make_window, fast_settings, tts_model, qtbot,
                                                             monkeypatch):
    import s2studio.engine.pipeline as pipeline_module

    prompts = []
    real_build = pipeline_module.build_prompt_for

    def spy(tok, model, text, ref_codes, ref_text):
        prompts.append((text, None if ref_codes is None else np.array(ref_codes), ref_text))
        return real_build(tok, model, text, ref_codes, ref_text)

    monkeypatch.setattr(pipeline_module, "build_prompt_for", spy)
    window = make_window(fast_settings(tts_model, max_new_tokens=10, pause_ms=250))
    a, codes_a = _voice(window.library, "Alice", 1)
    b, codes_b = _voice(window.library, "Bob", 2)
    window.speakers.reload_voices()
    window.voice_panel.reload_voices()
    window.editor.set_text("<|speaker:0|>Hello there. <|speaker:1|>Good morning!")
    window.speakers.set_voice(0, a.id)
    window.speakers.set_voice(1, b.id)
    with qtbot.waitSignal(window.worker.finished, timeout=120_000) as finished:
        window.generate()
    qtbot.waitUntil(lambda: not window.generating, timeout=5000)
    assert [p[0] for p in prompts] == ["Hello there.", "Good morning!"]
    np.testing.assert_array_equal(prompts[0][1], codes_a)  # part 1: voice A's codes
    np.testing.assert_array_equal(prompts[1][1], codes_b)  # part 2: voice B's codes
    assert [p[2] for p in prompts] == ["This is Alice speaking.", "This is Bob speaking."]
    result = finished.args[0].result
    take = window.output.current
    assert len(result.segments) == 2 and [s.text for s in result.segments] == ["Hello there.", "Good morning!"]
    (s0, e0), (s1, e1) = take.segments
    assert s0 == 0 and s1 - e0 == round(0.25 * 44100) and e1 == len(take.audio)  # joined with the pause
    assert not take.audio[e0:s1].any()
    assert result.codes.shape[1] == sum(s.codes.shape[1] for s in result.segments)
    assert "Alice" in take.voice and "Bob" in take.voice
    # The statistics line shows the voice prefix cache: both voices' prompts are kept there.
    assert re.search(r"voice cache ([2-9]|\d\d+) voices, \d+ MB, \d+ hits?", window.generate_bar.stats.text())


def test_unmapped_speakers_use_the_voice_panels_choice(make_window, fast_settings, tts_model, qtbot, monkeypatch):
    import s2studio.engine.pipeline as pipeline_module

    refs = []
    real_build = pipeline_module.build_prompt_for

    def spy(tok, model, text, ref, rt):
        refs.append((text, rt))
        return real_build(tok, model, text, ref, rt)

    monkeypatch.setattr(pipeline_module, "build_prompt_for", spy)
    window = make_window(fast_settings(tts_model, max_new_tokens=6))
    a, _ = _voice(window.library, "Alice", 1)
    panel_voice, _ = _voice(window.library, "Narrator", 3)
    window.speakers.reload_voices()
    window.voice_panel.reload_voices()
    window.voice_panel.select_voice(panel_voice.id)
    window.editor.set_text("<|speaker:0|>One. <|speaker:1|>Two.")
    window.speakers.set_voice(1, a.id)
    with qtbot.waitSignal(window.worker.finished, timeout=120_000):
        window.generate()
    assert refs == [("One.", "This is Narrator speaking."), ("Two.", "This is Alice speaking.")]


def _next_tab_stop(widget):
    """Where Tab goes from ``widget``: the next widget in the focus chain that takes Tab focus."""
    from PySide6.QtCore import Qt

    w = widget.nextInFocusChain()
    while not (w.focusPolicy() & Qt.FocusPolicy.TabFocus and w.isVisible() and w.isEnabled()):
        w = w.nextInFocusChain()
    return w


def test_tab_goes_from_the_script_through_the_speakers_to_generate(make_window, fast_settings):
    window = make_window(fast_settings())
    window.pages.setCurrentIndex(1)
    window.editor.set_text("<|speaker:0|>Hi. <|speaker:1|>Hello.")
    last_tag = list(window.editor.tag_buttons.values())[-1]
    assert _next_tab_stop(last_tag) is window.speakers.combos[0]
    assert _next_tab_stop(window.speakers.combos[0]) is window.speakers.combos[1]
    assert _next_tab_stop(window.speakers.combos[1]) is window.generate_bar.button


def test_an_unlocked_dialogue_has_one_seed_that_makes_it_again(make_window, fast_settings, tts_model, qtbot):
    window = make_window(fast_settings(tts_model, max_new_tokens=6, seed_locked=False))
    a, _ = _voice(window.library, "Alice", 1)
    b, _ = _voice(window.library, "Bob", 2)
    window.speakers.reload_voices()
    window.editor.set_text("<|speaker:0|>One. <|speaker:1|>Two.")
    window.speakers.set_voice(0, a.id)
    window.speakers.set_voice(1, b.id)
    with qtbot.waitSignal(window.worker.finished, timeout=120_000) as first:
        window.generate()
    qtbot.waitUntil(lambda: not window.generating, timeout=5000)
    result = first.args[0].result
    assert [s.seed for s in result.segments] == [result.seed, result.seed]
    s = window.settings.copy()
    s.seed, s.seed_locked = result.seed, True
    window.apply_settings(s)
    with qtbot.waitSignal(window.worker.finished, timeout=120_000) as again:
        window.generate()
    np.testing.assert_array_equal(again.args[0].result.codes, result.codes)


def test_stop_during_the_second_speaker_keeps_what_was_made(make_window, fast_settings, tts_model, qtbot):
    # seed 1 runs a sentence past 40 frames on the tiny model (see test_stop_cancels_within_a_second)
    window = make_window(fast_settings(tts_model, max_new_tokens=400, seed=1))
    a, _ = _voice(window.library, "Alice", 1)
    b, _ = _voice(window.library, "Bob", 2)
    window.speakers.reload_voices()
    window.editor.set_text("<|speaker:0|>Hi. <|speaker:1|>A long sentence that would take a while to speak "
                           "on this machine.")
    window.speakers.set_voice(0, a.id)
    window.speakers.set_voice(1, b.id)
    seen = []
    window.worker.progress.connect(lambda p: seen.append((p.segment, p.segment_count)))
    window.generate()
    qtbot.waitUntil(lambda: any(s == 2 for s, _ in seen) or not window.generating, timeout=120_000)
    assert window.generating and seen[-1][1] == 2, "the dialogue ended before its second turn"
    with qtbot.waitSignal(window.worker.cancelled, timeout=10_000):
        window.stop_action.trigger()
    qtbot.waitUntil(lambda: not window.generating and window.output.history.count() == 1, timeout=5000)
    take = window.output.current
    assert take.stopped and len(take.segments) == 2
    assert take.segments[1][0] > take.segments[0][1]  # the second turn's audio after the pause
