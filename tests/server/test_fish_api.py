"""Fish Audio's API (/v1/tts, /v1/references/*) driven by the official fish-audio-sdk and by
msgpack/JSON requests as fish-speech's own clients send them, against a real server on loopback."""

from __future__ import annotations

import base64
import io
import json

import av
import numpy as np
import pytest
import soundfile as sf

fishaudio = pytest.importorskip("fishaudio")
ormsgpack = pytest.importorskip("ormsgpack")

FRAME = 2048
SMALL = {"max_new_tokens": 3, "min_tokens_before_end": 3, "seed": 1}
TRANSCRIPT = "A short sample of the reference speaker."


@pytest.fixture
def fish_server(start_server):
    """The SDK sends no seed and asks for 1024 tokens: the server's defaults make its takes
    short and reproducible."""
    from s2studio.engine.params import GenerationParams

    return start_server(generation=GenerationParams(seed=1, min_tokens_before_end=3), max_new_tokens_limit=3)


def sdk(server, api_key="unused"):
    return fishaudio.FishAudio(api_key=api_key, base_url=server.url)


def pcm16(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<i2")


def post(server, api, path: str, body: dict, packer="msgpack", headers=None, method="POST"):
    if packer == "msgpack":
        data, ctype = ormsgpack.packb(body), "application/msgpack"
    else:
        data, ctype = json.dumps(body).encode(), "application/json"
    return api.request(server, method, path, data, {"Content-Type": ctype, **(headers or {})})


def generate_pcm16(server, api, fields: dict, files=None) -> np.ndarray:
    from s2studio.audio import float_to_pcm16

    reply = api.generate(server, {"text": "Hello.", **fields}, files=files, params=SMALL)
    assert reply.status == 200, reply.body
    samples, _ = sf.read(io.BytesIO(reply.body), dtype="float32")
    return float_to_pcm16(samples)


def test_seeded_tts_equals_generate(server, api):
    """The same seeded request through /v1/tts (msgpack and JSON) and s2.cpp's /generate:
    the same samples (PCM16 of the same float take)."""
    expected = generate_pcm16(server, api, {"voice": "hope"})
    for packer in ("msgpack", "json"):
        reply = post(server, api, "/v1/tts", {"text": "Hello.", "reference_id": "hope", "format": "pcm", **SMALL},
                     packer)
        assert reply.status == 200, reply.body
        np.testing.assert_array_equal(pcm16(reply.body), expected)
    # an inline reference: the same take as the clip uploaded to /generate
    clip = api.reference.read_bytes()
    expected = generate_pcm16(server, api, {"reference_text": TRANSCRIPT}, files={"reference": ("r.wav", clip)})
    reply = post(server, api, "/v1/tts", {"text": "Hello.", "format": "pcm", "references": [
        {"audio": base64.b64encode(clip).decode(), "text": TRANSCRIPT}], **SMALL}, "json")
    assert reply.status == 200, reply.body
    np.testing.assert_array_equal(pcm16(reply.body), expected)


def test_sdk_with_an_inline_reference_encodes_it_once(fish_server, api):
    from fishaudio.types import ReferenceAudio

    clip = api.reference.read_bytes()
    client = sdk(fish_server)
    takes = [client.tts.convert(text="Hello.", format="pcm", references=[ReferenceAudio(audio=clip, text=TRANSCRIPT)])
             for _ in range(2)]
    assert takes[0] == takes[1] and len(takes[0]) == 3 * FRAME * 2
    # The second request found the clip's codes by its hash instead of encoding it again.
    fish = fish_api(fish_server)
    assert (fish.cache.misses, fish.cache.hits) == (1, 1)
    # and the cached codes give the take the clip gives when sent to /generate
    assert pcm16(takes[0]).tolist() == generate_pcm16_seeded_like_sdk(fish_server, api, clip).tolist()


def fish_api(server):
    """The server's FishApi (its cache), found through the app the ServerThread runs."""
    app = server._server.config.app
    for route in app.routes:
        if getattr(route, "path", "") == "/v1/tts":
            return route.endpoint.__self__
    raise AssertionError("no /v1/tts route")


def generate_pcm16_seeded_like_sdk(server, api, clip: bytes) -> np.ndarray:
    """/generate with what the SDK sends by default (temperature and top_p 0.7)."""
    from s2studio.audio import float_to_pcm16

    reply = api.generate(server, {"text": "Hello.", "reference_text": TRANSCRIPT}, files={"reference": ("r.wav", clip)},
                         params={"temperature": 0.7, "top_p": 0.7})
    assert reply.status == 200, reply.body
    samples, _ = sf.read(io.BytesIO(reply.body), dtype="float32")
    return float_to_pcm16(samples)


def test_sdk_with_a_reference_id(fish_server, api):
    take = sdk(fish_server).tts.convert(text="Hello.", format="wav", reference_id="hope")
    samples, rate = sf.read(io.BytesIO(take), dtype="int16")
    assert rate == 44100 and len(samples) == 3 * FRAME
    reply = api.generate(fish_server, {"text": "Hello.", "voice": "hope"},
                         params={"temperature": 0.7, "top_p": 0.7})
    from s2studio.audio import float_to_pcm16

    np.testing.assert_array_equal(samples, float_to_pcm16(sf.read(io.BytesIO(reply.body), dtype="float32")[0]))
    with pytest.raises(fishaudio.exceptions.APIError, match="no voice"):
        sdk(fish_server).tts.convert(text="Hello.", reference_id="nobody")


@pytest.mark.parametrize("fmt, container, rate", [("mp3", "mp3", 44100), ("opus", "ogg", 48000),
                                                  ("wav", "wav", 44100)])
def test_sdk_formats(fish_server, fmt, container, rate):
    data = sdk(fish_server).tts.convert(text="Hello.", format=fmt, reference_id="hope")
    with av.open(io.BytesIO(data)) as probe:
        assert container in probe.format.name
        stream = probe.streams.audio[0]
        assert stream.rate == rate
        frames = sum(frame.samples for frame in probe.decode(stream))
    assert abs(frames / rate - 3 * FRAME / 44100) < 0.08


def test_sdk_streaming_and_prosody(fish_server):
    from fishaudio.types import Prosody, TTSConfig

    chunks = list(sdk(fish_server).tts.stream(text="Hello.", format="pcm", reference_id="hope"))
    assert sum(map(len, chunks)) == 3 * FRAME * 2
    slow = sdk(fish_server).tts.convert(text="Hello.", format="pcm", reference_id="hope", speed=0.5)
    assert len(slow) == 2 * 3 * FRAME * 2  # half the speed, twice the samples
    louder = sdk(fish_server).tts.convert(text="Hello.", format="pcm", reference_id="hope",
                                          config=TTSConfig(prosody=Prosody(volume=6.0)))
    base = pcm16(b"".join(chunks)).astype(np.float64)
    gained = pcm16(louder).astype(np.float64)
    assert 1.8 < np.sqrt(np.mean(gained ** 2)) / np.sqrt(np.mean(base ** 2)) < 2.2  # +6 dB ≈ ×2


def test_wrong_api_key_is_the_sdks_authentication_error(start_server):
    server = start_server(api_key="s3cret")
    with pytest.raises(fishaudio.exceptions.AuthenticationError, match="API key"):
        sdk(server, api_key="wrong").tts.convert(text="Hello.")


def test_oversized_text_is_the_sdks_bad_request_error(start_server):
    server = start_server(max_text_chars=20)
    with pytest.raises(fishaudio.exceptions.APIError) as caught:
        sdk(server).tts.convert(text="a" * 21)
    assert caught.value.status == 400
    assert "text is 21 characters long" in caught.value.message


def test_tts_refusals(server, api):
    for body, words in (({"text": "x", "format": "ogg"}, "format"),
                        ({"text": "x", "references": [{"audio": b"xx", "text": "t"}] * 2}, "at most 1"),
                        ({"text": "x", "references": [{"audio": b"not audio", "text": "t"}]}, "references[0].audio"),
                        ({"text": "x", "references": [{"audio": b"RIFF", "text": " "}]}, "transcript"),
                        ({"text": "x", "prosody": {"speed": 9}}, "speed"),
                        ({"text": "x", "prosody": {"volume": 40}}, "volume"),
                        ({"text": "x", "mp3_bitrate": 100}, "mp3_bitrate"),
                        ({"text": "x", "chunk_length": 10**6}, "chunk_length"),
                        ({"text": "x", "latency": "fast"}, "latency"),
                        ({"text": "x", "temperature": 9}, "temperature"),
                        ({"text": "x", "reference_id": "../outside"}, "voice"),
                        ({"texts": "x"}, "text")):
        reply = post(server, api, "/v1/tts", {**body, "max_new_tokens": 3})
        assert reply.status == 400, (body, reply.body)
        assert words in reply.json()["message"], (body, reply.json())
        assert reply.json()["status"] == 400
    assert post(server, api, "/v1/tts", {"text": "x"}, headers={"Content-Type": "text/plain"}).status == 415
    bad = api.request(server, "POST", "/v1/tts", b"\xc1", {"Content-Type": "application/msgpack"})
    assert bad.status == 400 and "msgpack" in bad.json()["message"]


def test_references_add_list_delete(server, api, voice_dir):
    clip = api.reference.read_bytes()
    listed = ormsgpack.unpackb(api.request(server, "GET", "/v1/references/list").body)  # msgpack by default
    assert listed["success"] and "hope" in listed["reference_ids"]
    # fish-speech's form: multipart id, audio, text
    body, ctype = api.multipart({"id": "added", "text": TRANSCRIPT}, {"audio": ("r.wav", clip)})
    reply = api.request(server, "POST", "/v1/references/add?format=json", body, {"Content-Type": ctype})
    assert reply.status == 200, reply.body
    assert reply.json() == {"success": True, "message": "Reference voice 'added' added successfully",
                            "reference_id": "added"}
    assert (voice_dir / "added.s2voice").is_file()
    again = api.request(server, "POST", "/v1/references/add?format=json", body, {"Content-Type": ctype})
    assert again.status == 409 and again.json()["success"] is False
    # the saved voice is what the clip gives inline
    by_id = post(server, api, "/v1/tts", {"text": "Hello.", "reference_id": "added", "format": "pcm", **SMALL})
    inline = post(server, api, "/v1/tts", {"text": "Hello.", "format": "pcm", "references": [
        {"audio": clip, "text": TRANSCRIPT}], **SMALL})
    assert by_id.body == inline.body
    # msgpack add, JSON listing
    reply = post(server, api, "/v1/references/add", {"id": "added2", "audio": clip, "text": TRANSCRIPT})
    assert ormsgpack.unpackb(reply.body)["success"] is True
    listed = api.request(server, "GET", "/v1/references/list", headers={"Accept": "application/json"}).json()
    assert {"added", "added2"} <= set(listed["reference_ids"])
    for voice_id in ("added", "added2"):
        reply = post(server, api, "/v1/references/delete?format=json", {"reference_id": voice_id}, "json",
                     method="DELETE")
        assert reply.status == 200 and reply.json()["success"] is True
    assert not (voice_dir / "added.s2voice").exists()
    missing = post(server, api, "/v1/references/delete?format=json", {"reference_id": "added"}, "json",
                   method="DELETE")
    assert missing.status == 404
    for bad_id in ("../escape", "", "a/b"):
        body, ctype = api.multipart({"id": bad_id, "text": TRANSCRIPT}, {"audio": ("r.wav", clip)})
        reply = api.request(server, "POST", "/v1/references/add", body, {"Content-Type": ctype})
        assert reply.status == 400, (bad_id, reply.body)
    assert sorted(p.name for p in voice_dir.glob("*.s2voice")) == ["escape.s2voice", "hope.s2voice"]


def test_references_routes_keep_the_guards(start_server, api):
    server = start_server(api_key="s3cret")
    assert api.request(server, "GET", "/v1/references/list").status == 401
    reply = post(server, api, "/v1/references/delete", {"reference_id": "hope"}, "json", method="DELETE",
                 headers={"Origin": "https://evil.example"})
    assert reply.status == 403
