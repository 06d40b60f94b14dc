"""The voice prefix cache across the server's requests: a voice's prompt is computed once, later
requests (alone or batched) find it, and their audio is what they get with the cache off."""

from __future__ import annotations

import dataclasses
import threading


def sampled(seed: int) -> dict:
    return {"max_new_tokens": 6, "min_tokens_before_end": 6, "temperature": 0.9, "top_k": 20, "seed": seed}


def test_requests_with_a_voice_share_its_prefix_and_sound_the_same_without_it(start_server, api, pipeline):
    server = start_server(max_batch=2, queue_depth=0)
    fields = [{"text": f"Spoken in her voice, number {i}.", "voice": "hope"} for i in range(2)]
    first = [api.generate(server, fields[i], params=sampled(40 + i)) for i in range(2)]
    assert all(r.status == 200 for r in first)
    before = api.health(server)["voice_cache"]
    assert before["entries"] >= 1 and 0 < before["bytes"] <= before["budget_bytes"]

    replies: list = [None] * 2

    def send(i):
        replies[i] = api.generate(server, fields[i], params=sampled(40 + i), timeout=120)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(150)
    after = api.health(server)["voice_cache"]
    assert after["hits"] >= before["hits"] + 2 and after["misses"] == before["misses"]
    for i in range(2):
        assert replies[i] is not None and replies[i].status == 200
        assert replies[i].body == first[i].body, f"request {i}, batched and warm"

    settings = pipeline.settings
    try:
        pipeline.configure(dataclasses.replace(settings, voice_cache_mb=0))
        off = api.generate(server, fields[0], params=sampled(40))
        assert off.status == 200 and off.body == first[0].body
        assert api.health(server)["voice_cache"] == {**after, "entries": 0, "bytes": 0, "budget_bytes": 0}
    finally:
        pipeline.configure(settings)
