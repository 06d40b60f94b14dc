"""Running the app under uvicorn on a socket we bind ourselves.

Binding first (rather than letting uvicorn bind) gives the real port at once — port 0 picks a
free one, which tests need — and a bind error before any model loading is wasted.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import socket
import threading
import time

log = logging.getLogger(__name__)

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
MIN_BACKLOG = 64


def bind_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def usable_connection_limit(wanted: int) -> int:
    """``wanted``, but at most half the process's file descriptor limit: the model, the
    listening socket and uploads' temp files need descriptors too, and running out makes the
    server deaf to everyone (EMFILE on every accept)."""
    try:
        import resource
    except ImportError:  # Windows: no per-process descriptor limit to respect
        return wanted
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return wanted if soft == resource.RLIM_INFINITY else max(1, min(wanted, soft // 2))


def _uvicorn_server(app, log_level: str):
    import uvicorn

    from s2studio.server.connections import ConnectionLimits, GuardedH11Protocol, limit_log_repeats

    server_config = app.state.server.config
    limits = ConnectionLimits(max_connections=usable_connection_limit(server_config.max_connections),
                              header_timeout_s=server_config.header_timeout_s,
                              body_timeout_s=server_config.body_timeout_s,
                              retry_after_s=server_config.retry_after_s)
    # h11 (pure Python) on purpose: identical behaviour everywhere, and httptools is optional;
    # our subclass adds the connection limit and the header/body deadlines.
    # backlog is also how many connections asyncio accepts per loop iteration: uvicorn's 2048
    # would accept a flood of them (and run out of descriptors) before the surplus is closed.
    config = uvicorn.Config(app, http=functools.partial(GuardedH11Protocol, limits=limits), lifespan="on",
                            log_level=log_level, access_log=False, timeout_graceful_shutdown=5,
                            backlog=max(limits.max_connections, MIN_BACKLOG))
    limit_log_repeats()  # after uvicorn.Config, which (re)configures its loggers
    return uvicorn.Server(config)


def listen_socket(host: str, port: int) -> socket.socket:
    """``bind_socket`` with a bind failure as one clear ``InputError`` (the CLI's one line):
    called before the model loads, so a busy port costs nothing."""
    from s2studio.errors import InputError

    try:
        return bind_socket(host, port)
    except OSError as exc:
        if exc.errno in (errno.EADDRINUSE, getattr(errno, "WSAEADDRINUSE", -1)):
            reason = "the port is already in use (is another server running?); choose another with --port"
        elif exc.errno in (errno.EACCES, errno.EPERM):
            reason = "permission denied (ports below 1024 need administrator rights); choose another with --port"
        elif exc.errno == errno.EADDRNOTAVAIL:
            reason = "this machine has no such address; check --host"
        else:
            reason = exc.strerror or str(exc)
        raise InputError(f"Cannot serve on {host}:{port}: {reason}.") from None
    except (socket.gaierror, OverflowError) as exc:
        raise InputError(f"Cannot serve on {host}:{port}: {exc}.") from None


def serve_forever(app, host: str, port: int, log_level: str = "info", sock: socket.socket | None = None) -> None:
    """Serve until Ctrl+C (uvicorn handles the signals in the main thread), on ``sock`` if
    given (bound earlier), else on a socket bound now."""
    sock = sock if sock is not None else bind_socket(host, port)
    try:
        _uvicorn_server(app, log_level).run(sockets=[sock])
    finally:
        sock.close()


class ServerThread:
    """The server on a background thread (tests, embedding): ``start()`` returns once it
    accepts connections, ``stop()`` shuts it down; also a context manager."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"):
        self._sock = bind_socket(host, port)
        self.host = host
        self.port = self._sock.getsockname()[1]
        self._server = _uvicorn_server(app, log_level)
        self._thread = threading.Thread(target=self._run, name="s2studio-server", daemon=True)
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _run(self) -> None:
        try:
            asyncio.run(self._server.serve(sockets=[self._sock]))
        except BaseException as exc:  # reported by start()
            self._error = exc

    def start(self, timeout: float = 60.0) -> "ServerThread":
        self._thread.start()
        waited = 0.0
        while not self._server.started and self._thread.is_alive() and waited < timeout:
            time.sleep(0.02)
            waited += 0.02
        if not self._server.started:
            self.stop()
            raise RuntimeError(f"the server did not start: {self._error!r}")
        return self

    def stop(self, timeout: float = 15.0) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._sock.close()

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
