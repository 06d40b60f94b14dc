"""The engine's modes (engine/modes.py): enums that are also their words, checked once where
the settings are made, and the CLI's and the app's choices taken from them."""

from __future__ import annotations

import dataclasses
import json

import pytest

from s2studio.engine.modes import CodecMode, CudaGraphs, GemvSchedule, IntDot, SegmentationMode, TokenizerMode, \
    WeightDtype
from s2studio.engine.pipeline import EngineSettings
from s2studio.errors import InputError

ALL = (CudaGraphs, CodecMode, WeightDtype, TokenizerMode, SegmentationMode, IntDot, GemvSchedule)


@pytest.mark.parametrize("mode", ALL)
def test_a_mode_is_its_word(mode):
    for m in mode:
        assert m == m.value and str(m) == m.value and f"{m}" == m.value
        assert {m.value: 1}[m] == 1 and hash(m) == hash(m.value)  # dict keys written as words still match
        assert json.loads(json.dumps({"k": m})) == {"k": m.value}
        assert mode.parse(m.value) is m and mode.parse(m) is m
    with pytest.raises(InputError):
        mode.parse("no such mode")


def test_engine_settings_convert_the_words_once():
    s = EngineSettings(model_path="m.gguf", tokenizer_mode="s2cpp", dtype="f16", codec_mode="cpu",
                       cuda_graphs="eager")
    assert s.tokenizer_mode is TokenizerMode.S2CPP and s.codec_mode is CodecMode.CPU
    assert s.dtype is WeightDtype.FLOAT16  # ggml's short name, accepted as before
    assert s.cuda_graphs is CudaGraphs.EAGER and s.cuda_graphs == "eager"
    assert s == EngineSettings(model_path="m.gguf", tokenizer_mode=TokenizerMode.S2CPP, dtype="float16",
                               codec_mode="cpu", cuda_graphs=CudaGraphs.EAGER)
    assert EngineSettings(model_path="m.gguf").cuda_graphs is CudaGraphs.AUTO


@pytest.mark.parametrize("field,value,message", [
    ("cuda_graphs", "always", "Unknown cuda_graphs mode 'always'. Use auto, on, off, eager, compile."),
    ("codec_mode", "gpu", "Unknown codec mode 'gpu'. Use auto, cpu or follow."),
    ("dtype", "int4", "Unknown dtype 'int4'. Use auto, quantized, float32, float16 or bfloat16."),
    ("tokenizer_mode", "bpe", "Unknown tokenizer mode 'bpe'. Use hf or s2cpp."),
])
def test_a_bad_word_is_refused_where_the_settings_are_made(field, value, message):
    with pytest.raises(InputError) as err:
        EngineSettings(model_path="m.gguf", **{field: value})
    assert str(err.value) == message
    with pytest.raises(InputError):
        dataclasses.replace(EngineSettings(model_path="m.gguf"), **{field: value})


def test_the_choices_offered_are_the_enums():
    from s2studio.app import settings as app_settings
    from s2studio.cli import build_parser
    from s2studio.engine.codec import placement as codec_placement
    from s2studio.engine.text import segmentation, tokenizer

    actions = {a.dest: a for a in build_parser()._subparsers._group_actions[0].choices["synth"]._actions}
    assert actions["tokenizer_mode"].choices == TokenizerMode.choices()
    assert actions["dtype"].choices == WeightDtype.choices()
    assert list(actions["cuda_graphs"].choices) == CudaGraphs.choices()
    assert list(app_settings.TOKENIZER_MODES) == TokenizerMode.choices()
    assert list(app_settings.CODEC_MODES) == CodecMode.choices() == list(codec_placement.MODES)
    assert list(tokenizer.MODES) == TokenizerMode.choices()
    assert list(segmentation.MODES) == SegmentationMode.choices()
    with pytest.raises(InputError, match="Unknown segmentation mode 'words'"):
        segmentation.split_text("One. Two.", mode="words")


def test_the_kernel_modes_read_the_old_environment_words():
    assert [IntDot.parse(w) for w in ("2", "1", "0", " 1 ")] == [IntDot.PRECISE, IntDot.INT8, IntDot.OFF, IntDot.INT8]
    assert GemvSchedule.parse("Static") is GemvSchedule.STATIC and GemvSchedule.parse("dynamic") is GemvSchedule.DYNAMIC
