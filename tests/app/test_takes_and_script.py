"""The history of takes (what the statistics line describes) and the script's character count."""

from __future__ import annotations

import numpy as np
from PySide6.QtWidgets import QApplication

from s2studio.app.widgets.output_panel import Take


def _take(text, seconds, stats):
    return Take(text=text, voice="model's own voice", seed=1, params="temp 0.8", sample_rate=44100,
                audio=np.full(int(seconds * 44100), 0.1, np.float32), stats=stats)


def test_selecting_an_older_take_shows_its_own_statistics(make_window, fast_settings, tts_model, qtbot):
    window = make_window(fast_settings(tts_model))
    window.editor.set_text("Hello world.")
    min_width = window.studio_page.minimumSizeHint().width()
    with qtbot.waitSignal(window.worker.finished, timeout=60_000):
        window.generate()
    qtbot.waitUntil(lambda: window.output.history.count() == 1, timeout=2000)
    first = window.output.current
    assert first.stats.startswith("Segment 1/1") and window.generate_bar.stats.text() == first.stats
    QApplication.processEvents()  # the layouts settle
    assert window.studio_page.minimumSizeHint().width() == min_width  # a long statistics line does not widen the window
    newest = _take("Two sentences. Here.", 2.0, "Segment 2/2 · 43 frames · 2.0 s of audio · real-time factor 0.50")
    window.output.end_live(newest)
    assert window.generate_bar.stats.text() == newest.stats
    window.output.history.setCurrentRow(0)  # a click on the older take
    assert window.output.current is first and window.output.waveform.sample_count == len(first.audio)
    assert window.generate_bar.stats.text() == first.stats and "2/2" not in window.generate_bar.stats.text()
    window.output.history.setCurrentRow(1)
    assert window.generate_bar.stats.text() == newest.stats


def test_character_count_ignores_surplus_whitespace(qtbot):
    from s2studio.app.widgets.script_editor import ScriptEditor

    editor = ScriptEditor()
    qtbot.addWidget(editor)
    editor.set_text("  Hello   world.\n\n\t ")
    assert editor.stats.text().startswith("12 characters")
    from s2studio.app.widgets.script_editor import character_count

    assert character_count("Hello world.") == character_count(" Hello \n world. ") == 12
    assert character_count(" \n\t ") == 0
