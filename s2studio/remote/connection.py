"""Talking to one ``s2studio serve`` (or s2.cpp ``--server``): addresses, requests, errors.

Standard library only (``http.client``): the remote engine must not add a dependency to the
laptop side. Every failure becomes one :class:`RemoteError` sentence that names the server:
unreachable, refused API key, a request the server refused (its JSON ``error`` message), a
full queue, or a connection that stopped mid-take.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import ssl
import threading
import urllib.parse
import uuid
from dataclasses import dataclass

from s2studio.errors import InputError, S2Error
from s2studio.remote.printable import printable

DEFAULT_PORT = 3030  # s2studio serve's and s2.cpp's
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
HOST_CHARS = re.compile(r"[A-Za-z0-9._:%-]+")  # names, IPv4, IPv6 (brackets already removed)


class RemoteError(S2Error):
    """A server could not do what was asked; ``str()`` names the server and the problem."""

    def __init__(self, url: str, message: str):
        self.url = url
        super().__init__(message)


class ServerUnreachable(RemoteError):
    """No connection (refused, unknown host, timeout): another server may do."""


class ServerBusy(RemoteError):
    """503: the server's queue is full; another server may do."""


class ServerDropped(RemoteError):
    """The connection ended (or went silent) mid-take; another server may finish the segment."""


class ServerRefused(RemoteError):
    """The server answered with an error about the request itself (4xx/5xx): retrying elsewhere
    would fail the same way."""

    def __init__(self, url: str, message: str, status: int):
        self.status = status
        super().__init__(url, message)


RETRYABLE = (ServerUnreachable, ServerBusy, ServerDropped)


@dataclass(frozen=True)
class ServerAddress:
    scheme: str  # http | https
    host: str
    port: int
    base_path: str = ""  # a server behind a reverse proxy under a path prefix

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.base_path}"

    @property
    def is_local(self) -> bool:
        return self.host.lower() in LOCAL_HOSTS or self.host.startswith("127.")

    @property
    def insecure_warning(self) -> str | None:
        """Plain HTTP to another machine: text, audio and the API key cross the network readable."""
        if self.scheme == "http" and not self.is_local:
            return (f"{self.url} is plain HTTP to another machine: the text, the audio and the API key travel "
                    "unencrypted. Use it only on a network you trust (or put HTTPS in front of the server).")
        return None


def parse_server_url(text: str) -> ServerAddress:
    """``host``, ``host:port`` or ``http(s)://host[:port][/prefix]`` → an address (port 3030 by
    default, as the server's); anything else is an ``InputError`` naming the value."""
    raw = (text or "").strip()
    if not raw:
        raise InputError("The server address is empty; give it as http://HOST:PORT.")
    if "://" not in raw:
        raw = "http://" + raw
    try:
        parts = urllib.parse.urlsplit(raw)
        port = parts.port
    except ValueError as exc:
        raise InputError(f"The server address {text!r} is not valid: {exc}.") from None
    if parts.scheme not in ("http", "https"):
        raise InputError(f"The server address {text!r} must start with http:// or https://.")
    if not parts.hostname:
        raise InputError(f"The server address {text!r} has no host name.")
    if not HOST_CHARS.fullmatch(parts.hostname):
        raise InputError(f"The server address {text!r} is not valid: {parts.hostname!r} is not a host name or "
                         "IP address.")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise InputError(f"The server address {text!r} must be just http(s)://HOST:PORT (no user, query or #); "
                         "an API key goes in its own setting.")
    default = DEFAULT_PORT if parts.scheme == "http" else 443
    return ServerAddress(parts.scheme, parts.hostname, port if port is not None else default,
                         parts.path.rstrip("/"))


def parse_server_list(text: str) -> tuple[ServerAddress, ...]:
    """A comma-separated list of server addresses (``--server URL1,URL2``), without repeats."""
    addresses: list[ServerAddress] = []
    for item in (text or "").split(","):
        if item.strip():
            address = parse_server_url(item)
            if address not in addresses:
                addresses.append(address)
    if not addresses:
        raise InputError("No server address given; use --server http://HOST:PORT (several: comma-separated).")
    return tuple(addresses)


def multipart_body(fields: dict[str, str], files: dict[str, tuple[str, bytes]]) -> tuple[bytes, str]:
    """A multipart/form-data body and its Content-Type."""
    boundary = "s2studio-" + uuid.uuid4().hex
    parts = []
    for name, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
                     + value.encode("utf-8") + b"\r\n")
    for name, (filename, data) in files.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
                     "Content-Type: application/octet-stream\r\n\r\n".encode() + data + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


class Connection:
    """One HTTP request to one server. ``abort()`` (any thread) closes the socket, which both
    unblocks a read in progress and tells the server the client is gone (it then cancels the
    job at its next frame)."""

    def __init__(self, address: ServerAddress, api_key: str | None, connect_timeout_s: float,
                 read_timeout_s: float):
        self.address = address
        self.api_key = api_key
        self.read_timeout_s = read_timeout_s
        if address.scheme == "https":
            self._conn = http.client.HTTPSConnection(address.host, address.port, timeout=connect_timeout_s,
                                                     context=ssl.create_default_context())
        else:
            self._conn = http.client.HTTPConnection(address.host, address.port, timeout=connect_timeout_s)
        self._lock = threading.Lock()
        self._aborted = False
        self._path = ""

    @property
    def url(self) -> str:
        return self.address.url

    def _headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        headers = {"User-Agent": "s2studio-remote", **(extra or {})}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
        """Send a request and return the response once its status line arrived, the status
        checked: anything but 200 becomes the matching ``RemoteError``."""
        self._path = path
        try:
            self._conn.connect()
            with self._lock:
                if self._aborted:
                    raise ServerDropped(self.url, "cancelled")
            # Connected: from here on, waiting (the queue, the first chunk) may be long.
            self._conn.sock.settimeout(self.read_timeout_s)
            self._conn.request(method, self.address.base_path + path, body=body, headers=self._headers(headers))
            response = self._conn.getresponse()
        except RemoteError:
            raise
        except (socket.timeout, TimeoutError) as exc:
            raise ServerUnreachable(self.url, f"The server at {self.url} did not answer in time ({exc}).") from None
        except ssl.SSLError as exc:
            raise ServerUnreachable(self.url, f"Cannot make a secure connection to {self.url}: {exc}.") from None
        except (OSError, http.client.HTTPException) as exc:
            raise ServerUnreachable(self.url, f"Cannot reach the server at {self.url} ({_reason(exc)}). Is "
                                              "`s2studio serve` running there, and are the address and port "
                                              "right?") from None
        if response.status != 200:
            raise self._status_error(response)
        return response

    def get_json(self, path: str, max_bytes: int) -> dict:
        """A JSON object answer, its body capped at ``max_bytes`` and checked
        (:mod:`s2studio.remote.answers`)."""
        from s2studio.remote.answers import parse_json_object, read_capped  # answers builds on this module

        response = self.request("GET", path)
        try:
            return parse_json_object(read_capped(response, max_bytes, self.url, f"its answer to {path}"),
                                     self.url, path)
        finally:
            self.close()

    def _status_error(self, response: http.client.HTTPResponse) -> RemoteError:
        try:
            body = response.read(65536)
        except (OSError, http.client.HTTPException):
            body = b""
        self.close()
        message = _error_text(body) or printable(f"HTTP {response.status} {response.reason}")
        status = response.status
        if status == 401:
            what = "rejected the API key" if self.api_key else "needs an API key"
            return ServerRefused(self.url, f"The server at {self.url} {what} (401): set the key it was started "
                                           "with (--api-key, or the app's server settings).", status)
        if status == 503:
            retry = response.getheader("Retry-After") or ""
            later = f"; try again in {int(retry)} s" if retry.isdigit() and len(retry) < 7 else ""
            return ServerBusy(self.url, f"The server at {self.url} is busy: {message}{later}.")
        if status == 404:
            return ServerRefused(self.url, f"The server at {self.url} has no {self._path} endpoint (404); is it "
                                           "an s2studio or s2.cpp server?", status)
        return ServerRefused(self.url, f"The server at {self.url} refused the request ({status}): {message}",
                             status)

    def abort(self) -> None:
        """Close the socket from any thread (a blocked read then fails at once)."""
        with self._lock:
            self._aborted = True
            sock = self._conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self._conn.close()


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.gaierror):
        return "unknown host name"
    # printable: a malformed status line (BadStatusLine) carries the server's bytes
    return printable(getattr(exc, "strerror", None) or str(exc) or type(exc).__name__, 120)


def _error_text(body: bytes) -> str:
    """The server's ``{"error": "..."}`` message, else the body's text, made printable and
    short: it is shown to a person, and the server may be hostile."""
    try:
        data = json.loads(body)
        if isinstance(data, dict) and isinstance(data.get("error"), str):
            return printable(data["error"])
    except (ValueError, RecursionError):
        pass
    return printable(body.decode("utf-8", "replace"))
