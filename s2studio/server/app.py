"""The Starlette application: routes, error mapping, and the synthesis submission path."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import tempfile
import time

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from s2studio import __version__
from s2studio.audio import decode_audio_bytes
from s2studio.errors import S2Error
from s2studio.engine.pipeline import Pipeline, PostProcess, SynthesisRequest
from s2studio.engine.voices import VoiceFileError, decode_s2voice, read_s2voice
from s2studio.server.config import ServerConfig
from s2studio.server.guards import ApiKeyGuard, BodyLimit, BodyTooSlow, BrowserGuard, UploadTooLarge
from s2studio.server.jobs import JobQueue, QueueFull
from s2studio.server.fish import FishApi
from s2studio.server.openai import openai_routes, parse_speech_body
from s2studio.server.openapi import openapi_document
from s2studio.server.params import (
    DEFAULT_LIMITS,
    REFERENCE_FIELDS,
    REFERENCE_TEXT_FIELDS,
    BadRequest,
    GenerateSpec,
    RequestLimits,
    parse_generate_form,
)
from s2studio.server.responses import (AudioOutput, PathRedactor, SynthesisResponse, error_message, error_status,
                                       json_error)
from s2studio.server.voice_select import request_voice_dir, resolve_request_voice

log = logging.getLogger(__name__)

MAX_FORM_FIELDS = 64
MAX_FORM_FILES = 4


def output_for(spec: GenerateSpec) -> AudioOutput:
    """s2.cpp's three response shapes (see ``GenerateSpec.live``/``streaming_path``)."""
    container = "pcm" if spec.output_format in ("pcm_s16le", "pcm_f32le") else "wav"
    raw_float = spec.output_format == "pcm_f32le"  # s2studio's extension: the samples unrounded
    if spec.live:
        return AudioOutput(container=container, live=True, start_buffer_ms=spec.start_buffer_ms,
                           float_samples=raw_float)
    if spec.streaming_path:
        return AudioOutput(container=container, float_samples=raw_float)
    return AudioOutput(container="wav", float_samples=True)  # one-shot: a float WAV


def postprocess_for(spec: GenerateSpec, output: AudioOutput) -> PostProcess:
    if output.live:
        return PostProcess()  # bytes already sent cannot be trimmed or normalized
    if spec.segmentation.enabled:
        # s2.cpp trims each sentence's trailing silence before the pause.
        return PostProcess(trim_silence=True, normalize=spec.postprocess.normalize,
                           dynamic_normalize=spec.postprocess.dynamic_normalize)
    return spec.postprocess


class Server:
    """The state behind the routes: the pipeline, its queue and the configuration."""

    def __init__(self, pipeline: Pipeline, config: ServerConfig, health_extra=None):
        self.pipeline = pipeline
        self.config = config
        # An async callable whose dict is added to /health (a cluster replica's view of its peers).
        self.health_extra = health_extra
        self.queue = JobQueue(config.queue_depth, threads=pipeline.settings.threads, workers=config.max_batch)
        settings = pipeline.settings
        self.redact = PathRedactor(
            [(os.fspath(config.voice_dir), "<voice folder>"), (os.path.dirname(os.path.abspath(settings.model_path)),
                                                                 "<model folder>"),
             (tempfile.gettempdir(), "<temp>"), (os.getcwd(), "<server folder>"), (os.path.expanduser("~"), "~")])

    # ---- routes ---------------------------------------------------------------------------------
    @property
    def limits(self) -> RequestLimits:
        """The per-request limits: the operator's text limits and the loaded model's context."""
        context = self.pipeline.model_info(load=False).context_length
        return RequestLimits(max_tokens=context if context is not None else DEFAULT_LIMITS.max_tokens,
                             max_text_chars=self.config.max_text_chars,
                             max_reference_text_chars=self.config.max_reference_text_chars)

    async def generate(self, request: Request):
        # A place in the queue first: a full queue answers 503 before the body is parsed or
        # any reference audio decoded.
        with self.queue.admission() as enqueue:
            async with request.form(max_files=MAX_FORM_FILES, max_fields=MAX_FORM_FIELDS,
                                    max_part_size=self.config.max_upload_bytes) as form:
                spec = parse_generate_form(form, self.config.generation, self.config.max_new_tokens_limit,
                                           self.limits)
                reference = voice_file = None
                if spec.reference is not None:
                    data = await spec.reference.read()
                    if data:  # an empty upload means "no reference", as in s2.cpp
                        reference = (data, spec.reference.filename or "reference")
                if spec.voice_file is not None:
                    data = await spec.voice_file.read()
                    if data:
                        voice_file = (data, spec.voice_file.filename or "voice_file")
            return await self.submit(spec, output_for(spec), reference, enqueue, voice_file)

    async def encode(self, request: Request):
        """``POST /encode`` (s2studio's extension): a reference clip and its transcript → a
        ``.s2voice`` made with this server's codec, so a client without the model can save voices."""
        from starlette.responses import Response

        from s2studio.engine.voices import encode_s2voice

        # Encoding is heavy work too: it holds a queue place (503 when full) until it is done.
        with self.queue.admission():
            async with request.form(max_files=MAX_FORM_FILES, max_fields=MAX_FORM_FIELDS,
                                    max_part_size=self.config.max_upload_bytes) as form:
                upload = next((form.get(name) for name in REFERENCE_FIELDS if form.get(name) is not None), None)
                if upload is None or isinstance(upload, str):
                    raise BadRequest("POST /encode needs the clip as a file upload named 'reference'.")
                data, name = await upload.read(), upload.filename or "reference"
                transcript = next((form.get(n) for n in REFERENCE_TEXT_FIELDS if isinstance(form.get(n), str)), "")
            if not transcript.strip():
                raise BadRequest("POST /encode needs reference_text, the transcript of the clip.")
            limit = self.config.max_reference_text_chars
            if len(transcript) > limit:
                raise BadRequest(f"reference_text has {len(transcript)} characters; at most {limit} are accepted.",
                                 status=413)
            samples = await asyncio.to_thread(decode_audio_bytes, data, name=name)  # checked as a reference
            # Waits for the model between takes (the pipeline runs one thing at a time).
            profile = await asyncio.to_thread(self.pipeline.encode_voice, samples, transcript)
        return Response(encode_s2voice(profile), media_type="application/octet-stream",
                        headers={"Content-Disposition": 'attachment; filename="voice.s2voice"'})

    async def speech(self, request: Request):
        with self.queue.admission() as enqueue:
            body = await request.body()
            try:
                decoded = json.loads(body)
            except (ValueError, RecursionError):  # RecursionError: [[[[... nested too deep
                raise BadRequest("The request body is not valid JSON.") from None
            spec, output, ignored = parse_speech_body(decoded, self.config.generation,
                                                      self.config.max_new_tokens_limit, self.limits,
                                                      self.config.voice_map)
            if ignored:  # accepted without effect, and said so (see server/openai.py)
                output = dataclasses.replace(output, extra_headers=(("X-S2-Ignored", ", ".join(ignored)),))
            return await self.submit(spec, output, None, enqueue)

    async def health(self, request: Request):
        info = self.pipeline.model_info(load=False)
        report = {
            "status": "ok" if info.loaded else "loading",
            "version": __version__,
            "model_loaded": info.loaded,
            "model": info.name,
            "device": info.device,
            "gpu_layers": info.gpu_layers,
            "codec_device": info.codec_device,
            "sample_rate": info.sample_rate,
            "queue": {"running": self.queue.running, "waiting": self.queue.waiting, "depth": self.queue.depth},
            # The voice prefix cache (hits, misses, entries, bytes, budget_bytes); null before the load.
            "voice_cache": info.prefix_cache.as_json() if info.prefix_cache is not None else None,
        }
        if self.health_extra is not None:
            report.update(await self.health_extra())
        return JSONResponse(report)

    async def openapi(self, request: Request):
        return JSONResponse(openapi_document(self.config, self.limits))

    async def voices(self, request: Request):
        from s2studio.engine.voices import VoiceLibrary

        infos = await asyncio.to_thread(VoiceLibrary(self.config.voice_dir).list)
        return JSONResponse({"voices": [{"id": v.id, "name": v.name, "usable": v.problem is None}
                                        for v in infos]})

    # ---- the common synthesis path -------------------------------------------------------------
    async def submit(self, spec: GenerateSpec, output: AudioOutput, reference: tuple[bytes, str] | None,
                     enqueue, voice_file: tuple[bytes, str] | None = None, reference_codes=None):
        """Prepare the take (decode the reference, read the voice) and queue it through the
        place ``enqueue`` (from ``JobQueue.admission``) holds. ``reference_codes``: (codes,
        transcript) of a reference already encoded (Fish Audio's cached inline references)."""
        if spec.n_threads is not None:
            log.debug("ignoring the request's n_threads=%d: threads are set by the operator", spec.n_threads)
        samples = codes = None
        ref_text = spec.reference_text
        if reference_codes is not None:
            codes, ref_text = reference_codes
        elif reference is not None:  # audio wins over a voice, as in s2.cpp
            if not ref_text.strip():
                raise BadRequest("Reference audio requires reference_text (aliases: ref_text, prompt_text).")
            data, name = reference
            samples = await asyncio.to_thread(decode_audio_bytes, data, name=name)
        elif voice_file is not None:  # the client's own saved voice, uploaded
            codes, ref_text = self._uploaded_voice(*voice_file)
        elif spec.voice:
            codes, ref_text = self._voice(spec)
        elif spec.voice_dir:
            request_voice_dir(self.config.voice_dir, spec.voice_dir)  # refuse a folder outside anyway
        job = self.pipeline.synthesize(SynthesisRequest(
            text=spec.text, reference_audio=samples, reference_codes=codes,
            reference_text=ref_text if (samples is not None or codes is not None) else None,
            generation=spec.generation, segmentation=spec.segmentation,
            postprocess=postprocess_for(spec, output), stream_stride=spec.stream_stride),
            batched=self.config.max_batch > 1)
        ticket = enqueue(job)
        rate = self.pipeline.model_info(load=False).sample_rate
        return SynthesisResponse(self.queue, ticket, output, rate, self.redact)

    def _uploaded_voice(self, data: bytes, name: str):
        """The codes and transcript of an uploaded .s2voice (its transcript wins, as a voice's does)."""
        try:
            profile = decode_s2voice(data, path=f"uploaded voice_file {name!r}")
        except VoiceFileError as exc:  # the client's file, so the client's mistake (400)
            raise BadRequest(str(exc)) from None
        self.pipeline.check_voice(profile, f"uploaded voice_file {name!r}")
        return profile.codes, profile.transcript

    def _voice(self, spec: GenerateSpec):
        """The stored codes and transcript of the voice a request names (its transcript replaces
        any reference_text, as in s2.cpp)."""
        path = resolve_request_voice(self.config.voice_dir, spec.voice, spec.voice_dir)
        profile = read_s2voice(path)
        self.pipeline.check_voice(profile, path)
        return profile.codes, profile.transcript


# ---- error handlers: every error is {"error": message}, without the server's paths -------------
def _redact(request, message: str) -> str:
    return request.app.state.server.redact(message)


async def _bad_request(request, exc: BadRequest):
    return json_error(exc.status, _redact(request, str(exc)), path=request.url.path)


async def _engine_error(request, exc: S2Error):
    status = error_status(exc)
    if status == 500:
        log.error("request failed: %s", exc)
    return json_error(status, _redact(request, error_message(exc)), path=request.url.path)


async def _http_error(request, exc: HTTPException):
    # Starlette's own refusals (404, 405, a malformed multipart body) are plain text otherwise.
    return json_error(exc.status_code, _redact(request, str(exc.detail)), exc.headers, path=request.url.path)


async def _too_slow(request, exc: BodyTooSlow):
    return json_error(408, str(exc), {"Connection": "close"}, path=request.url.path)


async def _client_gone(request, exc: ClientDisconnect):
    # Hung up while sending its body: nobody to answer, and nothing worth a traceback.
    return Response(status_code=499)


async def _internal_error(request, exc: Exception):
    # A bug; uvicorn logs the traceback (rate-limited), the client gets no details.
    return json_error(500, "Internal server error.", path=request.url.path)


async def _too_large(request, exc: UploadTooLarge):
    return json_error(413, str(exc), path=request.url.path)


def _queue_full(retry_after_s: int):
    async def handler(request, exc: QueueFull):
        return json_error(503, str(exc), {"Retry-After": str(retry_after_s)}, path=request.url.path)

    return handler


def create_app(pipeline: Pipeline, config: ServerConfig, health_extra=None) -> Starlette:
    """The ASGI app. Its lifespan loads the model (if not loaded) before the first request and
    starts/stops the synthesis worker. ``health_extra``: an async callable returning a dict that
    ``/health`` adds to its answer (``s2studio.cluster`` reports the replicas with it)."""
    server = Server(pipeline, config, health_extra)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        if not pipeline.is_loaded:
            await asyncio.to_thread(pipeline.load)
        server.queue.start()
        try:
            yield
        finally:
            await asyncio.to_thread(server.queue.stop)

    routes = [
        Route("/generate", server.generate, methods=["POST"]),
        Route("/v1/audio/speech", server.speech, methods=["POST"]),
        Route("/encode", server.encode, methods=["POST"]),
        Route("/health", server.health, methods=["GET"]),
        Route("/openapi.json", server.openapi, methods=["GET"]),
        Route("/voices", server.voices, methods=["GET"]),
        *openai_routes(),  # GET /v1/models, /v1/models/{id} (server/openai.py)
        *FishApi(server).routes(),  # Fish Audio's /v1/tts and /v1/references/* (server/fish.py)
    ]
    app = Starlette(
        routes=routes, lifespan=lifespan,
        # BrowserGuard outermost: a foreign page is refused before anything else looks at its
        # request, and every answer an allowed origin gets (401 included) carries CORS headers.
        middleware=[Middleware(BrowserGuard, allowed_hosts=config.allowed_hosts,
                               allowed_origins=config.allowed_origins),
                    Middleware(ApiKeyGuard, api_key=config.api_key),
                    Middleware(BodyLimit, limit=config.max_upload_bytes, timeout_s=config.body_timeout_s)],
        exception_handlers={BadRequest: _bad_request, S2Error: _engine_error, UploadTooLarge: _too_large,
                            QueueFull: _queue_full(config.retry_after_s), HTTPException: _http_error,
                            BodyTooSlow: _too_slow, ClientDisconnect: _client_gone,
                            Exception: _internal_error})
    app.state.server = server
    app.state.started_at = int(time.time())  # the "created" of GET /v1/models
    return app
