"""The documented range of every number a user or client can set for a synthesis.

One table, :data:`LIMITS`, maps a field name to its :class:`Limit` (inclusive min and max, and a
one-line description). The engine checks requests against it (:func:`check`), the CLI builds
its argparse type functions from it, and the server can reuse it for its own validation and
its API documentation. No torch here: the app imports this on its UI thread.

Why these bounds (each exists because an unbounded value reached the OS as a memory request):

* ``text`` (characters): 100 000 is about 1.5 hours of speech. Long text is split into
  segments that each fit the model's context, so memory per segment is bounded; the finished
  take itself (float32 audio, ~10 MB per minute) grows with the text, hence a cap.
* ``max_new_tokens``: at most the S2 Pro context (32 768 positions). The model in use bounds it
  further: prompt + new frames must fit its ``context_length`` (checked when the prompt is
  known, see ``Pipeline``).
* ``pause_ms``: 10 s of silence between segments at most (10⁷ ms allocated gigabytes).
* ``reference_frames``: 60 s of reference audio at the codec's 44 100 Hz / 2048 samples per
  frame (1292 frames), the same limit the audio reader applies to reference files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from s2studio.errors import InputError

# The codec's numbers, as s2studio.audio.validation has them (a test keeps them equal): importing
# s2studio.audio here would load soundfile and soxr on the app's UI thread before its window.
CODEC_SAMPLE_RATE = 44100
SAMPLES_PER_CODE_FRAME = 2048
MAX_REFERENCE_SECONDS = 60.0  # s2studio.audio.DEFAULT_MAX_REFERENCE_SECONDS

MAX_TEXT_CHARS = 100_000
MAX_DIALOGUE_SPEAKERS = 64  # speaker -> voice entries of one dialogue take (each voice is held while it runs)
MAX_CONTEXT = 32_768  # S2 Pro's context_length; a model file may declare less
MAX_REFERENCE_SAMPLES = int(MAX_REFERENCE_SECONDS * CODEC_SAMPLE_RATE)
MAX_REFERENCE_FRAMES = int(math.ceil(MAX_REFERENCE_SAMPLES / SAMPLES_PER_CODE_FRAME))  # 1292
# The voice prefix cache's default memory: ~12 voices of 10 s on the full-size model (144 KiB
# per prompt position, engine.model.prefix_cache).
DEFAULT_VOICE_CACHE_MB = 512


@dataclass(frozen=True)
class Limit:
    min: int | float
    max: int | float
    doc: str
    integer: bool = True

    def describe(self) -> str:
        return f"{self.min:g}..{self.max:g}" if not self.integer else f"{self.min}..{self.max}"


LIMITS: dict[str, Limit] = {
    # GenerationParams
    "max_new_tokens": Limit(1, MAX_CONTEXT, "most audio frames to generate (~21.5 per second); "
                                            "prompt + frames must also fit the model's context"),
    "temperature": Limit(0.0, 5.0, "sampling temperature; 0 = greedy", integer=False),
    "top_p": Limit(0.0, 1.0, "nucleus cut; 1 = no cut", integer=False),
    "top_k": Limit(0, 4096, "top-k cut; 0 = no cut"),
    "min_tokens_before_end": Limit(0, MAX_CONTEXT, "frames before the model may end the utterance"),
    "seed": Limit(0, 2**64 - 1, "random seed"),
    # Segmentation
    "max_chars": Limit(0, MAX_TEXT_CHARS, "split sentences longer than this many characters; 0 = no limit"),
    "pause_ms": Limit(0, 10_000, "silence between segments, milliseconds"),
    # SynthesisRequest
    "text": Limit(1, MAX_TEXT_CHARS, "characters of text to speak"),
    "stream_stride": Limit(1, 1024, "frames per streamed audio chunk"),
    "reference_frames": Limit(1, MAX_REFERENCE_FRAMES, f"reference code frames (≤ {MAX_REFERENCE_SECONDS:g} s)"),
    "reference_samples": Limit(1, MAX_REFERENCE_SAMPLES,
                               f"reference audio samples at {CODEC_SAMPLE_RATE} Hz (≤ {MAX_REFERENCE_SECONDS:g} s)"),
    "only_segments": Limit(0, MAX_TEXT_CHARS, "index of a segment to regenerate"),
    # EngineSettings
    "threads": Limit(0, 4096, "CPU threads; 0 = all cores (more than the cores is clamped to them)"),
    "gpu_layers": Limit(-1, 4096, "Slow-AR layers on the GPU: -1 all, 0 none, N the first N"),
    "voice_cache_mb": Limit(0, 65_536, "memory for the voice prefix cache, MB (~40 MB per 10 s voice "
                                       "on the full-size model); 0 = off"),
}


def check(field: str, value, *, label: str | None = None):
    """Return ``value`` if it lies in ``LIMITS[field]``; otherwise raise :class:`InputError`
    naming ``label`` (default: the field) and its range. Booleans are not numbers here."""
    lim = LIMITS[field]
    name = label or field
    ok_type = (int,) if lim.integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, ok_type):
        try:  # numpy scalars
            import numpy as np

            if isinstance(value, np.integer) or (not lim.integer and isinstance(value, np.floating)):
                value = value.item()
                ok_type = ()
        except ImportError:  # pragma: no cover - numpy is a dependency
            pass
        if ok_type:
            kind = "a whole number" if lim.integer else "a number"
            raise InputError(f"{name} must be {kind} in {lim.describe()}, not {value!r}.")
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{name} must be a finite number in {lim.describe()}, not {value!r}.")
    if not lim.min <= value <= lim.max:
        raise InputError(f"{name} must be in {lim.describe()} ({lim.doc}), not {value!r}.")
    return value


def argparse_type(field: str, flag: str, *, also: tuple = ()):
    """An argparse ``type=`` function that parses and range-checks one flag: out of range is a
    one-line usage error naming the flag. ``also``: extra accepted values (e.g. 0 = default)."""
    import argparse

    lim = LIMITS[field]

    def parse(text: str):
        try:
            value = int(text) if lim.integer else float(text)
        except ValueError:
            kind = "a whole number" if lim.integer else "a number"
            raise argparse.ArgumentTypeError(f"{flag} must be {kind} in {lim.describe()}, not {text!r}") from None
        if value in also:
            return value
        try:
            return check(field, value, label=flag)
        except InputError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    parse.__name__ = field  # argparse names the type in some messages
    return parse
