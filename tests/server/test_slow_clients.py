"""Slow and hostile clients: half-sent headers and bodies are timed out, surplus connections
are refused at once, and repeated errors cannot flood the log. Bounded: at most 50 loopback
sockets, short configured timeouts, every socket read with a timeout."""

from __future__ import annotations

import contextlib
import json
import logging
import socket

SOCKET_TIMEOUT = 15.0  # far above the configured deadlines; only reached on failure


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (socket.timeout if it never does)."""
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def status_and_error(answer: bytes) -> tuple[int, str]:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"application/json" in head.lower(), head
    return int(head.split()[1]), json.loads(body)["error"]


def test_half_sent_headers_are_timed_out_and_surplus_connections_refused(start_server, api):
    server = start_server(max_connections=20, header_timeout_s=0.5)
    with contextlib.ExitStack() as stack:
        socks = []
        for _ in range(50):
            sock = stack.enter_context(socket.create_connection((server.host, server.port), timeout=SOCKET_TIMEOUT))
            sock.sendall(b"POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")  # and never more
            socks.append(sock)
        statuses = []
        for sock in socks:
            status, message = status_and_error(read_until_closed(sock))
            statuses.append(status)
            assert ("headers" in message) if status == 408 else ("connections" in message), message
    assert set(statuses) == {408, 503}, statuses
    assert statuses.count(408) <= 20
    # and the server still answers
    assert api.health(server)["model_loaded"] is True


def test_trickled_headers_do_not_reset_the_deadline(start_server):
    server = start_server(header_timeout_s=0.5)
    with socket.create_connection((server.host, server.port), timeout=SOCKET_TIMEOUT) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        sock.settimeout(0.1)
        answer = b""
        for _ in range(300):  # one header byte per 0.1 s: bounded at 30 s; the server stops it at 0.5 s
            try:
                sock.sendall(b"X")
            except (BrokenPipeError, ConnectionResetError):
                break
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                continue
            except ConnectionResetError:
                break
            answer += chunk
            if not chunk:
                break
        else:
            raise AssertionError("the server kept a connection that never finished its headers")
    if answer:
        assert status_and_error(answer)[0] == 408


def test_a_connection_that_sends_nothing_is_closed(start_server):
    server = start_server(header_timeout_s=0.5)
    with socket.create_connection((server.host, server.port), timeout=SOCKET_TIMEOUT) as sock:
        status, _ = status_and_error(read_until_closed(sock))
    assert status == 408


def test_half_sent_body_is_408(start_server, api):
    server = start_server(body_timeout_s=0.5)
    body, ctype = api.multipart({"text": "x"})
    with socket.create_connection((server.host, server.port), timeout=SOCKET_TIMEOUT) as sock:
        sock.sendall(f"POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {ctype}\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body[:10])
        answer = read_until_closed(sock)
    status, message = status_and_error(answer)
    assert status == 408 and "body" in message
    assert api.health(server)["queue"]["waiting"] == 0  # its queue place is free again


def test_repeated_errors_are_rate_limited():
    from s2studio.server.connections import RepeatLimiter

    now = [0.0]
    limiter = RepeatLimiter(interval_s=10.0, clock=lambda: now[0])
    logger = logging.getLogger("s2studio.tests.repeat-limiter")
    logger.propagate = False
    records = []

    class Collect(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    handler = Collect()
    logger.addHandler(handler)
    logger.addFilter(limiter)
    try:
        for _ in range(10_000):  # what EMFILE on every accept attempt produced
            logger.error("socket.accept() out of system resource")
        logger.error("a different problem")
        now[0] = 11.0
        logger.error("socket.accept() out of system resource")
    finally:
        logger.removeHandler(handler)
        logger.removeFilter(limiter)
    assert records == ["socket.accept() out of system resource", "a different problem",
                       "socket.accept() out of system resource (9999 similar messages in the last 10 s not shown)"]


def test_a_running_server_limits_repeats_of_asyncio_and_uvicorn_errors(server):
    from s2studio.server.connections import RepeatLimiter

    # asyncio logs the accept loop's "Too many open files"; uvicorn.error every failed request.
    for name in ("asyncio", "uvicorn.error"):
        assert any(isinstance(f, RepeatLimiter) for f in logging.getLogger(name).filters), name
