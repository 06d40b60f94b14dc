"""Server-side limits: every number a client sends has a range (400 naming the key above it),
texts have a length limit (413), threads are the operator's, malformed bodies are 400 JSON."""

from __future__ import annotations

import json
import os

import pytest

SMALL = {"max_new_tokens": 2, "min_tokens_before_end": 2, "seed": 1}


def speech(server, api, body: bytes):
    return api.request(server, "POST", "/v1/audio/speech", body, {"Content-Type": "application/json"})


def assert_error(reply, status: int, *words: str):
    assert reply.status == status, (reply.status, reply.body[:300])
    assert reply.headers["content-type"] == "application/json"
    message = reply.json()["error"]
    if isinstance(message, dict):  # the OpenAI routes' shape
        message = message["message"]
    for word in words:
        assert word in message, message
    assert "Traceback" not in message


@pytest.mark.parametrize("key,value", [
    ("max_new_tokens", 10**9),  # was a 500 with a C++-sized allocation and a stack trace
    ("max_new_tokens", 4097),  # the tiny model's context is 4096
    ("min_tokens_before_end", 10**9),
    ("temperature", 100.0), ("top_p", 1.5), ("top_k", 10**6),
    ("sentence_pause_ms", 10**7),  # was an out-of-memory: hours of silence
    ("segment_max_chars", 10**6),
    ("stream_decode_stride_frames", 10**6), ("stream_decode_stride", 10**6),
    ("stream_start_buffer_ms", 10**9),
    ("stream_holdback_frames", 10**9), ("codec_context_frames", 10**9), ("codec_decode_context_frames", 10**9),
])
def test_numbers_above_their_range_are_400_naming_the_key(server, api, key, value):
    reply = api.generate(server, {"text": "x"}, params={**SMALL, key: value})
    assert_error(reply, 400, key, "at most")


def test_nan_is_refused(server, api):
    reply = api.generate(server, {"text": "x", "params": '{"temperature": NaN, "max_new_tokens": 2}'})
    assert_error(reply, 400, "temperature")


def test_speech_extensions_have_the_same_ranges(server, api):
    reply = speech(server, api, json.dumps({"input": "x", "max_new_tokens": 10**9}).encode())
    assert_error(reply, 400, "max_new_tokens")
    reply = speech(server, api, json.dumps({"input": "x", "top_p": 2}).encode())
    assert_error(reply, 400, "top_p")


def test_values_at_the_top_of_the_range_are_accepted(server, api):
    params = {**SMALL, "temperature": 5, "top_p": 1, "top_k": 4096, "sentence_pause_ms": 10_000,
              "stream_holdback_frames": 4096}
    assert api.generate(server, {"text": "x"}, params=params).status == 200


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts the process's threads via /proc")
def test_client_cannot_choose_the_thread_count(server, api):
    # The server runs with -threads 1. s2.cpp's n_threads made the worker start that many
    # OpenMP threads ({"n_threads": 20000} started 20 000); the operator's count must stand.
    def threads() -> int:
        return len(os.listdir("/proc/self/task"))

    assert api.generate(server, {"text": "x"}, params=SMALL).status == 200  # warm: pools exist
    before = threads()
    reply = api.generate(server, {"text": "x"}, params={**SMALL, "n_threads": 64})
    assert reply.status == 200, reply.body
    assert threads() - before < 16, (before, threads())
    reply = api.generate(server, {"text": "x"}, params={**SMALL, "n_threads": "many"})
    assert_error(reply, 400, "n_threads")  # still type-checked, as s2.cpp


def test_text_length_limits(server, api):
    assert_error(api.generate(server, {"text": "a" * 10_001}, params=SMALL), 413, "text", "10000")
    reply = api.generate(server, {"text": "x", "ref_text": "b" * 1001},
                         files={"reference": ("r.wav", api.reference.read_bytes())}, params=SMALL)
    assert_error(reply, 413, "reference_text", "1000")
    # OpenAI's route answers too long an input with a 400, as OpenAI does (the SDK's BadRequestError)
    assert_error(speech(server, api, json.dumps({"input": "a" * 10_001}).encode()), 400, "input", "10000")


def test_text_limits_are_configurable(start_server, api):
    server = start_server(max_text_chars=5)
    assert_error(api.generate(server, {"text": "abcdef"}, params=SMALL), 413, "at most 5")
    assert api.generate(server, {"text": "abcde"}, params=SMALL).status == 200


def test_deeply_nested_json_is_a_400(server, api):
    deep = "[" * 100_000
    assert_error(api.generate(server, {"text": "x", "params": deep}), 400, "JSON")
    assert_error(speech(server, api, deep.encode()), 400, "JSON")


def test_framework_errors_are_json(server, api):
    # a multipart body the parser refuses (too many fields) was text/plain
    body, ctype = api.multipart({f"f{i}": "v" for i in range(100)} | {"text": "x"})
    assert_error(api.request(server, "POST", "/generate", body, {"Content-Type": ctype}), 400)
    assert_error(api.request(server, "GET", "/nowhere"), 404)
    assert_error(api.request(server, "GET", "/generate"), 405)
    # a request line h11 cannot parse
    import socket

    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        answer = sock.recv(65536)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400") and b"application/json" in head.lower()
    assert "error" in json.loads(body)


def test_errors_do_not_reveal_server_paths(server, api, voice_dir):
    secrets = {str(voice_dir), str(voice_dir.parent)}
    for fields in ({"voice": "nobody"}, {"voice": "escape"}, {"voice": "nested/none.s2voice"},
                   {"voice": "hope", "voice_dir": "/etc"}):
        reply = api.generate(server, {"text": "x", **fields}, params=SMALL)
        assert reply.status == 400, reply.body
        message = reply.json()["error"]
    if isinstance(message, dict):  # the OpenAI routes' shape
        message = message["message"]
        assert not any(s in message for s in secrets), message


def test_full_queue_is_503_before_the_upload_is_decoded(start_server, api):
    from s2studio.server.jobs import QueueFull

    server = start_server(queue_depth=0)
    queue = server_queue(server)
    with queue.admission():  # a request holding the only place
        reply = api.generate(server, {"text": "x", "ref_text": "t"},
                             files={"reference": ("r.wav", b"not audio")}, params=SMALL)
        # old code decoded (400: not audio) before asking the queue
        assert_error(reply, 503, "busy")
        assert reply.headers["retry-after"].isdigit()
    assert QueueFull  # the type the queue raises (mapped to 503)


def server_queue(server):
    return server._server.config.app.state.server.queue


def test_reference_declaring_too_much_audio_is_refused_unread(server, api):
    import io

    import numpy as np
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, np.zeros((65_535, 8), dtype=np.float32), 655_350, format="FLAC")
    reply = api.generate(server, {"text": "x", "ref_text": "t"}, files={"reference": ("big.flac", buf.getvalue())},
                         params=SMALL)
    assert_error(reply, 400, "8 channels")


def test_openapi_states_the_ranges(server, api):
    doc = api.request(server, "GET", "/openapi.json").json()
    props = doc["components"]["schemas"]["GenerateParams"]["properties"]
    assert props["max_new_tokens"]["maximum"] == 4096  # the loaded (tiny) model's context
    assert (props["top_p"]["maximum"], props["sentence_pause_ms"]["maximum"]) == (1.0, 10_000)
    form = doc["paths"]["/generate"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert form["properties"]["text"]["maxLength"] == 10_000
    assert {"403", "408", "413", "415"} <= set(doc["paths"]["/generate"]["post"]["responses"])
