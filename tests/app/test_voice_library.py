"""Voices ▸ Voice library…: search, preview (clip and transcript), rename, delete, import and
export .s2voice; and reference clips that are too long (trim view) or very short (warning)."""

from __future__ import annotations

import numpy as np
import soundfile as sf

from s2studio.engine.voices import read_s2voice, write_s2voice


def _tone(seconds, rate=44100):
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * 180 * t)).astype(np.float32)


def _save(library, name, transcript, seed, clip=None):
    codes = np.random.default_rng(seed).integers(0, 128, size=(10, 25), dtype=np.int32)
    return library.save(None, codes, transcript, name=name, codebook_size=128, reference_audio=clip)


def _library_window(make_window, fast_settings):
    window = make_window(fast_settings())
    window.pages.setCurrentIndex(1)
    return window


def test_search_preview_and_use(fake_sd, make_window, fast_settings, qtbot):
    window = _library_window(make_window, fast_settings)
    clip = _tone(1.5)
    alice = _save(window.library, "Alice", "The rain in Spain stays mainly in the plain.", 1, clip)
    bob = _save(window.library, "Bob", "Peter Piper picked a peck of pickled peppers.", 2)
    dialog = window.open_voice_library()
    qtbot.addWidget(dialog)
    assert dialog.visible_ids() == [alice.id, bob.id]
    dialog.search.setText("pickled")  # the transcript is searched too
    assert dialog.visible_ids() == [bob.id]
    assert not dialog.play_button.isEnabled()  # Bob has no reference clip kept
    dialog.search.setText("zzz")
    assert dialog.visible_ids() == [] and dialog.title.text() == "No voice matches the search"
    dialog.search.setText("ali")
    assert dialog.visible_ids() == [alice.id] and dialog.selected_id() == alice.id
    assert dialog.transcript.toPlainText() == "The rain in Spain stays mainly in the plain."
    assert dialog.play_button.isEnabled()
    fake_sd.played.clear()
    dialog.play_button.click()
    assert window.audio.playing_owner == "library" and dialog.play_button.text() == "■ Stop"
    qtbot.waitUntil(lambda: window.audio.playing_owner == "", timeout=10_000)
    played = np.concatenate(fake_sd.played)
    assert len(played) >= len(clip) and np.allclose(played[:len(clip)], clip, atol=1e-3)
    assert dialog.play_button.text() == "▶ Play clip"
    dialog.use_button.click()
    assert window.voice_panel.current_choice().voice_id == alice.id and not dialog.isVisible()


def test_rename_delete_import_and_export(make_window, fast_settings, tmp_path):
    window = _library_window(make_window, fast_settings)
    alice = _save(window.library, "Alice", "One two three.", 1)
    dialog = window.open_voice_library()
    dialog.ask_text = lambda *a: "Alicia"
    dialog.rename_selected()
    assert window.library.get(alice.id).info.name == "Alicia"
    assert "Alicia" in [window.voice_panel.voice_list.item(i).text().split("  ·  ")[0]
                        for i in range(window.voice_panel.voice_list.count())]  # the panel follows
    exported = dialog.export_selected(str(tmp_path / "shared"))
    assert exported == str(tmp_path / "shared.s2voice")
    profile = read_s2voice(exported)
    np.testing.assert_array_equal(profile.codes, window.library.get(alice.id).codes)
    assert profile.transcript == "One two three."
    new_id = dialog.import_voice(exported)
    imported = window.library.get(new_id)
    # named as it was saved (the export's sidecar), made unique: the original is still there
    assert imported.info.name == "Alicia (2)" and np.array_equal(imported.codes, profile.codes)
    assert dialog.selected_id() == new_id and new_id in window.voice_panel.voice_ids()
    write_s2voice(tmp_path / "Alicia.s2voice", profile)  # a name taken: the import gets another
    assert window.library.get(dialog.import_voice(str(tmp_path / "Alicia.s2voice"))).info.name == "Alicia (3)"
    dialog.confirm = lambda question: False
    dialog.delete_selected()
    assert len(window.library.list()) == 3
    dialog.confirm = lambda question: "Alicia (3)" in question  # the one selected: the last imported
    dialog.delete_selected()
    assert len(window.library.list()) == 2 and len(window.voice_panel.voice_ids()) == 2
    assert len(dialog.visible_ids()) == 2


def test_a_bad_voice_file_is_one_sentence_and_nothing_is_imported(make_window, fast_settings, tmp_path):
    window = _library_window(make_window, fast_settings)
    dialog = window.open_voice_library()
    bad = tmp_path / "broken.s2voice"
    bad.write_bytes(b"not a voice at all")
    assert dialog.import_voice(str(bad)) is None
    assert dialog.banner.isVisible() and "broken.s2voice" in dialog.banner.text
    assert window.library.list() == []
    alice = _save(window.library, "Alice", "Hi.", 1)
    dialog.reload(alice.id)
    assert dialog.export_selected(str(tmp_path / "missing" / "x.s2voice")) is None
    assert "does not exist" in dialog.banner.text and not (tmp_path / "missing").exists()


def test_a_long_clip_opens_for_trimming_and_a_short_one_is_kept_with_a_warning(make_window, fast_settings, tmp_path):
    window = _library_window(make_window, fast_settings)
    panel = window.voice_panel
    long_clip = tmp_path / "interview.wav"
    sf.write(long_clip, _tone(75), 44100, subtype="PCM_16")
    assert panel.load_reference_file(long_clip)
    assert panel.waveform.selection == (0, 60 * 44100) and len(panel.kept_region()) == 60 * 44100
    assert window.notice_banner.isVisible() and "75 s" in window.notice_banner.text
    assert not window.error_banner.isVisible()
    assert "Keeping 60.0 s of 75.0 s" in panel.region_label.text()
    short_clip = tmp_path / "hi.wav"
    sf.write(short_clip, _tone(2), 44100, subtype="PCM_16")
    assert panel.load_reference_file(short_clip)
    assert panel.waveform.selection is None and "only 2.0 s" in window.notice_banner.text
    assert "5–30 s" in window.notice_banner.text
    huge = tmp_path / "audiobook.wav"
    sf.write(huge, np.full(16 * 60 * 8000, 0.1, np.float32), 8000, subtype="PCM_16")
    assert not panel.load_reference_file(huge)
    assert window.error_banner.isVisible() and "audiobook.wav" in window.error_banner.text


def test_a_kept_part_over_60_s_is_refused_until_trimmed(make_window, fast_settings, tts_model, tmp_path, qtbot):
    window = make_window(fast_settings(tts_model))
    panel = window.voice_panel
    clip = tmp_path / "interview.wav"
    sf.write(clip, _tone(70), 44100, subtype="PCM_16")
    assert panel.load_reference_file(clip)
    panel.transcript.setPlainText("A long interview.")
    panel.waveform.set_selection(None)  # the whole 70 s again
    window.editor.set_text("Hello.")
    window.generate()
    assert not window.generating and "70.0 s" in window.error_banner.text and "at most 60 s" in window.error_banner.text
    panel.waveform.set_selection((0, 10 * 44100))
    assert not window.error_banner.isVisible()  # trimmed: the cause has gone
    with qtbot.waitSignal(window.worker.finished, timeout=120_000):
        window.generate()


def test_the_panels_library_button_opens_the_library(make_window, fast_settings):
    window = _library_window(make_window, fast_settings)
    window.voice_panel.library_button.click()
    assert window.library_dialog.isVisible()
