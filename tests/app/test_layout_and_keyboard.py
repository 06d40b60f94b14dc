"""Window size and minimum sizes, keyboard focus and tab order, and the way back from the
model-files page."""

from __future__ import annotations

import subprocess
import sys

from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtWidgets import QApplication

from s2studio.app.main_window import STUDIO_PAGE, WELCOME_PAGE


def _tab_stops(start, count=60):
    """The widgets Tab visits after ``start``, in order (Qt's focus chain, focusable ones only)."""
    out, widget = [], start
    for _ in range(count):
        widget = widget.nextInFocusChain()
        if widget.focusPolicy() & Qt.FocusPolicy.TabFocus:
            out.append(widget)
    return out


def _activate(window, qtbot):
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=2000)  # focus and shortcuts need the active window


def test_script_has_the_first_focus_and_tab_leaves_text_boxes(make_window, fast_settings, tts_model, qtbot):
    window = make_window(fast_settings(tts_model))
    _activate(window, qtbot)
    assert QApplication.focusWidget() is window.editor.edit  # not the voice list
    window.editor.set_text("Hello")
    window.editor.edit.moveCursor(window.editor.edit.textCursor().MoveOperation.End)
    qtbot.keyClick(window.editor.edit, Qt.Key.Key_Tab)
    assert window.editor.text() == "Hello" and QApplication.focusWidget() is not window.editor.edit
    # the sentence table (under the script) comes next, then the tags, and on to Generate
    tags = list(window.editor.tag_buttons.values())
    assert QApplication.focusWidget() is window.segments_view.table
    chain = _tab_stops(window.editor.edit)
    assert chain[0] is window.segments_view.table and chain[1:1 + len(tags)] == tags
    assert chain.index(window.generate_bar.button) < chain.index(window.voice_panel.voice_list)
    panel = window.voice_panel
    panel.transcript.setFocus()
    qtbot.waitUntil(panel.transcript.hasFocus, timeout=1000)
    qtbot.keyClick(panel.transcript, Qt.Key.Key_Tab)
    assert panel.transcript.toPlainText() == "" and QApplication.focusWidget() is panel.name_edit
    # the trim waveform is reachable by keyboard: it sits between Record and Play in the chain
    assert panel.waveform.focusPolicy() == Qt.FocusPolicy.StrongFocus
    assert _tab_stops(panel.record_button)[0] is panel.waveform


def test_choose_model_files_has_a_way_back(make_window, fast_settings, tts_model, qtbot):
    window = make_window(fast_settings(tts_model))
    _activate(window, qtbot)
    window.choose_model_files()
    assert window.pages.currentIndex() == WELCOME_PAGE and window.welcome.back_button.isVisible()
    window.welcome.back_button.click()
    assert window.pages.currentIndex() == STUDIO_PAGE and window.settings.model_path == str(tts_model)
    window.choose_model_files()
    qtbot.keyClick(window.welcome, Qt.Key.Key_Escape)
    assert window.pages.currentIndex() == STUDIO_PAGE


def test_first_run_has_no_back_button(make_window, fast_settings, qtbot):
    window = make_window(fast_settings(""))
    _activate(window, qtbot)
    assert window.pages.currentIndex() == WELCOME_PAGE and not window.welcome.back_button.isVisible()
    qtbot.keyClick(window.welcome, Qt.Key.Key_Escape)
    assert window.pages.currentIndex() == WELCOME_PAGE  # nowhere to go back to yet


def _rect_in(widget, window) -> QRect:
    return QRect(widget.mapTo(window, QPoint(0, 0)), widget.size())


def test_nothing_overlaps_at_the_minimum_size(make_window, fast_settings, tts_model, qtbot):
    window = make_window(fast_settings(tts_model))  # no PortAudio: the panel shows a long wrapped note
    window.resize(window.minimumSizeHint())
    QApplication.processEvents()
    panel = window.voice_panel
    note, wave, play = panel.audio_note, panel.waveform, panel.play_button
    assert note.isVisible() and note.height() >= note.heightForWidth(note.width())  # every line shown
    assert _rect_in(note, window).bottom() < _rect_in(wave, window).top()
    assert _rect_in(wave, window).bottom() < _rect_in(play, window).top()
    assert _rect_in(play, window).bottom() < _rect_in(panel.transcript, window).top()
    tags = [_rect_in(b, window) for b in window.editor.tag_buttons.values()]
    assert max(r.bottom() for r in tags) < _rect_in(window.editor.edit, window).top()  # wrapped tags fit


SCALED_WINDOW = """
import os, sys
os.environ['QT_QPA_PLATFORM'] = 'offscreen'
os.environ['QT_SCALE_FACTOR'] = '2'
from PySide6.QtWidgets import QApplication
app = QApplication([])
from s2studio.app.main_window import MainWindow
from s2studio.app.settings import AppSettings
from s2studio.app.worker import WorkerThread
host = WorkerThread(sys.argv[1])
w = MainWindow(AppSettings(model_path=sys.argv[2]), host.worker)
w.show()
app.processEvents()
room = w.screen().availableGeometry()
print(room.width(), room.height(), w.width(), w.height(), w.minimumSizeHint().width(),
      w.minimumSizeHint().height(), w.frameGeometry().left(), w.frameGeometry().top())
host.shutdown()
"""


def test_window_fits_the_screen_at_200_percent(tmp_path, tts_model):
    # the offscreen screen is 800x800 pixels: 400x400 logical pixels at QT_SCALE_FACTOR=2
    out = subprocess.run([sys.executable, "-c", SCALED_WINDOW, str(tmp_path / "voices"), str(tts_model)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    room_w, room_h, w, h, min_w, min_h, left, top = map(int, out.stdout.split())
    assert (room_w, room_h) == (400, 400)
    assert w <= room_w and h <= room_h and left >= 0 and top >= 0
    assert min_w <= room_w and min_h <= room_h  # it can shrink to fit, too
