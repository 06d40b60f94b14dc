"""The FIFO queue: concurrent requests wait their turn; a full queue answers 503."""

from __future__ import annotations

import threading

LONG = {"max_new_tokens": 4000, "min_tokens_before_end": 4000, "stream": True, "chunked": True,
        "output_format": "pcm", "low_latency": True}


def test_three_concurrent_requests_all_complete(server, api):
    replies = [None] * 3

    def send(i):
        params = {"max_new_tokens": 10 + i, "min_tokens_before_end": 10 + i, "seed": i}
        replies[i] = api.generate(server, {"text": f"Request {i}."}, params=params, timeout=60)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert all(r is not None and r.status == 200 for r in replies), [r and r.status for r in replies]
    import io

    import soundfile as sf

    # each got its own take, not a neighbour's
    assert [len(sf.read(io.BytesIO(r.body))[0]) for r in replies] == [(10 + i) * 2048 for i in range(3)]


def test_full_queue_answers_503_with_retry_after(start_server, api):
    server = start_server(queue_depth=1)
    running, resp = api.open_stream(server, {"text": "Runs long."}, LONG)
    waiting = None
    try:
        assert resp.status == 200
        assert resp.read1(1024)
        # a second request waits (its response only starts when its turn comes)
        import http.client

        body, ctype = api.multipart({"text": "Waits."})
        waiting = http.client.HTTPConnection(server.host, server.port, timeout=30)
        waiting.request("POST", "/generate", body=body, headers={"Content-Type": ctype})
        assert api.wait_until(lambda: api.health(server)["queue"]["waiting"] == 1)
        reply = api.generate(server, {"text": "No room."}, params={"max_new_tokens": 2})
        assert reply.status == 503
        assert reply.headers["retry-after"].isdigit()
        assert "busy" in reply.json()["error"].lower()
    finally:
        running.close()
        if waiting is not None:
            waiting.close()
    # both hung up: the queue drains and serves again
    assert api.wait_until(lambda: api.health(server)["queue"] == {"running": 0, "waiting": 0, "depth": 1})
    assert api.generate(server, {"text": "Room again."}, params={"max_new_tokens": 2}).status == 200


def test_queue_depth_zero_is_s2cpp_busy_behaviour(start_server, api):
    server = start_server(queue_depth=0)
    running, resp = api.open_stream(server, {"text": "Runs long."}, LONG)
    try:
        assert resp.status == 200 and resp.read1(1024)
        assert api.generate(server, {"text": "Busy?"}, params={"max_new_tokens": 2}).status == 503
    finally:
        running.close()
