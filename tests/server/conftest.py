"""Fixtures for the server tests: one tiny real model, a voice folder, servers on loopback.

Every server is started on 127.0.0.1 with port 0 and always stopped by its fixture; every
HTTP call has a timeout, so a hung server fails a test instead of hanging the run.
"""

from __future__ import annotations

import http.client
import json
import pathlib
import time
import uuid

import pytest

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden"
CLONE = GOLDEN / "clone_f32_qknorm"
TIMEOUT = 30.0


@pytest.fixture(scope="session")
def pipeline():
    from s2studio.engine.pipeline import EngineSettings, Pipeline

    p = Pipeline(EngineSettings(str(CLONE / "model.gguf"), codec_mode="cpu", threads=1))
    p.load()
    return p


@pytest.fixture(scope="session")
def voice_dir(tmp_path_factory, pipeline):
    """A voice folder with one voice, "hope"; beside it (outside) a voice that must stay
    unreachable, and inside a symlink pointing at it."""
    from s2studio.audio import read_audio
    from s2studio.engine.voices import VoiceLibrary, write_s2voice, read_s2voice

    root = tmp_path_factory.mktemp("server-voices")
    folder = root / "voices"
    codes = pipeline.encode_reference(read_audio(CLONE / "reference.wav"))
    lib = VoiceLibrary(folder)
    lib.save("hope", codes, "A short sample of the reference speaker.", name="Hope",
             codebook_size=pipeline.model.cfg.codebook_size, sample_rate=pipeline.codec.sample_rate)
    (folder / "nested").mkdir()
    write_s2voice(folder / "nested" / "deep.s2voice", read_s2voice(folder / "hope.s2voice"))
    write_s2voice(root / "outside.s2voice", read_s2voice(folder / "hope.s2voice"))
    (folder / "escape.s2voice").symlink_to(root / "outside.s2voice")
    return folder


@pytest.fixture
def start_server(pipeline, voice_dir):
    """start_server(**ServerConfig overrides) -> a running ServerThread (stopped afterwards)."""
    from s2studio.server import ServerConfig, ServerThread, create_app

    started = []

    def start(**overrides):
        config = ServerConfig(voice_dir=voice_dir, **overrides)
        server = ServerThread(create_app(pipeline, config)).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def server(start_server):
    return start_server()


# ---- a small real HTTP client (stdlib) --------------------------------------------------------

def multipart(fields: dict[str, str], files: dict[str, tuple[str, bytes]] | None = None) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    parts = []
    for name, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
                     + value.encode() + b"\r\n")
    for name, (filename, data) in (files or {}).items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
                     f"Content-Type: application/octet-stream\r\n\r\n".encode() + data + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


class Reply:
    def __init__(self, status: int, headers: dict[str, str], body: bytes):
        self.status, self.headers, self.body = status, headers, body

    def json(self):
        return json.loads(self.body)


def request(server, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
            timeout: float = TIMEOUT) -> Reply:
    conn = http.client.HTTPConnection(server.host, server.port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
    finally:
        conn.close()


def generate(server, fields: dict, files=None, params: dict | None = None, headers=None, timeout=TIMEOUT) -> Reply:
    fields = dict(fields)
    if params is not None:
        fields["params"] = json.dumps(params)
    body, ctype = multipart(fields, files)
    return request(server, "POST", "/generate", body, {"Content-Type": ctype, **(headers or {})}, timeout)


def open_stream(server, fields: dict, params: dict, timeout=TIMEOUT):
    """POST /generate and return (connection, response) with the body still unread."""
    body, ctype = multipart({**fields, "params": json.dumps(params)})
    conn = http.client.HTTPConnection(server.host, server.port, timeout=timeout)
    conn.request("POST", "/generate", body=body, headers={"Content-Type": ctype})
    return conn, conn.getresponse()


def health(server) -> dict:
    return request(server, "GET", "/health", timeout=10).json()


def wait_until(predicate, timeout: float = 15.0, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False


@pytest.fixture(scope="session")
def api():
    """The helpers above (test modules cannot import conftest under --import-mode=importlib)."""
    import types

    return types.SimpleNamespace(request=request, generate=generate, open_stream=open_stream, health=health,
                                 wait_until=wait_until, multipart=multipart, reference=CLONE / "reference.wav")
