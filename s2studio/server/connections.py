"""Connection-level limits against slow or hostile clients, and a log that cannot flood.

uvicorn's h11 protocol waits for a request's headers forever and accepts every connection: 1100
sockets that each send half a request line held 1100 file descriptors for minutes, and with the
usual limit of 1024 the server stopped answering anyone while asyncio logged a "Too many open
files" traceback per accept attempt (100 MB in 15 s). ``GuardedH11Protocol`` adds:

* a connection limit, checked as a connection is accepted: the surplus gets a 503 and is closed
  at once instead of holding a descriptor;
* a header deadline: a request's headers must be complete ``header_timeout_s`` after its first
  byte (or after the connection opened), however the bytes trickle in: 408, closed;
* a body deadline (backstop): a body still incomplete ``body_timeout_s`` (+ grace) after its
  headers closes the connection. The app answers 408 itself a little earlier (``BodyLimit``);
  this catches a client that keeps trickling bytes after that answer;
* JSON instead of uvicorn's text/plain for a request h11 cannot parse.

``RepeatLimiter`` is the log side: the first record of each kind passes, then at most one per
interval, with a count of what it held back.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)

BODY_DEADLINE_GRACE_S = 5.0  # the app's own 408 comes first; this only ends what ignores it
# Loggers whose repeats are limited: uvicorn's errors, asyncio's (the accept loop's EMFILE
# tracebacks) and the server's own.
RATE_LIMITED_LOGGERS = ("uvicorn.error", "asyncio", "s2studio.server.app", "s2studio.server.responses",
                        "s2studio.server.jobs", "s2studio.server.connections")


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int = 100
    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    retry_after_s: int = 5

    def __post_init__(self) -> None:
        if self.max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        if not (self.header_timeout_s > 0 and self.body_timeout_s > 0):
            raise ValueError("the header and body timeouts must be positive")


def raw_json_response(status: int, reason: str, message: str, headers: dict[str, str] | None = None) -> bytes:
    """A whole HTTP/1.1 response that closes the connection, for when no request cycle exists."""
    body = json.dumps({"error": message}).encode()
    lines = [f"HTTP/1.1 {status} {reason}", "content-type: application/json", f"content-length: {len(body)}",
             "connection: close", *(f"{k}: {v}" for k, v in (headers or {}).items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the limits above (one instance per connection)."""

    def __init__(self, *args, limits: ConnectionLimits, **kwargs):
        super().__init__(*args, **kwargs)
        self.limits = limits
        self._refused = False
        self._deadline = None  # the asyncio TimerHandle of the current phase
        self._phase: str | None = None  # "headers" | "body" | None (nothing owed by the client)

    # ---- connection limit ----------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        if len(self.connections) >= self.limits.max_connections:
            self._refused = True
            log.warning("refusing a connection: %d open, the limit is %d", len(self.connections),
                        self.limits.max_connections)
            transport.write(raw_json_response(
                503, "Service Unavailable", "Too many open connections to this server; try again shortly.",
                {"retry-after": str(self.limits.retry_after_s)}))
            transport.close()
            return
        super().connection_made(transport)
        self._enter("headers")  # a client that connects and says nothing is timed too

    def connection_lost(self, exc) -> None:
        if self._refused:
            return  # never registered
        self._enter(None)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)
        self._follow_state()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow_state()

    # ---- deadlines -----------------------------------------------------------------------------
    def _follow_state(self) -> None:
        """Time what the client still owes: headers (h11 IDLE with bytes of a request pending)
        or body (SEND_BODY). An idle keep-alive connection is uvicorn's keep-alive timeout's."""
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            self._enter("body")
        elif state is h11.IDLE and self.conn.trailing_data[0]:
            self._enter("headers")
        elif state is not h11.IDLE:
            self._enter(None)
        elif self._phase == "body":  # a new cycle after a complete request, nothing sent yet
            self._enter(None)

    def _enter(self, phase: str | None) -> None:
        if phase == self._phase:
            return  # the deadline runs from the phase's start, not from the latest byte
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._phase = phase
        if phase == "headers":
            self._deadline = self.loop.call_later(self.limits.header_timeout_s, self._headers_late)
        elif phase == "body":
            self._deadline = self.loop.call_later(self.limits.body_timeout_s + BODY_DEADLINE_GRACE_S,
                                                  self._body_late)

    def _headers_late(self) -> None:
        self._deadline = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return  # gone already, or the headers made it after all
        log.warning("closing a connection whose request headers did not arrive within %g s",
                    self.limits.header_timeout_s)
        self.transport.write(raw_json_response(
            408, "Request Timeout", f"The request headers did not arrive within {self.limits.header_timeout_s:g} s."))
        self.transport.close()

    def _body_late(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            log.warning("closing a connection whose request body did not arrive within %g s",
                        self.limits.body_timeout_s)
            self.transport.close()

    # ---- JSON for what h11 cannot parse --------------------------------------------------------
    def send_400_response(self, msg: str) -> None:
        self.transport.write(raw_json_response(400, "Bad Request", msg))  # uvicorn's "Invalid HTTP request received."
        self.transport.close()


class RepeatLimiter(logging.Filter):
    """Passes the first record of each kind (logger, level, message template, exception type),
    then at most one per ``interval_s``, noting how many were held back in between."""

    MAX_KINDS = 1000  # forget everything beyond this many kinds, so memory stays bounded

    def __init__(self, interval_s: float = 10.0, clock=time.monotonic):
        super().__init__()
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._kinds: dict[tuple, list] = {}  # kind -> [time last passed, held back since]

    def filter(self, record: logging.LogRecord) -> bool:
        exc_type = record.exc_info[0].__name__ if record.exc_info and record.exc_info[0] else ""
        kind = (record.name, record.levelno, str(record.msg), exc_type)
        now = self._clock()
        with self._lock:
            entry = self._kinds.get(kind)
            if entry is not None and now - entry[0] < self.interval_s:
                entry[1] += 1
                return False
            held = entry[1] if entry is not None else 0
            if len(self._kinds) >= self.MAX_KINDS:
                self._kinds.clear()
            self._kinds[kind] = [now, 0]
        if held:
            record.msg = f"{record.msg} ({held} similar messages in the last {self.interval_s:g} s not shown)"
        return True


def limit_log_repeats(interval_s: float = 10.0) -> RepeatLimiter:
    """Install one ``RepeatLimiter`` on the server's noisy loggers (idempotent)."""
    for name in RATE_LIMITED_LOGGERS:
        for existing in logging.getLogger(name).filters:
            if isinstance(existing, RepeatLimiter):
                return existing
    limiter = RepeatLimiter(interval_s)
    for name in RATE_LIMITED_LOGGERS:
        logging.getLogger(name).addFilter(limiter)
    return limiter
