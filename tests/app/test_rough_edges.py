"""Issue 26's findings, each through the real widgets: Open script through a real QFileDialog,
speaker choices kept across a restart, rename clashes, stale clip advice, a trimmed clip's
transcript marked for review, Tab order, the default layout, elided lines, short seeds, the
welcome page's offline message, dropped files, the threads range, imported voice names, tag
spacing, the A/B reason, the estimate for a word, and the theme choice."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent
from PySide6.QtWidgets import QApplication, QFileDialog

from s2studio.app.settings import load_settings
from s2studio.audio import CODEC_SAMPLE_RATE, write_wav
from tests.app.conftest import answer_modal


def _voice(library, name, seed):
    codes = np.random.default_rng(seed).integers(0, 128, size=(10, 30), dtype=np.int32)
    return library.save(None, codes, f"This is {name} speaking.", name=name, codebook_size=128)


@pytest.fixture
def qt_file_dialogs():
    """Qt's own file dialog for the static QFileDialog functions, which the test can drive: with a
    platform theme that offers a native one (seen in a full run), the dialog has no widget and the
    test would wait for ever. The app's code path is the same either way."""
    QApplication.setAttribute(Qt.ApplicationAttribute.AA_DontUseNativeDialogs, True)
    yield
    QApplication.setAttribute(Qt.ApplicationAttribute.AA_DontUseNativeDialogs, False)


def test_open_script_goes_through_a_real_file_dialog(make_window, fast_settings, tmp_path, qtbot, qt_file_dialogs):
    window = make_window(fast_settings())
    script = tmp_path / "scene.txt"
    script.write_text("Read from the dialog.", encoding="utf-8")

    titles = []

    def choose(dialog):  # as a person would: pick the file, press Open
        titles.append(dialog.windowTitle())
        dialog.selectFile(str(script))
        dialog.accept()

    open_action = next(a for a in window.findChildren(type(window.generate_action)) if a.text() == "Open script…")
    with answer_modal(QFileDialog, choose):
        open_action.trigger()  # File ▸ Open script… (Ctrl+O)
    assert titles == ["Open a script"]
    assert window.editor.text() == "Read from the dialog."
    assert window.settings.recent_scripts == [str(script)]


def test_speaker_voices_are_kept_across_a_restart(make_window, fast_settings):
    window = make_window(fast_settings())
    alice, bob = _voice(window.library, "Alice", 1), _voice(window.library, "Bob", 2)
    window.speakers.reload_voices()
    window.editor.set_text("<|speaker:0|>Hi. <|speaker:1|>Hello.")
    window.speakers.set_voice(0, bob.id)
    window.speakers.set_voice(1, alice.id)
    window.close()
    saved = load_settings(window.settings_path).settings
    assert saved.speaker_voices == {"0": bob.id, "1": alice.id}
    again = make_window(saved)
    again.editor.set_text("<|speaker:0|>Hi. <|speaker:1|>Hello.")
    assert again.speakers.combos[0].currentText() == "Bob" and again.speakers.combos[1].currentText() == "Alice"
    assert again.speakers.mapping() == ((0, bob.id), (1, alice.id))


def test_bad_speaker_voices_in_the_settings_file_are_dropped(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text('{"speaker_voices": {"1": "alice", "x": "bob", "2": 5, "3": ""}, "theme": "neon"}')
    loaded = load_settings(path)
    assert loaded.settings.speaker_voices == {"1": "alice"} and loaded.settings.theme == "system"
    assert "speaker_voices" in loaded.notice and "theme" in loaded.notice


def test_rename_cannot_give_two_voices_one_name(make_window, fast_settings):
    window = make_window(fast_settings())
    window.pages.setCurrentIndex(1)
    _voice(window.library, "Alice", 1)
    bob = _voice(window.library, "Bob", 2)
    window.voice_panel.reload_voices(bob.id)
    window.voice_panel.ask_text = lambda *a: "alice"
    window.voice_panel.rename_selected()
    assert window.error_banner.isVisible() and "already named “Alice”" in window.error_banner.text
    assert sorted(i.name for i in window.library.list()) == ["Alice", "Bob"]
    dialog = window.open_voice_library()  # the library's Rename… refuses it too, in its banner
    dialog.ask_text = lambda *a: "ALICE"
    dialog.voice_list.setCurrentRow(dialog.visible_ids().index(bob.id))
    dialog.rename_selected()
    assert dialog.banner.isVisible() and "already named “Alice”" in dialog.banner.text
    assert sorted(i.name for i in window.library.list()) == ["Alice", "Bob"]
    dialog.ask_text = lambda *a: "Robert"  # any other name is fine
    dialog.rename_selected()
    assert sorted(i.name for i in window.library.list()) == ["Alice", "Robert"]


def _long_clip(tmp_path, seconds, name="long.wav"):
    t = np.arange(int(seconds * CODEC_SAMPLE_RATE)) / CODEC_SAMPLE_RATE
    samples = (0.3 * np.sin(2 * np.pi * 180 * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 0.7 * t))).astype(np.float32)
    path = tmp_path / name
    write_wav(path, samples, CODEC_SAMPLE_RATE)
    return path


def test_the_long_clip_notice_goes_with_its_clip(make_window, fast_settings, tmp_path):
    window = make_window(fast_settings())
    window.pages.setCurrentIndex(1)
    window.open_reference(_long_clip(tmp_path, 90))
    assert window.notice_banner.isVisible() and "90 s long" in window.notice_banner.text
    window.open_reference(_long_clip(tmp_path, 8, "short.wav"))
    assert not window.notice_banner.isVisible()


def test_trimming_marks_the_transcript_for_review(make_window, fast_settings, tmp_path):
    window = make_window(fast_settings())
    window.pages.setCurrentIndex(1)
    clip = _long_clip(tmp_path, 20)
    clip.with_suffix(".txt").write_text("The whole clip's words.", encoding="utf-8")
    window.open_reference(clip)
    panel = window.voice_panel
    assert not panel.transcript_needs_review and not panel.review_label.isVisible()
    panel.waveform.set_selection((0, 8 * CODEC_SAMPLE_RATE))  # keep 8 s of it
    assert panel.transcript_needs_review and panel.review_label.isVisible()
    panel.transcript.setPlainText("The first words only.")  # edited for the part kept
    assert not panel.transcript_needs_review and not panel.review_label.isVisible()
    # a clip longer than a reference may be opens trimmed: its .txt is the whole clip's
    long = _long_clip(tmp_path, 90, "ninety.wav")
    long.with_suffix(".txt").write_text("Ninety seconds of words.", encoding="utf-8")
    window.open_reference(long)
    assert panel.transcript_needs_review


def test_tab_goes_from_the_script_to_the_sentences_and_leaves_the_table(make_window, fast_settings, qtbot):
    window = make_window(fast_settings())
    window.pages.setCurrentIndex(1)
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=2000)
    window.editor.set_text("One. Two. Three. Four.")
    window.editor.edit.setFocus()
    qtbot.waitUntil(window.editor.edit.hasFocus, timeout=1000)
    qtbot.keyClick(window.editor.edit, Qt.Key.Key_Tab)
    table = window.segments_view.table
    assert QApplication.focusWidget() is table
    qtbot.keyClick(table, Qt.Key.Key_Tab)  # one press leaves it (it used to walk every cell)
    assert QApplication.focusWidget() is not table


def test_the_default_window_shows_the_script_and_eight_sentences(make_window, fast_settings, qtbot):
    window = make_window(fast_settings(segmentation_enabled=True, segment_max_chars=30))
    window.pages.setCurrentIndex(1)
    window.resize(1180, 760)
    window.editor.set_text(" ".join(f"Sentence number {i} is here." for i in range(1, 13)))
    table = window.segments_view.table
    qtbot.waitUntil(lambda: table.rowCount() >= 12, timeout=3000)
    QApplication.processEvents()
    visible = sum(1 for row in range(table.rowCount())
                  if table.visualRect(table.model().index(row, 1)).bottom() <= table.viewport().height())
    assert visible >= 8, visible
    edit = window.editor.edit
    assert edit.viewport().height() >= 4 * edit.fontMetrics().lineSpacing()  # the script: 4+ lines


def test_long_title_and_statistics_end_in_an_ellipsis_with_a_tooltip(make_window, fast_settings):
    window = make_window(fast_settings())
    window.pages.setCurrentIndex(1)
    window.resize(1180, 760)
    QApplication.processEvents()
    long = "Segment 3/9 · 120 frames · 5.6 s of audio · real-time factor 0.82 · 0:07 elapsed · 0:12 left " * 3
    window.generate_bar.stats.setText(long)
    assert window.generate_bar.stats.is_elided()
    assert window.generate_bar.stats.shown_text().endswith("…")
    assert window.generate_bar.stats.toolTip() == long
    title = window.segments_view.title
    title.setText("Take of 12:00:00 · " + "a very long voice label " * 20)
    assert title.is_elided() and title.toolTip() == title.text()


def test_seeds_are_shown_short_with_the_whole_seed_in_the_tooltip():
    from s2studio.app.seed_text import short_seed
    from s2studio.app.widgets.output_panel import Take

    seed = 9_223_372_036_854_775_807
    assert short_seed(seed) == "9223…07" and short_seed(1234) == "1234"
    take = Take("Hi.", "voice", seed, "temp 0.8", np.zeros(10, np.float32), 44100)
    assert "seed 9223…07" in take.summary() and str(seed) not in take.summary()
    assert f"seed {seed}" in take.details()


def test_offline_message_points_up_and_goes_when_the_page_is_reopened(make_window, fast_settings, tmp_path):
    from s2studio.app.downloads import OFFLINE_MESSAGE

    window = make_window(fast_settings(str(tmp_path / "m.gguf")))
    assert "below" not in OFFLINE_MESSAGE and "above" in OFFLINE_MESSAGE
    window.choose_model_files()
    window.welcome._on_failed(OFFLINE_MESSAGE)
    assert window.welcome.status.text() == OFFLINE_MESSAGE
    window.leave_welcome()
    window.choose_model_files()
    assert window.welcome.status.text() == ""


def _drop(window, path):
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    target = window.editor.edit.viewport()
    for kind in (QDropEvent.Type.DragEnter, QDropEvent.Type.Drop):
        from PySide6.QtGui import QDragEnterEvent

        cls = QDragEnterEvent if kind == QDropEvent.Type.DragEnter else QDropEvent
        event = cls(QPointF(5, 5).toPoint() if cls is QDragEnterEvent else QPointF(5, 5),
                    Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
        QApplication.sendEvent(target, event)


def test_a_dropped_pdf_gets_a_banner(make_window, fast_settings, tmp_path):
    window = make_window(fast_settings())
    window.pages.setCurrentIndex(1)
    pdf = tmp_path / "manual.pdf"
    pdf.write_bytes(b"%PDF-1.4\n")
    _drop(window, pdf)
    assert window.error_banner.isVisible() and str(pdf) in window.error_banner.text
    assert "not an audio file" in window.error_banner.text and window.editor.text() == ""
    _drop(window, _long_clip(tmp_path, 6))  # an audio file after it: the banner goes, the clip opens
    assert not window.error_banner.isVisible() and window.voice_panel.reference is not None


def test_the_threads_box_stops_at_this_machines_cores():
    from s2studio.app.settings import AppSettings
    from s2studio.app.widgets.settings_dialog import SettingsDialog, logical_cores

    dialog = SettingsDialog(AppSettings(threads=256))
    assert dialog.threads.maximum() == logical_cores() and dialog.threads.value() == logical_cores()


def test_an_imported_voice_keeps_its_saved_name(make_window, fast_settings, tmp_path):
    window = make_window(fast_settings())
    alice = _voice(window.library, "Alice Smith", 1)
    dialog = window.open_voice_library()
    dialog.voice_list.setCurrentRow(dialog.visible_ids().index(alice.id))
    (tmp_path / "out").mkdir()
    exported = dialog.export_selected(str(tmp_path / "out" / "alice"))
    assert exported and (tmp_path / "out" / "alice.json").is_file()
    window.library.delete(alice.id)
    dialog.reload()
    new_id = dialog.import_voice(exported)
    assert window.library.get(new_id).info.name == "Alice Smith"
    # a foreign .json beside a voice file is neither trusted for the name nor overwritten
    other = tmp_path / "other"
    other.mkdir()
    (other / "bob.json").write_text('{"name": "Mallory"}')
    (other / "bob.s2voice").write_bytes(open(exported, "rb").read())
    assert window.library.get(dialog.import_voice(str(other / "bob.s2voice"))).info.name.startswith("bob")


def test_tag_buttons_leave_one_space_on_each_side(qtbot):
    from s2studio.app.widgets.script_editor import ScriptEditor

    editor = ScriptEditor()
    qtbot.addWidget(editor)
    editor.set_text("Well then")
    cursor = editor.edit.textCursor()
    cursor.setPosition(5)  # after "Well", before the space
    editor.edit.setTextCursor(cursor)
    editor.insert_tag("[laugh]")
    assert editor.text() == "Well [laugh] then"
    cursor.setPosition(len(editor.text()))
    editor.edit.setTextCursor(cursor)
    editor.insert_tag("[sigh]")
    assert editor.text() == "Well [laugh] then [sigh] " and "  " not in editor.text()


def test_the_estimate_for_a_word_is_not_zero_seconds(qtbot):
    from s2studio.app.widgets.script_editor import ScriptEditor

    editor = ScriptEditor()
    qtbot.addWidget(editor)
    editor.set_text("Hello.")
    assert "about 0 s" not in editor.stats.text() and "under 1 s" in editor.stats.text()


def test_ab_play_buttons_say_why_they_are_disabled(make_window, fast_settings, qtbot):
    from s2studio.app.widgets.ab_compare import ABCompareDialog, Candidate

    window = make_window(fast_settings())
    assert not window.audio.status.can_play  # no PortAudio in these tests
    audio = np.zeros(4410, np.float32)
    dialog = ABCompareDialog("Sentence 1", [Candidate("v1", audio, 44100), Candidate("v2", audio, 44100)], 0, 1,
                             window.audio, parent=window)
    qtbot.addWidget(dialog)
    reason = window.audio.status.reason
    assert reason
    for button in dialog.play_buttons.values():
        assert not button.isEnabled() and button.toolTip() == reason
    assert reason in dialog.hint.text()


@pytest.mark.parametrize("choice, dark", [("dark", True), ("light", False)])
def test_the_theme_choice_is_applied_and_remembered(make_window, fast_settings, choice, dark):
    from s2studio.app.theme import is_dark

    window = make_window(fast_settings())
    s = window.settings.copy()
    s.theme = choice
    window.apply_settings(s)
    app = QApplication.instance()
    assert is_dark(app) is dark
    window_color = app.palette().color(app.palette().ColorRole.Window)
    assert (window_color.lightness() < 100) is dark
    assert load_settings(window.settings_path).settings.theme == choice
    s = window.settings.copy()
    s.theme = "system"
    window.apply_settings(s)  # back to the default for the other tests


def test_a_dialog_that_never_comes_fails_the_test_instead_of_hanging(qtbot):
    """The helper the dialog tests use: waiting for a file dialog while a different modal opens
    closes that modal after the give-up time, so the blocked call returns."""
    from PySide6.QtWidgets import QMessageBox

    box = QMessageBox(QMessageBox.Icon.Question, "Not the file dialog", "?",
                      QMessageBox.StandardButton.Ok | QMessageBox.StandardButton.Cancel)
    with answer_modal(QFileDialog, lambda d: d.accept(), give_up_s=0.3) as answered:
        box.exec()  # returns: the helper rejected it
    assert box.result() == 0 and not box.isVisible()
    assert answered == []
