"""POST /generate against a real server on loopback with the tiny model."""

from __future__ import annotations

import io
import struct
import time

import numpy as np
import soundfile as sf

SAMPLES_PER_FRAME = 2048  # the tiny codec's hop, as the real one's
FIXED = {"temperature": 0.7, "seed": 7}


def frames(n: int) -> dict:
    """n frames exactly: the model may not end before min_tokens_before_end."""
    return {**FIXED, "max_new_tokens": n, "min_tokens_before_end": n}


def test_one_shot_is_a_float_wav_of_the_take(server, api):
    reply = api.generate(server, {"text": "Hello world."}, params=frames(6))
    assert reply.status == 200, reply.body
    assert reply.headers["content-type"] == "audio/wav"
    assert 'filename="generated_audio.wav"' in reply.headers["content-disposition"]
    audio, rate = sf.read(io.BytesIO(reply.body), dtype="float32")
    info = sf.info(io.BytesIO(reply.body))
    assert (rate, info.subtype, info.channels) == (44100, "FLOAT", 1)
    assert len(audio) == 6 * SAMPLES_PER_FRAME
    assert np.abs(audio).max() > 0


def test_same_seed_same_audio(server, api):
    a = api.generate(server, {"text": "Same seed."}, params=frames(4))
    b = api.generate(server, {"text": "Same seed."}, params=frames(4))
    assert a.status == b.status == 200
    # Same codes; the float audio may differ in the last bits between runs (MKL's results
    # depend on memory alignment unless its bitwise-reproducible mode is forced).
    audio_a, audio_b = (sf.read(io.BytesIO(r.body), dtype="float32")[0] for r in (a, b))
    assert audio_a.shape == audio_b.shape
    np.testing.assert_allclose(audio_a, audio_b, atol=1e-5, rtol=0)
    other = api.generate(server, {"text": "Same seed."}, params={**frames(4), "seed": FIXED["seed"] + 1})
    audio_c = sf.read(io.BytesIO(other.body), dtype="float32")[0]
    assert np.abs(audio_c - audio_a).max() > 1e-3  # the seed does matter


def test_stream_without_chunked_is_a_finalized_pcm16_wav(server, api):
    reply = api.generate(server, {"text": "Hello."}, params={**frames(5), "stream": True})
    assert reply.status == 200
    riff, data = struct.unpack_from("<I", reply.body, 4)[0], struct.unpack_from("<I", reply.body, 40)[0]
    assert (riff, data) == (len(reply.body) - 8, len(reply.body) - 44)
    assert sf.info(io.BytesIO(reply.body)).subtype == "PCM_16"
    assert data == 5 * SAMPLES_PER_FRAME * 2


def test_stream_raw_pcm_has_audio_headers(server, api):
    reply = api.generate(server, {"text": "Hello."}, params={**frames(3), "stream": True, "output_format": "pcm"})
    assert reply.status == 200
    assert reply.headers["x-audio-sample-rate"] == "44100"
    assert reply.headers["x-audio-channels"] == "1"
    assert reply.headers["x-audio-encoding"] == "pcm_s16le"
    assert reply.headers["content-type"].startswith("audio/L16")
    assert len(reply.body) == 3 * SAMPLES_PER_FRAME * 2


def test_chunked_pcm_arrives_in_pieces_while_generating(server, api):
    params = {**frames(60), "stream": True, "chunked": True, "output_format": "pcm_s16le", "low_latency": True}
    conn, resp = api.open_stream(server, {"text": "Streaming, piece by piece."}, params)
    try:
        assert resp.status == 200
        assert resp.getheader("X-Audio-Encoding") == "pcm_s16le"
        first = resp.read1(65536)
        assert first
        # The first bytes are here while the model is still generating the rest.
        assert api.health(server)["queue"]["running"] == 1
        pieces, total = 1, len(first)
        for _ in range(10_000):  # bounded: the body is 60 frames
            piece = resp.read1(65536)
            if not piece:
                break
            pieces, total = pieces + 1, total + len(piece)
    finally:
        conn.close()
    assert pieces >= 3
    assert total == 60 * SAMPLES_PER_FRAME * 2


def test_chunked_wav_starts_with_a_placeholder_header(server, api):
    params = {**frames(8), "stream": True, "chunked": True}
    conn, resp = api.open_stream(server, {"text": "Live WAV."}, params)
    try:
        body = resp.read()
    finally:
        conn.close()
    from s2studio.audio import pcm16_wav_header

    assert resp.status == 200
    assert body[:44] == pcm16_wav_header(44100, data_bytes=None)
    assert len(body) == 44 + 8 * SAMPLES_PER_FRAME * 2


def test_voice_by_id_and_by_path(server, api):
    for voice in ("hope", "hope.s2voice", "nested/deep.s2voice"):
        reply = api.generate(server, {"text": "In her voice.", "voice": voice}, params=frames(3))
        assert reply.status == 200, (voice, reply.body)
    reply = api.generate(server, {"text": "In her voice.", "voice": "deep", "voice_dir": "nested"}, params=frames(3))
    assert reply.status == 200, reply.body


def test_reference_audio_with_each_alias(server, api):
    ref = api.reference.read_bytes()
    for field, text_field in (("reference", "reference_text"), ("ref_audio", "ref_text"),
                              ("prompt_audio", "prompt_text"), ("reference_audio", "ref_text")):
        reply = api.generate(server, {"text": "Cloned.", text_field: "A short sample."},
                             files={field: ("reference.wav", ref)}, params=frames(3))
        assert reply.status == 200, (field, reply.body)


def test_segmented_request(server, api):
    params = {**frames(3), "segment_sentences": True, "sentence_pause_ms": 100, "stream": True,
              "output_format": "pcm"}
    reply = api.generate(server, {"text": "One. Two."}, params=params)
    assert reply.status == 200, reply.body
    # Two segments of 3 frames (each trimmed of trailing silence, never below 0.1 s) + 100 ms.
    assert len(reply.body) >= 2 * 4410 * 2 + 4410 * 2


def test_bad_requests_are_400(server, api):
    cases = [
        ({}, None, None, "No text field"),
        ({"text": "x", "params": "{not json"}, None, None, "JSON parse error"),
        ({"text": "x", "params": "[1, 2]"}, None, None, "must be an object"),
        ({"text": "x"}, None, {"max_new_tokens": "many"}, "type must be number"),
        ({"text": "x"}, None, {"temperature": True}, "type must be number"),
        ({"text": "x"}, None, {"stream": 1}, "type must be boolean"),
        ({"text": "x"}, None, {"output_format": 5}, "type must be string"),
        ({"text": "   "}, None, frames(2), "no text"),
        ({"text": "x"}, {"reference": ("r.wav", b"RIFF....")}, frames(2), "reference_text"),
        ({"text": "x", "ref_text": "t"}, {"reference": ("r.wav", b"not audio at all")}, frames(2), "Audio"),
        ({"text": "x", "reference": "reference.wav", "ref_text": "t"}, None, frames(2), "file upload"),
        ({"text": "x", "voice": "nobody"}, None, frames(2), "no voice"),
        ({"text": "x"}, None, {"seed": -1}, "seed"),
    ]
    for fields, files, params, message in cases:
        reply = api.generate(server, fields, files=files, params=params)
        assert reply.status == 400, (fields, params, reply.status, reply.body)
        assert message.lower() in reply.json()["error"].lower(), (fields, reply.body)


def test_voice_paths_cannot_leave_the_voice_folder(server, api, voice_dir):
    outside = voice_dir.parent / "outside.s2voice"
    cases = [{"voice": "../outside.s2voice"}, {"voice": "../outside"}, {"voice": str(outside)},
             {"voice": "escape"}, {"voice": "escape.s2voice"}, {"voice": "nested/../../outside.s2voice"},
             {"voice": "outside", "voice_dir": ".."}, {"voice": "outside", "voice_dir": str(voice_dir.parent)},
             {"voice": "..\\outside.s2voice"}, {"voice": "hope", "voice_dir": "/etc"}]
    for fields in cases:
        reply = api.generate(server, {"text": "x", **fields}, params=frames(2))
        assert reply.status == 400, (fields, reply.body)
    # params' voice / voice_dir keys go through the same checks
    reply = api.generate(server, {"text": "x"}, params={**frames(2), "voice": str(outside)})
    assert reply.status == 400
    reply = api.generate(server, {"text": "x"}, params={**frames(2), "voice_dir": "../"})
    assert reply.status == 400


def test_disconnect_while_streaming_cancels_the_job(server, api):
    params = {**frames(4000), "stream": True, "chunked": True, "output_format": "pcm", "low_latency": True}
    conn, resp = api.open_stream(server, {"text": "A very long take."}, params)
    assert resp.status == 200
    assert resp.read1(4096)
    conn.close()  # hang up mid-stream
    t0 = time.monotonic()
    reply = api.generate(server, {"text": "Next."}, params=frames(2), timeout=20)
    assert reply.status == 200
    # 4000 frames take a minute here; the next request must not have waited for them.
    assert time.monotonic() - t0 < 10
    # (the worker marks itself idle just after handing over the last event)
    assert api.wait_until(lambda: api.health(server)["queue"] == {"running": 0, "waiting": 0, "depth": 4})


def test_disconnect_before_the_first_byte_cancels_the_job(server, api):
    body, ctype = api.multipart({"text": "A long one-shot take.", "params": '{"max_new_tokens":4000,'
                                 '"min_tokens_before_end":4000}'})
    import http.client

    conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
    conn.request("POST", "/generate", body=body, headers={"Content-Type": ctype})
    assert api.wait_until(lambda: api.health(server)["queue"]["running"] == 1)
    conn.close()
    assert api.wait_until(lambda: api.health(server)["queue"]["running"] == 0, timeout=10)
    assert api.generate(server, {"text": "Next."}, params=frames(2), timeout=20).status == 200
