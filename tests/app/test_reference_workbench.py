"""The reference workbench in the real voice panel (offscreen): "Find the best part" selects the
clean part of a long clip off the UI thread and marks the transcript for review; the part kept
is checked (clipping, noise floor, loudness) and saved levelled to the stated target."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import soundfile as sf

from s2studio.audio import loudness, reference_check as rc

RATE = 44100


@pytest.fixture
def long_clip_file(tmp_path, long_reference_clip):
    path = tmp_path / "interview.wav"
    sf.write(path, long_reference_clip.samples, RATE, subtype="FLOAT")
    path.with_suffix(".txt").write_text("What the whole interview says.", encoding="utf-8")
    return path


def _window_with_clip(make_window, fast_settings, clone_dir, tmp_path, clip_file):
    folder = tmp_path / "clone"
    folder.mkdir()
    for name in ("model.gguf", "tokenizer.json"):
        shutil.copy(clone_dir / name, folder / name)
    window = make_window(fast_settings(folder / "model.gguf"))
    panel = window.voice_panel
    assert panel.load_reference_file(clip_file)
    return window, panel


def test_find_the_best_part_selects_the_clean_speech_and_marks_the_transcript(
        make_window, fast_settings, clone_dir, tmp_path, qtbot, long_clip_file, long_reference_clip):
    window, panel = _window_with_clip(make_window, fast_settings, clone_dir, tmp_path, long_clip_file)
    bench = panel.workbench
    # over 60 s: the first 60 s are selected on opening (marked); the transcript is then edited for them
    assert panel.waveform.selection == (0, 60 * RATE) and panel.transcript_needs_review
    panel.transcript.setPlainText("What the first minute says.")
    assert not panel.transcript_needs_review and bench.find_button.isEnabled()
    qtbot.mouseClick(bench.find_button, qtbot_left())
    assert not bench.find_button.isEnabled() and "Finding" in bench.find_button.text()  # working, UI free
    qtbot.waitUntil(lambda: bench.find_button.isEnabled(), timeout=120_000)
    proposal = bench.last_proposal
    assert proposal is not None and panel.waveform.selection == (proposal.start, proposal.end)
    clean_start, clean_end = long_reference_clip.parts["clean"]
    assert clean_start - rc.EDGE_PAD_S - 0.05 <= proposal.start / RATE and proposal.end / RATE <= clean_end + 0.05
    assert rc.MIN_WINDOW_S <= (proposal.end - proposal.start) / RATE <= rc.MAX_WINDOW_S
    assert bench.proposal_label.isVisible() and f"Proposed {proposal.start / RATE:.1f}" in bench.proposal_label.text()
    # the kept part changed: the whole clip's transcript must be checked
    assert panel.transcript_needs_review and panel.review_label.isVisible()
    assert f"Keeping {(proposal.end - proposal.start) / RATE:.1f} s" in panel.region_label.text()
    # the proposal is only a selection: the user can still move it, and editing clears the mark
    panel.waveform.set_selection((proposal.start + RATE // 2, proposal.end))
    assert panel.waveform.selection[0] == proposal.start + RATE // 2
    panel.transcript.setPlainText("What the kept part says.")
    assert not panel.transcript_needs_review
    qtbot.waitUntil(lambda: bench.last_check is not None and bench.level_label.isVisible(), timeout=10_000)
    assert bench.last_check.clipped_samples == 0 and not bench.warning_label.isVisible()


def test_the_part_kept_shows_clipping_and_noise_with_numbers(
        make_window, fast_settings, clone_dir, tmp_path, qtbot, long_clip_file, long_reference_clip):
    window, panel = _window_with_clip(make_window, fast_settings, clone_dir, tmp_path, long_clip_file)
    bench = panel.workbench
    a, b = long_reference_clip.parts["clipped"]
    panel.waveform.set_selection((int(a * RATE), int(b * RATE)))
    qtbot.waitUntil(lambda: bench.last_check is not None and bench.last_check.duration_s == pytest.approx(b - a, abs=0.01),
                    timeout=10_000)
    expected = np.count_nonzero(np.abs(long_reference_clip.samples[int(a * RATE):int(b * RATE)]) >= rc.CLIP_LEVEL)
    assert bench.warning_label.isVisible()
    assert f"{expected} clipped samples, the first at" in bench.warning_label.text()
    a, b = long_reference_clip.parts["noisy"]
    panel.waveform.set_selection((int(a * RATE), int(b * RATE)))
    qtbot.waitUntil(lambda: "Noise floor" in bench.warning_label.text(), timeout=10_000)
    assert "Noise floor -2" in bench.warning_label.text() and "quieter room" in bench.warning_label.text()
    assert "clipped" not in bench.warning_label.text()
    assert "LUFS" in bench.level_label.text() and "saved levelled to -20 LUFS" in bench.level_label.text()


def test_the_saved_reference_is_levelled_to_the_target(
        make_window, fast_settings, clone_dir, tmp_path, qtbot, long_reference_clip):
    quiet = tmp_path / "quiet.wav"
    a, b = long_reference_clip.parts["clean"]
    part = long_reference_clip.samples[int(a * RATE):int((a + 6) * RATE)] * 0.1  # about -38 LUFS
    sf.write(quiet, part, RATE, subtype="FLOAT")
    window, panel = _window_with_clip(make_window, fast_settings, clone_dir, tmp_path, quiet)
    panel.transcript.setPlainText("Hello, hello, hello.")
    qtbot.waitUntil(lambda: "raised by" in panel.workbench.level_label.text(), timeout=10_000)
    with qtbot.waitSignal(panel.save_requested, timeout=10_000) as saved:
        with qtbot.waitSignal(window.worker.voice_saved, timeout=120_000):
            panel.save_button.click()
    region = saved.args[0]
    assert loudness.integrated_lufs(part, RATE) < -30
    assert loudness.integrated_lufs(region, RATE) == pytest.approx(rc.REFERENCE_TARGET_LUFS, abs=0.3)
    assert len(region) == len(part)


def qtbot_left():
    from PySide6.QtCore import Qt

    return Qt.MouseButton.LeftButton


def test_a_new_clip_stops_the_search_of_the_previous_one(
        make_window, fast_settings, clone_dir, tmp_path, qtbot, long_clip_file):
    window, panel = _window_with_clip(make_window, fast_settings, clone_dir, tmp_path, long_clip_file)
    bench = panel.workbench
    bench.find_best_part()
    qtbot.waitUntil(lambda: "%" in bench.find_button.text(), timeout=60_000)  # progress is shown
    short = tmp_path / "short.wav"
    sf.write(short, np.zeros(3 * RATE, np.float32) + 0.01, RATE)
    assert panel.load_reference_file(short)
    assert bench.find_button.text() == "Find the best part" and bench.find_button.isEnabled()
    assert bench.wait_idle(30_000)
    qtbot.wait(50)
    assert bench.last_proposal is None and panel.waveform.selection is None  # nothing from the old clip
