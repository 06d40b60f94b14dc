"""The real window, the real worker and a real tiny GGUF model (offscreen)."""

from __future__ import annotations

import time

import numpy as np
import soundfile as sf

from PySide6.QtCore import Qt

from s2studio.app.heartbeat import EventLoopHeartbeat
from tests.app.drag_and_drop import drop_file
from s2studio.app.main_window import STUDIO_PAGE, WELCOME_PAGE


def test_window_appears_without_importing_torch(make_window):
    import subprocess
    import sys

    code = ("import os, sys; os.environ['QT_QPA_PLATFORM']='offscreen'\n"
            "from PySide6.QtWidgets import QApplication; app = QApplication([])\n"
            "from s2studio.app.main_window import MainWindow\n"
            "from s2studio.app.worker import WorkerThread\n"
            "from s2studio.app.settings import AppSettings\n"
            "h = WorkerThread('voices'); w = MainWindow(AppSettings(), h.worker); w.show(); app.processEvents()\n"
            "print('torch' in sys.modules); h.shutdown()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_first_run_shows_welcome_then_studio(make_window, tts_model, fast_settings):
    window = make_window(fast_settings(""))
    assert window.pages.currentIndex() == WELCOME_PAGE
    window.welcome.ask_open_path = lambda *a: str(tts_model)
    window.welcome.choose_model_button.click()
    assert window.welcome.continue_button.isEnabled()  # tokenizer.json found beside the model
    window.welcome.continue_button.click()
    assert window.pages.currentIndex() == STUDIO_PAGE
    assert window.settings.model_path == str(tts_model)


def test_drop_wav_shows_reference_with_transcript(make_window, tts_model, tmp_path, fast_settings):
    window = make_window(fast_settings(tts_model))
    clip = tmp_path / "alice.wav"
    sf.write(clip, np.sin(np.linspace(0, 800, 44100 * 2)).astype(np.float32) * 0.5, 44100)
    clip.with_suffix(".lab").write_text("Hello there, this is Alice.", encoding="utf-8")
    drop_file(window.editor.edit.viewport(), clip)  # even on the text editor: it must not paste the path
    panel = window.voice_panel
    assert panel.reference is not None and len(panel.reference) == 88200
    assert panel.waveform.drawn_columns > 0
    assert panel.transcript.toPlainText() == "Hello there, this is Alice."
    assert window.editor.text() == ""
    assert panel.current_choice().kind == "reference"
    # a selected region is what is kept
    panel.waveform.set_selection((44100 // 2, 44100))
    assert len(panel.current_choice().samples) == 44100 // 2


def test_dropping_a_bad_file_shows_the_reason(make_window, tts_model, tmp_path, fast_settings):
    window = make_window(fast_settings(tts_model))
    bad = tmp_path / "broken.wav"
    bad.write_bytes(b"RIFF....not audio")
    window.open_reference(bad)
    assert window.error_banner.isVisible()
    assert "broken.wav" in window.error_banner.text


def test_generate_streams_chunks_and_export_writes_wav(make_window, tts_model, qtbot, tmp_path, fast_settings):
    window = make_window(fast_settings(tts_model))
    window.editor.set_text("Hello world, this is a tiny test.")
    columns = []  # drawn waveform columns after each chunk reached the window (UI thread)
    append = window.output.append_live
    window.output.append_live = lambda samples, rate: (append(samples, rate),
                                                       columns.append(window.output.waveform.drawn_columns))
    beat = EventLoopHeartbeat()
    beat.start()
    with qtbot.waitSignal(window.worker.finished, timeout=60_000):
        window.generate_bar.button.click()
        assert window.generate_bar.button.text() == "Stop"
    beat.stop()
    qtbot.waitUntil(lambda: not window.generating, timeout=5000)
    assert len(columns) >= 2
    assert columns == sorted(columns) and columns[-1] > columns[0] > 0  # it grew as audio arrived
    assert window.output.current is not None and window.output.history.count() == 1
    assert "frames" in window.generate_bar.stats.text() and "real-time factor" in window.generate_bar.stats.text()
    assert beat.worst_gap < 0.5, f"the UI thread stalled for {beat.worst_gap:.2f} s during load/generation"
    target = tmp_path / "take.wav"
    window.output.ask_save_path = lambda suggestion: str(target)
    window.output.export_button.click()
    data, rate = sf.read(target, dtype="float32")
    assert rate == 44100 and len(data) == len(window.output.current.audio) > 0
    assert np.allclose(data, window.output.current.audio)
    assert not list(tmp_path.glob(".take.wav.*"))  # no temp file left behind


def test_stop_cancels_within_a_second(make_window, tts_model, qtbot, fast_settings):
    # seed 1 runs this text to at least 40 frames on the tiny model (seed 7 ends it early)
    window = make_window(fast_settings(tts_model, max_new_tokens=400, seed=1))
    window.editor.set_text("A long sentence that would take a while to speak on this machine.")
    arrivals = []
    append = window.output.append_live
    window.output.append_live = lambda samples, rate: (append(samples, rate), arrivals.append(time.perf_counter()))
    window.generate()
    # past the first chunks (torch's one-time warm-up is slow), stop mid-take
    qtbot.waitUntil(lambda: len(arrivals) >= 3 or not window.generating, timeout=60_000)
    assert window.generating, "the take ended before it could be stopped"
    chunk_interval = arrivals[-1] - arrivals[-2]  # 4 frames + their decode, on this machine right now
    t0 = time.perf_counter()
    with qtbot.waitSignal(window.worker.cancelled, timeout=5000):
        window.stop()
    waited = time.perf_counter() - t0
    # The engine stops at the next frame boundary and still decodes the frames it holds, so the
    # worst case is about one chunk of work. On an idle machine that is far below 1 s; on a
    # machine busy with other jobs a chunk alone can take longer, hence the allowance. A Stop
    # that was ignored would run the remaining ~390 frames and fail either bound.
    assert waited < max(1.0, 1.5 * chunk_interval), (waited, chunk_interval)
    qtbot.waitUntil(lambda: not window.generating, timeout=2000)
    assert not window.generating and window.generate_bar.button.text() == "Generate"
    # what was made until Stop is kept as a take: in the history, marked, playable and exportable
    qtbot.waitUntil(lambda: window.output.history.count() == 1, timeout=2000)
    take = window.output.current
    assert take is not None and take.stopped and len(take.audio) > 0
    assert "(stopped)" in window.output.history.item(0).text()
    assert window.output.export_button.isEnabled()
    assert window.output.waveform.sample_count == len(take.audio)


def test_esc_shortcut_stops_and_ctrl_enter_generates(make_window, tts_model, qtbot, fast_settings):
    window = make_window(fast_settings(tts_model, max_new_tokens=400))
    window.editor.set_text("Shortcut test sentence.")
    window.activateWindow()
    window.editor.edit.setFocus()
    qtbot.waitUntil(lambda: window.isActiveWindow(), timeout=2000)  # shortcuts fire in the active window
    with qtbot.waitSignal(window.worker.chunk, timeout=30_000):
        qtbot.keyClick(window.editor.edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    with qtbot.waitSignal(window.worker.cancelled, timeout=3000):
        qtbot.keyClick(window.editor.edit, Qt.Key.Key_Escape)


def test_corrupt_model_shows_clear_error_and_app_stays_usable(make_window, tts_model, tmp_path, qtbot, fast_settings):
    bad = tmp_path / "corrupt.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 64)
    window = make_window(fast_settings(bad))
    window.editor.set_text("Hello.")
    with qtbot.waitSignal(window.worker.failed, timeout=30_000):
        window.generate()
    # the worker's signal can beat the window's queued slot: wait for what the user sees
    qtbot.waitUntil(window.error_banner.isVisible, timeout=2000)
    assert "corrupt.gguf" in window.error_banner.text
    assert window.error_banner.error.expected and window.error_banner.error.details
    assert not window.generating and window.generate_bar.button.isEnabled()
    # fix the settings: the same window now generates
    s = window.settings.copy()
    s.model_path = str(tts_model)
    window.apply_settings(s)
    with qtbot.waitSignal(window.worker.finished, timeout=60_000):
        window.generate()
    qtbot.waitUntil(lambda: window.output.history.count() == 1, timeout=2000)
    assert not window.error_banner.isVisible()


def test_unexpected_error_has_details_and_log_location(make_window, tts_model, qtbot, monkeypatch, fast_settings):
    window = make_window(fast_settings(tts_model))
    window.editor.set_text("Hello.")

    def boom(self, request):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(type(window.worker), "_generate", boom)
    with qtbot.waitSignal(window.worker.failed, timeout=10_000):
        window.generate()
    qtbot.waitUntil(window.error_banner.isVisible, timeout=2000)
    error = window.error_banner.error
    assert error.message.startswith("Unexpected error") and not error.expected
    assert "simulated bug" in error.details and "Traceback" in error.details
    assert error.log_file.endswith("s2studio.log")
    assert window.error_banner.details_button.isVisible()
