"""``POST /v1/audio/speech`` in OpenAI's shape, mapped onto the same request as ``/generate``.

``input`` is the text, ``voice`` a voice id from the server's voice folder (or absent for the
model's default voice), ``response_format`` ``wav`` (a finalized PCM16 WAV) or ``pcm`` (raw
PCM16, streamed as decoded; its rate is in ``X-Audio-Sample-Rate``, 44.1 kHz, not OpenAI's
24 kHz). ``model`` is ignored: the server has one model. ``speed`` other than 1.0 is refused
because the engine cannot change speaking rate. s2.cpp's sampling keys may be added to the
body as extensions (``max_new_tokens``, ``temperature``, ``top_p``, ``top_k``,
``min_tokens_before_end``, ``seed``).
"""

from __future__ import annotations

from s2studio.engine.params import GenerationParams
from s2studio.server.params import (DEFAULT_LIMITS, BadRequest, GenerateSpec, RequestLimits, apply_params, as_float,
                                    as_str, check_text_lengths)
from s2studio.server.responses import AudioOutput

FORMATS = ("wav", "pcm")
SAMPLING_KEYS = ("max_new_tokens", "temperature", "top_p", "top_k", "min_tokens_before_end", "seed")


def parse_speech_body(body, defaults: GenerationParams,
                      max_new_tokens_limit: int | None = None,
                      limits: RequestLimits = DEFAULT_LIMITS) -> tuple[GenerateSpec, AudioOutput]:
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    if "input" not in body:
        raise BadRequest("Missing 'input': the text to speak.")
    text = as_str("input", body["input"])
    voice = body.get("voice")
    voice = "" if voice is None else as_str("voice", voice)
    fmt = as_str("response_format", body.get("response_format", "wav")).lower()
    if fmt not in FORMATS:
        raise BadRequest(f"response_format {fmt!r} is not supported; use 'wav' or 'pcm'.")
    if body.get("speed") is not None and as_float("speed", body["speed"]) != 1.0:
        raise BadRequest("speed must be 1.0: this engine cannot change the speaking rate.")
    spec = GenerateSpec(text=text, generation=defaults, voice=voice)
    check_text_lengths(spec, limits)
    apply_params(spec, {k: body[k] for k in SAMPLING_KEYS if k in body}, max_new_tokens_limit, limits)
    output = AudioOutput(container="pcm", live=True) if fmt == "pcm" else AudioOutput(container="wav")
    return spec, output
