"""A fake Hugging Face on loopback for ``s2studio models pull`` (point ``HF_ENDPOINT`` at ``url``).

Not a test module: tests load it by path (``load_fake_hub()`` in the tests that use it)."""

from __future__ import annotations

import hashlib
import http.server
import pathlib
import threading

GOLDEN = pathlib.Path(__file__).resolve().parent / "data" / "golden"
TTS = GOLDEN / "tts_f32"
REPO = "rodrigomt/s2-pro-gguf"
# The tiny model is 2.4 MB: more than two of the downloader's 1 MiB chunks, so a connection cut
# after 2.3 MB leaves two whole chunks in the .part file.
MODEL_BYTES = (TTS / "model.gguf").read_bytes()
TOKENIZER_BYTES = (TTS / "tokenizer.json").read_bytes()
CUT_AFTER = 2_300_000


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class FakeHub:
    """``/{repo}/resolve/main/{file}`` as the Hub answers it: HEAD gives size and ETag (the LFS
    sha256 for .gguf, the git blob sha1 for small files), GET honours ``Range``."""

    def __init__(self):
        self.files = {"s2-pro-q8_0.gguf": MODEL_BYTES, "s2-pro-q6_k.gguf": MODEL_BYTES,
                      "tokenizer.json": TOKENIZER_BYTES}
        self.wrong_checksum: set[str] = set()
        self.cut_next_get: dict[str, int] = {}  # file -> bytes to send before dropping the connection
        self.gets: list[tuple[str, str | None]] = []  # (file, Range header)
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _file(self):
                prefix = f"/{REPO}/resolve/main/"
                name = self.path.split("?", 1)[0]
                name = name[len(prefix):] if name.startswith(prefix) else None
                if name not in hub.files:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.end_headers()
                    return None, None
                return name, hub.files[name]

            def do_HEAD(self):
                name, data = self._file()
                if name is None:
                    return
                digest = hashlib.sha256(data).hexdigest() if name.endswith(".gguf") else git_blob_sha1(data)
                if name in hub.wrong_checksum:
                    digest = "0" * len(digest)
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("ETag", f'"{digest}"')
                self.send_header("X-Repo-Commit", "0" * 40)
                self.end_headers()

            def do_GET(self):
                name, data = self._file()
                if name is None:
                    return
                rng = self.headers.get("Range")
                hub.gets.append((name, rng))
                start = int(rng.split("=")[1].split("-")[0]) if rng else 0
                body = data[start:]
                self.send_response(206 if start else 200)
                self.send_header("Content-Length", str(len(body)))
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.end_headers()
                cut = hub.cut_next_get.pop(name, None)
                if cut is not None:
                    self.wfile.write(body[:cut])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def isolated_env(environ: dict, hub: FakeHub, home: pathlib.Path) -> dict:
    """``environ`` with the Hub on loopback and every user folder inside ``home``."""
    env = {k: v for k, v in environ.items() if not k.startswith(("HF_", "HUGGINGFACE", "S2STUDIO_", "XDG_"))}
    env.update(HF_ENDPOINT=hub.url, HF_HOME=str(home / "hf"), HF_HUB_DISABLE_TELEMETRY="1",
               NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost", HOME=str(home),
               XDG_DATA_HOME=str(home / "data"), XDG_CONFIG_HOME=str(home / "config-home"),
               XDG_CACHE_HOME=str(home / "cache"),
               S2STUDIO_MODELS_DIR=str(home / "models"), S2STUDIO_CONFIG_DIR=str(home / "config"),
               S2STUDIO_VOICES_DIR=str(home / "voices"), S2STUDIO_LOG_DIR=str(home / "logs"),
               S2STUDIO_PROJECTS_DIR=str(home / "projects"))
    return env
