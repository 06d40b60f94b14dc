"""A local HTTP server with hostile answers, for the remote client's tests (issue 24).

``HostileServer(mode)`` listens on 127.0.0.1 (a free port) in a thread and answers every
request the way ``mode`` says: audio at a rate of its choosing, a body cut short of its length,
an endless stream, NaN samples, escape sequences in its messages, huge or deeply nested JSON,
audio dripped a few bytes at a time. Used as a context manager it always stops.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

RATE = 44100
ESCAPES = "\x1b[2J\x1b]0;pwned\x07\x1b[31mred\x9b1m\r\n"  # clear screen, retitle, colour, C1 CSI, newline
MODES = ("rate", "short", "endless", "nan", "escape", "huge_json", "deep_json", "drip", "voices_escape", "wav_rate")


def _health(mode: str) -> bytes:
    return json.dumps({"status": "ok", "model": f"hostile{ESCAPES if mode == 'voices_escape' else ''}",
                       "model_loaded": True, "sample_rate": RATE, "queue": {"running": 0, "waiting": 0},
                       "device": "cpu"}).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes, headers: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _endless(self, chunk: bytes, headers: dict) -> None:
        """A body with no end (chunked), until the client hangs up."""
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        try:
            while not self.server.stopping.is_set():
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.server.sent_bytes += len(chunk)
        except OSError:
            pass
        self.close_connection = True

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        mode = self.server.mode
        if mode == "huge_json":
            return self._endless(b'{"a":"' + b"x" * 65536, {"Content-Type": "application/json"})
        if mode == "deep_json":
            return self._send(200, b"[" * 200_000 + b"]" * 200_000, {"Content-Type": "application/json"})
        if self.path.startswith("/health"):
            return self._send(200, _health(mode), {"Content-Type": "application/json"})
        if self.path.startswith("/voices"):
            voices = [{"id": f"v{ESCAPES}", "name": f"Narrator{ESCAPES}", "usable": True}, {"id": {"x": 1}}, 5]
            return self._send(200, json.dumps({"voices": voices}).encode(), {"Content-Type": "application/json"})
        self._send(404, b'{"error": "no"}')

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        mode = self.server.mode
        f32 = {"X-Audio-Encoding": "pcm_f32le", "X-Audio-Sample-Rate": str(RATE), "Content-Type": "audio/pcm"}
        audio = np.full(2048, 0.1, "<f4").tobytes()
        if mode == "rate":  # 16 KB of audio claiming 2 GHz
            return self._send(200, np.zeros(4096, "<f4").tobytes(), {**f32, "X-Audio-Sample-Rate": "2000000000"})
        if mode == "wav_rate":  # a live WAV (s2.cpp's stream) whose header says 8 kHz
            from s2studio.audio import pcm16_wav_header

            return self._send(200, pcm16_wav_header(8000, None) + b"\0" * 8192,
                              {"Content-Type": "audio/wav"})
        if mode == "short":  # promises 1 MB, sends 8 KB, hangs up
            self.send_response(200)
            self.send_header("Content-Length", str(1 << 20))
            for k, v in f32.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(audio)
            self.close_connection = True
            return
        if mode == "endless":
            return self._endless(audio * 16, f32)
        if mode == "nan":
            return self._send(200, np.full(4096, np.nan, "<f4").tobytes(), f32)
        if mode == "escape":
            return self._send(400, json.dumps({"error": f"bad request{ESCAPES}then more"}).encode(),
                              {"Content-Type": "application/json"})
        if mode == "drip":  # within the read timeout every time, forever
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            for k, v in f32.items():
                self.send_header(k, v)
            self.end_headers()
            try:
                while not self.server.stopping.is_set():
                    self.wfile.write(b"4\r\n\0\0\0\0\r\n")
                    self.wfile.flush()
                    time.sleep(0.2)
            except OSError:
                pass
            self.close_connection = True
            return
        self._send(200, audio, f32)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, mode: str):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.mode = mode
        self.stopping = threading.Event()
        self.sent_bytes = 0

    def handle_error(self, request, client_address) -> None:
        pass  # the client hanging up on a hostile answer is the expected end, not news


class HostileServer:
    def __init__(self, mode: str):
        assert mode in MODES, mode
        self._server = _Server(mode)
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def sent_bytes(self) -> int:
        return self._server.sent_bytes

    def __enter__(self) -> "HostileServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

