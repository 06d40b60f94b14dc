"""Parsing s2.cpp's form fields and params JSON (no server needed)."""

from __future__ import annotations

import pytest

from s2studio.engine.params import GenerationParams
from s2studio.server.app import output_for, postprocess_for
from s2studio.server.params import BadRequest, parse_generate_form


class Form:
    """The part of Starlette's FormData the parser uses."""

    def __init__(self, **fields):
        self.fields = fields

    def getlist(self, key):
        value = self.fields.get(key)
        return [] if value is None else value if isinstance(value, list) else [value]


def parse(params: str | None = None, limit=None, **fields):
    if params is not None:
        fields["params"] = params
    return parse_generate_form(Form(**fields), GenerationParams(), limit)


def test_defaults_are_s2cpp_server_defaults():
    spec = parse(text="hi")
    assert spec.generation == GenerationParams()
    assert (spec.stream, spec.chunked, spec.output_format, spec.stream_stride) == (False, False, "wav", 4)
    assert not spec.segmentation.enabled and spec.segmentation.pause_ms == 180 and spec.segmentation.mode == "s2cpp"
    assert output_for(spec).float_samples and not output_for(spec).live


def test_lower_bounds_clamp_as_s2cpp():
    spec = parse('{"temperature": -1, "top_p": -0.5, "top_k": -3, "min_tokens_before_end": -2, "n_threads": 0,'
                 ' "max_new_tokens": 7.9, "sentence_pause_ms": -5, "segment_max_chars": -1}', text="hi")
    g = spec.generation
    assert (g.temperature, g.top_p, g.top_k, g.min_tokens_before_end, g.max_new_tokens) == (0, 0, 0, 0, 7)
    assert spec.n_threads == 1 and spec.segmentation.pause_ms == 0 and spec.segmentation.max_chars == 0


def test_first_alias_wins_and_params_voice_overrides():
    spec = parse(text="hi", ref_text="b", prompt_text="c", voice_profile="v2", voice_id="v1")
    assert spec.reference_text == "b" and spec.voice == "v1"
    spec = parse('{"voice": "a", "voice_id": "b", "voice_dir": "d"}', text="hi", voice="x")
    assert spec.voice == "b" and spec.voice_dir == "d"


@pytest.mark.parametrize("value,expected", [("pcm", "pcm_s16le"), ("PCM16", "pcm_s16le"), ("s16le", "pcm_s16le"),
                                            ("wav", "wav"), ("anything", "wav")])
def test_output_format_aliases(value, expected):
    assert parse(f'{{"output_format": "{value}"}}', text="hi").output_format == expected


def test_streaming_presets():
    live_pcm = parse('{"stream": true, "chunked": true, "output_format": "pcm"}', text="hi")
    assert live_pcm.live and live_pcm.start_buffer_ms == 3000 and live_pcm.stream_stride == 4
    low = parse('{"stream": true, "realtime": true, "output_format": "pcm", "low_latency": true}', text="hi")
    assert low.live and low.start_buffer_ms == 0 and low.stream_stride == 1
    explicit = parse('{"stream": true, "chunked": true, "low_latency": true, "stream_decode_stride": 6}', text="hi")
    assert explicit.stream_stride == 6
    assert not parse('{"chunked": true}', text="hi").live  # chunked needs the streaming path
    assert parse('{"chunked": true, "segment_sentences": true}', text="hi").live


def test_postprocess_rules():
    spec = parse('{"normalize": true, "dynamic_normalize": true, "trim_silence": true}', text="hi")
    pp = postprocess_for(spec, output_for(spec))
    assert pp.dynamic_normalize and not pp.normalize and pp.trim_silence  # exclusive, as s2.cpp in memory
    seg = parse('{"segment_sentences": true, "stream": true}', text="hi")
    assert postprocess_for(seg, output_for(seg)).trim_silence  # s2.cpp trims each sentence
    live = parse('{"stream": true, "chunked": true, "normalize": true}', text="hi")
    assert postprocess_for(live, output_for(live)).normalize is False


def test_token_limit_clamps():
    assert parse('{"max_new_tokens": 512}', limit=10, text="hi").generation.max_new_tokens == 10
    assert parse(None, limit=10, text="hi").generation.max_new_tokens == 10


@pytest.mark.parametrize("params", ['{"top_k": "5"}', '{"top_k": null}', '{"segment_sentences": "yes"}',
                                    '{"voice": 3}', '{"stream_holdback_frames": true}', '{"seed": 1.5e300}',
                                    "null", "3", '{"a":'])
def test_bad_params_are_refused(params):
    with pytest.raises(BadRequest):
        parse(params, text="hi")


def test_unknown_keys_are_ignored():
    assert parse('{"future_option": [1, 2]}', text="hi").generation == GenerationParams()
