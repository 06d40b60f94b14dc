"""Server settings (what ``s2studio serve`` flags set)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from s2studio.engine.params import GenerationParams
from s2studio.server.voice_map import VoiceMap

DEFAULT_PORT = 3030  # s2.cpp's
DEFAULT_QUEUE_DEPTH = 4
# Takes decoded together (``serve --max-batch``); the engine's batch holds at most MAX_BATCH.
DEFAULT_MAX_BATCH = 4
MAX_BATCH = 8  # s2studio.engine.batching.MAX_BATCH (a test keeps them equal; no torch import here)
DEFAULT_MAX_UPLOAD_MB = 50.0
DEFAULT_MAX_TEXT_CHARS = 10_000
DEFAULT_MAX_CONNECTIONS = 100
DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_BODY_TIMEOUT_S = 60.0
DEFAULT_MAX_REFERENCE_TEXT_CHARS = 1_000


@dataclass(frozen=True)
class ServerConfig:
    voice_dir: str | os.PathLike[str]
    # Requests allowed to wait behind the running one; 0 answers 503 whenever busy (s2.cpp).
    queue_depth: int = DEFAULT_QUEUE_DEPTH
    # Requests synthesized at once, decoded together in one batch (1..MAX_BATCH). 1: one take
    # at a time, the others wait their turn (as s2.cpp; ``serve`` defaults to DEFAULT_MAX_BATCH).
    max_batch: int = 1
    api_key: str | None = None  # None: no authentication (the default bind is loopback-only)
    max_upload_bytes: int = int(DEFAULT_MAX_UPLOAD_MB * 1024 * 1024)
    # Per-request defaults, as s2.cpp's server takes them from its command line.
    generation: GenerationParams = field(default_factory=GenerationParams)
    # Upper bound on max_new_tokens a request may ask for (None: no bound). Lets a shared
    # server cap the work one request can cause; larger requests are clamped, not refused.
    max_new_tokens_limit: int | None = None
    retry_after_s: int = 5  # the Retry-After of a 503
    # Longest text / reference transcript of one request (413 beyond): the prompt's memory
    # and prefill time grow with it.
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS
    max_reference_text_chars: int = DEFAULT_MAX_REFERENCE_TEXT_CHARS
    # Browser protections (server/guards.py): Host names besides localhost/127.0.0.1/[::1] and
    # the address connected to ("*": any), and web page origins allowed to call (CORS).
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    # Slow or hostile clients (server/connections.py): open connections beyond this get a 503
    # at once; a request's headers must arrive within header_timeout_s, its body within
    # body_timeout_s of its headers (else 408 and the connection is closed).
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    # OpenAI's stock voice names → voices, and the voice a stock name without an entry gets
    # (``--voice-map``, ``--default-voice``; server/voice_map.py).
    voice_map: VoiceMap = field(default_factory=VoiceMap)
    # Inline references of /v1/tts (Fish Audio's API) kept encoded, by content hash (server/fish.py).
    reference_cache_entries: int = 16

    def __post_init__(self) -> None:
        if self.queue_depth < 0:
            raise ValueError("queue_depth must be 0 or more")
        if not 1 <= self.max_batch <= MAX_BATCH:
            raise ValueError(f"max_batch must be 1..{MAX_BATCH}, not {self.max_batch}")
        if self.max_upload_bytes < 1:
            raise ValueError("max_upload_bytes must be positive")
        if self.max_text_chars < 1 or self.max_reference_text_chars < 1:
            raise ValueError("max_text_chars and max_reference_text_chars must be positive")
        if self.max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        if not (self.header_timeout_s > 0 and self.body_timeout_s > 0):
            raise ValueError("header_timeout_s and body_timeout_s must be positive")
        if not 0 <= self.reference_cache_entries <= 1024:
            raise ValueError("reference_cache_entries must be 0..1024")
        if self.api_key is not None and not self.api_key:
            raise ValueError("an empty API key would accept anyone; pass None for no key")
