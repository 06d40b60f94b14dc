"""The HTTP API on a real local Ray Serve cluster (2 replicas of the tiny model, loopback): the same
takes as a local pipeline, requests spread over the replicas, a replica killed mid-take replaced
without the take noticing, and the guards of ``s2studio serve``.

The failover test kills a replica, so it runs last in this module."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid

import numpy as np
import pytest

from s2studio.engine.params import GenerationParams
from s2studio.engine.pipeline import Segmentation, SynthesisRequest
from s2studio.remote import RemoteEngine, RemoteSettings

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

API_KEY = "secret"
ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def multipart(fields: dict[str, str]) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n'.encode() + v.encode() + b"\r\n"
             for k, v in fields.items()]
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def generate_body(text: str, seed: int, frames: int) -> tuple[bytes, str]:
    params = {"stream": True, "chunked": True, "output_format": "pcm_f32le", "stream_start_buffer_ms": 0,
              "seed": seed, "max_new_tokens": frames, "min_tokens_before_end": frames, "temperature": 0.8}
    return multipart({"text": text, "params": json.dumps(params)})


def test_seeded_take_through_the_serve_url_equals_the_local_take(cluster, local_pipeline):
    request = SynthesisRequest(text="Hello from the cluster. A second sentence follows.", stream_stride=4,
                               segmentation=Segmentation(enabled=True),
                               generation=GenerationParams(max_new_tokens=30, temperature=0.8, seed=1234))
    remote_job = RemoteEngine(RemoteSettings(cluster.url, api_key=API_KEY)).synthesize(request)
    remote_chunks = list(remote_job)
    local_job = local_pipeline.synthesize(request)
    local_chunks = list(local_job)
    assert len(remote_job.result.audio) == len(local_job.result.audio) > 0
    np.testing.assert_array_equal(remote_job.result.audio, local_job.result.audio)
    np.testing.assert_array_equal(np.concatenate([c.samples for c in remote_chunks]),
                                  np.concatenate([c.samples for c in local_chunks]))
    assert [s.seed for s in remote_job.result.segments] == [s.seed for s in local_job.result.segments]


def test_health_lists_every_replica_and_cluster_status_prints_them(cluster):
    # A take of an earlier test may still be leaving its replica's queue (the client has its last
    # byte before the server's handler has finished): wait, a little, for every queue to drain.
    deadline = time.monotonic() + 30
    while True:
        health = cluster.health()
        if all(r["queue"]["running"] == 0 for r in health["replicas"]) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    replicas = health["replicas"]
    assert len(replicas) == 2 and len({r["replica"] for r in replicas}) == 2
    assert health["replica"] in {r["replica"] for r in replicas}  # the one that answered is one of them
    for entry in replicas:
        assert entry["device"] == "cpu" and entry["model_loaded"] is True and entry["max_batch"] == 2
        # queue_depth 0 at the replica: Ray holds the waiting; its queue takes the probe slot and
        # the finish slack (s2studio.cluster.options).
        assert entry["queue"] == {"running": 0, "waiting": 0, "depth": 2}
    result = subprocess.run([sys.executable, "-m", "s2studio", "cluster", "status", "--url", cluster.url],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert f"{cluster.url}: 2 replicas" in result.stdout
    for entry in replicas:
        assert entry["replica"] in result.stdout


def test_four_concurrent_requests_are_served_by_both_replicas(cluster):
    answers: list[tuple[int, str | None, int]] = []

    def one(seed: int) -> None:
        body, content_type = generate_body("Four at once, spread over the replicas.", seed, 40)
        status, headers, data = cluster.request("POST", "/generate", body, {"Content-Type": content_type,
                                                                            "Authorization": f"Bearer {API_KEY}"},
                                                timeout=180)
        answers.append((status, headers.get("x-s2studio-replica"), len(data)))

    threads = [threading.Thread(target=one, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
    assert len(answers) == 4
    assert [a[0] for a in answers] == [200] * 4
    assert all(a[2] == 40 * 2048 * 4 for a in answers)  # every take complete: 40 frames of float32
    replicas = {a[1] for a in answers}
    assert len(replicas) == 2 and None not in replicas, answers
    assert replicas == {r["replica"] for r in cluster.health()["replicas"]}


@pytest.mark.parametrize("headers, path, status", [
    ({"Origin": "http://evil.example", "Authorization": f"Bearer {API_KEY}"}, "/generate", 403),
    ({"Host": "evil.example", "Authorization": f"Bearer {API_KEY}"}, "/generate", 403),
    ({}, "/generate", 401),
    ({"Authorization": "Bearer wrong"}, "/generate", 401),
    ({}, "/voices", 401),
])
def test_guards_answer_as_s2studio_serve_does(cluster, headers, path, status):
    if path == "/generate":
        body, content_type = generate_body("Refused.", 1, 4)
        got, _, data = cluster.request("POST", path, body, {"Content-Type": content_type, **headers})
    else:
        got, _, data = cluster.request("GET", path, headers=headers)
    assert got == status, data
    assert "error" in json.loads(data)


def test_the_key_opens_what_the_guards_close(cluster):
    status, headers, data = cluster.request("GET", "/voices", headers={"Authorization": f"Bearer {API_KEY}"})
    assert status == 200 and json.loads(data) == {"voices": []}
    assert headers.get("x-s2studio-replica")


def _busy_replica(cluster, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in cluster.health()["replicas"]:
            if entry["queue"]["running"] > 0:
                return entry["replica"]
        time.sleep(0.2)
    raise AssertionError("no replica reported the take as running")


def test_a_replica_killed_mid_take_ends_in_the_complete_undisturbed_take(cluster, local_pipeline, caplog):
    import ray

    from s2studio.cluster.deployment import APP_NAME

    request = SynthesisRequest(text="This replica will not see the end of this sentence.", stream_stride=2,
                               generation=GenerationParams(max_new_tokens=300, min_tokens_before_end=300,
                                                           temperature=0.8, seed=99))
    job = RemoteEngine(RemoteSettings(cluster.url, api_key=API_KEY)).synthesize(request)
    chunks = iter(job)
    received = [next(chunks)]
    victim = _busy_replica(cluster)
    ray.kill(ray.get_actor(f"SERVE_REPLICA::{APP_NAME}#S2Studio#{victim}", namespace="serve"), no_restart=True)
    with caplog.at_level("WARNING", logger="s2studio.remote.engine"):
        received += list(chunks)
    assert "stopped answering" in caplog.text and "retrying segment 1 at the same address" in caplog.text
    local_job = local_pipeline.synthesize(request)
    local_chunks = list(local_job)
    np.testing.assert_array_equal(job.result.audio, local_job.result.audio)
    np.testing.assert_array_equal(np.concatenate([c.samples for c in received]),
                                  np.concatenate([c.samples for c in local_chunks]))
    assert job.result.segments[0].stop_reason == "max_tokens"
