"""Fish Audio's API: ``POST /v1/tts`` and fish-speech's ``/v1/references/list|add|delete``.

``/v1/tts`` takes the body the official ``fish-audio-sdk`` sends (msgpack, ``Content-Type:
application/msgpack``, as fish-speech reads it with ormsgpack) or the same keys as JSON
(reference audio then base64). Keys and what they do here:

* ``text``; ``references`` ``[{audio, text}]`` (at most one: S2's prompt holds one reference),
  encoded once and kept by the SHA-256 of its bytes (``ReferenceCache``), so a client that
  sends the same clip with every request pays for its encoding once; ``reference_id`` — a
  voice of the voice folder (what ``/v1/references/add`` saved);
* ``format`` ``wav`` | ``pcm`` | ``mp3`` | ``opus`` (Fish's) and ``flac`` | ``aac``;
  ``sample_rate``; ``mp3_bitrate`` (64/128/192 kbit/s), ``opus_bitrate`` (24–64, -1000 = auto);
  all but ``wav`` are sent as decoded, ``wav`` too with ``streaming: true``;
* ``prosody`` ``{speed 0.25–4, volume −20–20 dB}``: the time-stretch and gain of
  ``audio.encoders``;
* ``temperature``, ``top_p``, ``max_new_tokens``, ``seed``: the sampler (the server's ranges);
* accepted, type-checked and without effect (fish-speech's knobs this engine has no use for):
  ``chunk_length``, ``normalize``, ``latency``, ``use_memory_cache``, ``repetition_penalty``,
  ``min_chunk_length``, ``condition_on_previous_chunks``, ``early_stop_threshold``; the
  ``model`` header.

The reference routes answer msgpack, or JSON when ``?format=json`` or ``Accept:
application/json`` asks for it, as fish-speech's do. Guards, limits and the queue are the
other routes' (``guards``, ``RequestLimits``, ``JobQueue``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from s2studio.engine.params import GenerationParams
from s2studio.server.openai import compat_text_lengths, encode_options
from s2studio.server.params import (DEFAULT_LIMITS, BadRequest, GenerateSpec, RequestLimits, apply_params, as_bool,
                                    as_float, as_int, as_str)
from s2studio.server.responses import AudioOutput

FORMATS = ("wav", "pcm", "mp3", "opus", "flac", "aac")
MAX_REFERENCES = 1
MP3_BITRATES = (64, 128, 192)
OPUS_BITRATES = (-1000, 24, 32, 48, 64)  # kbit/s; -1000: the encoder's choice
MAX_REFERENCE_ID_CHARS = 255
# Accepted with no effect: (key, converter, range or allowed values).
IGNORED_NUMBERS = {"chunk_length": (as_int, 0, 10_000), "repetition_penalty": (as_float, 0.0, 10.0),
                   "min_chunk_length": (as_int, 0, 10_000), "early_stop_threshold": (as_float, 0.0, 1.0)}
IGNORED_BOOLS = ("normalize", "condition_on_previous_chunks")
IGNORED_CHOICES = {"latency": ("normal", "balanced", "low"), "use_memory_cache": ("on", "off")}


def decode_body(data: bytes, content_type: str) -> Any:
    """msgpack or JSON (by ``Content-Type``; the guard lets no other type through)."""
    if content_type.split(";", 1)[0].strip().lower() == "application/msgpack":
        import ormsgpack

        try:
            return ormsgpack.unpackb(data)
        except (ormsgpack.MsgpackDecodeError, ValueError, RecursionError):
            raise BadRequest("The request body is not valid msgpack.") from None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        raise BadRequest("The request body is not valid JSON.") from None


def _ranged(key: str, value, low: float, high: float):
    if not low <= value <= high:
        raise BadRequest(f"{key} must be between {low:g} and {high:g}, not {value:g}.")
    return value


def audio_bytes(key: str, value) -> bytes:
    """Reference audio: msgpack's bytes, or base64 text in JSON."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise BadRequest(f"{key} must be the audio file's bytes (base64 in JSON).") from None
    raise BadRequest(f"{key} must be the audio file's bytes (base64 in JSON).")


def parse_tts_body(body, defaults: GenerationParams, max_new_tokens_limit: int | None = None,
                   limits: RequestLimits = DEFAULT_LIMITS) -> tuple[GenerateSpec, AudioOutput, bytes | None]:
    """The body → (spec, output, the inline reference's audio bytes or None); the inline
    reference's transcript is in ``spec.reference_text``, a ``reference_id`` in ``spec.voice``."""
    if not isinstance(body, dict):
        raise BadRequest("The request body must be an object (msgpack or JSON).")
    if "text" not in body:
        raise BadRequest("Missing 'text': the text to speak.")
    spec = GenerateSpec(text=as_str("text", body["text"]), generation=defaults)
    reference = None
    references = body.get("references") or []
    if not isinstance(references, list):
        raise BadRequest("references must be a list of {audio, text}.")
    if len(references) > MAX_REFERENCES:
        raise BadRequest(f"references has {len(references)} entries; this server takes at most {MAX_REFERENCES} "
                         f"(one reference clip per request).")
    if references:
        entry = references[0]
        if not isinstance(entry, dict) or "audio" not in entry or "text" not in entry:
            raise BadRequest("references[0] must be {audio, text}.")
        reference = audio_bytes("references[0].audio", entry["audio"])
        spec.reference_text = as_str("references[0].text", entry["text"])
        if not reference:
            raise BadRequest("references[0].audio is empty.")
        if not spec.reference_text.strip():
            raise BadRequest("references[0].text must be the transcript of the reference clip.")
    if body.get("reference_id") is not None and reference is None:
        spec.voice = as_str("reference_id", body["reference_id"])
    compat_text_lengths(spec, limits)

    fmt = as_str("format", body.get("format") or "mp3").lower()  # the SDK's default
    if fmt not in FORMATS:
        raise BadRequest(f"format {fmt!r} is not supported; use one of {', '.join(FORMATS)}.")
    rate = None if body.get("sample_rate") is None else as_int("sample_rate", body["sample_rate"])
    bitrate = None
    if fmt == "mp3" and body.get("mp3_bitrate") is not None:
        kbps = as_int("mp3_bitrate", body["mp3_bitrate"])
        if kbps not in MP3_BITRATES:
            raise BadRequest(f"mp3_bitrate must be one of {', '.join(map(str, MP3_BITRATES))}, not {kbps}.")
        bitrate = kbps * 1000
    if fmt == "opus" and body.get("opus_bitrate") is not None:
        kbps = as_int("opus_bitrate", body["opus_bitrate"])
        if kbps not in OPUS_BITRATES:
            raise BadRequest(f"opus_bitrate must be one of {', '.join(map(str, OPUS_BITRATES))}, not {kbps}.")
        bitrate = None if kbps == -1000 else kbps * 1000
    speed, volume = 1.0, 0.0
    prosody = body.get("prosody")
    if prosody is not None:
        if not isinstance(prosody, dict):
            raise BadRequest("prosody must be an object {speed, volume}.")
        if prosody.get("speed") is not None:
            speed = as_float("prosody.speed", prosody["speed"])
        if prosody.get("volume") is not None:
            volume = as_float("prosody.volume", prosody["volume"])
    streaming = bool(as_bool("streaming", body["streaming"])) if body.get("streaming") is not None else False

    for key, (convert, low, high) in IGNORED_NUMBERS.items():
        if body.get(key) is not None:
            _ranged(key, convert(key, body[key]), low, high)
    for key in IGNORED_BOOLS:
        if body.get(key) is not None:
            as_bool(key, body[key])
    for key, choices in IGNORED_CHOICES.items():
        if body.get(key) is not None and as_str(key, body[key]) not in choices:
            raise BadRequest(f"{key} must be one of {', '.join(choices)}.")
    sampling = {k: body[k] for k in ("temperature", "top_p", "max_new_tokens", "seed") if body.get(k) is not None}
    apply_params(spec, sampling, max_new_tokens_limit, limits)
    encoding = encode_options(fmt, rate, speed, bitrate, gain_db=volume)
    live = fmt != "wav" or streaming
    return spec, AudioOutput(container=fmt, live=live, encoding=encoding), reference


class ReferenceCache:
    """Encoded inline references by the SHA-256 of their file bytes, the least recently used
    dropped beyond ``entries`` (codes of a 60 s clip are about 50 KB)."""

    def __init__(self, entries: int):
        self.entries = max(0, entries)
        self._codes: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    @staticmethod
    def key(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    def get(self, key: str) -> np.ndarray | None:
        with self._lock:
            codes = self._codes.get(key)
            if codes is not None:
                self._codes.move_to_end(key)
                self.hits += 1
            else:
                self.misses += 1
            return codes

    def put(self, key: str, codes: np.ndarray) -> None:
        if self.entries == 0:
            return
        with self._lock:
            self._codes[key] = codes
            self._codes.move_to_end(key)
            while len(self._codes) > self.entries:
                self._codes.popitem(last=False)


def wants_json(request) -> bool:
    """fish-speech's rule: ``?format=json`` (or msgpack), else the Accept header; msgpack by default."""
    query = request.query_params.get("format", "").strip().lower()
    if query in ("json", "application/json", "msgpack", "application/msgpack"):
        return query in ("json", "application/json")
    accept = request.headers.get("accept", "").lower()
    return "application/json" in accept and "application/msgpack" not in accept


def packed(request, payload: dict, status: int = 200):
    from starlette.responses import JSONResponse, Response

    if wants_json(request):
        return JSONResponse(payload, status_code=status)
    import ormsgpack

    return Response(ormsgpack.packb(payload), status_code=status, media_type="application/msgpack")


# ---- the routes (registered by app.create_app; ``server`` is app.Server) ----------------------

class FishApi:
    def __init__(self, server):
        self.server = server
        self.cache = ReferenceCache(server.config.reference_cache_entries)

    def routes(self) -> list:
        from starlette.routing import Route

        return [Route("/v1/tts", self.tts, methods=["POST"]),
                Route("/v1/references/list", self.list_references, methods=["GET"]),
                Route("/v1/references/add", self.add_reference, methods=["POST"]),
                Route("/v1/references/delete", self.delete_reference, methods=["DELETE", "POST"])]

    async def tts(self, request):
        server = self.server
        with server.queue.admission() as enqueue:
            body = decode_body(await request.body(), request.headers.get("content-type", ""))
            spec, output, reference = parse_tts_body(body, server.config.generation,
                                                     server.config.max_new_tokens_limit, server.limits)
            codes = None
            if reference is not None:
                codes = (await self.reference_codes(reference), spec.reference_text)
            return await server.submit(spec, output, None, enqueue, reference_codes=codes)

    async def reference_codes(self, data: bytes) -> np.ndarray:
        """The clip's codes: from the cache, or decoded (checked as every reference is) and
        encoded with this server's codec, then cached."""
        from s2studio.audio import decode_audio_bytes

        key = self.cache.key(data)
        codes = self.cache.get(key)
        if codes is None:
            samples = await asyncio.to_thread(decode_audio_bytes, data, name="references[0].audio")
            codes = await asyncio.to_thread(self.server.pipeline.encode_reference, samples)
            self.cache.put(key, codes)
        return codes

    def _library(self):
        from s2studio.engine.voices import VoiceLibrary

        return VoiceLibrary(self.server.config.voice_dir)

    async def list_references(self, request):
        infos = await asyncio.to_thread(self._library().list)
        ids = [info.id for info in infos if info.problem is None]
        return packed(request, {"success": True, "reference_ids": ids,
                                "message": f"Found {len(ids)} reference voices"})

    async def _fields(self, request, names: tuple[str, ...]) -> dict:
        """The body's fields: a multipart form (files as bytes) or msgpack/JSON."""
        from s2studio.server.app import MAX_FORM_FIELDS, MAX_FORM_FILES

        ctype = request.headers.get("content-type", "")
        if ctype.lower().startswith("multipart/form-data"):
            fields = {}
            async with request.form(max_files=MAX_FORM_FILES, max_fields=MAX_FORM_FIELDS,
                                    max_part_size=self.server.config.max_upload_bytes) as form:
                for name in names:
                    value = form.get(name)
                    fields[name] = value if value is None or isinstance(value, str) else await value.read()
            return fields
        body = decode_body(await request.body(), ctype)
        if not isinstance(body, dict):
            raise BadRequest("The request body must be an object (msgpack or JSON).")
        return {name: body.get(name) for name in names}

    async def add_reference(self, request):
        """fish-speech's ``add``: ``id``, ``audio``, ``text`` → a voice of the voice folder
        (encoded with this server's codec; 409 when the id exists)."""
        from s2studio.audio import decode_audio_bytes
        from s2studio.engine.voices import InvalidVoiceIdError, VoiceExistsError, validate_voice_id

        server = self.server
        with server.queue.admission():  # encoding is heavy work: it holds a queue place
            fields = await self._fields(request, ("id", "audio", "text"))
            voice_id = as_str("id", fields["id"] if fields["id"] is not None else "").strip()
            if not voice_id:
                raise BadRequest("id cannot be empty.")
            try:
                validate_voice_id(voice_id)
            except InvalidVoiceIdError as exc:
                raise BadRequest(str(exc)) from None
            text = as_str("text", fields["text"] if fields["text"] is not None else "")
            if not text.strip():
                raise BadRequest("text must be the transcript of the clip.")
            limit = server.config.max_reference_text_chars
            if len(text) > limit:
                raise BadRequest(f"text has {len(text)} characters; at most {limit} are accepted.")
            if fields["audio"] is None:
                raise BadRequest("audio is missing: the reference clip's bytes.")
            data = audio_bytes("audio", fields["audio"])
            library = self._library()
            if await asyncio.to_thread(library.exists, voice_id):
                return packed(request, {"success": False, "message": f"Reference ID '{voice_id}' already exists",
                                        "reference_id": voice_id}, status=409)
            samples = await asyncio.to_thread(decode_audio_bytes, data, name="audio")
            profile = await asyncio.to_thread(server.pipeline.encode_voice, samples, text)
            try:
                await asyncio.to_thread(library.save_profile, voice_id, profile, name=voice_id, reference_audio=samples)
            except VoiceExistsError:  # added meanwhile by another request
                return packed(request, {"success": False, "message": f"Reference ID '{voice_id}' already exists",
                                        "reference_id": voice_id}, status=409)
        return packed(request, {"success": True, "message": f"Reference voice '{voice_id}' added successfully",
                                "reference_id": voice_id})

    async def delete_reference(self, request):
        from s2studio.engine.voices import InvalidVoiceIdError, VoiceNotFoundError

        fields = await self._fields(request, ("reference_id",))
        voice_id = as_str("reference_id", fields["reference_id"] if fields["reference_id"] is not None else "")
        if not voice_id.strip():
            raise BadRequest("reference_id cannot be empty.")
        try:
            await asyncio.to_thread(self._library().delete, voice_id)
        except InvalidVoiceIdError as exc:
            raise BadRequest(str(exc)) from None
        except VoiceNotFoundError:
            return packed(request, {"success": False, "message": f"Reference ID '{voice_id}' not found",
                                    "reference_id": voice_id}, status=404)
        return packed(request, {"success": True, "message": f"Reference voice '{voice_id}' deleted successfully",
                                "reference_id": voice_id})
