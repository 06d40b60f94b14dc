"""``s2studio cluster serve`` in a subprocess: starts its own local Ray cluster (2 CPUs, 1 replica
of the tiny model, loopback), answers with the key it was given, and Ctrl+C takes it all down."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = ROOT / "tests" / "data" / "golden" / "clone_f32_qknorm" / "model.gguf"


def test_cluster_serve_serves_until_interrupted(tmp_path, api):
    pytest.importorskip("ray.serve", reason="the cluster extra (pip install 's2studio[cluster]') is not installed")
    port = api.free_port()
    log = open(tmp_path / "cluster.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "s2studio", "cluster", "serve", "-m", str(MODEL), "--codec-cpu", "-threads", "1",
         "--replicas", "1", "--num-cpus", "2", "--max-batch", "2", "-P", str(port), "--api-key", "k",
         "--voice-dir", str(tmp_path / "voices")],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        health = api.wait_for_replicas(port, 1)
        assert health["replicas"][0]["max_batch"] == 2
        assert api.http_request(port, "GET", "/voices")[0] == 401
        assert api.http_request(port, "GET", "/voices", headers={"Authorization": "Bearer k"})[0] == 200
        status = subprocess.run([sys.executable, "-m", "s2studio", "cluster", "status", "--url",
                                 f"http://127.0.0.1:{port}"], capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert status.returncode == 0 and ": 1 replica, model model.gguf" in status.stdout, status
        proc.send_signal(signal.SIGINT)
        assert proc.wait(120) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        log.close()
    text = (tmp_path / "cluster.log").read_text(errors="replace")
    assert f"serving on http://127.0.0.1:{port} (1 replica, 2 at once each" in text
    with pytest.raises(OSError):  # the proxy went with it
        api.http_request(port, "GET", "/health", timeout=5)
