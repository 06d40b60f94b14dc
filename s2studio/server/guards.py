"""ASGI middleware that guards every route: the optional API key and the upload size limit."""

from __future__ import annotations

import hmac
import json

OPEN_PATHS = frozenset({"/health", "/openapi.json"})  # probes and docs reveal nothing secret


class UploadTooLarge(Exception):
    def __init__(self, limit: int):
        super().__init__(f"The request body is larger than the server's limit of {limit / 1048576:g} MB.")
        self.limit = limit


async def _send_json(send, status: int, message: str, headers: dict[str, str] | None = None) -> None:
    body = json.dumps({"error": message}).encode()
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
            return await _send_json(send, 401, "Missing or wrong API key (send 'Authorization: Bearer KEY').",
                                    {"WWW-Authenticate": "Bearer"})
        return await self.app(scope, receive, send)


class BodyLimit:
    """Refuse bodies over ``limit`` bytes: at once from Content-Length, or while reading a body
    sent without one (chunked uploads) by raising ``UploadTooLarge`` into the handler."""

    def __init__(self, app, limit: int):
        self.app = app
        self.limit = limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            return await _send_json(send, 413, str(UploadTooLarge(self.limit)))
        seen = 0

        async def counting_receive():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise UploadTooLarge(self.limit)
            return message

        return await self.app(scope, counting_receive, send)
