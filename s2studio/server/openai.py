"""OpenAI's speech API: ``POST /v1/audio/speech``, ``GET /v1/models`` and ``/v1/models/{id}``.

The body as the OpenAI SDK sends it, mapped onto the same request as ``/generate``:

* ``input`` — the text (longer than ``--max-text-chars`` is a 400, as OpenAI answers too long
  an input, so the SDK raises ``BadRequestError``);
* ``voice`` — an OpenAI stock name (``alloy``…), mapped by ``serve --voice-map`` or else the
  default voice (``--default-voice``, else the model's own): never refused; any other name is a
  voice id of the voice folder. ``{"id": "hope"}`` (OpenAI's custom-voice object) works too;
* ``response_format`` — ``mp3`` (OpenAI's default), ``opus`` (Ogg), ``aac`` (ADTS), ``flac``,
  ``wav``, ``pcm`` (16-bit at 24 kHz as OpenAI defines it, resampled with soxr; at the model's
  44.1 kHz or any other rate with ``sample_rate``; ``X-Audio-Sample-Rate`` says which);
  all but ``wav`` are sent as they are decoded; ``wav`` is a finalized PCM16 WAV;
* ``speed`` — 0.25–4.0, a pitch-preserving time-stretch (``audio.encoders``);
* ``model`` — any name (the server has one model), ``instructions`` — accepted; the S2 model
  takes its style from inline tags in the text (``[whisper]``…), not from a separate prompt,
  so it does not change the take (the response says so in ``X-S2-Ignored``);
* s2studio's extensions: ``max_new_tokens``, ``temperature``, ``top_p``, ``top_k``,
  ``min_tokens_before_end``, ``seed`` and ``sample_rate`` (8000–48000).
"""

from __future__ import annotations

from s2studio.audio.encoders import FORMATS, EncodeOptions, EncoderError
from s2studio.engine.params import GenerationParams
from s2studio.server.params import (DEFAULT_LIMITS, BadRequest, GenerateSpec, RequestLimits, apply_params, as_float,
                                    as_int, as_str, check_text_lengths)
from s2studio.server.responses import AudioOutput
from s2studio.server.voice_map import VoiceMap

SAMPLING_KEYS = ("max_new_tokens", "temperature", "top_p", "top_k", "min_tokens_before_end", "seed")
DEFAULT_FORMAT = "mp3"  # OpenAI's
# OpenAI's pcm is 24 kHz and clients play it as such (there is no header to say otherwise).
OPENAI_PCM_RATE = 24_000
MAX_INSTRUCTIONS_CHARS = 4096  # OpenAI's limit on instructions
# Model names OpenAI clients offer in their menus; all are this server's one model.
MODEL_ALIASES = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")


def compat_text_lengths(spec: GenerateSpec, limits: RequestLimits, text_field: str = "text") -> None:
    """The length limits as a 400: what OpenAI and fish-speech answer, and what their SDKs
    turn into their bad-request error (a 413 would be a generic status error)."""
    try:
        check_text_lengths(spec, limits)
    except BadRequest as exc:
        message = str(exc)
        if message.startswith("text "):  # the field as this API names it
            message = text_field + message[len("text"):]
        raise BadRequest(message, status=400) from None


def encode_options(fmt: str, sample_rate=None, speed=1.0, bitrate=None, gain_db=0.0) -> EncodeOptions:
    """The encoder's options, a value out of its range a 400 naming it."""
    try:
        return EncodeOptions(fmt=fmt, sample_rate=sample_rate, speed=speed, bitrate=bitrate, gain_db=gain_db)
    except EncoderError as exc:
        raise BadRequest(str(exc)) from None


def _voice_name(value) -> str:
    if value is None:
        return ""
    if isinstance(value, dict) and "id" in value:  # OpenAI's {"id": "voice_..."} custom voice
        return as_str("voice.id", value["id"])
    return as_str("voice", value)


def parse_speech_body(body, defaults: GenerationParams, max_new_tokens_limit: int | None = None,
                      limits: RequestLimits = DEFAULT_LIMITS,
                      voice_map: VoiceMap = VoiceMap()) -> tuple[GenerateSpec, AudioOutput, list[str]]:
    """The body → (spec, output, the names of the fields accepted and ignored)."""
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    if "input" not in body:
        raise BadRequest("Missing 'input': the text to speak.")
    text = as_str("input", body["input"])
    if "model" in body and body["model"] is not None:
        as_str("model", body["model"])
    voice = voice_map.resolve(_voice_name(body.get("voice")))
    fmt = as_str("response_format", body.get("response_format") or DEFAULT_FORMAT).lower()
    if fmt not in FORMATS:
        raise BadRequest(f"response_format {fmt!r} is not supported; use one of {', '.join(FORMATS)}.")
    speed = 1.0 if body.get("speed") is None else as_float("speed", body["speed"])
    rate = None if body.get("sample_rate") is None else as_int("sample_rate", body["sample_rate"])
    if rate is None and fmt == "pcm":
        rate = OPENAI_PCM_RATE
    ignored = []
    if body.get("instructions") is not None:
        instructions = as_str("instructions", body["instructions"])
        if len(instructions) > MAX_INSTRUCTIONS_CHARS:
            raise BadRequest(f"instructions is {len(instructions)} characters long; at most "
                             f"{MAX_INSTRUCTIONS_CHARS} are accepted.")
        if instructions.strip():
            ignored.append("instructions")
    stream_format = body.get("stream_format")
    if stream_format is not None and as_str("stream_format", stream_format) != "audio":
        raise BadRequest("stream_format must be 'audio': this server does not send server-sent events.")
    spec = GenerateSpec(text=text, generation=defaults, voice=voice)
    compat_text_lengths(spec, limits, "input")
    apply_params(spec, {k: body[k] for k in SAMPLING_KEYS if k in body}, max_new_tokens_limit, limits)
    encoding = encode_options(fmt, rate, speed)
    return spec, AudioOutput(container=fmt, live=fmt != "wav", encoding=encoding), ignored


def models_list(model_name: str, created: int) -> dict:
    """``GET /v1/models``: the loaded model under its own name and the names clients offer."""
    return {"object": "list", "data": [model_entry(name, created) for name in model_ids(model_name)]}


def model_ids(model_name: str) -> list[str]:
    return [model_name, *[alias for alias in MODEL_ALIASES if alias != model_name]]


def model_entry(model_id: str, created: int) -> dict:
    return {"id": model_id, "object": "model", "created": created, "owned_by": "s2studio"}


# ---- GET /v1/models, /v1/models/{id} (registered by app.create_app) ---------------------------

def _model_name(request) -> str:
    return request.app.state.server.pipeline.model_info(load=False).name or "s2-pro"


def _created(request) -> int:
    return int(getattr(request.app.state, "started_at", 0))


async def list_models(request):
    from starlette.responses import JSONResponse

    return JSONResponse(models_list(_model_name(request), _created(request)))


async def get_model(request):
    from starlette.responses import JSONResponse

    model_id = request.path_params["model_id"]
    if model_id not in model_ids(_model_name(request)):
        raise BadRequest(f"The model '{model_id}' does not exist; GET /v1/models lists this server's.", status=404)
    return JSONResponse(model_entry(model_id, _created(request)))


def openai_routes() -> list:
    from starlette.routing import Route

    return [Route("/v1/models", list_models, methods=["GET"]),
            Route("/v1/models/{model_id:path}", get_model, methods=["GET"])]
