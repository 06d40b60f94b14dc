"""OpenAI-style endpoint, auth, upload limit, health and the OpenAPI document."""

from __future__ import annotations

import io
import json

import soundfile as sf

SMALL = {"max_new_tokens": 3, "min_tokens_before_end": 3, "seed": 1}


def speech(server, api, body: dict, headers=None):
    return api.request(server, "POST", "/v1/audio/speech", json.dumps(body).encode(),
                       {"Content-Type": "application/json", **(headers or {})})


def test_openai_speech_wav_and_pcm(server, api):
    reply = speech(server, api, {"model": "tts-1", "input": "Hello.", "voice": "hope", "response_format": "wav",
                                 **SMALL})
    assert reply.status == 200, reply.body
    info = sf.info(io.BytesIO(reply.body))
    assert (info.samplerate, info.subtype, info.frames) == (44100, "PCM_16", 3 * 2048)
    reply = speech(server, api, {"input": "Hello.", "response_format": "pcm", "speed": 1.0, **SMALL})
    assert reply.status == 200
    assert reply.headers["x-audio-sample-rate"] == "24000"  # OpenAI's pcm rate
    assert abs(len(reply.body) // 2 - round(3 * 2048 * 24000 / 44100)) <= 1
    reply = speech(server, api, {"input": "Hello.", "response_format": "pcm", "sample_rate": 44100, **SMALL})
    assert reply.headers["x-audio-sample-rate"] == "44100"
    assert len(reply.body) == 3 * 2048 * 2


def test_openai_speech_refusals(server, api):
    for body, message in (({"input": "x", "speed": 4.5}, "speed"),
                          ({"input": "x", "response_format": "ogg"}, "response_format"),
                          ({"voice": "hope"}, "input"),
                          ({"input": "x", "voice": "../outside"}, "voice"),
                          ({"input": 3}, "input")):
        reply = speech(server, api, {**body, **SMALL})
        assert reply.status == 400, (body, reply.body)
        assert message in reply.json()["error"]["message"], reply.body  # OpenAI's error shape
    reply = api.request(server, "POST", "/v1/audio/speech", b"{oops", {"Content-Type": "application/json"})
    assert reply.status == 400


def test_api_key(start_server, api):
    server = start_server(api_key="s3cret")
    assert api.generate(server, {"text": "x"}, params=SMALL).status == 401
    assert api.generate(server, {"text": "x"}, params=SMALL, headers={"Authorization": "Bearer wrong"}).status == 401
    reply = api.generate(server, {"text": "x"}, params=SMALL, headers={"Authorization": "Bearer s3cret"})
    assert reply.status == 200
    assert api.request(server, "GET", "/health").status == 200  # probes stay open


def test_upload_limit(start_server, api):
    server = start_server(max_upload_bytes=64 * 1024)
    big = api.reference.read_bytes()
    assert len(big) > 64 * 1024
    reply = api.generate(server, {"text": "x", "ref_text": "t"}, files={"reference": ("r.wav", big)}, params=SMALL)
    assert reply.status == 413
    # a body without Content-Length is counted while it is read
    body, ctype = api.multipart({"text": "x", "ref_text": "t"}, {"reference": ("r.wav", big)})
    import http.client

    conn = http.client.HTTPConnection(server.host, server.port, timeout=30)
    try:
        conn.request("POST", "/generate", body=iter([body[i:i + 8192] for i in range(0, len(body), 8192)]),
                     headers={"Content-Type": ctype}, encode_chunked=True)
        assert conn.getresponse().status == 413
    finally:
        conn.close()


def test_health_and_openapi(server, api):
    h = api.health(server)
    assert h["model_loaded"] is True and h["device"] == "cpu" and h["sample_rate"] == 44100
    assert h["queue"] == {"running": 0, "waiting": 0, "depth": 4}
    doc = api.request(server, "GET", "/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    assert {"/generate", "/v1/audio/speech", "/health"} <= set(doc["paths"])
    props = doc["paths"]["/generate"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]["properties"]
    assert {"text", "reference", "ref_audio", "prompt_text", "voice", "voice_dir", "params"} <= set(props)
    voices = api.request(server, "GET", "/voices").json()["voices"]
    assert "hope" in [v["id"] for v in voices]


def test_pcm_f32le_sends_the_engines_float_samples(server, api, pipeline):
    """s2studio's extension for its remote engine: raw float32, no PCM16 rounding."""
    import numpy as np

    from s2studio.engine.params import GenerationParams
    from s2studio.engine.pipeline import SynthesisRequest

    params = {**SMALL, "temperature": 0, "stream": True, "chunked": True, "output_format": "pcm_f32le"}
    reply = api.generate(server, {"text": "Hello."}, params=params)
    assert reply.status == 200, reply.body
    assert reply.headers["x-audio-encoding"] == "pcm_f32le" and reply.headers["x-audio-sample-rate"] == "44100"
    samples = np.frombuffer(reply.body, dtype="<f4")
    local = pipeline.synthesize(SynthesisRequest(text="Hello.", generation=GenerationParams(
        max_new_tokens=3, min_tokens_before_end=3, seed=1, temperature=0.0))).run_to_end()
    np.testing.assert_array_equal(samples, local.audio)


def test_uploaded_voice_file(server, api, voice_dir):
    """An .s2voice uploaded with the request (the client's own voice); a broken one is a 400."""
    data = (voice_dir / "hope.s2voice").read_bytes()
    reply = api.generate(server, {"text": "Hello."}, files={"voice_file": ("mine.s2voice", data)}, params=SMALL)
    assert reply.status == 200, reply.body
    reply = api.generate(server, {"text": "Hello."}, files={"voice_file": ("mine.s2voice", data[:60])}, params=SMALL)
    assert reply.status == 400
    assert "uploaded voice_file 'mine.s2voice'" in reply.json()["error"] and "truncated" in reply.json()["error"]
    reply = api.generate(server, {"text": "Hello.", "voice_file": "hope"}, params=SMALL)
    assert reply.status == 400 and "voice_file" in reply.json()["error"]


def test_encode_returns_the_voice_of_a_clip(server, api, pipeline):
    """POST /encode (for clients without the model): the .s2voice of the clip, the local codes."""
    import numpy as np

    from s2studio.audio import read_audio
    from s2studio.engine.voices import decode_s2voice

    clip = api.reference.read_bytes()
    body, ctype = api.multipart({"reference_text": "A short sample."}, {"reference": ("r.wav", clip)})
    reply = api.request(server, "POST", "/encode", body, {"Content-Type": ctype})
    assert reply.status == 200, reply.body
    profile = decode_s2voice(reply.body)
    assert profile.transcript == "A short sample."
    np.testing.assert_array_equal(profile.codes, pipeline.encode_reference(read_audio(api.reference)))
    body, ctype = api.multipart({}, {"reference": ("r.wav", clip)})
    reply = api.request(server, "POST", "/encode", body, {"Content-Type": ctype})
    assert reply.status == 400 and "reference_text" in reply.json()["error"]
    body, ctype = api.multipart({"reference_text": "x"}, {"reference": ("r.wav", b"not audio")})
    reply = api.request(server, "POST", "/encode", body, {"Content-Type": ctype})
    assert reply.status == 400 and "r.wav" in reply.json()["error"]


def test_encode_is_guarded_like_generate(server, api):
    """/encode decodes audio and runs the codec: the same browser and size rules as /generate."""
    clip = api.reference.read_bytes()
    reply = api.request(server, "POST", "/encode", b"reference_text=x", {"Content-Type": "text/plain"})
    assert reply.status == 415 and "multipart/form-data" in reply.json()["error"]
    body, ctype = api.multipart({"reference_text": "x" * 5000}, {"reference": ("r.wav", clip)})
    reply = api.request(server, "POST", "/encode", body, {"Content-Type": ctype})
    assert reply.status == 413 and "reference_text" in reply.json()["error"]
    body, ctype = api.multipart({"reference_text": "x"}, {"reference": ("r.wav", clip)})
    reply = api.request(server, "POST", "/encode", body, {"Content-Type": ctype, "Origin": "https://evil.example"})
    assert reply.status == 403
