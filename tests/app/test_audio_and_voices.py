"""Sound card present (fake) or absent; recording; saving, renaming and deleting voices."""

from __future__ import annotations

import shutil

import numpy as np
import soundfile as sf


def test_no_audio_device_mode_disables_play_and_record_with_a_reason(make_window, fast_settings, tts_model):
    window = make_window(fast_settings(tts_model))
    panel = window.voice_panel
    assert not window.audio.status.can_play and not window.audio.status.can_record
    assert not panel.record_button.isEnabled() and not panel.play_button.isEnabled()
    assert panel.audio_note.isVisible() and "PortAudio" in panel.audio_note.text()
    assert not window.output.play_button.isEnabled()
    window.output.toggle_play()  # harmless no-op


def test_live_playback_plays_chunks_as_they_arrive(fake_sd, make_window, fast_settings, tts_model, qtbot):
    window = make_window(fast_settings(tts_model, max_new_tokens=16))
    assert window.audio.status.can_play and window.audio.status.can_record
    window.editor.set_text("Hello there.")
    with qtbot.waitSignal(window.worker.chunk, timeout=60_000):
        window.generate()
    qtbot.waitUntil(lambda: window.audio.playing_owner == "output", timeout=5000)
    qtbot.waitUntil(lambda: not window.generating, timeout=60_000)
    # the live stream keeps playing what is buffered, then stops by itself
    qtbot.waitUntil(lambda: window.audio.playing_owner == "", timeout=15_000)
    played = np.concatenate(fake_sd.played)
    take = window.output.current.audio
    assert np.abs(played).max() > 0
    assert np.count_nonzero(played) >= 0.9 * np.count_nonzero(take)  # every sample made it out
    # replay of the finished take from the history
    fake_sd.played.clear()
    window.output.show_take(window.output.current, play=True)
    qtbot.waitUntil(lambda: window.audio.playing_owner == "", timeout=15_000)
    assert sum(len(b) for b in fake_sd.played) >= len(take)


def test_recording_shows_the_take_at_once(fake_sd, make_window, fast_settings, tts_model, qtbot):
    window = make_window(fast_settings(tts_model))
    panel = window.voice_panel
    panel.record_button.click()
    assert window.audio.recording
    qtbot.waitUntil(lambda: panel.level_meter.level > 0.3, timeout=3000)  # the fake mic plays a 0.4 sine
    qtbot.waitUntil(lambda: float(panel.elapsed_label.text().split()[0]) >= 0.5, timeout=5000)
    panel.record_button.click()
    assert not window.audio.recording
    assert panel.reference is not None and panel.waveform.drawn_columns > 0
    assert abs(len(panel.reference) / 44100 - float(panel.elapsed_label.text().split()[0])) < 0.2
    assert panel.current_choice().kind == "reference"  # recorded at 48 kHz, kept at 44.1 kHz


def test_save_voice_encodes_in_the_worker_then_rename_and_delete(make_window, fast_settings, clone_dir, tmp_path,
                                                                qtbot):
    folder = tmp_path / "clone"
    folder.mkdir()
    for name in ("model.gguf", "tokenizer.json"):
        shutil.copy(clone_dir / name, folder / name)
    window = make_window(fast_settings(folder / "model.gguf"))
    panel = window.voice_panel
    assert panel.load_reference_file(clone_dir / "reference.wav")
    panel.transcript.setPlainText("The quick brown fox jumps over the lazy dog.")
    panel.name_edit.setText("Fox Reader")
    with qtbot.waitSignal(window.worker.voice_saved, timeout=60_000):
        panel.save_button.click()
    qtbot.waitUntil(lambda: "fox-reader" in panel.voice_ids() or "Fox-Reader" in panel.voice_ids(), timeout=3000)
    voice_id = panel.voice_ids()[0]
    assert panel.current_choice().voice_id == voice_id
    info = window.library.get(voice_id).info
    assert info.name == "Fox Reader" and info.transcript.startswith("The quick brown fox")
    assert info.reference_audio is not None and sf.info(str(info.reference_audio)).samplerate == 44100
    panel.ask_text = lambda *a: "Renamed"
    panel.rename_selected()
    assert window.library.get(voice_id).info.name == "Renamed"
    panel.confirm = lambda question: True
    panel.delete_selected()
    assert panel.voice_ids() == [] and not window.library.list()


def test_save_voice_without_transcript_is_refused(make_window, fast_settings, tts_model, clone_dir):
    window = make_window(fast_settings(tts_model))
    window.voice_panel.load_reference_file(clone_dir / "reference.wav")
    window.voice_panel.transcript.setPlainText("")
    window.voice_panel.save_button.click()
    assert window.error_banner.isVisible() and "transcript" in window.error_banner.text
