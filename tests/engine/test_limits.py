"""Every number of a synthesis request has a documented range, checked in one place."""

from __future__ import annotations

import dataclasses
import logging
import math
import pathlib

import numpy as np
import pytest

from s2studio.engine import limits
from s2studio.engine.limits import LIMITS, MAX_TEXT_CHARS, argparse_type, check
from s2studio.engine.params import GenerationParams
from s2studio.engine.pipeline import EngineSettings, Pipeline, Segmentation, SynthesisRequest
from s2studio.errors import InputError

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden"


def test_codec_numbers_match_the_audio_package():
    from s2studio import audio

    assert limits.CODEC_SAMPLE_RATE == audio.CODEC_SAMPLE_RATE
    assert limits.SAMPLES_PER_CODE_FRAME == audio.SAMPLES_PER_CODE_FRAME
    assert limits.MAX_REFERENCE_SECONDS == audio.DEFAULT_MAX_REFERENCE_SECONDS
    assert limits.MAX_REFERENCE_FRAMES == math.ceil(60 * 44100 / 2048)


def test_every_numeric_request_field_has_a_range():
    numeric = {f.name for cls in (GenerationParams, Segmentation) for f in dataclasses.fields(cls)
               if f.type in ("int", "float", "int | None")}
    numeric |= {"stream_stride", "text", "reference_frames", "reference_samples", "threads", "gpu_layers"}
    assert numeric <= set(LIMITS), numeric - set(LIMITS)
    for name, lim in LIMITS.items():
        assert lim.min <= lim.max and lim.doc, name


@pytest.mark.parametrize("field, value", [
    ("max_new_tokens", 0), ("max_new_tokens", 2_000_000), ("max_new_tokens", 10**9), ("temperature", -0.1),
    ("temperature", 1e9), ("temperature", math.nan), ("top_p", 1.5), ("top_k", -1), ("top_k", 10**6),
    ("min_tokens_before_end", -1), ("seed", -1), ("seed", 2**64), ("max_new_tokens", 3.0), ("ras", 1),
])
def test_generation_params_out_of_range_name_the_field(field, value):
    with pytest.raises(InputError, match=field):
        GenerationParams(**{field: value}).validated()


def test_generation_params_at_the_bounds_are_accepted():
    for field in ("max_new_tokens", "temperature", "top_p", "top_k", "min_tokens_before_end", "seed"):
        for value in (LIMITS[field].min, LIMITS[field].max):
            GenerationParams(**{field: value}).validated()
    GenerationParams(seed=np.int64(3)).validated()


@pytest.fixture(scope="module")
def unloaded():
    return Pipeline(EngineSettings(model_path=str(GOLDEN / "tts_f32" / "model.gguf"), codec_mode="cpu"))


@pytest.mark.parametrize("change, field", [
    (dict(segmentation=Segmentation(enabled=True, pause_ms=10**7)), "pause_ms"),
    (dict(segmentation=Segmentation(max_chars=-1)), "max_chars"),
    (dict(stream_stride=0), "stream_stride"),
    (dict(stream_stride=10**6), "stream_stride"),
    (dict(text="a" * (MAX_TEXT_CHARS + 1)), "text"),
    (dict(only_segments=(-1,)), "only_segments"),
    (dict(generation=GenerationParams(top_p=2.0)), "top_p"),
    (dict(reference_codes=np.zeros((10, 20_000), np.int32), reference_text="hi"), "reference_codes"),
    (dict(reference_audio=np.zeros(61 * 44100, np.float32), reference_text="hi"), "reference_audio"),
])
def test_bad_requests_fail_before_any_work(unloaded, change, field):
    """sentence_pause_ms 10⁷ once allocated gigabytes of silence; now every field is refused by
    synthesize() itself, before the model is even loaded."""
    with pytest.raises(InputError, match=field):
        unloaded.synthesize(dataclasses.replace(SynthesisRequest(text="Hello."), **change))
    assert not unloaded.is_loaded


def test_argparse_types_give_one_line_naming_the_flag():
    import argparse

    temp = argparse_type("temperature", "--temp")
    assert temp("0.5") == 0.5
    for bad in ("6", "x", "nan"):
        with pytest.raises(argparse.ArgumentTypeError, match="--temp"):
            temp(bad)
    stride = argparse_type("stream_stride", "--stream-decode-stride", also=(0,))
    assert stride("0") == 0 and stride("16") == 16
    with pytest.raises(argparse.ArgumentTypeError):
        stride("-1")


def test_check_accepts_numpy_and_refuses_bools():
    assert check("top_k", np.int32(5)) == 5
    with pytest.raises(InputError, match="top_k"):
        check("top_k", True)


def test_threads_beyond_the_cores_are_clamped_with_a_warning(caplog):
    """--threads 999 ran 12× slower than --threads 0: oversubscribed cores."""
    from s2studio.engine.threads import effective_threads, logical_cores, set_threads

    cores = logical_cores()
    with caplog.at_level(logging.WARNING, logger="s2studio.engine.threads"):
        assert effective_threads(999) == cores
    assert any("999" in r.getMessage() and "cores" in r.getMessage() for r in caplog.records)
    assert effective_threads(0) == cores and effective_threads(1) == 1
    import torch

    before = torch.get_num_threads()
    try:
        assert set_threads(cores + 5) == cores and torch.get_num_threads() == cores
    finally:
        torch.set_num_threads(before)
    with pytest.raises(InputError, match="threads"):
        effective_threads(-1)


def test_engine_settings_out_of_range_name_the_field():
    for field, value in (("gpu_layers", -2), ("threads", -1), ("threads", 10**6)):
        p = Pipeline(EngineSettings(model_path=str(GOLDEN / "tts_f32" / "model.gguf"), **{field: value}))
        with pytest.raises(InputError, match=field):
            p.load()
        assert not p.is_loaded
