"""s2.cpp's ``POST /generate`` request: multipart fields, their aliases, and the ``params`` JSON.

Field names, aliases, lower bounds and defaults follow ``s2_server.cpp`` (docs/spec/engine.md §8.5):
numbers below their bound are clamped (``max(0, v)``), not refused; a value of the wrong JSON
type is a 400, as nlohmann's ``get<T>()`` throwing there is. Unknown keys are ignored, for
forward compatibility, as s2.cpp does. Keys s2.cpp accepts that have no meaning in this engine
(``stream_holdback_frames``, ``codec_*``, ``verbose``) are type-checked and otherwise ignored.

Unlike s2.cpp, every number also has an upper bound (``numeric_ranges``) and every text a length
limit (``RequestLimits``): the server runs on a desktop that any web page can send requests to,
so no request may ask for unbounded memory or time (``max_new_tokens`` of 10^9, a
``sentence_pause_ms`` of hours, 20 000 characters of text). Above a bound is a 400 naming the
key; too long a text is a 413. ``n_threads`` is accepted and ignored: the thread count is the
operator's (``-threads``), never a client's (20 000 threads would take the machine down).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

from s2studio.engine.params import GenerationParams
from s2studio.engine.pipeline import PostProcess, Segmentation
from s2studio.server.config import DEFAULT_MAX_REFERENCE_TEXT_CHARS, DEFAULT_MAX_TEXT_CHARS

TEXT_FIELD = "text"
REFERENCE_FIELDS = ("reference", "reference_audio", "prompt_audio", "ref_audio")
REFERENCE_TEXT_FIELDS = ("reference_text", "ref_text", "prompt_text")
VOICE_FIELDS = ("voice", "voice_id", "voice_profile")
OUTPUT_FORMATS = ("wav", "pcm_s16le", "pcm_f32le")
VOICE_FILE_FIELD = "voice_file"  # an uploaded .s2voice (an s2studio extension: the client's own voice)
DEFAULT_STREAM_STRIDE = 4  # frames per chunk, s2.cpp's server default (≈186 ms)
DEFAULT_SENTENCE_PAUSE_MS = 180
PCM_START_BUFFER_MS = 3000  # s2.cpp's start buffer for chunked PCM without low_latency
MAX_SEED = 2**63 - 1

# Upper bounds of the params keys that do not depend on the model (see docs/server.md).
MAX_TEMPERATURE = 5.0
MAX_TOP_P = 1.0
MAX_TOP_K = 4096  # the codebook size of S2 Pro; a larger cut keeps every token anyway
MAX_STREAM_STRIDE = 1024  # frames per streamed chunk (~48 s)
MAX_START_BUFFER_MS = 60_000
MAX_SENTENCE_PAUSE_MS = 10_000
MAX_IGNORED_FRAMES = 4096  # stream_holdback_frames, codec_*_frames: accepted, no effect
DEFAULT_CONTEXT_TOKENS = 32768  # S2 Pro's context; the server passes the loaded model's


@dataclass(frozen=True)
class RequestLimits:
    """The server-side limits of one request: ``max_tokens`` is the loaded model's context (no
    take can be longer than the model can attend to), the character limits bound the prompt."""

    max_tokens: int = DEFAULT_CONTEXT_TOKENS
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS
    max_reference_text_chars: int = DEFAULT_MAX_REFERENCE_TEXT_CHARS


DEFAULT_LIMITS = RequestLimits()


def numeric_ranges(limits: RequestLimits = DEFAULT_LIMITS) -> dict[str, tuple[float, float]]:
    """Every numeric params key -> (lowest, highest). Below the lowest is clamped (s2.cpp);
    above the highest is refused. The OpenAPI document and docs/server.md show these."""
    frames = (0, MAX_IGNORED_FRAMES)
    return {
        "max_new_tokens": (0, limits.max_tokens),
        "min_tokens_before_end": (0, limits.max_tokens),
        "temperature": (0.0, MAX_TEMPERATURE),
        "top_p": (0.0, MAX_TOP_P),
        "top_k": (0, MAX_TOP_K),
        "seed": (0, MAX_SEED),
        "stream_decode_stride_frames": (0, MAX_STREAM_STRIDE),
        "stream_decode_stride": (0, MAX_STREAM_STRIDE),
        "stream_start_buffer_ms": (0, MAX_START_BUFFER_MS),
        "sentence_pause_ms": (0, MAX_SENTENCE_PAUSE_MS),
        "segment_max_chars": (0, limits.max_text_chars),
        "stream_holdback_frames": frames,
        "codec_decode_context_frames": frames,
        "codec_context_frames": frames,
    }


class BadRequest(Exception):
    """A request the server refuses; ``str()`` is the message sent back."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass
class GenerateSpec:
    """One parsed ``/generate`` (or ``/v1/audio/speech``) request, before any audio is read."""

    text: str
    generation: GenerationParams
    reference: Any = None  # the uploaded file (read later, asynchronously)
    voice_file: Any = None  # an uploaded .s2voice (read later)
    reference_text: str = ""
    voice: str = ""
    voice_dir: str = ""
    stream: bool = False
    chunked: bool = False
    output_format: str = "wav"
    segmentation: Segmentation = field(default_factory=Segmentation)
    postprocess: PostProcess = field(default_factory=PostProcess)
    stream_stride: int = DEFAULT_STREAM_STRIDE
    start_buffer_ms: int = 0
    n_threads: int | None = None

    @property
    def live(self) -> bool:
        """Bytes go out as they are decoded. As s2.cpp: chunked only matters on the streaming
        path, which ``stream`` or ``segment_sentences`` selects."""
        return self.chunked and (self.stream or self.segmentation.enabled)

    @property
    def streaming_path(self) -> bool:
        """PCM16 output without post-processing (s2.cpp's sink path) instead of a float WAV."""
        return self.stream or self.segmentation.enabled


# ---- JSON value conversion with nlohmann's rules ---------------------------------------------

def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _type_error(key: str, wanted: str, value: Any) -> BadRequest:
    return BadRequest(f"Invalid params JSON: {key}: type must be {wanted}, but is {_type_name(value)}")


def as_int(key: str, value: Any) -> int:
    # nlohmann converts a float to int by truncation, but refuses booleans and strings.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _type_error(key, "number", value)
    if isinstance(value, float) and not (abs(value) < 2**63):
        raise BadRequest(f"Invalid params JSON: {key}: {value} is out of range")
    return int(value)


def as_float(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _type_error(key, "number", value)
    value = float(value)
    if value != value:  # Python's json accepts NaN; no sampler knob means anything at NaN
        raise BadRequest(f"Invalid params JSON: {key}: NaN is not a number")
    return value


def in_range(key: str, value, ranges: dict[str, tuple[float, float]]):
    """Clamp below the range (s2.cpp's ``max(0, v)``); refuse above it, naming the key."""
    low, high = ranges[key]
    if value > high:
        raise BadRequest(f"{key} must be at most {_number(high)}, not {_number(value)}.")
    return max(low, value)


def _number(value) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def check_text_lengths(spec: "GenerateSpec", limits: RequestLimits) -> None:
    """413 for a text over the server's limit: the prompt's memory and time grow with it."""
    for name, value, limit in (("text", spec.text, limits.max_text_chars),
                               ("reference_text", spec.reference_text, limits.max_reference_text_chars)):
        if len(value) > limit:
            raise BadRequest(f"{name} is {len(value)} characters long; this server accepts at most {limit} "
                             f"per request (split the text into several requests).", status=413)


def as_bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _type_error(key, "boolean", value)
    return value


def as_str(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _type_error(key, "string", value)
    return value


def parse_output_format(value: str) -> str:
    """s2.cpp: pcm, pcm16, pcm_s16le, s16le (any case) mean raw PCM; anything else is WAV.
    s2studio adds pcm_f32le (also f32le): raw 32-bit float PCM, the engine's samples exactly,
    which the remote engine asks for so a take fetched remotely equals the same take made
    locally. s2.cpp answers it with a PCM16 WAV (its "anything else"); clients tell the two
    apart by ``X-Audio-Encoding``/``Content-Type``."""
    value = value.lower()
    if value in ("pcm_f32le", "f32le"):
        return "pcm_f32le"
    return "pcm_s16le" if value in ("pcm", "pcm16", "pcm_s16le", "s16le") else "wav"


def decode_params(text: str) -> dict:
    try:
        params = json.loads(text) if text.strip() else {}
    except ValueError:
        raise BadRequest("JSON parse error") from None
    except RecursionError:  # [[[[... nested deeper than the parser's stack
        raise BadRequest("JSON parse error: nested too deeply") from None
    if not isinstance(params, dict):
        raise BadRequest("Params JSON must be an object")
    return params


# ---- the request ------------------------------------------------------------------------------

def _first(form, names: tuple[str, ...]):
    """The first value of the first alias present (s2.cpp's get_first_form_field)."""
    for name in names:
        values = form.getlist(name)
        if values:
            return values[0]
    return None


def _form_text(form, names: tuple[str, ...]) -> str:
    value = _first(form, names)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadRequest(f"The field {names[0]!r} must be a text field, not a file.")
    return value


def parse_generate_form(form, defaults: GenerationParams, max_new_tokens_limit: int | None = None,
                        limits: RequestLimits = DEFAULT_LIMITS) -> GenerateSpec:
    """A multipart form (anything with ``getlist``) → ``GenerateSpec``; ``BadRequest`` if refused."""
    text = _first(form, (TEXT_FIELD,))
    if text is None:
        raise BadRequest("No text field in multipart form")
    if not isinstance(text, str):
        raise BadRequest("The field 'text' must be a text field, not a file.")
    reference = _first(form, REFERENCE_FIELDS)
    if isinstance(reference, str):
        if reference:  # s2.cpp only looks at files; a non-empty text value is a client mistake
            raise BadRequest("The field 'reference' must be a file upload (curl: --form \"reference=@file.wav\").")
        reference = None
    voice_file = _first(form, (VOICE_FILE_FIELD,))
    if isinstance(voice_file, str):
        if voice_file:
            raise BadRequest("The field 'voice_file' must be a file upload of a .s2voice profile.")
        voice_file = None
    spec = GenerateSpec(text=text, generation=defaults, reference=reference, voice_file=voice_file,
                        reference_text=_form_text(form, REFERENCE_TEXT_FIELDS),
                        voice=_form_text(form, VOICE_FIELDS), voice_dir=_form_text(form, ("voice_dir",)))
    check_text_lengths(spec, limits)  # before the params: the cheapest refusal first
    params_field = _form_text(form, ("params",))
    apply_params(spec, decode_params(params_field) if params_field else {}, max_new_tokens_limit, limits)
    return spec


def apply_params(spec: GenerateSpec, p: dict, max_new_tokens_limit: int | None = None,
                 limits: RequestLimits = DEFAULT_LIMITS) -> None:
    """Apply the ``params`` JSON object to ``spec`` (s2.cpp's keys, bounds and defaults)."""
    ranges = numeric_ranges(limits)

    def get(key: str, convert: Callable[[str, Any], Any]):
        if key not in p:
            return None
        value = convert(key, p[key])
        return in_range(key, value, ranges) if key in ranges and convert in (as_int, as_float) else value

    gen = {}
    for key, convert in (("max_new_tokens", as_int), ("temperature", as_float), ("top_p", as_float),
                         ("top_k", as_int), ("min_tokens_before_end", as_int)):
        value = get(key, convert)
        if value is not None:
            gen[key] = value
    if "seed" in p and p["seed"] is not None:
        seed = as_int("seed", p["seed"])
        if not 0 <= seed <= MAX_SEED:
            raise BadRequest(f"seed must be between 0 and {MAX_SEED}")
        gen["seed"] = seed
    if "ras" in p:
        gen["ras"] = as_bool("ras", p["ras"])
    generation = GenerationParams(**{**spec.generation.__dict__, **gen})
    if max_new_tokens_limit is not None and generation.max_new_tokens > max_new_tokens_limit:
        generation = GenerationParams(**{**generation.__dict__, "max_new_tokens": max_new_tokens_limit})
    spec.generation = generation

    # s2.cpp lets a client set the thread count; here it is recorded (type-checked, for the
    # log) and never used: threads are the operator's choice (-threads), see the module doc.
    n_threads = get("n_threads", as_int)
    spec.n_threads = None if n_threads is None else max(1, n_threads)
    for key in ("voice", "voice_id"):  # in this order: voice_id wins, as in s2.cpp
        if key in p:
            spec.voice = as_str(key, p[key])
    if "voice_dir" in p:
        spec.voice_dir = as_str("voice_dir", p["voice_dir"])

    stride = None
    for key in ("stream_decode_stride_frames", "stream_decode_stride"):
        value = get(key, as_int)
        if value is not None:
            stride = value
    start_buffer = get("stream_start_buffer_ms", as_int)
    for key in ("stream_holdback_frames", "codec_decode_context_frames", "codec_context_frames"):
        get(key, as_int)  # accepted for compatibility; the torch decoder has no such knobs
    for key in ("codec_follow_backend", "codec_auto_backend", "verbose"):
        get(key, as_bool)

    segment = get("segment_sentences", as_bool)
    pause = get("sentence_pause_ms", as_int)
    max_chars = get("segment_max_chars", as_int)
    spec.segmentation = Segmentation(enabled=bool(segment), max_chars=max_chars or 0,
                                     pause_ms=DEFAULT_SENTENCE_PAUSE_MS if pause is None else pause,
                                     mode="s2cpp")
    low_latency = bool(get("low_latency", as_bool))
    if "output_format" in p:
        spec.output_format = parse_output_format(as_str("output_format", p["output_format"]))
    spec.stream = bool(get("stream", as_bool))
    chunked = get("chunked", as_bool)
    realtime = get("realtime", as_bool)  # an alias of chunked that, as in s2.cpp, wins
    spec.chunked = bool(realtime if realtime is not None else chunked)

    post = {key: get(key, as_bool) for key in ("trim_silence", "normalize", "dynamic_normalize")}
    trim = bool(post["trim_silence"])
    dynamic = bool(post["dynamic_normalize"])
    # s2.cpp's in-memory path: dynamic normalization and peak normalization are exclusive.
    spec.postprocess = PostProcess(trim_silence=trim, normalize=bool(post["normalize"]) and not dynamic,
                                   dynamic_normalize=dynamic)

    # s2.cpp's presets: low_latency decodes every frame and starts at once; chunked PCM
    # otherwise waits for 3 s of audio so a player does not starve.
    if stride:
        spec.stream_stride = stride
    elif low_latency:
        spec.stream_stride = 1
    if start_buffer is not None:
        spec.start_buffer_ms = start_buffer
    elif not low_latency and spec.chunked and spec.output_format == "pcm_s16le":
        spec.start_buffer_ms = PCM_START_BUFFER_MS
