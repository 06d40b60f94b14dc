"""An error banner belongs to its cause and goes when that cause goes (and only then)."""

from __future__ import annotations

import numpy as np
import soundfile as sf

from s2studio.app.widgets import voice_panel as vp

RATE = 44100


def write_clip(path, seconds: float):
    t = np.arange(int(seconds * RATE)) / RATE
    sf.write(path, (0.4 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), RATE)
    return path


def test_a_too_long_clip_banner_goes_when_a_good_clip_is_opened(make_window, fast_settings, tts_model, tmp_path,
                                                                monkeypatch):
    # over 60 s a clip opens for trimming; only past the trim limit is it refused
    monkeypatch.setattr(vp, "MAX_TRIM_SOURCE_SECONDS", 65.0)
    window = make_window(fast_settings(tts_model))
    panel = window.voice_panel
    clips = iter([write_clip(tmp_path / "seventy.wav", 70.0), write_clip(tmp_path / "good.wav", 3.0)])
    panel.ask_open_path = lambda: str(next(clips))
    panel.open_button.click()  # File ▸ Open… goes through the same panel method
    assert window.error_banner.isVisible() and "seventy.wav" in window.error_banner.text
    panel.open_button.click()
    assert panel.reference is not None
    assert not window.error_banner.isVisible()


def test_a_missing_transcript_banner_goes_when_a_saved_voice_is_chosen(make_window, fast_settings, tts_model,
                                                                      tmp_path):
    window = make_window(fast_settings(tts_model))
    window.library.save(None, np.zeros((10, 20), np.int32), "A saved transcript.", name="Saved")
    panel = window.voice_panel
    panel.reload_voices()
    assert panel.load_reference_file(write_clip(tmp_path / "clip.wav", 3.0))
    window.editor.set_text("Hello.")
    window.generate()  # the unsaved reference has no transcript
    assert window.error_banner.isVisible() and "transcript" in window.error_banner.text
    assert not window.generating
    panel.select_voice(panel.voice_ids()[0])
    assert not window.error_banner.isVisible()
    # and typing the transcript is the other way the cause goes
    panel.select_voice(vp.UNSAVED_REFERENCE)
    panel.save_button.click()
    assert window.error_banner.isVisible() and "transcript" in window.error_banner.text
    panel.transcript.setPlainText("What is said.")
    assert not window.error_banner.isVisible()


def test_a_bad_model_banner_goes_when_a_good_model_is_chosen(make_window, fast_settings, tts_model, tmp_path,
                                                            qtbot):
    bad = tmp_path / "corrupt.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 64)
    window = make_window(fast_settings(bad))
    window.editor.set_text("Hello.")
    with qtbot.waitSignal(window.worker.failed, timeout=30_000):
        window.load_model_now()
    qtbot.waitUntil(window.error_banner.isVisible, timeout=2000)
    assert "corrupt.gguf" in window.error_banner.text
    unrelated = window.settings.copy()
    unrelated.pause_ms += 10  # not an engine setting: the model is still the bad one
    window.apply_settings(unrelated)
    assert window.error_banner.isVisible()
    good = window.settings.copy()
    good.model_path = str(tts_model)
    window.apply_settings(good)
    assert not window.error_banner.isVisible()


def test_fixing_one_cause_leaves_another_causes_banner(make_window, fast_settings, tts_model, tmp_path, monkeypatch):
    monkeypatch.setattr(vp, "MAX_TRIM_SOURCE_SECONDS", 65.0)  # a 70 s clip is refused, not opened for trimming
    window = make_window(fast_settings(tts_model))
    window.voice_panel.ask_open_path = lambda: str(write_clip(tmp_path / "seventy.wav", 70.0))
    window.voice_panel.choose_file()
    assert window.error_banner.isVisible()
    s = window.settings.copy()
    s.model_path = str(tmp_path / "other.gguf")
    window.apply_settings(s)  # an engine change says nothing about the clip
    window.editor.set_text("Typed.")
    assert window.error_banner.isVisible() and "seventy.wav" in window.error_banner.text


def test_a_voice_folder_problem_goes_after_the_next_successful_change(make_window, fast_settings, tts_model):
    window = make_window(fast_settings(tts_model))
    gone = window.library.save(None, np.zeros((10, 20), np.int32), "One.", name="Gone")
    kept = window.library.save(None, np.zeros((10, 20), np.int32), "Two.", name="Kept")
    panel = window.voice_panel
    panel.reload_voices()
    window.library.path_for(gone.id).unlink()  # removed behind the app's back
    panel.ask_text = lambda *a: "New name"
    panel.select_voice(gone.id)
    panel.rename_selected()
    assert window.error_banner.isVisible()
    panel.select_voice(kept.id)
    panel.rename_selected()
    assert window.library.get(kept.id).info.name == "New name"
    assert not window.error_banner.isVisible()
