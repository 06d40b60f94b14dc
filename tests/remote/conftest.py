"""Fixtures for the remote engine: real ``s2studio serve`` subprocesses on loopback with the tiny
golden model, and the same model loaded here for the local side of each comparison.

One server is shared by the whole session (each start costs seconds); tests that kill a server
start their own. Every server is on 127.0.0.1, always stopped, and every wait is bounded.
"""

from __future__ import annotations

import http.client
import json
import os
import pathlib
import socket
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLONE = ROOT / "tests" / "data" / "golden" / "clone_f32_qknorm"
MODEL = CLONE / "model.gguf"
START_TIMEOUT = 180.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_health(url_port: int, timeout: float = 5.0) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", url_port, timeout=timeout)
    try:
        conn.request("GET", "/health")
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


class ServeProcess:
    """``python -m s2studio serve`` with the tiny model on a free loopback port."""

    def __init__(self, voice_dir: pathlib.Path, log_path: pathlib.Path, *extra: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "s2studio", "serve", "-m", str(MODEL), "--codec-cpu", "-threads", "1",
             "-P", str(self.port), "--voice-dir", str(voice_dir), "--log-level", "warn", *extra],
            env=env, stdout=self._log, stderr=subprocess.STDOUT)
        self.log_path = log_path
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"s2studio serve exited: {log_path.read_text()}")
            try:
                if get_health(self.port).get("model_loaded"):
                    return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"s2studio serve did not start in {START_TIMEOUT} s: {log_path.read_text()}")

    def health(self) -> dict:
        return get_health(self.port)

    def kill(self) -> None:
        """As a crash or a pulled cable would: no goodbye on the open connections."""
        self.proc.kill()
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()


@pytest.fixture(scope="session")
def local_pipeline():
    from s2studio.engine.pipeline import EngineSettings, Pipeline

    p = Pipeline(EngineSettings(str(MODEL), codec_mode="cpu", threads=1))
    p.load()
    return p


@pytest.fixture(scope="session")
def voices(tmp_path_factory, local_pipeline):
    """A local voice library with one voice, "hope" (the laptop's own saved voice)."""
    from s2studio.audio import read_audio
    from s2studio.engine.voices import VoiceLibrary

    lib = VoiceLibrary(tmp_path_factory.mktemp("remote-local-voices"))
    codes = local_pipeline.encode_reference(read_audio(CLONE / "reference.wav"))
    lib.save("hope", codes, "A short sample of the reference speaker.", name="Hope",
             codebook_size=local_pipeline.model.cfg.codebook_size, sample_rate=local_pipeline.codec.sample_rate)
    return lib


@pytest.fixture(scope="session")
def start_serve(tmp_path_factory):
    """start_serve(*extra flags) -> a running ServeProcess, stopped at the end of the session."""
    started: list[ServeProcess] = []
    server_voices = tmp_path_factory.mktemp("remote-server-voices")

    def start(*extra: str) -> ServeProcess:
        n = len(started)
        server = ServeProcess(server_voices, tmp_path_factory.getbasetemp() / f"serve-{n}.log", *extra)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def served(start_serve) -> ServeProcess:
    """The shared server."""
    return start_serve()


@pytest.fixture(scope="session")
def keyed(start_serve) -> ServeProcess:
    """A server started with --api-key secret."""
    return start_serve("--api-key", "secret")
