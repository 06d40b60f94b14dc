"""``max_batch``: concurrent requests are synthesized together, with the audio they get alone."""

from __future__ import annotations

import threading

import pytest

LONG = {"max_new_tokens": 4000, "min_tokens_before_end": 4000, "stream": True, "chunked": True,
        "output_format": "pcm", "low_latency": True}


def request_params(i: int) -> dict:
    # Different lengths, settings and seeds; RAS on for the sampled ones.
    n = 6 + 3 * i
    if i == 1:
        return {"max_new_tokens": n, "min_tokens_before_end": n, "temperature": 0, "seed": 5}
    return {"max_new_tokens": n, "min_tokens_before_end": n, "temperature": 0.9, "top_k": 20, "seed": 100 + i}


def test_concurrent_requests_get_the_audio_they_get_alone(start_server, api, pipeline):
    texts = [f"Request number {i}, spoken at once." for i in range(4)]
    alone_server = start_server(max_batch=1)
    alone = [api.generate(alone_server, {"text": texts[i]}, params=request_params(i), timeout=60)
             for i in range(4)]
    assert all(r.status == 200 for r in alone)
    batch_server = start_server(max_batch=4, queue_depth=0)
    replies: list = [None] * 4

    def send(i):
        replies[i] = api.generate(batch_server, {"text": texts[i]}, params=request_params(i), timeout=120)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(150)
    assert all(r is not None and r.status == 200 for r in replies), [r and r.status for r in replies]
    assert pipeline._batcher.largest_batch >= 2  # they were decoded together
    for i in range(4):
        assert replies[i].body == alone[i].body, f"request {i}"


def test_max_batch_requests_run_at_once_then_503(start_server, api):
    server = start_server(max_batch=2, queue_depth=0)
    streams = []
    try:
        for _ in range(2):
            conn, resp = api.open_stream(server, {"text": "Runs long."}, LONG)
            streams.append(conn)
            assert resp.status == 200 and resp.read1(1024)
        assert api.health(server)["queue"]["running"] == 2
        reply = api.generate(server, {"text": "No room."}, params={"max_new_tokens": 2})
        assert reply.status == 503 and "2 syntheses running" in reply.json()["error"]
    finally:
        for conn in streams:
            conn.close()
    # both hung up: their places free and the batch serves again
    assert api.wait_until(lambda: api.health(server)["queue"]["running"] == 0)
    assert api.generate(server, {"text": "Room again."}, params={"max_new_tokens": 2}).status == 200


def test_max_batch_range(voice_dir):
    from s2studio.engine.batching import MAX_BATCH
    from s2studio.server import ServerConfig
    from s2studio.server.config import MAX_BATCH as CONFIG_MAX_BATCH

    assert CONFIG_MAX_BATCH == MAX_BATCH
    for bad in (0, MAX_BATCH + 1):
        with pytest.raises(ValueError, match="max_batch"):
            ServerConfig(voice_dir=voice_dir, max_batch=bad)


@pytest.mark.parametrize("value", ["0", "9", "x"])
def test_serve_rejects_bad_max_batch(value):
    from s2studio.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--max-batch", value])


def test_serve_max_batch_default():
    from s2studio.cli import build_parser
    from s2studio.server.config import DEFAULT_MAX_BATCH

    assert build_parser().parse_args(["serve"]).max_batch == DEFAULT_MAX_BATCH


def test_a_client_hanging_up_leaves_the_others_audio_unchanged(start_server, api):
    texts = ["The first of two that stay.", "The second one stays too."]
    # Long enough (60 frames) to be seen running beside the third.
    params = [{"max_new_tokens": 60, "min_tokens_before_end": 60, "seed": 7 + i} for i in range(2)]
    alone_server = start_server(max_batch=1)
    alone = [api.generate(alone_server, {"text": texts[i]}, params=params[i], timeout=60) for i in range(2)]
    server = start_server(max_batch=3)
    conn, resp = api.open_stream(server, {"text": "Goes away."}, LONG)
    replies: list = [None] * 2
    try:
        assert resp.status == 200 and resp.read1(1024)

        def send(i):
            replies[i] = api.generate(server, {"text": texts[i]}, params=params[i], timeout=120)

        threads = [threading.Thread(target=send, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        assert api.wait_until(lambda: api.health(server)["queue"]["running"] == 3)
    finally:
        conn.close()  # the long take's client hangs up while the other two run beside it
    for t in threads:
        t.join(150)
    assert [r.status for r in replies] == [200, 200]
    for i in range(2):
        assert replies[i].body == alone[i].body, f"request {i}"
    assert api.wait_until(lambda: api.health(server)["queue"]["running"] == 0)
