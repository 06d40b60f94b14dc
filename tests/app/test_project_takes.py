"""The takes model with the real window and worker on the tiny model: takes survive a restart,
sentences regenerate alone (the others sample-identical), locks, versions and A/B, project
files (and damaged ones), play-from-a-sentence with the spoken sentence highlighted, the
progress line's times, the window's layout restored, and quitting during a take."""

from __future__ import annotations

import numpy as np
import pytest

from s2studio.app import take_model
from s2studio.app.project_file import load_project_file

SCRIPT = "One here. Two there. Three now."


def _generate(window, qtbot, text=SCRIPT):
    window.editor.set_text(text)
    with qtbot.waitSignal(window.worker.finished, timeout=60_000) as blocker:
        window.generate()
    qtbot.waitUntil(lambda: not window.generating, timeout=5000)
    return blocker.args[0]


def _slices(take, audio):
    return [audio[a:b] for a, b in take.spans()]


@pytest.fixture
def seeds(monkeypatch):
    """Regenerations draw fixed seeds, so the tiny model's output is the same every run."""
    drawn = iter(range(1000, 2000))
    monkeypatch.setattr(take_model, "new_seed", lambda: next(drawn))


def _three_sentences(make_window, fast_settings, tts_model, **overrides):
    return make_window(fast_settings(tts_model, segmentation_enabled=True, pause_ms=60, **overrides))


def test_takes_and_script_survive_a_restart(make_window, fast_settings, tts_model, qtbot, isolated_dirs):
    window = _three_sentences(make_window, fast_settings, tts_model)
    finished = _generate(window, qtbot)
    shown = window.output.current
    # The take is assembled from its sentences exactly as the pipeline joined them.
    np.testing.assert_array_equal(shown.audio, finished.result.audio)
    take = window.segments_view.take
    assert [s.text for s in take.sentences] == ["One here.", "Two there.", "Three now."]
    window.editor.set_text(SCRIPT + " Unsaid yet.")
    window.close()
    assert (isolated_dirs / "projects" / "autosave" / "project.json").is_file()

    again = make_window(fast_settings(tts_model, segmentation_enabled=True, pause_ms=60))
    assert again.editor.text() == SCRIPT + " Unsaid yet."
    assert again.output.history.count() == 1
    restored = again.output.current
    assert restored is not None and restored.seed == shown.seed and restored.text == SCRIPT
    np.testing.assert_array_equal(restored.audio, shown.audio)  # float WAV: sample-identical
    assert [s.text for s in again.segments_view.take.sentences] == ["One here.", "Two there.", "Three now."]
    assert again.segments_view.table.rowCount() == 3


def test_regenerating_one_sentence_leaves_the_others_sample_identical(make_window, fast_settings, tts_model,
                                                                     qtbot, seeds):
    window = _three_sentences(make_window, fast_settings, tts_model)
    _generate(window, qtbot)
    take = window.segments_view.take
    before = _slices(take, window.output.current.audio)
    old_seed = take.sentences[1].current.seed
    window.segments_view.table.selectRow(1)
    assert window.segments_view.regenerate_button.isEnabled()
    with qtbot.waitSignal(window.worker.finished, timeout=60_000) as blocker:
        window.segments_view.regenerate_button.click()
    assert blocker.args[0].request.only_segments == (1,)
    qtbot.waitUntil(lambda: not window.generating, timeout=5000)
    assert window.output.history.count() == 1  # the same take, re-assembled
    s1 = take.sentences[1]
    assert len(s1.versions) == 2 and s1.chosen == 1 and s1.current.seed == 1000 != old_seed
    after = _slices(take, window.output.current.audio)
    np.testing.assert_array_equal(after[0], before[0])
    np.testing.assert_array_equal(after[2], before[2])
    assert len(take.sentences[0].versions) == len(take.sentences[2].versions) == 1
    assert window.segments_view.table.item(1, 2).text().startswith("2 of 2 · ")
    assert window.segments_view.table.item(1, 2).toolTip() == "seed 1000"


def test_locked_sentences_keep_their_audio_and_versions_can_be_compared_and_picked(
        make_window, fast_settings, tts_model, qtbot, seeds):
    window = _three_sentences(make_window, fast_settings, tts_model)
    _generate(window, qtbot)
    view, take = window.segments_view, window.segments_view.take
    original = window.output.current.audio
    view.table.item(0, 3).setCheckState(view.table.item(0, 3).checkState().__class__.Checked)
    assert take.sentences[0].locked
    view.table.selectRow(0)
    assert not view.regenerate_button.isEnabled()  # a locked sentence is not regenerated
    with qtbot.waitSignal(window.worker.finished, timeout=60_000) as blocker:
        view.unlocked_button.click()
    assert blocker.args[0].request.only_segments == (1, 2)
    qtbot.waitUntil(lambda: not window.generating, timeout=5000)
    assert [len(s.versions) for s in take.sentences] == [1, 2, 2]

    view.table.selectRow(2)
    view.compare_button.click()
    dialog = window.takes.compare_dialog
    assert dialog is not None and dialog.isVisible()
    assert dialog.choosers["A"].currentIndex() == 0 and dialog.choosers["B"].currentIndex() == 1
    dialog.keep_buttons["A"].click()  # the first version of sentence 3 wins
    assert take.sentences[2].chosen == 0 and not dialog.isVisible()
    view.table.selectRow(1)
    view.previous_button.click()  # and sentence 2 steps back to its first version too
    assert take.sentences[1].chosen == 0
    np.testing.assert_array_equal(window.output.current.audio, original)


def test_two_takes_compared_and_one_kept_and_its_seed_reused(make_window, fast_settings, tts_model, qtbot):
    window = make_window(fast_settings(tts_model, seed_locked=False))
    _generate(window, qtbot, "Hello there.")
    _generate(window, qtbot, "Hello again.")
    first, second = window.output.takes
    dialog = window.takes.compare_takes()
    assert dialog.choosers["A"].currentIndex() == 0 and dialog.choosers["B"].currentIndex() == 1
    dialog.keep_buttons["A"].click()
    assert window.output.current is first and window.segments_view.take.id == first.key
    window.segments_view.seed_button.click()
    assert window.settings.seed == first.seed and window.settings.seed_locked


def test_project_file_round_trip_and_a_damaged_file_is_a_banner(make_window, fast_settings, tts_model, qtbot,
                                                                 tmp_path):
    window = _three_sentences(make_window, fast_settings, tts_model)
    _generate(window, qtbot)
    path = tmp_path / "episode.s2project"
    window.takes.ask_project_path = lambda save: str(tmp_path / "episode")  # the suffix is added
    with qtbot.waitSignal(window.takes.saved, timeout=20_000):
        window.takes.save_project()
    assert load_project_file(path).takes[0].base_seed == window.output.current.seed

    damaged = tmp_path / "damaged.s2project"
    damaged.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    window.takes.ask_project_path = lambda save: str(damaged)
    window.takes.open_project()
    assert window.error_banner.isVisible() and "damaged.s2project" in window.error_banner.text
    assert window.output.history.count() == 1  # nothing on screen was lost
    assert damaged.stat().st_size == path.stat().st_size // 2  # and the file is left as it was

    window.output.clear_takes()
    window.takes.ask_project_path = lambda save: str(path)
    window.takes.open_project()
    assert not window.error_banner.isVisible()
    assert window.output.history.count() == 1 and window.segments_view.table.rowCount() == 3


def test_a_damaged_autosave_is_kept_aside_and_reported(make_window, fast_settings, tts_model, isolated_dirs):
    folder = isolated_dirs / "projects" / "autosave"
    folder.mkdir(parents=True)
    (folder / "project.json").write_text('{"format": "s2studio-project", "version": 1, "takes": [{"id": 3}]}')
    window = make_window(fast_settings(tts_model))
    assert window.error_banner.isVisible() and "autosaved project could not be read" in window.error_banner.text
    kept = [p for p in (isolated_dirs / "projects").iterdir() if p.name.startswith("autosave.damaged-")]
    assert len(kept) == 1 and (kept[0] / "project.json").read_text().endswith('[{"id": 3}]}')


def test_play_from_a_sentence_highlights_the_sentence_being_spoken(make_window, fast_settings, tts_model, qtbot,
                                                                   fake_sd):
    window = _three_sentences(make_window, fast_settings, tts_model, max_new_tokens=12)
    _generate(window, qtbot)
    qtbot.waitUntil(lambda: window.audio.playing_owner == "", timeout=10_000)  # the live playback ends
    view, take = window.segments_view, window.segments_view.take
    view.table.selectRow(1)
    view.play_button.click()
    assert window.audio.playing_owner == "output" and view.spoken == 1
    qtbot.waitUntil(lambda: view.spoken == 2, timeout=10_000)  # playback moves on to the next sentence
    assert view.table.item(2, 1).font().bold() and not view.table.item(1, 1).font().bold()
    qtbot.waitUntil(lambda: view.spoken is None, timeout=10_000)  # and the highlight goes at the end
    start = take.spans()[1][0]
    played = np.concatenate(fake_sd.played[-200:])
    assert len(played) and start > 0


def test_progress_tells_elapsed_time_and_time_left(make_window, fast_settings, tts_model, qtbot):
    window = _three_sentences(make_window, fast_settings, tts_model)
    seen = []
    window.worker.progress.connect(lambda p: seen.append((window.generate_bar.progress.format(),
                                                           window.generate_bar.stats.text())))
    _generate(window, qtbot)
    assert seen
    bar_format, stats = seen[-1]
    assert "%" in bar_format and "Segment" in bar_format and "left" in bar_format
    assert "elapsed" in stats and "left" in stats and "ms/frame" in stats


def test_eta_corrects_its_estimate_with_the_measured_frames():
    from s2studio.app.progress_eta import EtaEstimator
    from s2studio.app.requests import GenerationProgress

    eta = EtaEstimator([(0, "A sentence of some length here."), (1, "Another one, as long as that one.")], 1024)
    first = eta.update(GenerationProgress(1, 2, 10, 0.4, 1.0, 10, False))
    assert 0 < first.segment_percent < 100 and first.ms_per_frame == pytest.approx(100.0)
    # the first sentence really took 20 frames: the second is expected to take about as many
    done = eta.update(GenerationProgress(1, 2, 20, 0.9, 2.0, 20, True))
    assert done.segment_percent == 100
    assert done.remaining_s == pytest.approx(20 * 0.1 * eta.expected[1] / eta.expected[0], rel=0.01)
    assert done.describe().startswith("0:02 elapsed · about 0:0")


def test_window_layout_is_restored(make_window, fast_settings, tts_model, qtbot):
    from s2studio.app.settings import load_settings

    window = make_window(fast_settings(tts_model))
    window.resize(760, 560)  # within the offscreen screen (800×600): geometry is kept on screen
    qtbot.waitUntil(lambda: window.width() == 760)
    window.main_splitter.setSizes([220, 520])
    sizes = window.main_splitter.sizes()
    assert sizes != [400, 780]
    window.close()
    saved = load_settings(window.settings_path).settings
    assert saved.window_geometry and len(saved.splitter_states) == 2
    again = make_window(saved)
    # the voice panel's width comes back (the right side may lose a scroll bar's width or gain it)
    qtbot.waitUntil(lambda: again.main_splitter.sizes()[0] == sizes[0], timeout=2000)
    assert (again.width(), again.height()) == (760, 560)


def test_quitting_during_a_take_asks_first(make_window, fast_settings, tts_model, qtbot):
    window = make_window(fast_settings(tts_model, max_new_tokens=400, segmentation_enabled=True))
    asked = []
    window.confirm_quit = lambda: asked.append(1) or False
    window.editor.set_text(SCRIPT * 4)
    window.generate()
    qtbot.waitUntil(lambda: window.output.waveform.sample_count > 0, timeout=60_000)
    window.close()
    assert asked and window.isVisible() and window.generating  # "No": nothing stops
    window.confirm_quit = lambda: True
    window.close()
    assert not window.isVisible()


def test_an_autosave_that_cannot_be_written_is_a_banner(make_window, fast_settings, tts_model, qtbot, tmp_path):
    window = make_window(fast_settings(tts_model))
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the project folder should be")
    window.takes.autosave_folder = blocker / "autosave"
    window.editor.set_text("Something to keep.")
    window.takes.autosave_now().result()
    qtbot.waitUntil(window.error_banner.isVisible, timeout=2000)
    assert "could not be saved automatically" in window.error_banner.text


def test_the_script_is_previewed_as_the_sentences_the_pipeline_will_speak(make_window, fast_settings, tts_model,
                                                                          qtbot):
    window = _three_sentences(make_window, fast_settings, tts_model)
    window.editor.set_text("Dr. Smith arrived. It was 3.14 p.m. exactly! Then he left.")
    view = window.segments_view
    qtbot.waitUntil(lambda: view.table.rowCount() == 3, timeout=2000)  # "Dr." and "3.14" do not split
    assert [view.table.item(i, 1).text() for i in range(3)] == ["Dr. Smith arrived.", "It was 3.14 p.m. exactly!",
                                                                "Then he left."]
    assert view.take is None and not view.regenerate_button.isEnabled()


def test_deleting_a_take_removes_it_from_the_project_and_opening_asks_about_unsaved_takes(
        make_window, fast_settings, tts_model, qtbot, tmp_path, isolated_dirs):
    window = make_window(fast_settings(tts_model))
    _generate(window, qtbot, "Keep me.")
    path = tmp_path / "kept.s2project"
    window.takes.ask_project_path = lambda save: str(path)
    with qtbot.waitSignal(window.takes.saved, timeout=20_000):
        window.takes.save_project()
    _generate(window, qtbot, "Delete me.")
    assert window.takes.unsaved_changes
    asked = []
    window.takes.ask_keep_current_project = lambda: asked.append(1) or "cancel"
    window.takes.open_project()
    assert asked and window.output.history.count() == 2  # cancelled: nothing replaced

    window.takes.confirm_delete_take = lambda take: take.text == "Delete me."
    window.output.history.setCurrentRow(1)
    delete = [a for a in window.output.history.actions() if a.text() == "Delete take"][0]
    delete.trigger()
    assert [t.text for t in window.takes.project.takes] == ["Keep me."]
    assert window.output.history.count() == 1 and window.output.current.text == "Keep me."
    assert window.segments_view.take.text == "Keep me."
    window.takes.autosave_now().result()
    assert len(list((isolated_dirs / "projects" / "autosave" / "audio").iterdir())) == 1  # its audio went too

    window.takes.ask_keep_current_project = lambda: "discard"
    window.takes.open_project()
    assert [t.text for t in window.takes.project.takes] == ["Keep me."] and not window.takes.unsaved_changes


def test_switching_a_to_b_while_playing_continues_at_the_same_moment(qtbot, fake_sd):
    from s2studio.app.audio_service import AudioService
    from s2studio.app.widgets.ab_compare import ABCompareDialog, Candidate

    audio = AudioService()
    rate = 44100
    a = Candidate("A take", np.full(3 * rate, 0.25, np.float32), rate)
    b = Candidate("B take", np.full(3 * rate, -0.5, np.float32), rate)
    dialog = ABCompareDialog("Compare", [a, b], 0, 1, audio)
    qtbot.addWidget(dialog)
    picked = []
    dialog.picked.connect(picked.append)
    dialog.show()
    dialog.play_buttons["A"].click()
    assert dialog.playing == "A" and dialog.play_buttons["A"].text().startswith("❚❚")
    qtbot.waitUntil(lambda: dialog._position > rate // 2, timeout=5000)
    at = dialog._position
    dialog.play_buttons["B"].click()
    assert dialog.playing == "B" and audio._source.position >= at  # B starts where A was
    qtbot.waitUntil(lambda: any((block == -0.5).any() for block in fake_sd.played[-3:]), timeout=5000)
    dialog.keep_buttons["B"].click()
    assert picked == [1] and audio.playing_owner == ""


def test_a_second_running_app_keeps_its_takes_in_a_folder_of_its_own(make_window, fast_settings, tts_model,
                                                                   isolated_dirs):
    import subprocess
    import sys

    folder = isolated_dirs / "projects"
    folder.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from PySide6.QtCore import QLockFile; "
        f"lock = QLockFile({str(folder / 'autosave.lock')!r}); lock.tryLock(1000); print('locked', flush=True); "
        "sys.stdin.readline()")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        window = make_window(fast_settings(tts_model))
        assert window.takes.autosave_folder.name.startswith("autosave-")
        assert window.notice_banner.isVisible() and "Another s2studio is open" in window.notice_banner.text
    finally:
        holder.communicate("\n", timeout=20)


def test_sentence_keys_and_a_hint_when_the_script_has_changed_since_the_take(make_window, fast_settings, tts_model,
                                                                           qtbot, seeds):
    from PySide6.QtCore import Qt

    window = _three_sentences(make_window, fast_settings, tts_model)
    _generate(window, qtbot)
    view, take = window.segments_view, window.segments_view.take
    assert "script has changed" not in view.title.text()
    view.table.setFocus()
    view.table.selectRow(2)
    qtbot.keyClick(view.table, Qt.Key.Key_L, Qt.KeyboardModifier.ControlModifier)
    assert take.sentences[2].locked and view.table.item(2, 3).checkState() == Qt.CheckState.Checked
    qtbot.keyClick(view.table, Qt.Key.Key_L, Qt.KeyboardModifier.ControlModifier)
    assert not take.sentences[2].locked
    with qtbot.waitSignal(window.worker.finished, timeout=60_000):
        qtbot.keyClick(view.table, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: not window.generating, timeout=5000)
    assert len(take.sentences[2].versions) == 2
    qtbot.keyClick(view.table, Qt.Key.Key_Left, Qt.KeyboardModifier.AltModifier)
    assert take.sentences[2].chosen == 0
    window.editor.set_text(SCRIPT + " And more.")
    assert "script has changed since" in view.title.text()
    window.editor.set_text(SCRIPT)
    assert "script has changed" not in view.title.text()


def test_a_take_of_an_unsaved_clip_regenerates_in_its_session_and_says_why_not_after_a_restart(
        make_window, fast_settings, clone_dir, tmp_path, qtbot, seeds):
    import shutil

    folder = tmp_path / "clone"
    folder.mkdir()
    for name in ("model.gguf", "tokenizer.json"):
        shutil.copy(clone_dir / name, folder / name)
    settings = fast_settings(folder / "model.gguf", segmentation_enabled=True)
    window = make_window(settings)
    assert window.voice_panel.load_reference_file(clone_dir / "reference.wav")
    window.voice_panel.transcript.setPlainText("The quick brown fox jumps over the lazy dog.")
    finished = _generate(window, qtbot, "First one. Second one.")
    assert finished.request.reference_audio is not None
    view = window.segments_view
    view.table.selectRow(1)
    with qtbot.waitSignal(window.worker.finished, timeout=60_000) as blocker:
        view.regenerate_button.click()
    assert blocker.args[0].request.reference_audio is finished.request.reference_audio  # the same clip
    qtbot.waitUntil(lambda: not window.generating, timeout=5000)
    window.close()

    again = make_window(settings)
    again.segments_view.table.selectRow(0)
    again.segments_view.regenerate_button.click()
    assert not again.generating
    assert again.error_banner.isVisible() and "unsaved reference clip" in again.error_banner.text


def test_a_take_done_before_the_script_preview_is_due_keeps_its_sentences(make_window, fast_settings, tts_model,
                                                                          qtbot):
    """Typing arms the script preview (PREVIEW_DELAY_MS). A take that is done before the window's
    event loop runs again (a short take on a busy machine) is shown first, and the preview that
    falls due after it must not replace its sentences: Regenerate would do nothing."""
    import threading
    import time

    from PySide6.QtCore import Qt

    from s2studio.app.takes_controller import PREVIEW_DELAY_MS

    window = _three_sentences(make_window, fast_settings, tts_model)
    done = threading.Event()
    window.worker.finished.connect(lambda _finished: done.set(), Qt.ConnectionType.DirectConnection)
    window.editor.set_text(SCRIPT)  # no take on screen: the preview is armed
    due = time.monotonic() + PREVIEW_DELAY_MS / 1000
    window.generate()
    # The UI thread is late (as beside a full test suite on two cores): the take ends, and the
    # preview falls due, before its event loop runs again.
    assert done.wait(60)
    time.sleep(max(0.0, due + 0.05 - time.monotonic()))
    qtbot.waitUntil(lambda: not window.generating, timeout=5000)
    qtbot.wait(PREVIEW_DELAY_MS + 100)
    view = window.segments_view
    assert view.take is not None and view.take.id == window.output.current.key
    view.table.selectRow(1)
    assert view.regenerate_button.isEnabled()
    with qtbot.waitSignal(window.worker.finished, timeout=60_000) as blocker:
        view.regenerate_button.click()
    assert blocker.args[0].request.only_segments == (1,)
    qtbot.waitUntil(lambda: not window.generating, timeout=5000)


def test_while_a_take_is_heard_as_it_is_made_the_highlight_follows_what_is_heard(make_window, fast_settings,
                                                                                tts_model, qtbot, fake_sd):
    window = _three_sentences(make_window, fast_settings, tts_model, max_new_tokens=12)
    heard = []
    window.audio.position_changed.connect(lambda owner, sample: heard.append((sample, window.segments_view.spoken)))
    _generate(window, qtbot)
    starts = window.live_starts
    assert sorted(starts) == [0, 1, 2] and starts[0] == 0 < starts[1] < starts[2]
    qtbot.waitUntil(lambda: window.audio.playing_owner == "", timeout=10_000)
    during = [(sample, spoken) for sample, spoken in heard if spoken is not None]
    assert during and all(starts[spoken] <= sample for sample, spoken in during)
    assert [s for _, s in during] == sorted(s for _, s in during)  # it moves forward only
    take = window.segments_view.take
    assert [a for a, _ in take.spans()] == [starts[0], starts[1], starts[2]]  # the same places as the final take


def test_a_dialogue_take_is_kept_by_sentences_and_one_of_them_regenerates(make_window, fast_settings, tts_model,
                                                                          qtbot):
    window = make_window(fast_settings(tts_model, max_new_tokens=6, pause_ms=120, segmentation_enabled=True))
    codes = np.random.default_rng(1).integers(0, 128, size=(10, 30), dtype=np.int32)
    alice = window.library.save(None, codes, "This is Alice speaking.", name="Alice", codebook_size=128)
    window.speakers.reload_voices()
    window.editor.set_text("<|speaker:0|>Hello there. How are you? <|speaker:1|>Good morning!")
    window.speakers.set_voice(0, alice.id)
    with qtbot.waitSignal(window.worker.finished, timeout=120_000) as blocker:
        window.generate()
    qtbot.waitUntil(lambda: not window.generating, timeout=5000)
    take = window.segments_view.take
    assert [s.text for s in take.sentences] == ["Hello there.", "How are you?", "Good morning!"]
    np.testing.assert_array_equal(window.output.current.audio, blocker.args[0].result.audio)
    assert window.takes.project.speaker_voices == {"0": alice.id}
    # One sentence of a dialogue regenerates like any other: in its speaker's voice, the others untouched.
    before = _slices(take, window.output.current.audio)
    window.segments_view.table.selectRow(1)
    with qtbot.waitSignal(window.worker.finished, timeout=60_000) as again:
        window.segments_view.regenerate_button.click()
    assert again.args[0].request.only_segments == (1,)
    assert again.args[0].request.speaker_voices == ((0, alice.id),)
    assert [(s.index, s.speaker) for s in again.args[0].result.segments] == [(1, 0)]
    qtbot.waitUntil(lambda: not window.generating, timeout=5000)
    assert window.output.history.count() == 1 and not window.error_banner.isVisible()
    assert [len(s.versions) for s in take.sentences] == [1, 2, 1]
    after = _slices(take, window.output.current.audio)
    np.testing.assert_array_equal(after[0], before[0])
    np.testing.assert_array_equal(after[2], before[2])
