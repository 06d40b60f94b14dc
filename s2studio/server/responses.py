"""Turning a queued job's events into HTTP: errors, one-shot audio, and the live stream.

Written as plain ASGI callables because two things must happen at once: waiting for audio
from the worker thread, and listening for the client's ``http.disconnect`` (which only
``receive()`` reports) so that a client that hangs up — while queued, while the model is
still generating before the first byte, or mid-stream — cancels its job at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from s2studio.audio import float_to_pcm16, pcm16_wav_header, wav_bytes
from s2studio.errors import AudioInputError, InputError
from s2studio.engine.voices import IncompatibleVoiceError, VoiceNotFoundError
from s2studio.server.jobs import Chunk, ClientGone, Done, Failed, JobQueue, Ticket

log = logging.getLogger(__name__)

CLIENT_ERRORS = (InputError, AudioInputError, IncompatibleVoiceError, VoiceNotFoundError)


def error_status(exc: BaseException) -> int:
    """400 for what the request got wrong, 500 for everything else (s2.cpp's split)."""
    return 400 if isinstance(exc, CLIENT_ERRORS) else 500


def error_message(exc: BaseException) -> str:
    if error_status(exc) == 400 or getattr(exc, "__module__", "").startswith("s2studio."):
        return str(exc)
    return "Synthesis failed."  # an unexpected exception is a bug: logged, not shown


class PathRedactor:
    """Replaces the server's own folders in messages sent to clients: an error must not tell a
    web page where the user's home, model or voices are (``/home/alice/...``)."""

    def __init__(self, named_paths: list[tuple[str, str]]):
        pairs = []
        for path, label in named_paths:
            for variant in {os.path.abspath(path), os.path.realpath(path)}:
                if len(variant) > 1:  # never "/" itself
                    pairs.append((variant.rstrip(os.sep), label))
        # The most specific first; a path only where it ends (so /home/al leaves /home/alice be).
        self._patterns = [(re.compile(re.escape(path) + r"(?![\w-]|\.\w)"), label)
                          for path, label in sorted(set(pairs), key=lambda pair: -len(pair[0]))]

    def __call__(self, message: str) -> str:
        for pattern, label in self._patterns:
            message = pattern.sub(lambda _: label, message)
        return message


def json_error(status: int, message: str, headers: dict[str, str] | None = None, path: str = ""):
    """The error in the shape of the API ``path`` belongs to (``error_shapes``)."""
    from starlette.responses import JSONResponse

    from s2studio.server.error_shapes import error_body

    return JSONResponse(error_body(path, status, message), status_code=status, headers=headers)


def pcm16_bytes(samples: np.ndarray) -> bytes:
    return float_to_pcm16(samples).astype("<i2", copy=False).tobytes()


def f32_bytes(samples: np.ndarray) -> bytes:
    return np.asarray(samples, dtype="<f4").tobytes()


@dataclass(frozen=True)
class AudioOutput:
    """What the client gets: ``container`` wav|pcm, ``float`` samples (the one-shot WAV, or
    raw ``pcm_f32le``) or PCM16, ``live`` (sent as decoded) or buffered, and for live streams
    how much audio to hold back before the first byte (s2.cpp's ``stream_start_buffer_ms``)."""

    container: str = "wav"
    float_samples: bool = False
    live: bool = False
    start_buffer_ms: int = 0
    # The compat routes' formats (OpenAI, Fish Audio): an ``audio.encoders.EncodeOptions``
    # (format, rate, speed, bitrate); ``container`` is then its format.
    encoding: Any = None
    extra_headers: tuple[tuple[str, str], ...] = ()  # e.g. X-S2-Ignored on the OpenAI route

    def encoder(self, sample_rate: int):
        from s2studio.audio.encoders import StreamEncoder

        return StreamEncoder(self.encoding, sample_rate)

    def headers(self, sample_rate: int) -> dict[str, str]:
        if self.encoding is not None:
            return {**self._encoded_headers(sample_rate), **dict(self.extra_headers)}
        name = "generated_audio.pcm" if self.container == "pcm" else "generated_audio.wav"
        headers = {"Content-Disposition": f'attachment; filename="{name}"', "Cache-Control": "no-store"}
        if self.container == "pcm" or self.live:
            # Live and raw responses are PCM16 (s2.cpp's streaming format), or float32 when
            # the client asked for s2studio's pcm_f32le.
            headers.update({"X-Audio-Sample-Rate": str(sample_rate), "X-Audio-Channels": "1",
                            "X-Audio-Encoding": "pcm_f32le" if self.raw_float else "pcm_s16le"})
        return headers

    def _encoded_headers(self, sample_rate: int) -> dict[str, str]:
        rate = self.encoding.output_rate(sample_rate)
        headers = {"Content-Disposition": f'attachment; filename="speech.{self.encoding.fmt}"',
                   "Cache-Control": "no-store", "X-Audio-Sample-Rate": str(rate), "X-Audio-Channels": "1"}
        if self.encoding.fmt in ("pcm", "wav"):
            headers["X-Audio-Encoding"] = "pcm_s16le"
        return headers

    @property
    def raw_float(self) -> bool:
        return self.container == "pcm" and self.float_samples

    @property
    def bytes_per_sample(self) -> int:
        return 4 if self.raw_float else 2

    def encode(self, samples: np.ndarray) -> bytes:
        """Samples as this output's raw PCM bytes."""
        return f32_bytes(samples) if self.raw_float else pcm16_bytes(samples)

    def media_type(self, sample_rate: int) -> str:
        if self.encoding is not None:
            from s2studio.audio.encoders import media_type

            return media_type(self.encoding.fmt, self.encoding.output_rate(sample_rate))
        if self.raw_float:
            return "application/octet-stream"  # no registered type for raw float PCM
        return f"audio/L16; rate={sample_rate}; channels=1" if self.container == "pcm" else "audio/wav"


class SynthesisResponse:
    """The response of a queued synthesis (an ASGI app Starlette's router calls)."""

    def __init__(self, queue: JobQueue, ticket: Ticket, output: AudioOutput, sample_rate: int,
                 redact=lambda message: message):
        self.queue = queue
        self.ticket = ticket
        self.output = output
        self.sample_rate = sample_rate
        self.redact = redact

    async def __call__(self, scope, receive, send) -> None:
        watcher = asyncio.create_task(self._watch_disconnect(receive))
        try:
            first = await self.ticket.next_event()
            if isinstance(first, Failed):
                await self._send_failure(first.error, scope, receive, send)
            elif self.output.live:
                await self._stream(first, send)
            else:
                await self._send_whole(first, scope, receive, send)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            self.queue.withdraw(self.ticket)  # a no-op once finished; else cancels the job

    async def _watch_disconnect(self, receive) -> None:
        # The body has been read already, so the next message is http.disconnect.
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                log.info("client disconnected; cancelling its synthesis")
                self.queue.withdraw(self.ticket)
                self.ticket.abandon()
                return

    async def _send_failure(self, exc: BaseException, scope, receive, send) -> None:
        if isinstance(exc, ClientGone):
            return
        status = error_status(exc)
        if status == 500:
            log.error("synthesis failed: %s", exc, exc_info=not error_message(exc) == str(exc))
        await json_error(status, self.redact(error_message(exc)), path=scope.get("path", ""))(scope, receive, send)

    async def _collect(self, first) -> tuple[list[np.ndarray], Done | Failed]:
        pieces: list[np.ndarray] = []
        event = first
        while isinstance(event, Chunk):
            pieces.append(event.chunk.samples)
            event = await self.ticket.next_event()
        return pieces, event

    async def _send_whole(self, first, scope, receive, send) -> None:
        from starlette.responses import Response

        _, end = await self._collect(first)
        if isinstance(end, Failed):
            await self._send_failure(end.error, scope, receive, send)
            return
        result = end.result
        if result is None or result.cancelled:  # the server is shutting down (or the client left)
            await json_error(503, "The synthesis was cancelled.", path=scope.get("path", ""))(scope, receive, send)
            return
        # The take's audio, not the chunks: it carries the requested post-processing.
        if self.output.encoding is not None:
            from s2studio.audio.encoders import encode_whole

            body = await asyncio.to_thread(encode_whole, result.audio, self.output.encoding, result.sample_rate)
        elif self.output.container == "pcm":
            body = self.output.encode(result.audio)
        else:
            subtype = "FLOAT" if self.output.float_samples else "PCM_16"
            body = await asyncio.to_thread(wav_bytes, result.audio, result.sample_rate, subtype=subtype)
        response = Response(body, media_type=self.output.media_type(result.sample_rate),
                            headers=self.output.headers(result.sample_rate))
        await response(scope, receive, send)

    async def _stream(self, first, send) -> None:
        if self.output.encoding is not None:
            return await self._stream_encoded(first, send)
        out = self.output
        await send({"type": "http.response.start", "status": 200,
                    "headers": _raw_headers({**out.headers(self.sample_rate),
                                             "Content-Type": out.media_type(self.sample_rate)})})
        pending = [pcm16_wav_header(self.sample_rate, data_bytes=None)] if out.container == "wav" else []
        hold = out.start_buffer_ms * self.sample_rate * out.bytes_per_sample // 1000  # bytes to queue first
        started = hold == 0
        event = first
        while isinstance(event, Chunk):
            pending.append(out.encode(event.chunk.samples))
            if not started and sum(map(len, pending)) >= hold:
                started = True
            if started:
                await send({"type": "http.response.body", "body": b"".join(pending), "more_body": True})
                pending.clear()
            event = await self.ticket.next_event()
        if isinstance(event, Failed):
            if isinstance(event.error, ClientGone):
                return
            # Headers are gone already: the only honest signal left is an unfinished body.
            raise StreamAborted(f"synthesis failed mid-stream: {event.error}") from event.error
        await send({"type": "http.response.body", "body": b"".join(pending), "more_body": False})


    async def _stream_encoded(self, first, send) -> None:
        """The compat routes' live stream: each chunk through the format's encoder (PyAV or
        PCM; a few ms per chunk, in a thread so the event loop keeps serving)."""
        out = self.output
        encoder = out.encoder(self.sample_rate)
        await send({"type": "http.response.start", "status": 200,
                    "headers": _raw_headers({**out.headers(self.sample_rate),
                                             "Content-Type": out.media_type(self.sample_rate)})})
        event = first
        while isinstance(event, Chunk):
            data = await asyncio.to_thread(encoder.write, event.chunk.samples)
            if data:
                await send({"type": "http.response.body", "body": data, "more_body": True})
            event = await self.ticket.next_event()
        if isinstance(event, Failed):
            if isinstance(event.error, ClientGone):
                return
            raise StreamAborted(f"synthesis failed mid-stream: {event.error}") from event.error
        await send({"type": "http.response.body", "body": await asyncio.to_thread(encoder.finish),
                    "more_body": False})


class StreamAborted(Exception):
    """Raised after the headers were sent, so the server drops the connection mid-body."""


def _raw_headers(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]

