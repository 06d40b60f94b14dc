"""The OpenAI route driven by the official OpenAI Python SDK against a real server on loopback."""

from __future__ import annotations

import io

import av
import numpy as np
import pytest
import soundfile as sf

openai = pytest.importorskip("openai")

SMALL = {"max_new_tokens": 3, "min_tokens_before_end": 3, "seed": 1}
NATIVE = {**SMALL, "sample_rate": 44100}  # pcm at the model's rate (OpenAI's pcm is 24 kHz)
FRAME = 2048  # samples per code frame at 44.1 kHz
TAKE = 3 * FRAME


def client(server, api_key="unused"):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=api_key, max_retries=0, timeout=60)


def decode(data: bytes) -> tuple[np.ndarray, int]:
    """Any container FFmpeg reads → mono float samples and rate."""
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        pieces = []
        for frame in container.decode(stream):
            scale = {"s16": 32768.0, "s16p": 32768.0, "s32": 2.0 ** 31, "s32p": 2.0 ** 31}.get(frame.format.name, 1.0)
            pieces.append(frame.to_ndarray().astype(np.float32).reshape(-1) / np.float32(scale))
        return np.concatenate(pieces), stream.rate


def reference_take(server, api) -> np.ndarray:
    """The same seeded take through s2.cpp's /generate (float WAV)."""
    reply = api.generate(server, {"text": "Hello.", "voice": "hope"}, params=SMALL)
    assert reply.status == 200
    samples, _ = sf.read(io.BytesIO(reply.body), dtype="float32")
    return samples


def test_the_sdk_default_call_works(server):
    # What every OpenAI client sends by default: model tts-1, voice alloy, mp3.
    reply = client(server).audio.speech.create(model="tts-1", voice="alloy", input="Hello.", extra_body=SMALL)
    assert reply.response.headers["content-type"] == "audio/mpeg"
    samples, rate = decode(reply.content)
    assert rate == 44100
    assert abs(len(samples) - TAKE) <= 2 * 1152 + 529  # LAME's padding, at most two frames and its delay
    assert np.abs(samples).max() > 0


@pytest.mark.parametrize("fmt, container, rate", [("mp3", "mp3", 44100), ("opus", "ogg", 48000),
                                                  ("aac", "aac", 44100), ("flac", "flac", 44100),
                                                  ("wav", "wav", 44100)])
def test_every_format_decodes_to_the_take(server, api, fmt, container, rate):
    expected = reference_take(server, api)
    reply = client(server).audio.speech.create(model="tts-1", voice="hope", input="Hello.", response_format=fmt,
                                               extra_body=SMALL)
    with av.open(io.BytesIO(reply.content)) as probe:
        assert container in probe.format.name
    samples, got_rate = decode(reply.content)
    assert got_rate == rate
    if fmt in ("flac", "wav"):  # lossless PCM16: the take to within PCM16 rounding
        assert len(samples) == TAKE
        np.testing.assert_allclose(samples, np.clip(expected, -1, 1), atol=1.5 / 32768)
    else:  # lossy: as long as the take (within the codec's padding), same energy
        assert abs(len(samples) / rate - TAKE / 44100) < 0.08
        ratio = np.sqrt(np.mean(samples ** 2)) / np.sqrt(np.mean(expected ** 2))
        assert 0.5 < ratio < 1.5, ratio


def test_pcm_is_raw_pcm16_of_the_take(server, api):
    from s2studio.audio import float_to_pcm16, resample

    expected = reference_take(server, api)
    sdk = client(server)
    reply = sdk.audio.speech.create(model="tts-1", voice="hope", input="Hello.", response_format="pcm",
                                    extra_body=NATIVE)
    assert reply.response.headers["x-audio-sample-rate"] == "44100"
    np.testing.assert_array_equal(np.frombuffer(reply.content, dtype="<i2"), float_to_pcm16(expected))
    # OpenAI's own pcm: 24 kHz, the take resampled (soxr, streamed in pieces: within a step or two)
    reply = sdk.audio.speech.create(model="tts-1", voice="hope", input="Hello.", response_format="pcm",
                                    extra_body=SMALL)
    assert reply.response.headers["x-audio-sample-rate"] == "24000"
    pcm24 = np.frombuffer(reply.content, dtype="<i2").astype(np.float32) / 32768
    reference24 = resample(expected, 44100, 24000)
    assert abs(len(pcm24) - len(reference24)) <= 1
    n = min(len(pcm24), len(reference24))
    assert np.abs(pcm24[:n] - reference24[:n]).max() < 0.01


def test_streaming_response_arrives_in_pieces(server):
    sdk = client(server)
    with sdk.audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input="Hello.", response_format="pcm",
            extra_body={**NATIVE, "max_new_tokens": 8, "min_tokens_before_end": 8}) as response:
        assert response.headers.get("transfer-encoding") == "chunked"
        pieces = [piece for piece in response.iter_bytes() if piece]
    assert sum(map(len, pieces)) == 8 * FRAME * 2
    assert len(pieces) >= 2  # sent as decoded (stride 4 frames), not in one piece at the end


def test_stock_voices_and_the_voice_map(start_server, api):
    # Unmapped stock names are the default voice (here the model's own), mapped ones the voice.
    from s2studio.server.voice_map import VoiceMap

    server = start_server(voice_map=VoiceMap(entries=(("nova", "hope"),)))
    sdk = client(server)
    takes = {voice: sdk.audio.speech.create(model="tts-1", voice=voice, input="Hello.", response_format="pcm",
                                            extra_body=SMALL).content
             for voice in ("alloy", "echo", "nova", "hope")}
    assert takes["alloy"] == takes["echo"]  # both: the model's own voice
    assert takes["nova"] == takes["hope"]  # the map: nova is hope
    assert takes["alloy"] != takes["hope"]
    with pytest.raises(openai.BadRequestError, match="no voice"):
        sdk.audio.speech.create(model="tts-1", voice="not-a-voice", input="Hello.", extra_body=SMALL)


def test_default_voice_for_stock_names(start_server):
    from s2studio.server.voice_map import VoiceMap

    server = start_server(voice_map=VoiceMap(default="hope"))
    sdk = client(server)
    alloy = sdk.audio.speech.create(model="tts-1", voice="alloy", input="Hi.", response_format="pcm",
                                    extra_body=SMALL).content
    hope = sdk.audio.speech.create(model="tts-1", voice="hope", input="Hi.", response_format="pcm",
                                   extra_body=SMALL).content
    assert alloy == hope


@pytest.mark.parametrize("speed", [0.25, 0.5, 2.0, 4.0])
def test_speed_stretches_the_take(server, speed):
    reply = client(server).audio.speech.create(model="tts-1", voice="hope", input="Hello.", response_format="wav",
                                               speed=speed, extra_body=SMALL)
    samples, rate = decode(reply.content)
    # atempo: the duration divided by the speed, the rate unchanged.
    assert rate == 44100
    assert len(samples) == round(TAKE / speed)
    assert np.abs(samples).max() > 0
    with pytest.raises(openai.BadRequestError, match="speed"):
        client(server).audio.speech.create(model="tts-1", voice="hope", input="x", speed=4.5, extra_body=SMALL)


def test_instructions_are_accepted_and_said_to_be_ignored(server):
    reply = client(server).audio.speech.create(model="gpt-4o-mini-tts", voice="coral", input="Hello.",
                                               instructions="Speak cheerfully.", response_format="pcm",
                                               extra_body=NATIVE)
    assert reply.response.headers["x-s2-ignored"] == "instructions"
    assert len(reply.content) == TAKE * 2


def test_models_list_and_retrieve(server):
    sdk = client(server)
    ids = [model.id for model in sdk.models.list()]
    assert ids[0] == "model.gguf" and {"tts-1", "tts-1-hd", "gpt-4o-mini-tts"} <= set(ids)
    assert sdk.models.retrieve("tts-1").id == "tts-1"
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        sdk.models.retrieve("whisper-1")


def test_wrong_api_key_is_the_sdks_authentication_error(start_server):
    server = start_server(api_key="s3cret")
    with pytest.raises(openai.AuthenticationError) as caught:
        client(server, api_key="wrong").audio.speech.create(model="tts-1", voice="alloy", input="x")
    assert caught.value.body["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        client(server, api_key="wrong").models.list()
    reply = client(server, api_key="s3cret").audio.speech.create(model="tts-1", voice="alloy", input="x",
                                                                 response_format="pcm", extra_body=NATIVE)
    assert len(reply.content) == TAKE * 2


def test_oversized_input_is_the_sdks_bad_request_error(start_server):
    server = start_server(max_text_chars=50)
    with pytest.raises(openai.BadRequestError) as caught:
        client(server).audio.speech.create(model="tts-1", voice="alloy", input="a" * 51)
    assert "input is 51 characters long" in caught.value.message
    assert caught.value.body["type"] == "invalid_request_error"


@pytest.mark.parametrize("path, body", [
    ("/v1/audio/speech", {"input": "A long take.", "voice": "alloy", "response_format": "mp3"}),
    ("/v1/tts", {"text": "A long take.", "reference_id": "hope", "format": "opus"})])
def test_hanging_up_mid_stream_cancels_the_take(server, api, path, body):
    """The compat routes' encoded streams cancel their job as /generate's do."""
    import http.client
    import json

    conn = http.client.HTTPConnection(server.host, server.port, timeout=30)
    conn.request("POST", path, body=json.dumps({**body, "max_new_tokens": 4000, "min_tokens_before_end": 4000}),
                 headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200 and response.read1(4096)  # audio is flowing
    conn.close()
    assert api.wait_until(lambda: api.health(server)["queue"]["running"] == 0, timeout=10)


def test_openais_voice_object(server):
    plain = client(server).audio.speech.create(model="tts-1", voice="hope", input="Hi.", response_format="pcm",
                                               extra_body=SMALL).content
    as_object = client(server).audio.speech.create(model="tts-1", voice={"id": "hope"}, input="Hi.",
                                                   response_format="pcm", extra_body=SMALL).content
    assert plain == as_object
