"""A real local Ray cluster on loopback for the cluster tests: 2 CPUs, 2 replicas of the tiny golden
model, deployed from the example Serve config's args (as ``serve run`` would), always shut down.

Skipped with the reason when the cluster extra (Ray Serve) is not installed. Ray is heavy: the
cluster is started once per module that asks for it, and every wait is bounded.
"""

from __future__ import annotations

import http.client
import json
import pathlib
import socket
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLONE = ROOT / "tests" / "data" / "golden" / "clone_f32_qknorm"
MODEL = CLONE / "model.gguf"
EXAMPLE_CONFIG = ROOT / "examples" / "cluster" / "serve_config.yaml"
API_KEY = "secret"
READY_TIMEOUT_S = 240.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_request(port: int, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
                 timeout: float = 60.0):
    """(status, lower-cased headers, body) of one request to the cluster's proxy."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def wait_for_replicas(port: int, count: int, timeout: float = READY_TIMEOUT_S) -> dict:
    """/health once it lists ``count`` replicas with the model loaded."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            status, _, body = http_request(port, "GET", "/health", timeout=10)
            if status == 200:
                last = json.loads(body)
                loaded = [r for r in last.get("replicas", []) if r.get("model_loaded")]
                if len(loaded) == count:
                    return last
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"the cluster did not report {count} loaded replicas in {timeout} s: {last}")


class Cluster:
    def __init__(self, port: int):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def request(self, *args, **kwargs):
        return http_request(self.port, *args, **kwargs)

    def health(self) -> dict:
        status, _, body = http_request(self.port, "GET", "/health", timeout=10)
        assert status == 200, body
        return json.loads(body)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The example config's application on a 2-CPU local Ray cluster: 2 replicas (1 CPU each), the
    tiny model on the CPU, an API key. Each replica decodes 2 takes together and queues none, so
    Ray sends it at most 3 requests (2 + the probe slot): 4 at once must use both replicas."""
    pytest.importorskip("ray.serve", reason="the cluster extra (pip install 's2studio[cluster]') is not installed")
    import ray
    import yaml
    from ray import serve

    from s2studio.cluster import deployment

    config = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    args = dict(config["applications"][0]["args"])
    # The example's GPU sizing, made to fit this machine; every other option as written there.
    args.update(model=str(MODEL), device="cpu", num_gpus=0, num_cpus=1, threads=1, codec_mode="cpu",
                autoscale=False, num_replicas=2, max_batch=2, queue_depth=0, api_key=API_KEY,
                voice_dir=str(tmp_path_factory.mktemp("cluster-voices")))
    port = free_port()
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING", configure_logging=False,
             log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(deployment.app_builder(args), name=deployment.APP_NAME, route_prefix="/", blocking=False)
        wait_for_replicas(port, 2)
        yield Cluster(port)
    finally:
        deployment.stop()


@pytest.fixture(scope="module")
def local_pipeline():
    from s2studio.engine.pipeline import EngineSettings, Pipeline

    p = Pipeline(EngineSettings(str(MODEL), codec_mode="cpu", threads=1))
    p.load()
    return p


@pytest.fixture(scope="session")
def api():
    """The helpers above (test modules cannot import conftest under --import-mode=importlib)."""
    import types

    return types.SimpleNamespace(free_port=free_port, http_request=http_request, wait_for_replicas=wait_for_replicas)
