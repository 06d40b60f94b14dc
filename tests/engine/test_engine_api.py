"""One engine interface, one take path: both engines implement ``SynthesisEngine``, every take
(local, batched, remote, dialogue) is assembled by ``engine.take.assemble_take``, and a dialogue
is a take like any other (its sentences regenerate one by one)."""

from __future__ import annotations

import ast
import dataclasses
import pathlib

import numpy as np
import pytest

from s2studio.engine.api import ModelInfo, SynthesisEngine
from s2studio.engine.params import GenerationParams
from s2studio.engine.pipeline import EngineSettings, Pipeline, Segmentation, SynthesisRequest
from s2studio.engine.take import split_request_text
from s2studio.engine.voices import VoiceLibrary
from s2studio.errors import InputError
from s2studio.remote import RemoteEngine, RemoteSettings

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLONE = ROOT / "tests" / "data" / "golden" / "clone_f32_qknorm"
SEEDED = GenerationParams(max_new_tokens=8, seed=11)


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    from s2studio.audio import read_audio

    lib = VoiceLibrary(tmp_path_factory.mktemp("voices"))
    p = Pipeline(EngineSettings(str(CLONE / "model.gguf"), codec_mode="cpu"), voices=lib)
    profile = p.encode_voice(read_audio(CLONE / "reference.wav"), "Alice speaks here.")
    lib.save_profile("alice", profile, name="Alice")
    lib.save_profile("bob", dataclasses.replace(profile, codes=profile.codes[:, :25], transcript="Bob, briefly."),
                     name="Bob")
    return p


def test_both_engines_implement_the_interface_without_loading_anything():
    p = Pipeline(EngineSettings(str(CLONE / "model.gguf")))
    assert isinstance(p, SynthesisEngine)
    assert not p.is_loaded  # the check looked, it did not load
    info = p.model_info(load=False)
    assert info == ModelInfo(name="model.gguf", loaded=False, device="cpu")
    remote = RemoteEngine(RemoteSettings("http://127.0.0.1:9"))
    assert isinstance(remote, SynthesisEngine)
    assert remote.available_devices() == []


def test_model_info_of_a_loaded_pipeline(clone):
    info = clone.model_info()
    assert info.loaded and info.sample_rate == 44100 and info.num_codebooks == 10
    assert info.codebook_size > 0 and info.context_length > 0 and info.codec_device == "cpu" and info.codec_reason


def _constructions(name: str) -> list[str]:
    """Where the package builds a ``name(...)``."""
    found = []
    for path in (ROOT / "s2studio").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == name:
                found.append(str(path.relative_to(ROOT)))
    return found


def test_only_the_take_assembler_builds_take_results():
    # A second place that builds a take's result is a second take path: it will drift from this one.
    assert set(_constructions("SynthesisResult")) == {"s2studio/engine/take.py"}
    assert set(_constructions("SegmentResult")) == {"s2studio/engine/take.py"}
    assert set(_constructions("assemble_take")) == {"s2studio/engine/pipeline.py", "s2studio/remote/engine.py"}


def test_dialogue_segments_follow_the_turns():
    seg = Segmentation(enabled=False, pause_ms=150)
    voices = {0: "alice", 1: "bob"}
    segs = split_request_text("Intro. <|speaker:0|>Hi. Still me. <|speaker:1|>Hello!", seg, 5, voices)
    assert [(s.text, s.speaker, s.pause_after_ms) for s in segs] == [
        ("Intro.", None, 150), ("Hi. Still me.", 0, 150), ("Hello!", 1, 0)]
    assert [s.seed for s in segs] == [5, 5, 5]  # not segmented: every turn has the take's seed
    segs = split_request_text("<|speaker:0|>Hi. Still me. <|speaker:1|>Hello!", dataclasses.replace(seg, enabled=True),
                              5, voices)
    assert [(s.text, s.speaker) for s in segs] == [("Hi.", 0), ("Still me.", 0), ("Hello!", 1)]
    assert len({s.seed for s in segs}) == 3
    with pytest.raises(InputError, match="speaker tags but no words"):
        split_request_text("<|speaker:0|> <|speaker:1|>", seg, 5, voices)


def test_a_dialogue_is_one_take_and_one_sentence_of_it_regenerates(clone):
    request = SynthesisRequest("<|speaker:0|>Hello there. How are you? <|speaker:1|>Good morning!",
                               generation=SEEDED, segmentation=Segmentation(enabled=True, pause_ms=120),
                               speaker_voices={0: "alice", 1: "bob"})
    whole = clone.synthesize(request).run_to_end()
    assert [(s.text, s.speaker) for s in whole.segments] == [
        ("Hello there.", 0), ("How are you?", 0), ("Good morning!", 1)]
    assert [s.text for s in whole.all_segments] == [s.text for s in whole.segments]
    assert whole.codes.shape[1] == sum(s.codes.shape[1] for s in whole.segments) > 0
    pause = round(0.120 * 44100)
    assert whole.segments[1].start_sample - whole.segments[0].end_sample == pause
    # the same sentence alone, with its seed from the take: the same samples
    again = clone.synthesize(dataclasses.replace(request, only_segments=(2,),
                                                 segment_seeds={2: whole.segments[2].seed})).run_to_end()
    assert [s.index for s in again.segments] == [2]
    np.testing.assert_array_equal(again.segments[0].audio, whole.segments[2].audio)
    # and as Bob's monologue (the turn's text, Bob's voice, that seed)
    alone = clone.synthesize(SynthesisRequest("Good morning!", voice="bob", generation=dataclasses.replace(
        SEEDED, seed=whole.segments[2].seed))).run_to_end()
    np.testing.assert_array_equal(alone.audio, whole.segments[2].audio)


def test_a_dialogue_checks_its_voices_before_any_audio(clone):
    request = SynthesisRequest("<|speaker:0|>Hi. <|speaker:1|>Hello.", generation=SEEDED,
                               speaker_voices={0: "alice", 1: "nobody"})
    job = clone.synthesize(request)
    chunks = []
    with pytest.raises(Exception, match="nobody"):
        for chunk in job:
            chunks.append(chunk)
    assert chunks == []
    with pytest.raises(InputError, match="speaker"):
        clone.synthesize(dataclasses.replace(request, speaker_voices={-1: "alice"}))
