"""ASGI middleware that guards every route: browser protections (Host, Origin, Content-Type,
CORS), the optional API key and the upload size limit.

The threat: the server runs on a desktop, and any web page the user visits can make the browser
send it requests. Three browser attacks are closed here, as Jupyter and Ollama close them:

* **DNS rebinding** — a page on ``evil.example`` re-points its name at 127.0.0.1 and then reads
  our answers as same-origin. Its requests carry ``Host: evil.example``, so only the names this
  server is reached by are accepted (``BrowserGuard.host_allowed``).
* **Cross-site requests** — a page can *send* (not read) a POST without any CORS preflight if it
  looks like an HTML form: ``application/x-www-form-urlencoded``, ``multipart/form-data`` or
  ``text/plain`` (or a ``fetch`` of a Blob with no type at all). Browsers put an ``Origin``
  header on every such POST (``null`` from sandboxed frames and some redirects), and modern ones
  ``Sec-Fetch-Site`` on every request, so a request from a page that is not explicitly allowed
  is refused whatever its type. Only curl-like clients send neither.
* **Content types a form can forge** — each POST route takes exactly one type:
  ``multipart/form-data`` for ``/generate`` (s2.cpp's API), ``application/json`` for
  ``/v1/audio/speech`` (which a page can only send after a preflight we refuse), msgpack or JSON
  for Fish Audio's routes (both need a preflight; ``/v1/references/add`` also takes multipart,
  refused from a page by its Origin as ``/generate`` is). Anything else is a 415, so
  ``text/plain`` and url-encoded bodies never reach a parser.

CORS is off unless the operator lists origins (``--allowed-origins``); then those origins get a
proper preflight answer and ``Access-Control-Allow-Origin`` on every response.
"""

from __future__ import annotations

import asyncio
import hmac
import json

OPEN_PATHS = frozenset({"/health", "/openapi.json"})  # probes and docs reveal nothing secret

# Names that always reach this machine only (a rebinding page cannot use them: its own name is
# in the Host header).
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
# The only body type each POST route accepts (others: 415).
BODY_TYPES = {"/generate": "multipart/form-data", "/encode": "multipart/form-data",
              "/v1/audio/speech": "application/json",
              # Fish Audio's API (server/fish.py): msgpack (its SDK) or JSON; the add route also
              # takes fish-speech's multipart form. msgpack, like JSON, needs a preflight.
              "/v1/tts": ("application/msgpack", "application/json"),
              "/v1/references/add": ("multipart/form-data", "application/msgpack", "application/json"),
              "/v1/references/delete": ("application/msgpack", "application/json")}
CORS_ALLOW_METHODS = "GET, POST, DELETE"
CORS_ALLOW_HEADERS = "Authorization, Content-Type"
CORS_EXPOSE_HEADERS = ("Content-Disposition, Retry-After, X-Audio-Sample-Rate, X-Audio-Channels, X-Audio-Encoding, "
                       "X-S2-Ignored")
CORS_MAX_AGE_S = 600


class BodyTooSlow(Exception):
    """The body did not arrive in time (a slow or stalled client); answered 408."""

    def __init__(self, timeout_s: float):
        super().__init__(f"The request body did not arrive within {timeout_s:g} s.")


class UploadTooLarge(Exception):
    def __init__(self, limit: int):
        super().__init__(f"The request body is larger than the server's limit of {limit / 1048576:g} MB.")
        self.limit = limit


async def _send_json(send, scope, status: int, message: str, headers: dict[str, str] | None = None) -> None:
    from s2studio.server.error_shapes import error_body

    body = json.dumps(error_body(scope.get("path", ""), status, message)).encode()  # in its API's shape
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class ApiKeyGuard:
    """``Authorization: Bearer <key>`` on every route but the open ones. The comparison is
    constant-time so the key cannot be guessed byte by byte from response timings."""

    def __init__(self, app, api_key: str | None):
        self.app = app
        self._key = None if api_key is None else f"Bearer {api_key}".encode()

    async def __call__(self, scope, receive, send):
        if self._key is None or scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            return await self.app(scope, receive, send)
        given = dict(scope["headers"]).get(b"authorization", b"")
        if not hmac.compare_digest(given, self._key):
            return await _send_json(send, scope, 401, "Missing or wrong API key (send 'Authorization: Bearer KEY').",
                                    {"WWW-Authenticate": "Bearer"})
        return await self.app(scope, receive, send)


class BodyLimit:
    """Refuse bodies over ``limit`` bytes: at once from Content-Length, or while reading a body
    sent without one (chunked uploads) by raising ``UploadTooLarge`` into the handler. A body
    still incomplete ``timeout_s`` after the headers raises ``BodyTooSlow`` (408): a client
    sending one byte a second must not hold a connection and a queue place for hours."""

    def __init__(self, app, limit: int, timeout_s: float = 60.0):
        self.app = app
        self.limit = limit
        self.timeout_s = timeout_s

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            return await _send_json(send, scope, 413, str(UploadTooLarge(self.limit)))
        seen = 0
        complete = False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s

        async def counting_receive():
            nonlocal seen, complete
            if complete:  # after the body: only http.disconnect is left, which may take any time
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                raise BodyTooSlow(self.timeout_s) from None
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise UploadTooLarge(self.limit)
                complete = not message.get("more_body", False)
            return message

        return await self.app(scope, counting_receive, send)


def _header(scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


def host_name(host_header: str) -> str:
    """``Host`` without its port, lower case, IPv6 brackets removed: ``[::1]:3030`` -> ``::1``."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    name, sep, port = host.rpartition(":")
    if sep and port.isdigit() and ":" not in name:
        host = name
    return host.rstrip(".")


def _normalize_origin(origin: str) -> str:
    return origin.strip().lower().rstrip("/")


class BrowserGuard:
    """Host allow-list, Origin/``Sec-Fetch-Site`` refusal, one Content-Type per POST route, and
    CORS for the origins the operator allows (see the module doc for why each)."""

    def __init__(self, app, allowed_hosts=(), allowed_origins=()):
        self.app = app
        self.any_host = "*" in allowed_hosts
        self.hosts = frozenset(host_name(h) for h in allowed_hosts if h != "*") | LOOPBACK_HOSTS
        self.any_origin = "*" in allowed_origins
        self.origins = frozenset(_normalize_origin(o) for o in allowed_origins if o != "*")

    def host_allowed(self, host: str, scope) -> bool:
        name = host_name(host)
        if self.any_host or name in self.hosts:
            return True
        # The address the client connected to (the bound one, or with --host 0.0.0.0 the
        # interface's): a browser that uses an IP address sends it as Host; rebinding cannot.
        server = scope.get("server")
        return server is not None and name == str(server[0]).lower()

    def origin_allowed(self, origin: str) -> bool:
        return origin != "null" and (self.any_origin or _normalize_origin(origin) in self.origins)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        host = _header(scope, b"host")
        if host is not None and not self.host_allowed(host, scope):
            return await _send_json(send, scope, 403,
                                    f"The Host header {host_name(host)!r} is not an address of this server "
                                    "(a DNS-rebinding web page?); the operator can allow a name with "
                                    "--allowed-hosts.")
        origin = _header(scope, b"origin")
        if origin is not None and not self.origin_allowed(origin):
            return await _send_json(send, scope, 403,
                                    f"Requests from web pages ({origin[:100]}) are refused; the operator "
                                    "can allow an origin with --allowed-origins.")
        if origin is None and _header(scope, b"sec-fetch-site") in ("cross-site", "same-site"):
            # A browser request from another site whose Origin was withheld (a GET or HEAD).
            return await _send_json(send, scope, 403, "Requests from other web sites are refused.")
        if scope["method"] == "OPTIONS" and origin is not None:
            return await self._preflight(origin, send)
        wanted = BODY_TYPES.get(scope["path"])
        if wanted is not None and scope["method"] in ("POST", "DELETE"):
            wanted = (wanted,) if isinstance(wanted, str) else wanted
            given = (_header(scope, b"content-type") or "").split(";", 1)[0].strip().lower()
            if given not in wanted:
                return await _send_json(send, scope, 415, f"{scope['path']} takes Content-Type: "
                                                          f"{' or '.join(wanted)}, not {given or 'none'}.")
        if origin is None:
            return await self.app(scope, receive, send)

        async def send_with_cors(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *self._cors_headers(origin)]}
            await send(message)

        return await self.app(scope, receive, send_with_cors)

    @staticmethod
    def _cors_headers(origin: str) -> list[tuple[bytes, bytes]]:
        return [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin"),
                (b"access-control-expose-headers", CORS_EXPOSE_HEADERS.encode())]

    async def _preflight(self, origin: str, send) -> None:
        """An allowed origin's preflight: what it may send (needs no API key: browsers never
        send credentials on a preflight)."""
        headers = [*self._cors_headers(origin),
                   (b"access-control-allow-methods", CORS_ALLOW_METHODS.encode()),
                   (b"access-control-allow-headers", CORS_ALLOW_HEADERS.encode()),
                   (b"access-control-max-age", str(CORS_MAX_AGE_S).encode()), (b"content-length", b"0")]
        await send({"type": "http.response.start", "status": 204, "headers": headers})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
