"""The remote engine against a real ``s2studio serve`` on loopback: same samples as a local take,
cancel closes the stream and ends the server's job, and failures are clear (or retried)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from s2studio.engine.params import GenerationParams
from s2studio.engine.pipeline import PostProcess, Segmentation, SynthesisRequest
from s2studio.errors import InputError
from s2studio.remote import RemoteEngine, RemoteSettings, ServerDropped, ServerRefused, ServerUnreachable

GREEDY = GenerationParams(max_new_tokens=24, temperature=0.0, seed=7)
LONG = GenerationParams(max_new_tokens=600, min_tokens_before_end=600, temperature=0.0, seed=3)


def take(engine, request):
    job = engine.synthesize(request)
    chunks = list(job)
    return chunks, job.result


def wait_until(predicate, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


CASES = {
    "plain": dict(text="Hello there, friend."),
    "saved voice, two sentences, trimmed": dict(
        text="Hello there. How are you today?", voice="hope",
        segmentation=Segmentation(enabled=True, pause_ms=120), postprocess=PostProcess(trim_silence=True)),
    "reference audio, normalized": dict(text="Nice to meet you.", reference_text="A short sample of the reference "
                                        "speaker.", postprocess=PostProcess(normalize=True)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_remote_take_has_the_local_take_samples(case, served, local_pipeline, voices):
    kwargs = dict(CASES[case])
    if "reference_text" in kwargs:
        kwargs["reference_audio"] = _reference(local_pipeline)
    request = SynthesisRequest(generation=GREEDY, stream_stride=4, **kwargs)
    local_pipeline._voices = voices  # the local side reads the same library the remote side uploads from
    local_chunks, local = take(local_pipeline, request)
    remote_chunks, remote = take(RemoteEngine(RemoteSettings(served.url), voices=voices), request)

    assert remote.sample_rate == local.sample_rate
    assert len(remote.audio) == len(local.audio) > 0
    np.testing.assert_array_equal(remote.audio, local.audio)  # float32 on the wire: no rounding at all
    assert remote.seed == local.seed and [s.seed for s in remote.segments] == [s.seed for s in local.segments]
    assert [(s.start_sample, s.end_sample, s.stop_reason) for s in remote.segments] == \
        [(s.start_sample, s.end_sample, s.stop_reason) for s in local.segments]
    # The stream itself: the same samples, segment by segment, pauses included.
    np.testing.assert_array_equal(np.concatenate([c.samples for c in remote_chunks]),
                                  np.concatenate([c.samples for c in local_chunks]))
    assert {c.segment for c in remote_chunks} == {c.segment for c in local_chunks}


@pytest.mark.parametrize("wire_format", ["pcm_s16le", "wav"])
def test_pcm16_wire_formats_round_to_16_bits_and_nothing_else(wire_format, served, local_pipeline):
    """PCM16 on the wire (smaller; ``wav`` is what s2.cpp's server streams): each sample is the
    local one rounded as the server's float_to_pcm16 rounds it, so at most 1/32768 off."""
    from s2studio.audio import float_to_pcm16

    request = SynthesisRequest(text="Hello there, friend.", generation=GREEDY, stream_stride=4)
    _, local = take(local_pipeline, request)
    _, remote = take(RemoteEngine(RemoteSettings(served.url, wire_format=wire_format)), request)
    np.testing.assert_array_equal(remote.audio, float_to_pcm16(local.audio).astype(np.float32) / 32768)
    assert np.max(np.abs(remote.audio - local.audio)) <= 1 / 32768


def _reference(pipeline):
    from pathlib import Path

    from s2studio.audio import read_audio

    return read_audio(Path(pipeline.settings.model_path).parent / "reference.wav")


def test_cancel_closes_the_stream_and_ends_the_server_job(served):
    engine = RemoteEngine(RemoteSettings(served.url))
    job = engine.synthesize(SynthesisRequest(text="A long take that is stopped early.", generation=LONG,
                                             stream_stride=1))
    chunks = iter(job)
    first = next(chunks)
    assert served.health()["queue"]["running"] == 1
    job.cancel()
    rest = list(chunks)
    result = job.result
    assert result.cancelled and result.stop_reason == "cancelled"
    got = len(first.samples) + sum(len(c.samples) for c in rest)
    assert len(result.audio) == got < 600 * 2048
    # The server noticed the closed connection and let go of the model: nothing runs any more.
    assert wait_until(lambda: served.health()["queue"] == {"running": 0, "waiting": 0, "depth": 4})


def test_unreachable_server_is_one_clear_error():
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(ServerUnreachable, match=f"Cannot reach the server at {url} .connection refused"):
        list(RemoteEngine(RemoteSettings(url, connect_timeout_s=5)).synthesize(SynthesisRequest(text="Hi.")))


def test_server_refusal_carries_its_message(served, voices):
    engine = RemoteEngine(RemoteSettings(served.url), voices=voices)
    with pytest.raises(ServerRefused, match=r"refused the request \(400\): .*nobody") as info:
        list(engine.synthesize(SynthesisRequest(text="Hi.", voice="nobody", generation=GREEDY)))
    assert info.value.status == 400
    # s2.cpp's path spelling is no local id: the server resolves it (inside its voice folder only).
    with pytest.raises(ServerRefused, match=r"\(400\): .*outside"):
        list(engine.synthesize(SynthesisRequest(text="Hi.", voice="../x.s2voice", generation=GREEDY)))


def test_killed_server_mid_take_is_reported(start_serve):
    server = start_serve()
    job = RemoteEngine(RemoteSettings(server.url)).synthesize(
        SynthesisRequest(text="This server goes away mid-take.", generation=LONG, stream_stride=1))
    chunks = iter(job)
    next(chunks)
    server.kill()
    with pytest.raises(ServerDropped, match=rf"The server at {server.url} stopped answering after \d+\.\d s of "
                                            r"audio \(the connection closed\)"):
        list(chunks)


def test_a_second_server_finishes_the_take_of_a_killed_one(start_serve, served, local_pipeline, caplog):
    doomed = start_serve()
    request = SynthesisRequest(text="First sentence here. And the second one.", generation=GenerationParams(
        max_new_tokens=80, min_tokens_before_end=80, temperature=0.0, seed=11),
        segmentation=Segmentation(enabled=True), stream_stride=2)
    # Both idle: the first server listed is chosen first.
    job = RemoteEngine(RemoteSettings(f"{doomed.url},{served.url}")).synthesize(request)
    chunks = iter(job)
    received = [next(chunks)]
    assert received[0].segment == 0
    doomed.kill()
    with caplog.at_level("WARNING", logger="s2studio.remote.engine"):
        received += list(chunks)
    assert f"The server at {doomed.url} stopped answering" in caplog.text
    assert "retrying segment 1 on another server" in caplog.text  # the sentence it was speaking
    local_chunks, local = take(local_pipeline, request)
    np.testing.assert_array_equal(job.result.audio, local.audio)
    np.testing.assert_array_equal(np.concatenate([c.samples for c in received]),
                                  np.concatenate([c.samples for c in local_chunks]))
    assert [s.index for s in job.result.segments] == [0, 1]


def test_least_busy_server_is_chosen(served, keyed):
    engine = RemoteEngine(RemoteSettings(f"{keyed.url},{served.url}", api_key="secret"))
    # Make the first listed server busy with a long take of its own.
    busy = RemoteEngine(RemoteSettings(keyed.url, api_key="secret")).synthesize(
        SynthesisRequest(text="Keeping this server busy.", generation=LONG, stream_stride=1))
    it = iter(busy)
    next(it)
    try:
        assert engine.pick_server(set()).url == served.url
    finally:
        busy.cancel()
        list(it)


def test_api_key_errors(keyed):
    server = keyed
    request = SynthesisRequest(text="Hi.", generation=GREEDY)
    with pytest.raises(ServerRefused, match=rf"The server at {server.url} needs an API key \(401\)"):
        list(RemoteEngine(RemoteSettings(server.url)).synthesize(request))
    with pytest.raises(ServerRefused, match="rejected the API key"):
        list(RemoteEngine(RemoteSettings(server.url, api_key="wrong")).synthesize(request))
    _, result = take(RemoteEngine(RemoteSettings(server.url, api_key="secret")), request)
    assert len(result.audio) > 0


def test_settings_are_checked():
    with pytest.raises(InputError, match="must start with http"):
        RemoteSettings("ftp://host").validated()
    with pytest.raises(InputError, match="read_timeout_s must be between 1 and 3600"):
        RemoteSettings("http://127.0.0.1:1", read_timeout_s=0).validated()
    with pytest.raises(InputError, match="wire_format must be one of pcm_f32le, pcm_s16le, wav"):
        RemoteSettings("http://127.0.0.1:1", wire_format="mp3").validated()
    assert "secret" not in repr(RemoteSettings("http://h:1", api_key="secret"))


def test_server_addresses():
    from s2studio.remote import parse_server_list, parse_server_url

    assert parse_server_url("gpu-box").url == "http://gpu-box:3030"  # the server's default port
    assert parse_server_url(" https://tts.example.org/s2/ ").url == "https://tts.example.org:443/s2"
    assert parse_server_url("[::1]:4000").url == "http://[::1]:4000" and parse_server_url("[::1]:4000").is_local
    assert parse_server_url("http://127.0.0.1:1").insecure_warning is None
    assert "plain HTTP" in parse_server_url("http://10.0.0.5:3030").insecure_warning
    assert parse_server_url("https://10.0.0.5").insecure_warning is None
    assert [a.url for a in parse_server_list("a:1, b:2,a:1")] == ["http://a:1", "http://b:2"]
    for bad, why in (("http://user:pw@h:1", "no user"), ("h:99999", "not valid"), ("http://a b", "not a host"),
                     ("", "empty"), ("h:1?x=1", "no user, query")):
        with pytest.raises(InputError, match=why):
            parse_server_url(bad)


def test_pcm_decoder_handles_split_reads_and_a_live_wav_header():
    """Bytes arrive cut anywhere; chunks come out in whole frames; a live WAV header (s2.cpp's
    stream, sizes 0x7FFFFFF0) is recognised and skipped, and its rate must be the model's."""
    from s2studio.audio import float_to_pcm16, pcm16_wav_header
    from s2studio.remote.answers import ServerMisbehaved
    from s2studio.remote.engine import PcmDecoder

    rng = np.random.default_rng(0)
    audio = (rng.standard_normal(3 * 2048 + 100) * 0.2).astype(np.float32)
    pcm = float_to_pcm16(audio).astype("<i2").tobytes()
    for encoding, data, want in (
            ("pcm_f32le", audio.astype("<f4").tobytes(), audio),
            ("pcm_s16le", pcm16_wav_header(44100, None) + pcm, float_to_pcm16(audio) / np.float32(32768)),
            ("pcm_s16le", pcm, float_to_pcm16(audio) / np.float32(32768))):
        decoder = PcmDecoder(encoding, 44100)
        pieces = [decoder.feed(data[i:i + 1000]) for i in range(0, len(data), 1000)]
        assert all(len(p) % 2048 == 0 for p in pieces)
        out = np.concatenate(pieces + [decoder.finish()])
        np.testing.assert_array_equal(out, want.astype(np.float32))
        assert decoder.sample_rate == 44100
    with pytest.raises(ServerMisbehaved, match="sent audio at 22050 Hz; the model makes 44100 Hz"):
        PcmDecoder("pcm_s16le", 44100, "http://x").feed(pcm16_wav_header(22050, None) + pcm)


def test_one_segment_regenerated_remotely_with_its_own_seed_matches_the_local_one(served, local_pipeline, voices):
    """The studio regenerates one sentence with a seed of its own (``segment_seeds``) through a
    server too: the same samples as locally, and the result reports that seed."""
    request = SynthesisRequest(text="Hello there. How are you today?", generation=GREEDY, only_segments=(1,),
                               segment_seeds={1: 4242}, segmentation=Segmentation(enabled=True, pause_ms=120))
    local_pipeline._voices = voices
    _, local = take(local_pipeline, request)
    _, remote = take(RemoteEngine(RemoteSettings(served.url), voices=voices), request)
    assert [s.seed for s in remote.segments] == [s.seed for s in local.segments] == [4242]
    np.testing.assert_array_equal(remote.audio, local.audio)


def test_a_remote_dialogue_is_the_local_dialogue_with_the_same_segment_audio(served, local_pipeline, voices):
    # One take path: the remote take carries what a local one does (segments, their audio, the
    # dialogue's speakers), assembled by the same code, sample for sample.
    request = SynthesisRequest("<|speaker:0|>Hello there. <|speaker:1|>Good morning to you.", generation=GREEDY,
                               segmentation=Segmentation(enabled=False, pause_ms=90), speaker_voices={1: "hope"})
    local_pipeline._voices = voices
    _, local = take(local_pipeline, request)
    _, remote = take(RemoteEngine(RemoteSettings(served.url), voices=voices), request)
    assert [(s.text, s.speaker) for s in remote.segments] == [("Hello there.", 0), ("Good morning to you.", 1)]
    np.testing.assert_array_equal(remote.audio, local.audio)
    for r, l in zip(remote.segments, local.segments):
        assert r.audio is not None and (r.start_sample, r.end_sample) == (l.start_sample, l.end_sample)
        np.testing.assert_array_equal(r.audio, l.audio)
    assert [s.text for s in remote.all_segments] == [s.text for s in local.all_segments]


def test_model_info_reports_the_servers_voice_cache(served, voices):
    engine = RemoteEngine(RemoteSettings(served.url), voices=voices)
    engine.synthesize(SynthesisRequest(text="In her voice.", voice="hope",
                                       generation=GenerationParams(max_new_tokens=3, seed=1))).run_to_end()
    cache = engine.model_info().prefix_cache
    assert cache is not None and cache.entries >= 1 and 0 < cache.bytes <= cache.budget_bytes == 512 << 20
    assert engine.model_info(load=False).prefix_cache is None  # nothing asked of the server
