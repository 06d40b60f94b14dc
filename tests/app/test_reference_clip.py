"""The reference clip in the voice panel: a fresh start per clip, trimming by mouse and keyboard,
and saving under a name that is already taken."""

from __future__ import annotations

import shutil

import numpy as np
import soundfile as sf
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QApplication, QMessageBox

from s2studio.app.widgets import voice_panel as vp
from tests.app.conftest import answer_modal

RATE = 44100


def write_clip(path, seconds: float = 2.0):
    t = np.arange(int(seconds * RATE)) / RATE
    sf.write(path, (0.4 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), RATE)
    return path


def test_a_new_clip_starts_with_its_own_transcript_and_name(make_window, fast_settings, tts_model, tmp_path):
    window = make_window(fast_settings(tts_model))
    panel = window.voice_panel
    alice = write_clip(tmp_path / "alice.wav")
    alice.with_suffix(".txt").write_text("Hello, this is Alice.", encoding="utf-8")
    bob = write_clip(tmp_path / "bob.wav")  # nothing beside it
    assert panel.load_reference_file(alice)
    assert (panel.transcript.toPlainText(), panel.name_edit.text()) == ("Hello, this is Alice.", "alice")
    assert panel.load_reference_file(bob)
    assert (panel.transcript.toPlainText(), panel.name_edit.text()) == ("", "bob")
    # Generate asks for Bob's transcript instead of silently using Alice's
    window.editor.set_text("Something to say.")
    assert window.build_request() is None
    assert window.error_banner.isVisible() and "transcript" in window.error_banner.text


def test_loading_a_clip_and_ending_a_drag_move_nothing(make_window, fast_settings, tts_model, tmp_path, qtbot):
    window = make_window(fast_settings(tts_model))
    panel = window.voice_panel
    QApplication.processEvents()
    min_width = window.studio_page.minimumSizeHint().width()
    panel_width = panel.width()
    assert panel.load_reference_file(write_clip(tmp_path / "a-clip-with-a-rather-long-file-name.wav", 3.0))
    QApplication.processEvents()
    assert window.studio_page.minimumSizeHint().width() == min_width  # the window does not widen
    assert panel.width() == panel_width
    wave = panel.waveform
    before = wave.mapTo(window, QPoint(0, 0)), wave.size()
    y = wave.height() // 2
    qtbot.mousePress(wave, Qt.MouseButton.LeftButton, pos=QPoint(wave.width() // 4, y))
    qtbot.mouseMove(wave, QPoint(wave.width() // 2, y))
    qtbot.mouseRelease(wave, Qt.MouseButton.LeftButton, pos=QPoint(wave.width() // 2, y))
    QApplication.processEvents()
    assert wave.selection is not None
    assert (wave.mapTo(window, QPoint(0, 0)), wave.size()) == before  # it stays under the cursor
    assert window.studio_page.minimumSizeHint().width() == min_width


def test_trim_handles_move_with_the_keyboard(make_window, fast_settings, tts_model, tmp_path, qtbot):
    window = make_window(fast_settings(tts_model))
    panel = window.voice_panel
    assert panel.load_reference_file(write_clip(tmp_path / "clip.wav", 3.0))
    wave, n, step = panel.waveform, 3 * RATE, RATE // 10
    assert wave.focusPolicy() & Qt.FocusPolicy.TabFocus
    qtbot.keyClick(wave, Qt.Key.Key_Right)
    assert wave.selection == (step, n)
    qtbot.keyClick(wave, Qt.Key.Key_Right, Qt.KeyboardModifier.ControlModifier)  # a whole second
    assert wave.selection == (step + RATE, n)
    qtbot.keyClick(wave, Qt.Key.Key_Left, Qt.KeyboardModifier.ShiftModifier)  # the end handle
    assert wave.selection == (step + RATE, n - step)
    assert len(panel.current_choice().samples) == n - 2 * step - RATE
    assert "1.8 s of 3.0 s" in panel.region_label.text()
    qtbot.keyClick(wave, Qt.Key.Key_Home)
    assert wave.selection == (0, n - step)
    qtbot.keyClick(wave, Qt.Key.Key_End)
    assert wave.selection is None and len(panel.kept_region()) == n  # the whole clip again
    for _ in range(40):  # the handles stop at the edges and never cross
        qtbot.keyClick(wave, Qt.Key.Key_Right)
    start, end = wave.selection
    assert 0 < end - start <= step and end == n


def _saving_window(make_window, fast_settings, clone_dir, tmp_path):
    folder = tmp_path / "clone"
    folder.mkdir()
    for name in ("model.gguf", "tokenizer.json"):
        shutil.copy(clone_dir / name, folder / name)
    window = make_window(fast_settings(folder / "model.gguf"))
    panel = window.voice_panel
    assert panel.load_reference_file(clone_dir / "reference.wav")
    return window, panel


def _save(panel, qtbot, window, transcript, name):
    panel.transcript.setPlainText(transcript)
    panel.name_edit.setText(name)
    with qtbot.waitSignal(window.worker.voice_saved, timeout=60_000):
        panel.save_button.click()
    qtbot.waitUntil(lambda: panel.save_button.text() == "Save as voice", timeout=3000)


def test_saving_under_a_taken_name_asks_to_replace_or_rename(make_window, fast_settings, clone_dir, tmp_path,
                                                             qtbot):
    window, panel = _saving_window(make_window, fast_settings, clone_dir, tmp_path)
    _save(panel, qtbot, window, "The quick brown fox.", "short1s")
    assert [i.name for i in window.library.list()] == ["short1s"]
    first_id = window.library.list()[0].id
    asked = []

    def answer(choice):
        return lambda name: (asked.append(name), choice)[1]

    panel.select_voice(vp.UNSAVED_REFERENCE)
    panel.ask_name_clash = answer(vp.REPLACE)
    _save(panel, qtbot, window, "The lazy dog.", "Short1s")  # names match case-insensitively
    voices = window.library.list()
    assert asked == ["Short1s"] and [v.id for v in voices] == [first_id]  # no "short1s-2"
    assert voices[0].transcript == "The lazy dog."
    panel.select_voice(vp.UNSAVED_REFERENCE)
    panel.ask_name_clash = answer(vp.RENAME)
    panel.ask_text = lambda *a: "Other name"
    _save(panel, qtbot, window, "The lazy dog.", "short1s")
    assert sorted(v.name for v in window.library.list()) == ["Other name", "Short1s"]
    assert panel.name_edit.text() == "Other name"


def test_name_clash_question_is_a_real_box_and_cancel_saves_nothing(make_window, fast_settings, clone_dir,
                                                                     tmp_path, qtbot):
    window, panel = _saving_window(make_window, fast_settings, clone_dir, tmp_path)
    _save(panel, qtbot, window, "The quick brown fox.", "Fox")
    panel.select_voice(vp.UNSAVED_REFERENCE)
    panel.name_edit.setText("fox")
    seen = []

    def answer_box(box):
        seen.append([b.text() for b in box.buttons()])
        box.button(QMessageBox.StandardButton.Cancel).click()

    with qtbot.assertNotEmitted(panel.save_requested), answer_modal(QMessageBox, answer_box):
        panel.save_button.click()
    assert seen and "Replace" in seen[0] and "Rename…" in seen[0]
    assert panel.save_button.isEnabled() and len(window.library.list()) == 1
