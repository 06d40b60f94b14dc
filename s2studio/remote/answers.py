"""What a server says, checked before anything here believes it.

A server the user points the app at may be hostile (or merely broken), so every answer is
bounded and checked on arrival (docs/security.md):

* **bodies are capped**: a JSON answer (``/health``, ``/voices``, an error) is read up to its
  cap and refused past it, never read whole first; an audio stream is bounded by the samples
  the request allows (:func:`max_segment_samples`);
* **a body must be complete**: fewer bytes than its ``Content-Length`` (or a broken chunk) is
  a dropped connection, retried elsewhere, never a finished take;
* **JSON** is parsed with NaN/Infinity refused and its depth bounded (the parser's recursion
  would otherwise be the server's to exhaust);
* **text is made printable** (:func:`printable`): a server's error message or voice name
  reaches a terminal or a label, and escape sequences in it could rewrite the screen.

Standard library only, as the rest of the wire side.
"""

from __future__ import annotations

import http.client
import json
import math

from s2studio.remote.connection import RemoteError, ServerDropped
from s2studio.remote.printable import MAX_TEXT_CHARS, printable

MAX_JSON_BYTES = 1 << 20  # /health is a few hundred bytes
MAX_VOICES_BYTES = 8 << 20  # /voices: thousands of voices' names and transcripts
MAX_VOICE_FILE_BYTES = 16 << 20  # /encode answers one .s2voice (a 60 s reference is ~52 KB)
MAX_JSON_DEPTH = 32
# Frames a server may send beyond ``max_new_tokens``: the codec's look-ahead and a partial last
# frame. More than that is not an answer to the request.
FRAME_MARGIN = 8
SAMPLES_PER_FRAME = 2048  # the codec's hop (s2studio.audio.SAMPLES_PER_CODE_FRAME), at any rate
MIN_RATE, MAX_RATE = 8000, 192_000
class ServerMisbehaved(RemoteError):
    """An answer that breaks the protocol (a wrong sample rate, more audio than asked for,
    invalid samples, an oversized body): another server may answer properly."""


def clean(value, depth: int = 0):
    """A parsed JSON value with every string (keys too) made :func:`printable`."""
    if depth > MAX_JSON_DEPTH:
        return None
    if isinstance(value, str):
        return printable(value, 4 * MAX_TEXT_CHARS)
    if isinstance(value, list):
        return [clean(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {printable(k, 100): clean(v, depth + 1) for k, v in value.items()}
    return value


def read_capped(response: http.client.HTTPResponse, limit: int, url: str, what: str) -> bytes:
    """The whole body, at most ``limit`` bytes; a longer one is :class:`ServerMisbehaved`, a
    body cut short of its length or a broken chunk :class:`ServerDropped`."""
    try:
        data = response.read(limit + 1)
    except http.client.IncompleteRead:
        raise ServerDropped(url, f"The server at {url} stopped sending {what} half-way.") from None
    except (OSError, http.client.HTTPException) as exc:
        raise ServerDropped(url, f"The server at {url} stopped answering while sending {what} "
                                 f"({printable(exc, 80)}).") from None
    if len(data) > limit:
        raise ServerMisbehaved(url, f"The server at {url} sent more than {limit} bytes for {what}; refusing it.")
    check_complete(response, url, what)
    return data


def check_complete(response: http.client.HTTPResponse, url: str, what: str) -> None:
    """A body whose ``Content-Length`` promised more than arrived is a dropped connection.
    (``http.client`` reports that for ``read()`` but not for ``read1()``, which streams use.)"""
    if response.length:  # bytes still owed; None when the length was not given (chunked: checked per chunk)
        raise ServerDropped(url, f"The server at {url} stopped sending {what} {response.length} bytes short of "
                                 "its stated length.")


def _refuse_constant(name: str):
    raise ValueError(name)


def _depth(value) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, d = stack.pop()
        deepest = max(deepest, d)
        if d > MAX_JSON_DEPTH:
            return d
        if isinstance(item, dict):
            stack.extend((v, d + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, d + 1) for v in item)
    return deepest


def parse_json_object(data: bytes, url: str, what: str) -> dict:
    """A JSON object from a server, or :class:`ServerMisbehaved`; strings made printable."""
    try:
        value = json.loads(data, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        value = None
    if not isinstance(value, dict) or _depth(value) > MAX_JSON_DEPTH or _has_bad_number(value):
        raise ServerMisbehaved(url, f"The server at {url} sent an unreadable answer to {what}; is it an s2studio "
                                    "(or s2.cpp) server?")
    return clean(value)


def _has_bad_number(value) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def checked_rate(value) -> int | None:
    """A sample rate a server reported (``/health``), if it is one audio can have."""
    if isinstance(value, int) and not isinstance(value, bool) and MIN_RATE <= value <= MAX_RATE:
        return value
    return None


def max_segment_samples(max_new_tokens: int) -> int:
    """The most samples an answer to one segment may hold: the frames the request allows,
    plus :data:`FRAME_MARGIN`."""
    return (max_new_tokens + FRAME_MARGIN) * SAMPLES_PER_FRAME
