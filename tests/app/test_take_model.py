"""The takes model (app/take_model.py) without Qt: takes made by the real pipeline on the tiny
model become project takes sentence by sentence, regenerations become versions, locks and chosen
versions, what "Regenerate unlocked" asks for, dialogue takes (regenerated with their speakers'
voices), unsaved-clip takes after a restart, a server's result (no codes), and the round trip
through the autosave folder.
No QApplication is made here."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest

from s2studio.app.project_file import load_project_folder, save_project_folder
from s2studio.app.requests import FinishedTake, GenerateRequest, synthesis_request
from s2studio.app.take_model import CannotRegenerate, TakesModel, take_settings
from s2studio.engine.params import GenerationParams
from s2studio.engine.pipeline import EngineSettings, Pipeline, SegmentResult, SynthesisResult
from s2studio.engine.text.segmentation import Segment

SCRIPT = "One here. Two there. Three now."
ENGINE = EngineSettings(model_path="model.gguf", codec_mode="cpu", threads=2)  # what requests carry


@pytest.fixture(scope="module")
def pipeline(tts_model):
    p = Pipeline(dataclasses.replace(ENGINE, model_path=str(tts_model)))
    p.load()
    yield p
    p.unload()


def _request(text=SCRIPT, **overrides) -> GenerateRequest:
    values = dict(engine=ENGINE, text=text, sampling=GenerationParams(max_new_tokens=8, temperature=0.8, seed=7),
                  segmentation=True, pause_ms=60)
    values.update(overrides)
    return GenerateRequest(**values)


def _run(pipeline, request: GenerateRequest) -> FinishedTake:
    """What the worker does with a request (app/worker.py), in this thread."""
    return FinishedTake(request, pipeline.synthesize(synthesis_request(request)).run_to_end())


def test_the_model_imports_without_qt():
    code = ("import sys; sys.modules['PySide6'] = None\n"
            "import s2studio.app.take_model, s2studio.app.project_file\n"
            "assert not [m for m in sys.modules if m.startswith('PySide6') and sys.modules[m] is not None]\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_a_finished_take_is_kept_sentence_by_sentence_and_assembles_to_the_pipelines_audio(pipeline):
    model = TakesModel()
    finished = _run(pipeline, _request())
    take = model.add_take(finished, stats="12 ms/frame")
    assert [s.text for s in take.sentences] == ["One here.", "Two there.", "Three now."]
    assert [s.pause_after_ms for s in take.sentences] == [60, 60, 0]
    assert [s.current.seed for s in take.sentences] == [seg.seed for seg in finished.result.segments]
    np.testing.assert_array_equal(take.assemble(), finished.result.audio)
    assert take.base_seed == 7 and take.stats == "12 ms/frame" and not take.stopped
    assert take.settings == take_settings(finished.request) and "seed" not in take.settings["sampling"]
    assert model.project.takes == [take] and model.project.current_take == take.id and model.current() is take
    assert model.unsaved_changes


def test_regenerating_a_sentence_adds_a_version_and_leaves_the_others_sample_identical(pipeline):
    model = TakesModel()
    take = model.add_take(_run(pipeline, _request()))
    original = take.assemble()
    before = [original[a:b] for a, b in take.spans()]

    request = model.regeneration(take, [1], ENGINE, seeds={1: 1000})
    assert request.only_segments == (1,) and request.segment_seeds == {1: 1000} and request.take_id == take.id
    assert request.sampling.seed == take.base_seed and request.sampling.max_new_tokens == 8
    assert (request.segmentation, request.pause_ms, request.text) == (True, 60, SCRIPT)
    assert model.add_versions(_run(pipeline, request)) is take
    s1 = take.sentences[1]
    assert len(s1.versions) == 2 and s1.chosen == 1 and s1.current.seed == 1000
    after = take.assemble()
    spans = take.spans()
    np.testing.assert_array_equal(after[slice(*spans[0])], before[0])
    np.testing.assert_array_equal(after[slice(*spans[2])], before[2])

    assert model.step_version(take, 1, -1) and s1.chosen == 0  # back to the first version
    assert not model.step_version(take, 1, -1) and s1.chosen == 0  # there is none before it
    np.testing.assert_array_equal(take.assemble(), original)
    assert model.choose_version(take, 1, 1) and not model.choose_version(take, 1, 2) and s1.chosen == 1


def test_locked_sentences_are_not_asked_for_and_new_seeds_are_drawn(monkeypatch):
    from s2studio.app import take_model

    model = TakesModel()
    take = model.add_take(FinishedTake(_request(), _made_result(["One here.", "Two there.", "Three now."])))
    model.unsaved_changes = False
    assert model.set_locked(take, 0, True) and take.sentences[0].locked and model.unsaved_changes
    assert not model.set_locked(take, 3, True)
    assert model.unlocked(take) == [1, 2]
    drawn = iter(range(500, 600))
    monkeypatch.setattr(take_model, "new_seed", lambda: next(drawn))
    request = model.regeneration(take, [2, 1], ENGINE, seeds={2: 9})
    assert request.only_segments == (1, 2) and request.segment_seeds[2] == 9  # a given seed wins
    assert set(request.segment_seeds) == {1, 2} and 500 <= request.segment_seeds[1] < 600  # else a new one


def _made_result(texts, *, rate=1000, cancelled_from=None, pause=60, speakers=None) -> SynthesisResult:
    """An engine result built from the engine's own value types (a take of ``texts``, 100 samples
    each with ``pause`` ms pauses); segments from ``cancelled_from`` on were not reached."""
    pieces, segments, pos = [], [], 0
    speakers = speakers or [None] * len(texts)
    reached = texts if cancelled_from is None else texts[:cancelled_from]
    for i, text in enumerate(reached):
        audio = np.full(100, 0.1 * (i + 1), np.float32)
        if i:
            pieces.append(np.zeros(pause, np.float32))
            pos += pause
        pieces.append(audio)
        segments.append(SegmentResult(index=i, text=text, seed=100 + i, codes=np.zeros((10, 2), np.int32),
                                      stop_reason="end", start_sample=pos, end_sample=pos + 100, audio=audio,
                                      speaker=speakers[i]))
        pos += 100
    every = [Segment(i, t, speakers[i], pause if i < len(texts) - 1 else 0, 100 + i) for i, t in enumerate(texts)]
    return SynthesisResult(audio=np.concatenate(pieces), sample_rate=rate, codes=np.zeros((10, 0), np.int32),
                           seed=7, stop_reason="cancelled" if cancelled_from is not None else "end",
                           segments=segments, all_segments=every)


def test_a_servers_result_without_codes_gives_the_same_take(pipeline):
    # A remote engine's result has no codes (a server sends audio): the take is the same.
    finished = _run(pipeline, _request())
    empty = np.zeros((0, 0), np.int32)
    remote = dataclasses.replace(finished.result, codes=empty,
                                 segments=[dataclasses.replace(s, codes=empty) for s in finished.result.segments])
    local_take = TakesModel().add_take(finished)
    remote_take = TakesModel().add_take(FinishedTake(finished.request, remote))
    assert [s.text for s in remote_take.sentences] == [s.text for s in local_take.sentences]
    np.testing.assert_array_equal(remote_take.assemble(), local_take.assemble())
    for a, b in zip(remote_take.sentences, local_take.sentences):
        np.testing.assert_array_equal(a.current.audio, b.current.audio)


def test_a_stopped_take_keeps_what_was_made_and_regenerated_sentences_complete_it():
    texts = ["One here.", "Two there.", "Three now."]
    model = TakesModel()
    stopped = _made_result(texts, cancelled_from=2)  # its stop reason says "cancelled"
    take = model.add_take(FinishedTake(_request(), stopped))
    assert take.stopped and [s.current is not None for s in take.sentences] == [True, True, False]
    assert take.spans()[2] == (260, 260)

    last = _made_result(texts)
    last.segments = [last.segments[2]]
    cancelled = dataclasses.replace(last.segments[0], index=1, stop_reason="cancelled")
    last.segments.append(cancelled)  # a sentence stopped half-way is dropped: its old version stays
    request = model.regeneration(take, [1, 2], ENGINE, seeds={1: 1, 2: 2})
    assert model.add_versions(FinishedTake(request, last)) is take
    assert [len(s.versions) for s in take.sentences] == [1, 1, 1] and not take.stopped
    model.delete_take(take.id)
    assert model.add_versions(FinishedTake(request, last)) is None and model.project.takes == []


def test_a_dialogue_take_is_its_turns_sentences_and_regenerates_one_by_one():
    model = TakesModel()
    request = _request("<|speaker:0|>Hello there. <|speaker:1|>Good morning!", speaker_voices=((0, "alice"),),
                       pause_ms=120)
    made = _made_result(["Hello there.", "Good morning!"], pause=120, speakers=[0, 1])
    take = model.add_take(FinishedTake(request, made))
    assert [s.text for s in take.sentences] == ["Hello there.", "Good morning!"]
    assert [s.pause_after_ms for s in take.sentences] == [120, 0]
    assert model.project.speaker_voices == {"0": "alice"}
    again = model.regeneration(take, [1], ENGINE, seeds={1: 5})
    assert again.speaker_voices == ((0, "alice"),) and again.only_segments == (1,) and again.segment_seeds == {1: 5}
    assert synthesis_request(again).speaker_voices == {0: "alice"}


def test_an_unsaved_clip_regenerates_in_its_session_only_and_the_project_round_trips(tmp_path):
    clip = np.full(4410, 0.2, np.float32)
    model = TakesModel()
    request = _request("One here. Two there.", reference_audio=clip, reference_text="A clip.")
    take = model.add_take(FinishedTake(request, _made_result(["One here.", "Two there."], rate=8000)))
    again = model.regeneration(take, [0], ENGINE, seeds={0: 3})
    assert again.reference_audio is clip and again.reference_text == "A clip."

    copy, removable = model.for_saving()
    folder = tmp_path / "autosave"
    save_project_folder(copy, folder, removable)
    restarted = TakesModel()
    restarted.adopt(load_project_folder(folder))
    restored = restarted.project.take(take.id)
    np.testing.assert_array_equal(restored.assemble(), take.assemble())
    assert restarted.current() is restored and not restarted.unsaved_changes
    with pytest.raises(CannotRegenerate, match="unsaved reference clip"):
        restarted.regeneration(restored, [0], ENGINE)

    # deleting the take: the next autosave removes the WAVs of its versions (this session knew them)
    assert restarted.delete_take(take.id) and restarted.unsaved_changes
    copy, removable = restarted.for_saving()
    save_project_folder(copy, folder, removable)
    assert list((folder / "audio").iterdir()) == [] and load_project_folder(folder).takes == []
