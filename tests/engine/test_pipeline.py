"""The Pipeline API end to end on the golden tiny models."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from s2studio.errors import InputError, TokenizerError
from s2studio.engine.params import GenerationParams
from s2studio.engine.pipeline import EngineSettings, Pipeline, PostProcess, SynthesisRequest

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden"


def dump(case, name):
    return np.load(GOLDEN / case / "dumps" / f"{name}.npy")


def golden_request(case, **kw):
    inputs = json.loads((GOLDEN / case / "inputs.json").read_text())
    p = inputs["params"]
    gen = GenerationParams(max_new_tokens=p["max_tokens"], temperature=0.0, top_p=p["top_p"], top_k=p["top_k"],
                           min_tokens_before_end=p["min_tokens_before_end"], ras=False)
    return SynthesisRequest(text=inputs["text"], generation=gen, **kw)


def settings(case, **kw):
    return EngineSettings(model_path=str(GOLDEN / case / "model.gguf"), tokenizer_mode="s2cpp",
                          codec_mode="cpu", **kw)


@pytest.fixture(scope="module")
def tts():
    return Pipeline(settings("tts_f32"))


def test_loads_lazily_and_reports_stages():
    p = Pipeline(settings("tts_f32"))
    assert not p.is_loaded
    stages = []
    p.load(lambda stage, frac: stages.append((stage, frac)))
    assert p.is_loaded
    names = [s for s, _ in stages]
    assert names[0] == "Opening model file" and names[-1] == "Ready"
    assert "Loading transformer" in names and "Loading tokenizer" in names and "Loading audio codec" in names
    fracs = [f for s, f in stages if s == "Loading transformer"]
    assert fracs == sorted(fracs) and fracs[-1] == pytest.approx(1.0)


def test_greedy_synthesis_matches_s2cpp(tts):
    job = tts.synthesize(golden_request("tts_f32", stream_stride=3))
    chunks = list(job)
    r = job.result
    np.testing.assert_array_equal(r.codes, dump("tts_f32", "codes"))
    assert [c.frame_count for c in chunks] == [3, 3, 3, 3, 3, 1]
    assert [c.frame_start for c in chunks] == [0, 3, 6, 9, 12, 15]
    streamed = np.concatenate([c.samples for c in chunks])
    np.testing.assert_array_equal(streamed, r.audio)  # no post-processing requested
    gold = dump("tts_f32", "audio")
    assert np.abs(r.audio - gold).max() <= 1e-2
    assert np.sqrt(np.mean((r.audio - gold) ** 2)) / np.sqrt(np.mean(gold**2)) <= 5e-3
    assert r.sample_rate == 44100 and r.stop_reason == "max_tokens"
    t = r.timings
    assert t.frames == 16 and t.audio_s == pytest.approx(16 * 2048 / 44100) and t.total_s > 0


def test_clone_from_voice_codes_matches_s2cpp():
    p = Pipeline(settings("clone_f32_qknorm"))
    inputs = json.loads((GOLDEN / "clone_f32_qknorm" / "inputs.json").read_text())
    req = golden_request("clone_f32_qknorm", reference_codes=dump("clone_f32_qknorm", "ref_codes"),
                         reference_text=inputs["prompt_text"])
    r = p.synthesize(req).run_to_end()
    np.testing.assert_array_equal(r.codes, dump("clone_f32_qknorm", "codes"))


def test_clone_from_reference_audio_runs():
    import soundfile as sf

    p = Pipeline(settings("clone_f32_qknorm"))
    audio, sr = sf.read(GOLDEN / "clone_f32_qknorm" / "reference.wav", dtype="float32")
    inputs = json.loads((GOLDEN / "clone_f32_qknorm" / "inputs.json").read_text())
    r = p.synthesize(golden_request("clone_f32_qknorm", reference_audio=audio,
                                    reference_text=inputs["prompt_text"])).run_to_end()
    assert r.codes.shape == (10, 16) and r.timings.encode_reference_s > 0
    # The encoder reproduces s2.cpp's reference codes almost exactly, so the prompt and
    # therefore most of the greedy output agree.
    assert (p.encode_reference(audio) == dump("clone_f32_qknorm", "ref_codes")).mean() >= 0.95


def test_cancel_stops_within_a_frame_and_pipeline_stays_usable(tts):
    req = SynthesisRequest(text="Hello there.", generation=GenerationParams(max_new_tokens=200, seed=3),
                           stream_stride=1)
    job = tts.synthesize(req)
    got = []
    for chunk in job:
        got.append(chunk)
        if len(got) == 2:
            job.cancel()
    assert len(got) == 2 and job.result.cancelled and job.result.codes.shape[1] == 2
    again = tts.synthesize(golden_request("tts_f32")).run_to_end()
    np.testing.assert_array_equal(again.codes, dump("tts_f32", "codes"))


def test_postprocess_applies_to_the_final_take(tts):
    r = tts.synthesize(golden_request("tts_f32", postprocess=PostProcess(normalize=True))).run_to_end()
    assert np.abs(r.audio).max() == pytest.approx(0.95, abs=1e-6)


def test_bad_requests_are_clear_errors(tts):
    with pytest.raises(InputError, match="empty"):
        tts.synthesize(SynthesisRequest(text="   "))
    with pytest.raises(InputError, match="transcript"):
        tts.synthesize(SynthesisRequest(text="hi", reference_codes=np.zeros((10, 4), np.int32)))
    with pytest.raises(InputError, match="control token"):
        tts.synthesize(SynthesisRequest(text="hi <|im_end|> there")).run_to_end()


def test_configure_reloads_only_what_changed():
    p = Pipeline(settings("tts_f32"))
    p.load()
    model, codec, tok = p.model, p.codec, p.tokenizer
    p.configure(settings("tts_f32", threads=1))
    assert p.model is model and p.codec is codec and p.tokenizer is tok
    p.configure(dataclass_replace(p.settings, tokenizer_mode="hf"))
    assert p.model is model and p.tokenizer is None
    p.configure(dataclass_replace(p.settings, dtype="float16"))
    assert p.model is None and p.codec is None
    p.load()
    assert p.model.w.slow.layers[0].wqkv.dtype.itemsize == 2 and p.tokenizer.mode == "hf"
    p.unload()
    assert not p.is_loaded


def test_missing_tokenizer_is_named(tmp_path):
    import shutil

    shutil.copy(GOLDEN / "tts_f32" / "model.gguf", tmp_path / "model.gguf")
    p = Pipeline(EngineSettings(model_path=str(tmp_path / "model.gguf"), codec_mode="cpu"))
    with pytest.raises(TokenizerError, match="no tokenizer.json found"):
        p.load()


def dataclass_replace(obj, **kw):
    import dataclasses

    return dataclasses.replace(obj, **kw)


LONG_PARTS = [
    "The quick brown fox jumps over the lazy dog. [laugh] Isn't that something?",
    "今天天气很好。我们去公园散步吧！",
    "東京は大きな都市です。とても賑やかですね？",
    "<|speaker:1|>[whisper] I have a secret... Do you want to hear it?",
    "Dr. Smith paid 3.14 dollars, e.g. almost nothing!",
]


def long_text(min_chars: int = 5000) -> str:
    parts, n = [], 0
    while n < min_chars:
        for p in LONG_PARTS:
            parts.append(p)
            n += len(p) + 1
    return " ".join(parts)


def test_long_text_streams_segment_by_segment_and_segments_regenerate_exactly(tts):
    from s2studio.engine.pipeline import Segmentation

    text = long_text()
    assert len(text) >= 5000
    req = SynthesisRequest(text=text, generation=GenerationParams(max_new_tokens=3, temperature=0.8, seed=42),
                           segmentation=Segmentation(enabled=True, max_chars=60, pause_ms=100), stream_stride=2)
    segments = tts.segments_of(req)
    assert len(segments) > 100
    assert all("[laugh]" not in s.text or "[laugh]" in s.text and not s.text.endswith("[laugh]") for s in segments)
    job = tts.synthesize(req)
    order, pauses = [], 0
    for chunk in job:
        if chunk.frame_count == 0:
            pauses += 1
            assert not chunk.samples.any() and len(chunk.samples) == int(0.1 * 44100)
        elif not order or order[-1] != chunk.segment:
            order.append(chunk.segment)
        assert chunk.segment_count == len(segments)
    r = job.result
    assert order == list(range(len(segments)))  # in order, one segment after another
    assert pauses == len(segments) - 1
    assert [s.index for s in r.segments] == order
    assert len(r.audio) == sum(s.end_sample - s.start_sample for s in r.segments) + pauses * int(0.1 * 44100)
    for k in (0, 7, len(segments) - 1):
        again = tts.synthesize(dataclass_replace(req, only_segments=(k,))).run_to_end()
        seg = r.segments[k]
        assert again.segments[0].seed == seg.seed
        np.testing.assert_array_equal(again.segments[0].codes, seg.codes)
        # Codes are identical; audio may differ in the last float bits (BLAS results depend
        # on memory alignment), far below anything audible.
        np.testing.assert_allclose(again.audio, r.audio[seg.start_sample:seg.end_sample], atol=1e-5, rtol=0)


def test_speaker_markers_and_segments_out_of_range(tts):
    from s2studio.engine.pipeline import Segmentation

    req = SynthesisRequest(text="<|speaker:0|>Hi. <|speaker:1|>Hello.",
                           segmentation=Segmentation(enabled=True), generation=GenerationParams(max_new_tokens=2))
    segs = tts.segments_of(req)
    assert [s.text for s in segs] == ["<|speaker:0|>Hi.", "<|speaker:1|>Hello."]
    with pytest.raises(InputError, match="2 segments"):
        list(tts.synthesize(dataclass_replace(req, only_segments=(5,))))


def test_voice_from_library(tmp_path):
    from s2studio.engine.voices import VoiceLibrary

    lib = VoiceLibrary(tmp_path / "voices")
    inputs = json.loads((GOLDEN / "clone_f32_qknorm" / "inputs.json").read_text())
    info = lib.save(None, dump("clone_f32_qknorm", "ref_codes"), inputs["prompt_text"], name="Golden voice",
                    codebook_size=128)
    p = Pipeline(settings("clone_f32_qknorm"), voices=lib)
    r = p.synthesize(golden_request("clone_f32_qknorm", voice=info.id)).run_to_end()
    np.testing.assert_array_equal(r.codes, dump("clone_f32_qknorm", "codes"))
    with pytest.raises(InputError, match="not both"):
        p.synthesize(golden_request("clone_f32_qknorm", voice=info.id, reference_codes=np.zeros((10, 2), np.int32),
                                    reference_text="x"))


def test_segment_seeds_regenerate_one_segment_with_its_own_seed(tts):
    """A studio regenerates one sentence with a fresh seed, and can replay that version exactly;
    each segment result carries its own audio for re-assembling the take."""
    from s2studio.engine.pipeline import Segmentation, split_request_text

    seg = Segmentation(enabled=True, pause_ms=50)
    req = SynthesisRequest(text="One here. Two there. Three now.", segmentation=seg,
                           generation=GenerationParams(max_new_tokens=4, temperature=0.8, seed=5))
    assert [s.text for s in split_request_text(req.text, seg, 5)] == [s.text for s in tts.segments_of(req)]
    full = tts.synthesize(req).run_to_end()
    assert [s.text for s in full.all_segments] == ["One here.", "Two there.", "Three now."]
    for s in full.segments:
        np.testing.assert_array_equal(s.audio, full.audio[s.start_sample:s.end_sample])
    fresh = tts.synthesize(dataclass_replace(req, only_segments=(1,), segment_seeds={1: 123})).run_to_end()
    assert [s.seed for s in fresh.segments] == [123] and len(fresh.all_segments) == 3
    again = tts.synthesize(dataclass_replace(req, only_segments=(1,), segment_seeds={1: 123})).run_to_end()
    np.testing.assert_array_equal(again.segments[0].codes, fresh.segments[0].codes)
    with pytest.raises(InputError, match=r"segment_seeds\[1\]"):
        tts.synthesize(dataclass_replace(req, segment_seeds={1: -1}))
