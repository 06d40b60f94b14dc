"""The OpenAPI 3.1 document served at ``/openapi.json`` (s2.cpp's ``/generate`` plus ours)."""

from __future__ import annotations

from s2studio import __version__
from s2studio.server.config import ServerConfig
from s2studio.server.params import (DEFAULT_LIMITS, REFERENCE_FIELDS, REFERENCE_TEXT_FIELDS, VOICE_FIELDS,
                                    RequestLimits, numeric_ranges)

_ERROR = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}


def _err(description: str) -> dict:
    return {"description": description, "content": _ERROR}


def _audio_ok(description: str) -> dict:
    header = {"schema": {"type": "string"}}
    return {
        "description": description,
        "headers": {"Content-Disposition": header, "X-Audio-Sample-Rate": {"schema": {"type": "integer"}},
                    "X-Audio-Channels": {"schema": {"type": "integer"}}, "X-Audio-Encoding": header},
        "content": {"audio/wav": {"schema": {"type": "string", "format": "binary"}},
                    "audio/L16": {"schema": {"type": "string", "format": "binary"}}},
    }


def _params_schema(limits: RequestLimits) -> dict:
    ranges = numeric_ranges(limits)

    def num(desc, minimum=0, kind="number"):
        return {"type": kind, "minimum": minimum, "description": desc}

    def flag(desc):
        return {"type": "boolean", "description": desc}

    schema = {
        "type": "object",
        "description": "Values below a minimum are clamped to it, values above a maximum are a 400; "
                       "unknown keys are ignored.",
        "properties": {
            "max_new_tokens": num("Most audio frames (~21.5 per second).", kind="integer"),
            "temperature": num("Sampling temperature; 0 is greedy."),
            "top_p": num("Nucleus cut."),
            "top_k": num("Top-k cut.", kind="integer"),
            "min_tokens_before_end": num("Frames before the model may end the utterance.", kind="integer"),
            "seed": num("Random seed (this server's extension).", kind="integer"),
            "n_threads": {"type": "integer", "description": "Accepted for compatibility and ignored: the "
                                                            "server's operator sets the thread count."},
            "voice": {"type": "string"}, "voice_id": {"type": "string"}, "voice_dir": {"type": "string"},
            "stream": flag("Use the streaming path: PCM16 output without post-processing."),
            "chunked": flag("With stream: send audio as it is decoded (provisional WAV header)."),
            "realtime": flag("Alias of chunked."),
            "output_format": {"type": "string", "enum": ["wav", "pcm_s16le", "pcm", "pcm16", "s16le", "pcm_f32le",
                                                         "f32le"],
                              "description": "pcm_f32le/f32le (this server's extension): raw float32 PCM."},
            "stream_decode_stride_frames": num("Frames per streamed chunk (0: 4).", kind="integer"),
            "stream_decode_stride": num("Alias of stream_decode_stride_frames.", kind="integer"),
            "stream_start_buffer_ms": num("Audio to queue before the first byte of a live stream "
                                          "(default 3000 for chunked PCM, else 0).", kind="integer"),
            "low_latency": flag("Stride 1 and no start buffer."),
            "segment_sentences": flag("Speak sentence by sentence (s2.cpp's splitting)."),
            "sentence_pause_ms": num("Silence between sentences (default 180).", kind="integer"),
            "segment_max_chars": num("Cut longer sentences at clauses (0: no limit).", kind="integer"),
            "trim_silence": flag("Cut trailing silence (not on live streams)."),
            "normalize": flag("Peak-normalize to 0.95 (not on live streams)."),
            "dynamic_normalize": flag("Even out loudness; excludes normalize (not on live streams)."),
            "ras": flag("Repetition-aware resampling (default on)."),
            "stream_holdback_frames": num("Accepted for compatibility; no effect.", kind="integer"),
            "codec_context_frames": num("Accepted for compatibility; no effect.", kind="integer"),
            "codec_decode_context_frames": num("Accepted for compatibility; no effect.", kind="integer"),
            "codec_follow_backend": flag("Accepted for compatibility; no effect."),
            "codec_auto_backend": flag("Accepted for compatibility; no effect."),
            "verbose": flag("Accepted for compatibility; no effect."),
        },
    }
    for key, (_, highest) in ranges.items():  # one table of bounds: the parser's
        schema["properties"][key]["maximum"] = highest
    return schema


def openapi_document(config: ServerConfig, limits: RequestLimits = DEFAULT_LIMITS) -> dict:
    text = {"type": "string"}
    binary = {"type": "string", "format": "binary"}
    form = {"text": {**text, "maxLength": limits.max_text_chars, "description": "Text to speak."}}
    form.update({name: {**binary, "description": "Reference audio (WAV, FLAC, OGG, MP3)."}
                 for name in REFERENCE_FIELDS})
    form.update({name: {**text, "maxLength": limits.max_reference_text_chars,
                        "description": "Transcript of the reference (required with one)."}
                 for name in REFERENCE_TEXT_FIELDS})
    form.update({name: {**text, "description": "Voice id, or a .s2voice path inside the voice folder."}
                 for name in VOICE_FIELDS})
    form["voice_dir"] = {**text, "description": "A folder inside the server's voice folder."}
    form["voice_file"] = {**binary, "description": "A .s2voice profile uploaded with the request (this server's "
                                                   "extension; wins over voice, loses to reference audio)."}
    form["params"] = {**text, "contentMediaType": "application/json",
                      "contentSchema": {"$ref": "#/components/schemas/GenerateParams"}}
    busy = {"description": f"The queue is full ({config.max_batch} running, {config.queue_depth} waiting).",
            "headers": {"Retry-After": {"schema": {"type": "integer"}}}, "content": _ERROR}
    common = {"400": _err("Bad field, JSON, type, or a number out of range."),
              "401": _err("API key missing or wrong."),
              "403": _err("Refused Host (DNS rebinding) or a web page's Origin not in --allowed-origins."),
              "408": _err("The request's headers or body did not arrive in time."),
              "413": _err("Upload or text too large."), "415": _err("Wrong Content-Type for this route."),
              "500": _err("Synthesis failed before the body started."), "503": busy}
    return {
        "openapi": "3.1.0",
        "info": {"title": "s2studio server (s2.cpp-compatible)", "version": __version__,
                 "description": "Text to speech with Fish Audio S2 Pro. Up to "
                                f"{config.max_batch} requests are generated together (batched), the next "
                                f"{config.queue_depth} wait in arrival order, more are refused with 503; a "
                                "client that disconnects cancels its request."},
        "components": {
            "schemas": {"Error": {"type": "object", "required": ["error"],
                                  "properties": {"error": {"type": "string"}}},
                        "GenerateParams": _params_schema(limits)},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}] if config.api_key else [],
        "paths": {
            "/generate": {"post": {
                "summary": "Synthesize speech (s2.cpp's API)",
                "requestBody": {"required": True, "content": {"multipart/form-data": {
                    "schema": {"type": "object", "required": ["text"], "properties": form}}}},
                "responses": {"200": _audio_ok("A float WAV by default; PCM16 WAV or raw PCM16 with "
                                               "params.stream; sent as decoded with stream + chunked."),
                              **common},
            }},
            "/v1/audio/speech": {"post": {
                "summary": "Synthesize speech (OpenAI's shape)",
                "requestBody": {"required": True, "content": {"application/json": {"schema": {
                    "type": "object", "required": ["input"],
                    "properties": {"input": {**text, "maxLength": limits.max_text_chars},
                                   "voice": {**text, "description": "An OpenAI stock name (alloy...: --voice-map, "
                                                                    "else --default-voice) or a voice id."},
                                   "model": {**text, "description": "Any name: the server has one model."},
                                   "response_format": {"type": "string", "default": "mp3",
                                                       "enum": ["mp3", "opus", "aac", "flac", "wav", "pcm"]},
                                   "speed": {"type": "number", "minimum": 0.25, "maximum": 4.0, "default": 1.0},
                                   "instructions": {**text, "maxLength": 4096,
                                                    "description": "Accepted, no effect (X-S2-Ignored)."},
                                   "sample_rate": {"type": "integer", "minimum": 8000, "maximum": 48000}}}}}},
                "responses": {"200": _audio_ok("The format asked for; all but wav streamed as decoded."),
                              **common},
            }},
            "/v1/models": {"get": {"summary": "The served model and the names OpenAI clients use for it",
                                   "responses": {"200": {"description": "OpenAI's model list."}}}},
            "/v1/models/{model_id}": {"get": {"summary": "One model",
                                              "parameters": [{"name": "model_id", "in": "path", "required": True,
                                                              "schema": text}],
                                              "responses": {"200": {"description": "The model."},
                                                            "404": _err("No such model.")}}},
            "/v1/tts": {"post": {
                "summary": "Synthesize speech (Fish Audio's API; msgpack or JSON, see docs/server.md)",
                "requestBody": {"required": True, "content": {"application/msgpack": {}, "application/json": {
                    "schema": {"type": "object", "required": ["text"], "properties": {
                        "text": {**text, "maxLength": limits.max_text_chars},
                        "references": {"type": "array", "maxItems": 1, "items": {"type": "object", "properties": {
                            "audio": {**text, "contentEncoding": "base64"}, "text": text}}},
                        "reference_id": text,
                        "format": {"type": "string", "enum": ["wav", "pcm", "mp3", "opus", "flac", "aac"],
                                   "default": "mp3"},
                        "streaming": {"type": "boolean"}}}}}},
                "responses": {"200": _audio_ok("The format asked for."), **common},
            }},
            "/v1/references/list": {"get": {"summary": "Voice ids (fish-speech's API; msgpack, or JSON with "
                                                       "?format=json)",
                                            "responses": {"200": {"description": "The ids."}}}},
            "/v1/references/add": {"post": {"summary": "Encode and save a voice (id, audio, text)",
                                            "responses": {"200": {"description": "Added."},
                                                          "409": {"description": "The id exists."}, **common}}},
            "/v1/references/delete": {"delete": {"summary": "Delete a voice (reference_id)",
                                                 "responses": {"200": {"description": "Deleted."},
                                                               "404": {"description": "No such voice."}}}},
            "/encode": {"post": {
                "summary": "Encode a reference clip into a .s2voice (this server's extension)",
                "requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
                    "type": "object", "required": ["reference", "reference_text"],
                    "properties": {"reference": {**binary, "description": "The clip (WAV, FLAC, OGG, MP3)."},
                                   "reference_text": {**text, "description": "What is said in it."}}}}}},
                "responses": {"200": {"description": "The .s2voice file.",
                                      "content": {"application/octet-stream": {"schema": binary}}},
                              **common},
            }},
            "/health": {"get": {"summary": "Model, device, queue and voice cache state", "security": [],
                                "responses": {"200": {"description": "Server state."}}}},
            "/voices": {"get": {"summary": "Voice ids in the voice folder",
                                "responses": {"200": {"description": "The voices."}}}},
            "/openapi.json": {"get": {"summary": "This document", "security": [],
                                      "responses": {"200": {"description": "OpenAPI 3.1."}}}},
        },
    }
