"""The engine interface every front end uses: value types and the ``SynthesisEngine`` protocol.

Two engines implement it: the local :class:`s2studio.engine.pipeline.Pipeline` (the model in
this process) and :class:`s2studio.remote.RemoteEngine` (the model on one or more servers). The
app, the CLI and the server talk only to this interface, so a take made here, on a server, or
as a dialogue of several voices is the same kind of object, assembled by the same code
(:mod:`s2studio.engine.take`).

Torch-free and cheap to import: a UI builds requests before any model is touched, and the
remote client (which has no torch) uses these types too.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable, Iterator, Protocol, runtime_checkable

import numpy as np

from s2studio.engine.modes import SegmentationMode
from s2studio.engine.params import GenerationParams

ProgressCallback = Callable[[str, float], None]  # (stage, fraction of that stage done)


@dataclass(frozen=True)
class PostProcess:
    """s2.cpp's optional clean-up of the finished take (all off by default)."""

    trim_silence: bool = False
    normalize: bool = False  # peak-normalize to 0.95
    dynamic_normalize: bool = False


@dataclass(frozen=True)
class Segmentation:
    """Long text: split into sentences (then clauses past ``max_chars``), synthesise each
    independently with the same voice, ``pause_ms`` of silence between them. Off by default,
    as in s2.cpp's CLI (its server has it as ``segment_sentences``)."""

    enabled: bool = False
    max_chars: int = 0  # 0: no limit; otherwise cut longer sentences at clauses, then spaces
    pause_ms: int = 180
    mode: SegmentationMode = SegmentationMode.SENTENCES  # Unicode-aware | s2cpp (s2.cpp's ASCII rules)

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", SegmentationMode.parse(self.mode))  # checked once, where it is made


@dataclass(frozen=True, eq=False)
class SynthesisRequest:
    """Everything one take needs. With a ``voice`` id (from the engine's voice library),
    ``reference_codes`` + ``reference_text`` or ``reference_audio`` + ``reference_text``.

    ``speaker_voices`` makes the take a dialogue: the text is cut at its ``<|speaker:N|>`` tags
    and each speaker's turns are spoken with that speaker's saved voice as the reference (the
    tag removed); speakers not in the map, and text before the first tag, use the request's
    own voice. The turns are joined with ``segmentation.pause_ms`` of silence."""

    text: str
    voice: str | None = None
    reference_audio: np.ndarray | None = None  # mono float32 at the codec rate (44.1 kHz)
    reference_codes: np.ndarray | None = None  # int32 [10, T], e.g. from a voice profile
    reference_text: str | None = None  # transcript of the reference; required with one
    generation: GenerationParams = GenerationParams()  # its seed is the take's base seed
    segmentation: Segmentation = Segmentation()
    only_segments: tuple[int, ...] | None = None  # regenerate just these segments of the text
    # An explicit seed for some segments (index -> seed) instead of the one derived from the base
    # seed: a studio regenerates one sentence with a fresh seed, or replays a kept version's seed.
    segment_seeds: dict[int, int] | None = None
    postprocess: PostProcess = PostProcess()
    stream_stride: int = 4  # frames per streamed chunk (4 ≈ 186 ms, as s2.cpp's server)
    speaker_voices: dict[int, str] | None = None  # speaker N -> saved voice id: a dialogue

    @property
    def is_dialogue(self) -> bool:
        return bool(self.speaker_voices)


@dataclass(frozen=True)
class AudioChunk:
    """Audio as it is decoded. A pause between segments arrives as a chunk of zeros with
    ``frame_count == 0``."""

    samples: np.ndarray  # float32 mono
    sample_rate: int
    segment: int  # index into the text's segments
    segment_count: int
    frame_start: int  # first frame of this chunk within its segment
    frame_count: int


@dataclass
class SegmentResult:
    index: int
    text: str
    seed: int
    codes: np.ndarray  # int32 [num_codebooks, frames]; empty (0, 0) from an engine that has none
    stop_reason: str
    start_sample: int  # where this segment's speech starts in the take's audio
    end_sample: int
    # The segment's own audio (after the per-segment trim, before the whole take's
    # post-processing): what a studio keeps to re-assemble a take from sentence versions.
    audio: np.ndarray | None = None
    speaker: int | None = None  # the dialogue speaker who said it (None: the request's voice)


@dataclass
class Timings:
    load_s: float = 0.0
    encode_reference_s: float = 0.0
    prefill_s: float = 0.0
    generate_s: float = 0.0  # Slow-AR steps + Fast-AR, after prefill
    decode_s: float = 0.0  # codec
    total_s: float = 0.0  # synthesis, after loading (as s2.cpp's total_rtf)
    frames: int = 0
    audio_s: float = 0.0
    first_audio_s: float = 0.0  # from the start of synthesis to the first decoded chunk
    decode_chunks: int = 0  # codec calls (streaming chunks) that decode_s was spent on

    @property
    def ms_per_chunk(self) -> float:
        return 1000.0 * self.decode_s / max(self.decode_chunks, 1)

    @property
    def ms_per_frame(self) -> float:
        return 1000.0 * self.generate_s / max(self.frames, 1)

    @property
    def real_time_factor(self) -> float:
        """Compute time per second of audio (< 1 is faster than real time)."""
        return self.total_s / self.audio_s if self.audio_s > 0 else float("inf")


@dataclass
class SynthesisResult:
    audio: np.ndarray  # float32 mono, post-processed, pauses included
    sample_rate: int
    codes: np.ndarray  # int32 [num_codebooks, frames], all segments one after another
    seed: int  # the base seed; segment k used segments[k].seed
    stop_reason: str  # of the last segment run: "end" | "max_tokens" | "cancelled"
    segments: list[SegmentResult] = field(default_factory=list)
    timings: Timings = field(default_factory=Timings)
    # every segment the text was spoken in (engine.text.segmentation.Segment), generated this time
    # or not: what ``only_segments`` indices refer to
    all_segments: list = field(default_factory=list)

    @property
    def cancelled(self) -> bool:
        return self.stop_reason == "cancelled"


class SynthesisJob:
    """Iterate for ``AudioChunk``s; ``result`` is set once iteration ends. ``cancel()`` from
    any thread stops it at the next frame (and aborts a blocked network read: see
    :meth:`set_abort`)."""

    def __init__(self, run: Callable[["SynthesisJob"], Iterator[AudioChunk]]):
        self._cancel = threading.Event()
        self._abort_lock = threading.Lock()
        self._abort: Callable[[], None] | None = None
        self.result: SynthesisResult | None = None
        self._iter = run(self)

    @property
    def cancel_event(self) -> threading.Event:
        return self._cancel

    def set_abort(self, abort: Callable[[], None] | None) -> None:
        """What else a cancel must do right now (close the connection a segment is read from);
        None when nothing. Called at once if the job is already cancelled."""
        with self._abort_lock:
            self._abort = abort
        if abort is not None and self._cancel.is_set():
            abort()

    def cancel(self) -> None:
        self._cancel.set()
        with self._abort_lock:
            abort = self._abort
        if abort is not None:
            abort()

    def __iter__(self) -> Iterator[AudioChunk]:
        return self._iter

    def run_to_end(self) -> SynthesisResult:
        for _ in self._iter:
            pass
        assert self.result is not None
        return self.result


@dataclass(frozen=True)
class PrefixCacheStats:
    """The voice prefix cache (``engine.model.prefix_cache``): what it holds and how often a
    take found its voice there."""

    hits: int = 0
    misses: int = 0
    entries: int = 0
    bytes: int = 0
    budget_bytes: int = 0

    def describe(self) -> str:
        mb = 1 << 20
        if not self.budget_bytes:
            return "voice cache off"
        return (f"voice cache {self.entries} voice{'' if self.entries == 1 else 's'}, "
                f"{self.bytes / mb:.0f} MB, {self.hits} hit{'' if self.hits == 1 else 's'}")

    def as_json(self) -> dict:
        return {"hits": self.hits, "misses": self.misses, "entries": self.entries, "bytes": self.bytes,
                "budget_bytes": self.budget_bytes}


@dataclass(frozen=True)
class ModelInfo:
    """What a front end may know of the model behind an engine. Fields are None while an
    engine has not loaded (or not reached) its model."""

    name: str  # the model file's name (a server's: what its /health says)
    loaded: bool
    sample_rate: int | None = None  # of the audio the engine produces
    num_codebooks: int | None = None
    codebook_size: int | None = None
    context_length: int | None = None  # positions: prompt + frames
    device: str | None = None  # where the transformer runs
    gpu_layers: int | None = None
    codec_device: str | None = None
    codec_reason: str = ""  # why the codec runs there (benchmark verdict, or "served by ...")
    prefix_cache: PrefixCacheStats | None = None  # the voice prefix cache (None: the engine has none)


@runtime_checkable
class SynthesisEngine(Protocol):
    """The one interface of an engine. Methods only (no properties): Python before 3.12 checks
    a runtime protocol with ``hasattr``, which would run a property (and load a model)."""

    def synthesize(self, request: SynthesisRequest, *, batched: bool = False) -> SynthesisJob:
        """A cancellable, streaming job for one take (checked before it is returned).

        Callable from several threads at once, each iterating its own job: that is how a
        caller keeps N takes in flight (a book renders N sentences so). ``batched``: the
        caller will run several jobs at the same time; the local engine then decodes them
        together, one pass over the weights per step for all (``engine/batching.py``), each
        seeded take sample-identical to the same take alone. A remote engine sends each job
        as its own requests anyway (the servers batch them), so it ignores the flag."""

    def segments_of(self, request: SynthesisRequest) -> list:
        """The segments (``engine.text.segmentation.Segment``) the request's text is spoken in,
        before any re-split to fit the model's context; torch-free, for a UI's sentence list."""

    def model_info(self, load: bool = True) -> ModelInfo:
        """What the model is (``load=False``: what is known without loading it)."""

    def encode_voice(self, samples: np.ndarray, transcript: str):
        """A reference clip (mono float32 at 44.1 kHz) and its transcript → a ``VoiceProfile``
        made with this engine's codec, ready for ``VoiceLibrary.save_profile``."""

    def available_devices(self) -> list[tuple[str, str]]:
        """``(device, description)`` the engine can run on (a remote engine: none to choose)."""


def preload_native_libraries() -> int:
    """Map torch's and numba's native libraries without holding the GIL (engine.kernels.preload),
    before the first engine import: a UI thread keeps running meanwhile. Cheap, idempotent;
    returns how many were loaded."""
    from s2studio.engine.kernels.preload import preload

    return preload()


def warm_up() -> bool:
    """Do the engine's one-time Python work now (engine.warmup): the native libraries mapped,
    torch, numba and the engine's lazily imported modules imported, numba's first compiled call
    made. A UI calls it on its worker thread so that the first load and take do none of it.
    Idempotent; returns whether this call did the work."""
    from s2studio.engine.warmup import warm_up as run

    return run()
