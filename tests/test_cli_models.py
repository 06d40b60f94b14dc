"""``s2studio models`` and the model lookup of every command, in subprocesses, against a fake
Hugging Face on loopback (``HF_ENDPOINT``): the real ``huggingface_hub`` metadata request, the
real HTTP download with Range, the real checksum. The "published" model is the tiny golden
GGUF, so a pulled model really synthesizes."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import pathlib
import subprocess
import sys
import threading

import pytest

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


@pytest.fixture
def hub():
    h = FakeHub()
    yield h
    h.close()


@pytest.fixture
def home(tmp_path, hub):
    """The user's folders and the Hub, all in tmp_path and on loopback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE", "S2STUDIO_"))}
    env.update(HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "hf"), HF_HUB_DISABLE_TELEMETRY="1",
               NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost",
               S2STUDIO_MODELS_DIR=str(tmp_path / "models"), S2STUDIO_CONFIG_DIR=str(tmp_path / "config"),
               S2STUDIO_VOICES_DIR=str(tmp_path / "voices"))
    return env


def s2(env, *args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "s2studio", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env, cwd=cwd)


def one_line_error(r: subprocess.CompletedProcess, *fragments: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for f in fragments:
        assert f in lines[0], lines[0]
    return lines[0]


def test_pull_resumes_an_interrupted_download_and_becomes_the_default(hub, home, tmp_path):
    models = tmp_path / "models"
    hub.cut_next_get["s2-pro-q8_0.gguf"] = CUT_AFTER
    first = s2(home, "models", "pull", "q8_0")
    one_line_error(first)
    part = models / "s2-pro-q8_0.gguf.part"
    assert part.is_file() and not (models / "s2-pro-q8_0.gguf").exists()
    kept = part.stat().st_size
    assert 0 < kept <= CUT_AFTER and MODEL_BYTES.startswith(part.read_bytes())
    listing = s2(home, "models", "list")
    assert "incomplete download: s2-pro-q8_0.gguf.part" in listing.stdout and "no model installed" in listing.stdout

    second = s2(home, "models", "pull", "q8_0")
    assert second.returncode == 0, second.stderr
    assert ("s2-pro-q8_0.gguf", f"bytes={kept}-") in hub.gets  # continued from the part, not from 0
    assert (models / "s2-pro-q8_0.gguf").read_bytes() == MODEL_BYTES and not part.exists()
    assert (models / "tokenizer.json").read_bytes() == TOKENIZER_BYTES
    summary = second.stderr.strip().splitlines()
    assert len(summary) == 1 and "checksum verified" in summary[0] and "now the default" in summary[0], second.stderr

    settings = json.loads((tmp_path / "config" / "settings.json").read_text())
    assert settings["model_path"] == str((models / "s2-pro-q8_0.gguf").resolve())  # the app's default too
    listing = s2(home, "models", "list").stdout
    assert "* q8_0" in listing and "2.5 MB" in listing, listing
    assert s2(home, "models", "path", "q8_0").stdout.strip() == str(models / "s2-pro-q8_0.gguf")
    assert s2(home, "models", "path").stdout.strip() == str(models)


def test_a_checksum_mismatch_deletes_the_download(hub, home, tmp_path):
    hub.wrong_checksum.add("s2-pro-q8_0.gguf")
    one_line_error(s2(home, "models", "pull", "q8_0"), "checksum does not match", "deleted")
    assert list((tmp_path / "models").iterdir()) == []
    assert not (tmp_path / "config" / "settings.json").exists()


def test_pull_of_an_unknown_variant_or_a_missing_file_is_one_line(hub, home):
    one_line_error(s2(home, "models", "pull", "q9"), "'q9' is not a model variant", "q8_0")
    del hub.files["s2-pro-q6_k.gguf"]
    one_line_error(s2(home, "models", "pull", "q6_k"), "not on Hugging Face")


def test_synth_without_m_finds_the_model(hub, home, tmp_path):
    out = tmp_path / "out.wav"
    args = ("synth", "--text", "Hi.", "--max-tokens", "2", "--codec-cpu", "-o", out)
    one_line_error(s2(home, *args), "No model installed", "s2studio models pull q8_0")
    assert not out.exists()
    assert s2(home, "models", "pull", "q8_0", "--no-progress").returncode == 0
    r = s2(home, *args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert out.is_file() and r.stderr.strip().splitlines()[-1].startswith(f"wrote {out}")
    # A variant name works as -m; one that is not installed says how to get it.
    assert s2(home, *args, "-m", "q8_0").returncode == 0
    one_line_error(s2(home, *args, "-m", "q6_k"), "not installed", "s2studio models pull q6_k")


def test_the_default_decides_between_several_and_remove_clears_it(hub, home, tmp_path):
    models = tmp_path / "models"
    assert s2(home, "models", "pull", "q6_k", "--no-progress").returncode == 0  # the first: the default
    assert s2(home, "models", "pull", "q8_0", "--no-progress").returncode == 0
    assert s2(home, "models", "default").stdout.strip() == str((models / "s2-pro-q6_k.gguf").resolve())
    r = s2(home, "models", "default", "q8_0")
    assert r.returncode == 0 and "s2-pro-q8_0.gguf" in r.stdout
    assert "* q8_0" in s2(home, "models", "list").stdout
    removed = s2(home, "models", "remove", "q8_0")
    assert removed.returncode == 0 and "s2-pro-q8_0.gguf" in removed.stdout
    assert not (models / "s2-pro-q8_0.gguf").exists() and (models / "tokenizer.json").exists()
    out = tmp_path / "o.wav"
    # No default now, one model left: it is used.
    r = s2(home, "encode", TTS.parent / "codec_roundtrip" / "reference.wav", "-o", tmp_path / "c.npy")
    assert r.returncode == 0, r.stderr
    assert s2(home, "models", "pull", "q8_0", "--no-progress").returncode == 0  # no default: it becomes it
    assert "* q8_0" in s2(home, "models", "list").stdout
    settings = tmp_path / "config" / "settings.json"
    settings.write_text(json.dumps({**json.loads(settings.read_text()), "model_path": "", "top_k": 7}))
    one_line_error(s2(home, "synth", "--text", "Hi.", "--max-tokens", "2", "-o", out), "Several models are installed",
                   "s2studio models default")
    assert s2(home, "models", "default", "q6_k").returncode == 0
    assert json.loads(settings.read_text())["top_k"] == 7  # the app's other settings are left alone
    one_line_error(s2(home, "models", "default", "q5_k_m"), "not installed", "s2studio models pull q5_k_m")
    one_line_error(s2(home, "models", "remove", "q5_k_m"), "not installed")
    assert s2(home, "models", "remove", "q6_k").returncode == 0
    last = s2(home, "models", "remove", "q8_0")
    assert "tokenizer.json" in last.stdout and list(models.iterdir()) == []  # nothing left to use it
