"""One synthesis API for the app, the CLI and the server.

``Pipeline`` holds the loaded model, tokenizer and codec for one set of ``EngineSettings``.
It loads lazily (first use, or ``load()`` with a progress callback), reloads only what a
settings change requires, and ``synthesize(request)`` returns a ``SynthesisJob``: iterate it to
get audio chunks as soon as the incremental decoder produces them; afterwards ``job.result``
holds the whole take (codes, audio, timings, seed). ``job.cancel()`` — from any thread — stops
it at the next frame boundary and leaves the pipeline ready for the next request.

Importing this module does not import torch (the engine parts load on first use), so a UI can
build ``EngineSettings`` and ``SynthesisRequest`` values before the model is ever touched.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

from s2studio.errors import GenerationError, InputError, ModelFileError
from s2studio.engine.model.step_cache import StepCache
from s2studio.engine.params import GenerationParams

log = logging.getLogger(__name__)

ProgressCallback = Callable[[str, float], None]  # (stage, fraction of that stage done)

CODEC_MODES = ("auto", "cpu", "follow")


@dataclass(frozen=True)
class EngineSettings:
    """What to load and where. Changing a field reloads only the parts that depend on it."""

    model_path: str
    tokenizer_path: str | None = None  # None: look beside the model (s2.cpp's search order)
    tokenizer_mode: str = "hf"  # "hf" (as trained, fish-speech) or "s2cpp" (s2.cpp's exact ids)
    device: str = "cpu"  # cpu | cuda | cuda:N | mps
    gpu_layers: int = -1  # -1 all layers on the GPU device, 0 none, N the first N
    dtype: str = "auto"  # weights: auto | float32 | float16 | bfloat16
    threads: int = 0  # CPU threads, 0 = all cores
    codec_mode: str = "auto"  # auto (benchmark CPU vs GPU) | cpu | follow (the engine's device)
    # Decode steps of a take run alone: auto (CUDA graphs when the whole model is on one CUDA
    # GPU, else the dynamic path) | on | off | eager | compile (engine.model.static_step.MODES).
    cuda_graphs: str = "auto"


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
    mode: str = "sentences"  # "sentences" (Unicode-aware) | "s2cpp" (s2.cpp's ASCII rules)


@dataclass(frozen=True, eq=False)
class SynthesisRequest:
    """Everything one take needs. With a ``voice`` id (from the pipeline's voice library),
    ``reference_codes`` + ``reference_text`` or ``reference_audio`` + ``reference_text``."""

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
    codes: np.ndarray  # int32 [num_codebooks, frames]
    stop_reason: str
    start_sample: int  # where this segment's speech starts in the take's audio
    end_sample: int
    # The segment's own audio (after the per-segment trim, before the whole take's
    # post-processing): what a studio keeps to re-assemble a take from sentence versions.
    audio: np.ndarray | None = None


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
    """Iterate for ``AudioChunk``s; ``result`` is set once iteration ends."""

    def __init__(self, run: Callable[["SynthesisJob"], Iterator[AudioChunk]]):
        self._cancel = threading.Event()
        self.result: SynthesisResult | None = None
        self._iter = run(self)

    @property
    def cancel_event(self) -> threading.Event:
        return self._cancel

    def cancel(self) -> None:
        self._cancel.set()

    def __iter__(self) -> Iterator[AudioChunk]:
        return self._iter

    def run_to_end(self) -> SynthesisResult:
        for _ in self._iter:
            pass
        assert self.result is not None
        return self.result


class Pipeline:
    def __init__(self, settings: EngineSettings, voices=None):
        """``voices``: a ``VoiceLibrary`` for requests that name a voice (default folder if None)."""
        self._settings = settings
        self._voices = voices
        self._lock = threading.RLock()  # one synthesis or (re)load at a time (a batched step, too)
        # The codec is shared by batched takes, each decoding its own stream on its own thread.
        self._codec_lock = threading.Lock()
        self._batcher = None  # FrameBatcher of the loaded model, made on the first batched take
        self.step_cache = StepCache()  # the static decode steps (and graphs) kept between takes
        self.tokenizer = None
        self.model = None
        self.placement = None
        self.codec = None
        self.codec_placement = None
        self._gguf = None
        self.last_load_s = 0.0

    # ---- settings and loading -------------------------------------------------------------
    @staticmethod
    def available_devices() -> list[tuple[str, str]]:
        """``(device, description)`` for the CPU and each usable GPU; loads no model (imports torch)."""
        from s2studio.engine.placement import available_devices

        return available_devices()

    @property
    def settings(self) -> EngineSettings:
        return self._settings

    @property
    def is_loaded(self) -> bool:
        return self.model is not None and self.codec is not None and self.tokenizer is not None

    def configure(self, settings: EngineSettings) -> None:
        """Adopt new settings; drop only the parts they invalidate (reloaded lazily)."""
        with self._lock:
            old, self._settings = self._settings, settings
            if old == settings:
                return
            if old.model_path != settings.model_path:
                self.unload()
                return
            if (old.tokenizer_path, old.tokenizer_mode) != (settings.tokenizer_path, settings.tokenizer_mode):
                self.tokenizer = None
            if (old.device, old.gpu_layers, old.dtype) != (settings.device, settings.gpu_layers, settings.dtype):
                self.model = self.placement = None
                self.codec = self.codec_placement = None  # its choice depends on the device
            if old.codec_mode != settings.codec_mode:
                self.codec = self.codec_placement = None
            if old.cuda_graphs != settings.cuda_graphs or self.model is None:
                self.step_cache.clear()  # its caches and graphs belong to the old mode or model
            self._release_memory()

    def load(self, progress: ProgressCallback | None = None) -> None:
        """Load whatever is not loaded yet. ``progress(stage, fraction)``."""
        from s2studio.engine.limits import check
        from s2studio.engine.threads import set_threads

        with self._lock:
            s = self._settings
            t0 = time.perf_counter()
            report = progress or (lambda stage, frac: None)
            check("gpu_layers", s.gpu_layers)
            from s2studio.engine.model.static_step import MODES as CUDA_GRAPH_MODES

            if s.cuda_graphs not in CUDA_GRAPH_MODES:
                raise InputError(f"Unknown cuda_graphs mode '{s.cuda_graphs}'. Use {', '.join(CUDA_GRAPH_MODES)}.")
            set_threads(s.threads)
            if self._gguf is None:
                from s2studio.engine.model.gguf_file import GGUFFile

                report("Opening model file", 0.0)
                self._gguf = GGUFFile(s.model_path)
            if self.model is None:
                from s2studio.engine.model.loader import load_dual_ar

                report("Loading transformer", 0.0)
                self.model, self.placement = load_dual_ar(
                    s.model_path, device=s.device, gpu_layers=s.gpu_layers, dtype=s.dtype, gguf=self._gguf,
                    progress=lambda frac: report("Loading transformer", frac))
            if self.tokenizer is None:
                report("Loading tokenizer", 0.0)
                self.tokenizer = self._load_tokenizer()
            if self.codec is None:
                report("Loading audio codec", 0.0)
                self.codec, self.codec_placement = self._load_codec()
            report("Ready", 1.0)
            self.last_load_s = time.perf_counter() - t0

    def _load_tokenizer(self):
        from s2studio.errors import TokenizerError
        from s2studio.engine.text.tokenizer import check_tokenizer_matches_model, find_tokenizer, load_tokenizer

        s = self._settings
        path = s.tokenizer_path or find_tokenizer(s.model_path)
        if path is None:
            raise TokenizerError("tokenizer.json", f"no tokenizer.json found beside {s.model_path} (or in its "
                                                   "parent folder, or the current folder); choose it explicitly")
        tok = load_tokenizer(path, mode=s.tokenizer_mode)
        c = self.model.cfg
        check_tokenizer_matches_model(tok, c.semantic_begin_id, c.semantic_end_id, c.vocab_size)
        return tok

    def _load_codec(self):
        from s2studio.engine.codec.placement import load_placed_codec

        s = self._settings
        engine_device = self.placement.fast_device if self.placement is not None else "cpu"
        if s.codec_mode not in CODEC_MODES:
            raise InputError(f"Unknown codec mode '{s.codec_mode}'. Use auto, cpu or follow.")
        return load_placed_codec(s.model_path, engine_device, s.codec_mode)

    def unload(self) -> None:
        """Release the model, codec and tokenizer (they reload on next use)."""
        with self._lock:
            self.model = self.placement = self.codec = self.codec_placement = self.tokenizer = None
            self.step_cache.clear()
            if self._gguf is not None:
                self._gguf.close()
                self._gguf = None
            self._release_memory()

    @staticmethod
    def _release_memory() -> None:
        gc.collect()
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    @property
    def voices(self):
        if self._voices is None:
            from s2studio.engine.voices import VoiceLibrary

            self._voices = VoiceLibrary()
        return self._voices

    @property
    def sample_rate(self) -> int:
        self.load()
        return self.codec.sample_rate

    def segments_of(self, request: "SynthesisRequest") -> list:
        """The segments the request's text will be spoken in (with their seeds), before any
        re-split to fit the model's context (see ``_segments_fitting_context``)."""
        return split_request_text(request.text, request.segmentation, request.generation.seed)

    # ---- synthesis ------------------------------------------------------------------------
    def encode_reference(self, samples: np.ndarray) -> np.ndarray:
        """Reference audio (mono float32 at the codec rate, ≤ 60 s) → int32 codes [10, T]."""
        from s2studio.engine.limits import check

        check("reference_samples", int(np.shape(samples)[-1]) if np.ndim(samples) else 0,
              label="reference audio (samples at 44.1 kHz)")
        self.load()
        with self._lock, self._codec_lock:
            return self.codec.encode(np.asarray(samples, dtype=np.float32))

    def synthesize(self, request: SynthesisRequest, *, batched: bool = False) -> SynthesisJob:
        """A job for ``request``. ``batched``: decode it together with the other batched jobs
        running at the time (each on its own thread; the server's concurrent requests), one
        pass over the weights per step for all; its seeded output is the same as alone.
        Otherwise (app, CLI) the take runs alone and holds the pipeline until it ends."""
        check_request(request)
        if batched:
            return SynthesisJob(lambda job: self._run_batched(request, job))
        return SynthesisJob(lambda job: self._run(request, job))

    def _run(self, request: SynthesisRequest, job: SynthesisJob) -> Iterator[AudioChunk]:
        from s2studio.engine.model.generate import generate_frames

        # The lock is held until the generator finishes or is closed: one take at a time.
        with self._lock:
            try:
                timings = Timings()
                if not self.is_loaded:
                    self.load()
                    timings.load_s = self.last_load_s
                frames = functools.partial(generate_frames, self.model, im_end_id=self.tokenizer.im_end_id,
                                           cuda_graphs=self._settings.cuda_graphs, step_cache=self.step_cache)
                yield from self._run_take(request, job, timings, frames)
            finally:
                # A take's KV cache can be large (prompt + frames); it must not stay alive
                # until the next take.
                if self.model is not None:
                    self.model.release_cache()

    def _run_batched(self, request: SynthesisRequest, job: SynthesisJob) -> Iterator[AudioChunk]:
        # The lock only while loading and picking the batcher: the batcher takes it for each
        # step, so batched takes interleave with each other, never with a take run alone.
        with self._lock:
            timings = Timings()
            if not self.is_loaded:
                self.load()
                timings.load_s = self.last_load_s
            batcher = self._frame_batcher()
        yield from self._run_take(request, job, timings, batcher.frames)

    def _frame_batcher(self):
        """(under the lock) The batcher of the loaded model; a reload gets a new one (takes
        still in the old one finish on the model they started with)."""
        from s2studio.engine.batching import FrameBatcher

        b = self._batcher
        if b is None or b.model is not self.model or b.im_end_id != self.tokenizer.im_end_id:
            b = self._batcher = FrameBatcher(self.model, self.tokenizer.im_end_id, model_lock=self._lock)
        return b

    def _run_take(self, request: SynthesisRequest, job: SynthesisJob, timings: Timings, frame_source
                  ) -> Iterator[AudioChunk]:
        """The take: segments, prompts, frames from ``frame_source`` (``generate_frames``'
        signature without the model), streamed codec decode, post-processing."""
        from s2studio.engine.model.generate import GenerationStats

        t_start = time.perf_counter()  # total_s and the real-time factor exclude loading

        def first(chunk: AudioChunk) -> AudioChunk:
            if not timings.first_audio_s:
                timings.first_audio_s = time.perf_counter() - t_start
            return chunk

        model, codec = self.model, self.codec
        ref_codes, ref_text = self._reference(request, timings)
        # Build every prompt first: a bad segment, or one the model's context cannot hold,
        # fails before any audio is produced.
        segments, all_prompts, segmented = self._segments_fitting_context(request, ref_codes, ref_text)
        wanted = wanted_segments(request, len(segments))
        prompts = {i: all_prompts[i] for i in wanted}
        del all_prompts
        base_seed = take_seed(request)
        take: list[np.ndarray] = []  # audio pieces of the take, pauses included
        results: list[SegmentResult] = []
        stop_reason = ""
        n_seg = len(segments)
        for seg in segments:
            if seg.index not in wanted:
                continue
            if job.cancel_event.is_set():
                stop_reason = "cancelled"
                break
            seed = segment_seed(request, base_seed, seg.index, segmented)
            params = dataclasses.replace(request.generation, seed=seed)
            stats = GenerationStats()
            decoder = codec.stream_decoder()
            frames: list[np.ndarray] = []
            pending: list[np.ndarray] = []
            pieces: list[np.ndarray] = []
            for frame in frame_source(prompts[seg.index], params, cancel=job.cancel_event, stats=stats):
                frames.append(frame.codes)
                pending.append(frame.codes)
                if job.cancel_event.is_set():
                    break  # Stop answers within one frame: no decode after a cancel
                if len(pending) >= request.stream_stride:
                    yield first(self._decode_chunk(decoder, pending, frames, seg.index, n_seg, pieces, timings))
            if job.cancel_event.is_set():
                stats.stop_reason = "cancelled"
                del frames[len(frames) - len(pending):]  # keep codes and audio in step
                pending.clear()
            if pending:
                yield first(self._decode_chunk(decoder, pending, frames, seg.index, n_seg, pieces, timings))
            timings.prefill_s += stats.prefill_s
            timings.generate_s += stats.slow_s + stats.fast_s
            timings.frames += stats.frames
            stop_reason = stats.stop_reason
            audio, start = place_segment(take, pieces, request, n_seg, codec.sample_rate)
            codes = np.stack(frames, axis=1) if frames else np.zeros((model.cfg.num_codebooks, 0), np.int32)
            results.append(SegmentResult(seg.index, seg.text, seed, codes, stop_reason, start, start + len(audio),
                                         audio))
            if stop_reason == "cancelled":
                break
            silence = pause_after(take, seg, request, n_seg, codec.sample_rate)
            if silence is not None:
                yield AudioChunk(silence, codec.sample_rate, seg.index, n_seg, len(frames), 0)
        if not any(r.codes.shape[1] for r in results) and stop_reason != "cancelled":
            raise GenerationError("The model ended the utterance before producing any audio. "
                                  "Try other text, a higher temperature or another seed.")
        audio = np.concatenate(take) if take else np.zeros(0, dtype=np.float32)
        pp = request.postprocess
        if len(audio) and (pp.trim_silence or pp.normalize or pp.dynamic_normalize):
            from s2studio.audio import apply_postprocess

            audio = apply_postprocess(audio, codec.sample_rate, **dataclasses.asdict(pp))
        timings.audio_s = len(audio) / codec.sample_rate
        timings.total_s = time.perf_counter() - t_start
        all_codes = np.concatenate([r.codes for r in results], axis=1) if results else \
            np.zeros((model.cfg.num_codebooks, 0), np.int32)
        job.result = SynthesisResult(audio.astype(np.float32, copy=False), codec.sample_rate, all_codes,
                                     base_seed, stop_reason, results, timings, list(segments))
        log.info("synthesized %.2f s of audio (%d segment(s)) in %.2f s: %d frames, %.0f ms/frame, "
                 "prefill %.2f s, codec %.2f s, seed %d, %s", timings.audio_s, len(results), timings.total_s,
                 timings.frames, timings.ms_per_frame, timings.prefill_s, timings.decode_s, base_seed,
                 stop_reason)

    def _segments_fitting_context(self, request: SynthesisRequest, ref_codes, ref_text
                                  ) -> tuple[list, list[np.ndarray], bool]:
        """The request's segments and every segment's prompt, each prompt short enough that
        it plus ``max_new_tokens`` fits the model's context. A text too long for one prompt is
        split into sentences (then clauses and spaces) at a character limit that makes every
        piece fit; the same request always splits the same way, so ``only_segments`` indices
        stay meaningful. Returns (segments, prompts, segmented)."""
        from s2studio.engine.model.generate import check_fits_context
        from s2studio.engine.text.segmentation import pack_segments, split_text

        model, tok = self.model, self.tokenizer
        context, n_max = model.cfg.context_length, request.generation.max_new_tokens
        seg = request.segmentation

        def prompts_for(segments):
            if not segments:
                raise InputError("There is no text to speak: the text is empty or only whitespace.")
            return [build_prompt_for(tok, model, s.text, ref_codes, ref_text) for s in segments]

        def fits(prompts) -> bool:
            return max(p.shape[1] for p in prompts) + n_max <= context

        segments = self.segments_of(request)
        prompts = prompts_for(segments)
        if fits(prompts):
            return segments, prompts, seg.enabled
        longest = max(range(len(prompts)), key=lambda i: prompts[i].shape[1])
        overhead = prompts[longest].shape[1] - len(tok.encode(segments[longest].text))
        if overhead + 1 + n_max > context:
            # Even one token of text would not fit: say which number to change.
            check_fits_context(overhead + 1, n_max, context)
        # Characters per token of this text, measured; start a little below the estimate and
        # tighten until every piece fits (tokens per character vary along a text).
        chars_per_token = len(segments[longest].text) / max(1, prompts[longest].shape[1] - overhead)
        max_chars = max(1, int(0.9 * (context - n_max - overhead) * chars_per_token))
        if seg.max_chars:
            max_chars = min(max_chars, seg.max_chars)
        while True:
            segments = split_text(request.text, max_chars=max_chars, mode=seg.mode, pause_ms=seg.pause_ms,
                                  seed=request.generation.seed)
            if not seg.enabled:  # not asked for sentences: as few pieces as fit
                segments = pack_segments(segments, max_chars, pause_ms=seg.pause_ms, seed=request.generation.seed)
            prompts = prompts_for(segments)
            if fits(prompts):
                log.info("the text is too long for one prompt (context %d, max_new_tokens %d): split into %d "
                         "segments of at most %d characters", context, n_max, len(segments), max_chars)
                return segments, prompts, True
            if max_chars == 1:
                worst = max(p.shape[1] for p in prompts)
                check_fits_context(worst, n_max, context)  # raises: names the numbers
            max_chars = max(1, int(max_chars * 0.7))

    def _reference(self, request: SynthesisRequest, timings: Timings) -> tuple[np.ndarray | None, str | None]:
        """The reference codes and transcript of a request (voice, codes, or audio to encode)."""
        if request.voice is not None:
            from s2studio.engine.voices import check_compatible

            voice = self.voices.get(request.voice)
            cfg = self.model.cfg
            check_compatible(voice.profile, num_codebooks=cfg.num_codebooks, codebook_size=cfg.codebook_size,
                             sample_rate=self.codec.sample_rate, path=self.voices.path_for(voice.id))
            return voice.codes, voice.transcript
        if request.reference_codes is not None:
            return np.asarray(request.reference_codes), request.reference_text
        if request.reference_audio is not None:
            t = time.perf_counter()
            with self._codec_lock:
                codes = self.codec.encode(np.asarray(request.reference_audio, dtype=np.float32))
            timings.encode_reference_s = time.perf_counter() - t
            return codes, request.reference_text
        return None, None

    def _decode_chunk(self, decoder, pending: list[np.ndarray], frames: list[np.ndarray], segment: int, n_seg: int,
                      pieces: list[np.ndarray], timings: Timings) -> AudioChunk:
        t = time.perf_counter()
        with self._codec_lock:
            samples = decoder.feed(np.stack(pending, axis=1))
        timings.decode_s += time.perf_counter() - t
        if not np.isfinite(samples).all():  # NaN/Inf codec weights: one message, never a NaN WAV
            raise ModelFileError(decoder.codec.path,
                                 "the audio codec produced non-finite samples (NaN or infinity): its "
                                 "weights (c.*) or metadata are damaged. Download the model again.")
        timings.decode_chunks += 1
        chunk = AudioChunk(samples, decoder.codec.sample_rate, segment, n_seg, len(frames) - len(pending),
                           len(pending))
        pieces.append(samples)
        pending.clear()
        return chunk


def check_request(request: SynthesisRequest) -> None:
    """Every field of a request against its documented range (:mod:`s2studio.engine.limits`):
    one :class:`InputError` naming the field, before any work."""
    from s2studio.engine.limits import MAX_TEXT_CHARS, check

    text = request.text
    if not isinstance(text, str) or not text.strip():
        raise InputError("There is no text to speak: the text is empty or only whitespace.")
    if len(text) > MAX_TEXT_CHARS:
        raise InputError(f"text is {len(text)} characters long; at most {MAX_TEXT_CHARS} can be spoken in one "
                         "request. Split it into several.")
    check("stream_stride", request.stream_stride)
    seg = request.segmentation
    check("max_chars", seg.max_chars, label="segmentation.max_chars")
    check("pause_ms", seg.pause_ms, label="segmentation.pause_ms")
    if request.only_segments is not None:
        for i in request.only_segments:
            check("only_segments", i)
    for index, seed in (request.segment_seeds or {}).items():
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
            raise InputError(f"segment_seeds[{index}] must be a whole number from 0 to 2**63-1, not {seed!r}.")
    request.generation.validated()
    has_ref = request.reference_audio is not None or request.reference_codes is not None
    if request.voice is not None and has_ref:
        raise InputError("Give either a saved voice or reference audio, not both.")
    if has_ref and not (request.reference_text or "").strip():
        raise InputError("A reference voice needs the transcript of what is said in it.")
    if request.reference_audio is not None:
        n = int(np.shape(request.reference_audio)[-1]) if np.ndim(request.reference_audio) else 0
        check("reference_samples", n, label="reference_audio (samples at 44.1 kHz)")
    if request.reference_codes is not None:
        shape = np.shape(request.reference_codes)
        if len(shape) != 2:
            raise InputError(f"reference_codes must be a [codebooks, frames] array, not shape {shape}.")
        check("reference_frames", int(shape[1]), label="reference_codes (frames)")


def split_request_text(text: str, segmentation: Segmentation, seed: int | None = None) -> list:
    """The segments ``text`` is spoken in under ``segmentation`` (``Segment``: index, text,
    speaker, pause after, seed): the pipeline's split, torch-free, so a UI can show a script as
    the sentences it will be generated in. (A text too long for the model's context is split
    further when spoken; ``SynthesisResult.all_segments`` has the segments really used.)"""
    from s2studio.engine.text.segmentation import Segment, split_text

    if not segmentation.enabled:
        return [Segment(0, text, None, 0, seed)]
    return split_text(text, max_chars=segmentation.max_chars, mode=segmentation.mode,
                      pause_ms=segmentation.pause_ms, seed=seed)


def build_prompt_for(tok, model, text: str, ref_codes, ref_text) -> np.ndarray:
    from s2studio.engine.text.prompt import build_prompt

    return build_prompt(tok, text, semantic_begin_id=model.cfg.semantic_begin_id,
                        num_codebooks=model.cfg.num_codebooks, ref_codes=ref_codes,
                        ref_text=ref_text if ref_codes is not None else None)


# ---- assembling a take from its segments (shared with the remote engine, so that a take made
# through a server is put together exactly as a local one) ----------------------------------------
def wanted_segments(request: SynthesisRequest, n_segments: int) -> set[int]:
    """The segments a request asks for: all, or its ``only_segments`` (checked)."""
    wanted = set(range(n_segments)) if request.only_segments is None else set(request.only_segments)
    if not wanted <= set(range(n_segments)):
        raise InputError(f"The text has {n_segments} segments; cannot regenerate {sorted(wanted)}.")
    return wanted


def take_seed(request: SynthesisRequest) -> int:
    """The request's seed, or one drawn here so that the result can report it."""
    if request.generation.seed is not None:
        return request.generation.seed
    import random

    return random.SystemRandom().randrange(2**63)


def place_segment(take: list[np.ndarray], pieces: list[np.ndarray], request: SynthesisRequest, n_seg: int,
                  sample_rate: int) -> tuple[np.ndarray, int]:
    """Join a segment's pieces (its trailing silence trimmed when asked and the text has several
    segments, as s2.cpp does per segment), append it to ``take``; returns it and its start sample."""
    audio = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
    if request.postprocess.trim_silence and n_seg > 1 and len(audio):
        from s2studio.audio import trim_trailing_silence

        audio = trim_trailing_silence(audio, sample_rate)
    start = sum(len(a) for a in take)
    take.append(audio)
    return audio, start


def pause_after(take: list[np.ndarray], seg, request: SynthesisRequest, n_seg: int,
                sample_rate: int) -> np.ndarray | None:
    """The pause after segment ``seg`` (none after the last, nor when regenerating single
    segments), appended to ``take`` and returned, or None."""
    pause = int(round(seg.pause_after_ms * sample_rate / 1000)) if seg.index < n_seg - 1 else 0
    if not pause or request.only_segments is not None:
        return None
    silence = np.zeros(pause, np.float32)
    take.append(silence)
    return silence


def segment_seed(request: SynthesisRequest, base_seed: int, index: int, segmented: bool) -> int:
    """Segment ``index``'s seed: the request's own for it (a regenerated sentence), else derived
    from the take's seed, or the take's seed itself when the text is one segment. Shared with
    the remote engine, so a take made through a server has the local seeds."""
    if request.segment_seeds and index in request.segment_seeds:
        return int(request.segment_seeds[index])
    return derive_seed(base_seed, index) if segmented else base_seed


def derive_seed(base_seed: int, index: int) -> int:
    from s2studio.engine.text.segmentation import derive_segment_seed

    return derive_segment_seed(base_seed, index)
