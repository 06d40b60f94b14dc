"""Property-based fuzzing of the other untrusted inputs (issue 24): the app's settings file, the
server's request parameters (what any web page may send), and the remote client's handling of
a server's answers. For any input: a clear error of the documented class, or a valid value."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from s2studio.app.settings import AppSettings, load_settings
from s2studio.engine.params import GenerationParams
from s2studio.errors import InputError
from s2studio.remote.answers import ServerMisbehaved, parse_json_object
from s2studio.remote.engine import PcmDecoder
from s2studio.remote.printable import printable
from s2studio.server.params import BadRequest, parse_generate_form
from tests.fuzz.test_fuzz_files import json_values

pytestmark = pytest.mark.fuzz
DEEP = "[" * 100_000 + "]" * 100_000


# ---- the settings file ------------------------------------------------------------------------
@given(data=st.dictionaries(st.sampled_from([f.name for f in AppSettings.__dataclass_fields__.values()]
                                            + ["other"]), json_values, max_size=6))
def test_any_settings_values_load_as_settings_and_a_notice(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("settings") / "settings.json"
    path.write_text(json.dumps(data))
    loaded = load_settings(path)
    assert isinstance(loaded.settings, AppSettings)


@given(raw=st.binary(max_size=200))
@example(raw=DEEP.encode())  # RecursionError escaped json.loads: the app did not start
@example(raw=b'{"volume": NaN, "threads": Infinity}')
def test_any_settings_bytes_load_as_settings_and_a_notice(tmp_path_factory, raw):
    path = tmp_path_factory.mktemp("settings") / "settings.json"
    path.write_bytes(raw)
    assert isinstance(load_settings(path).settings, AppSettings)


# ---- the server's request parameters -----------------------------------------------------------
class Form:
    """A parsed multipart form as the server sees it (``getlist``), text fields only."""

    def __init__(self, fields: dict[str, str]):
        self.fields = fields

    def getlist(self, name):
        return [self.fields[name]] if name in self.fields else []


@given(params=st.dictionaries(st.sampled_from(
    ["max_new_tokens", "temperature", "top_p", "top_k", "seed", "stream", "chunked", "output_format",
     "segment_sentences", "segment_max_chars", "sentence_pause_ms", "stream_decode_stride_frames", "ras",
     "min_tokens_before_end", "trim_silence", "normalize", "stream_start_buffer_ms", "other"]), json_values,
    max_size=6), text=st.text(max_size=50))
def test_any_request_parameters_are_a_request_or_a_bad_request(params, text):
    try:
        spec = parse_generate_form(Form({"text": text, "params": json.dumps(params)}), GenerationParams())
    except BadRequest as err:
        assert str(err) and 400 <= err.status < 500
        return
    try:
        spec.generation.validated()
    except InputError:  # the server answers it as a 400 too (server/responses.py CLIENT_ERRORS)
        pass  # e.g. max_new_tokens 0: the server's range starts at 0, the engine's at 1


@given(params=st.text(max_size=200))
@example(params=DEEP)
@example(params='{"temperature": NaN}')
@example(params='{"max_new_tokens": 1e999}')
def test_any_params_text_is_a_request_or_a_bad_request(params):
    try:
        parse_generate_form(Form({"text": "Hello.", "params": params}), GenerationParams())
    except BadRequest:
        pass


# ---- the remote client's handling of answers ----------------------------------------------------
@given(body=st.binary(max_size=300))
@example(body=DEEP.encode())
@example(body=b'{"sample_rate": Infinity}')
def test_any_json_answer_is_an_object_or_server_misbehaved(body):
    try:
        value = parse_json_object(body, "http://s", "/health")
    except ServerMisbehaved:
        return
    assert isinstance(value, dict)
    assert "\x1b" not in json.dumps(value, ensure_ascii=False)


@given(chunks=st.lists(st.binary(max_size=5000), max_size=8), encoding=st.sampled_from(["pcm_f32le", "pcm_s16le"]))
@example(chunks=[np.full(2048, np.nan, "<f4").tobytes()], encoding="pcm_f32le")
def test_any_audio_bytes_decode_to_finite_whole_frames_or_server_misbehaved(chunks, encoding):
    decoder = PcmDecoder(encoding, 44100, "http://s")
    try:
        pieces = [decoder.feed(c) for c in chunks] + [decoder.finish()]
    except ServerMisbehaved:
        return
    assert all(len(p) % 2048 == 0 for p in pieces[:-1])
    assert all(p.dtype == np.float32 and np.all(np.isfinite(p)) for p in pieces)


@given(text=st.text(max_size=400))
@example(text="\x1b]0;title\x07\x1b[2J\x9b31m\u202eevil\r\n")
def test_server_text_is_shown_as_one_printable_line(text):
    shown = printable(text)
    assert len(shown) <= 300 and "\n" not in shown and "\r" not in shown
    assert not any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F for c in shown)
