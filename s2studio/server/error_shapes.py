"""Each API's own error body, so every client library raises its usual exception with our message.

* s2.cpp's routes (``/generate``, ``/encode``, ...): ``{"error": "message"}``.
* OpenAI's (``/v1/audio/...``, ``/v1/models``): ``{"error": {"message", "type", "param", "code"}}``;
  the OpenAI SDK picks ``message`` for its ``APIStatusError`` (``BadRequestError``,
  ``AuthenticationError``...) and keeps the rest in ``.body``.
* Fish Audio's (``/v1/tts``, ``/v1/references/...``): ``{"status", "message"}``, what
  fish.audio answers; the Fish Audio SDK reads ``message`` (or ``detail``) into its ``APIError``.
"""

from __future__ import annotations

OPENAI_PREFIXES = ("/v1/audio/", "/v1/models")
FISH_PREFIXES = ("/v1/tts", "/v1/references")

# status -> (OpenAI's error type, code): the pairs api.openai.com answers with.
_OPENAI_KINDS = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "forbidden"),
    404: ("invalid_request_error", "not_found"),
    405: ("invalid_request_error", "method_not_allowed"),
    408: ("invalid_request_error", "timeout"),
    413: ("invalid_request_error", "request_too_large"),
    415: ("invalid_request_error", "unsupported_media_type"),
    503: ("server_error", "server_busy"),
}


def api_of(path: str) -> str:
    """"openai", "fish" or "s2" (s2.cpp's shape, also for unknown paths)."""
    if path.startswith(OPENAI_PREFIXES):
        return "openai"
    if path.startswith(FISH_PREFIXES):
        return "fish"
    return "s2"


def error_body(path: str, status: int, message: str) -> dict:
    kind = api_of(path)
    if kind == "openai":
        error_type, code = _OPENAI_KINDS.get(status, ("server_error" if status >= 500 else "invalid_request_error",
                                                      None))
        return {"error": {"message": message, "type": error_type, "param": None, "code": code}}
    if kind == "fish":
        return {"status": status, "message": message}
    return {"error": message}
