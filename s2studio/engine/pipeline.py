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
import os
import threading
import time
from dataclasses import dataclass
from typing import Generator, Iterator

import numpy as np

from s2studio.engine.api import (  # noqa: F401 - the value types, importable from here as before
    AudioChunk,
    ModelInfo,
    PostProcess,
    ProgressCallback,
    Segmentation,
    SegmentResult,
    SynthesisJob,
    SynthesisRequest,
    SynthesisResult,
    Timings,
)
from s2studio.engine.params import GenerationParams  # noqa: F401
from s2studio.engine.take import (  # noqa: F401 - check_request and split_request_text are used from here too
    SegmentOutcome,
    VoiceChoice,
    assemble_take,
    check_request,
    segments_of,
    split_request_text,
    voice_for,
)
from s2studio.engine.limits import DEFAULT_VOICE_CACHE_MB
from s2studio.engine.model.step_cache import StepCache
from s2studio.engine.modes import CodecMode, CudaGraphs, TokenizerMode, WeightDtype
from s2studio.errors import InputError, ModelFileError

log = logging.getLogger(__name__)

CODEC_MODES = tuple(CodecMode.choices())


@dataclass(frozen=True)
class EngineSettings:
    """What to load and where. Changing a field reloads only the parts that depend on it.

    The modes are checked here, once: a word (as the CLI, the server and the settings file
    pass them) becomes its enum (engine.modes, still equal to the word), an unknown word is an
    ``InputError`` when the settings are made, not later at load."""

    model_path: str
    tokenizer_path: str | None = None  # None: look beside the model (s2.cpp's search order)
    tokenizer_mode: TokenizerMode = TokenizerMode.HF  # as trained (fish-speech) or s2.cpp's exact ids
    device: str = "cpu"  # cpu | cuda | cuda:N | mps
    gpu_layers: int = -1  # -1 all layers on the GPU device, 0 none, N the first N
    dtype: WeightDtype = WeightDtype.AUTO  # weights: auto | quantized | float32 | float16 | bfloat16
    threads: int = 0  # CPU threads, 0 = all cores
    codec_mode: CodecMode = CodecMode.AUTO  # auto (benchmark CPU vs GPU) | cpu | follow (the engine's device)
    # Decode steps of a take run alone: auto (CUDA graphs when the whole model is on one CUDA
    # GPU, else the dynamic path) | on | off | eager | compile (engine.modes.CudaGraphs).
    cuda_graphs: CudaGraphs = CudaGraphs.AUTO
    # Memory for the voice prefix cache (engine.model.prefix_cache), MB; 0 = off.
    voice_cache_mb: int = DEFAULT_VOICE_CACHE_MB

    def __post_init__(self) -> None:
        for name, mode in (("tokenizer_mode", TokenizerMode), ("dtype", WeightDtype), ("codec_mode", CodecMode),
                           ("cuda_graphs", CudaGraphs)):
            object.__setattr__(self, name, mode.parse(getattr(self, name)))  # frozen: set once, here


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
        self._prefix_cache = None  # the voice prefixes' KV (PrefixCache), made with the model
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
            if self._prefix_cache is not None:
                if self.model is None or old.threads != settings.threads:
                    self._prefix_cache.clear()  # entries of the old model (or GEMM blocking)
                self._prefix_cache.set_budget(settings.voice_cache_mb << 20)
            self._release_memory()

    def load(self, progress: ProgressCallback | None = None) -> None:
        """Load whatever is not loaded yet. ``progress(stage, fraction)``."""
        from s2studio.engine.limits import check
        from s2studio.engine.threads import set_threads

        with self._lock:
            s = self._settings
            t0 = time.perf_counter()
            report = progress or (lambda stage, frac: None)
            check("gpu_layers", s.gpu_layers)  # the modes were checked when the settings were made
            check("voice_cache_mb", s.voice_cache_mb)
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
            if self._prefix_cache is None:
                from s2studio.engine.model.prefix_cache import PrefixCache

                self._prefix_cache = PrefixCache(s.voice_cache_mb << 20)
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
        return load_placed_codec(s.model_path, engine_device, s.codec_mode)

    def unload(self) -> None:
        """Release the model, codec and tokenizer (they reload on next use)."""
        with self._lock:
            self.model = self.placement = self.codec = self.codec_placement = self.tokenizer = None
            self.step_cache.clear()
            if self._prefix_cache is not None:
                self._prefix_cache.clear()
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

    def segments_of(self, request: SynthesisRequest) -> list:
        """The segments the request's text will be spoken in (with their seeds), before any
        re-split to fit the model's context (see ``LocalTake.plan``)."""
        return segments_of(request)

    def model_info(self, load: bool = True) -> ModelInfo:
        """What the model is; ``load=False`` answers without loading (fields None until loaded)."""
        if load and not self.is_loaded:  # loaded: answer at once, even while a take holds the lock
            self.load()
        s, placement, codec_placement = self._settings, self.placement, self.codec_placement
        cfg = self.model.cfg if self.model is not None else None
        return ModelInfo(
            name=os.path.basename(s.model_path), loaded=self.is_loaded,
            sample_rate=self.codec.sample_rate if self.codec is not None else None,
            num_codebooks=cfg.num_codebooks if cfg is not None else None,
            codebook_size=cfg.codebook_size if cfg is not None else None,
            context_length=cfg.context_length if cfg is not None else None,
            device=placement.fast_device if placement is not None else s.device,
            gpu_layers=placement.gpu_layer_count if placement is not None else None,
            codec_device=str(codec_placement.device) if codec_placement is not None else None,
            codec_reason=str(getattr(codec_placement, "reason", "") or ""),
            prefix_cache=self.prefix_cache_stats())

    def prefix_cache_stats(self):
        """The voice prefix cache's ``PrefixCacheStats`` (hits, entries, bytes, budget); None
        before the first load."""
        cache = self._prefix_cache
        return cache.stats() if cache is not None else None

    # ---- synthesis ------------------------------------------------------------------------
    def encode_reference(self, samples: np.ndarray) -> np.ndarray:
        """Reference audio (mono float32 at the codec rate, ≤ 60 s) → int32 codes [10, T]."""
        from s2studio.engine.limits import check

        check("reference_samples", int(np.shape(samples)[-1]) if np.ndim(samples) else 0,
              label="reference audio (samples at 44.1 kHz)")
        self.load()
        with self._lock, self._codec_lock:
            return self.codec.encode(np.asarray(samples, dtype=np.float32))

    def encode_voice(self, samples: np.ndarray, transcript: str):
        """A reference clip and its transcript → a ``VoiceProfile`` made with this codec."""
        from s2studio.engine.voices import VoiceProfile

        if not (transcript or "").strip():
            raise InputError("A voice needs the transcript of what is said in the clip.")
        codes = self.encode_reference(samples)
        return VoiceProfile(codes=codes, transcript=transcript, sample_rate=self.codec.sample_rate,
                            codebook_size=self.model.cfg.codebook_size)

    def check_voice(self, profile, path) -> None:
        """A voice's codes against this model and codec (``IncompatibleVoiceError`` naming ``path``)."""
        from s2studio.engine.voices import check_compatible

        if not self.is_loaded:
            self.load()
        cfg = self.model.cfg
        check_compatible(profile, num_codebooks=cfg.num_codebooks, codebook_size=cfg.codebook_size,
                         sample_rate=self.codec.sample_rate, path=path)

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
                                           cuda_graphs=self._settings.cuda_graphs, step_cache=self.step_cache,
                                           prefix_cache=self._prefix_cache)
                yield from assemble_take(request, LocalTake(self, frames), job, timings)
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
        # A CPU codec shares the cores with the batch's steps: its chunks run between them.
        turn = batcher.between_steps if self._codec_shares_cores() else None
        yield from assemble_take(request, LocalTake(self, batcher.frames, cpu_turn=turn), job, timings)

    def _codec_shares_cores(self) -> bool:
        """(under the lock) Whether the codec and some of the model's layers both run on the CPU."""
        if self.codec.device.type != "cpu":
            return False
        stacks = [s for s in (self.model.w.slow, self.model.w.fast) if s is not None]
        return any(lw.device.type == "cpu" for stack in stacks for lw in stack.layers)

    def _frame_batcher(self):
        """(under the lock) The batcher of the loaded model; a reload gets a new one (takes
        still in the old one finish on the model they started with)."""
        from s2studio.engine.batching import FrameBatcher

        b = self._batcher
        if b is None or b.model is not self.model or b.im_end_id != self.tokenizer.im_end_id:
            b = self._batcher = FrameBatcher(self.model, self.tokenizer.im_end_id, model_lock=self._lock,
                                             prefix_cache=self._prefix_cache)
        return b

    def resolve_voice(self, voice: VoiceChoice, timings: Timings) -> tuple[np.ndarray | None, str | None]:
        """The reference codes and transcript of a voice (saved id, codes, or audio to encode)."""
        if voice.voice is not None:
            stored = self.voices.get(voice.voice)
            self.check_voice(stored.profile, self.voices.path_for(stored.id))
            return stored.codes, stored.transcript
        if voice.reference_codes is not None:
            return np.asarray(voice.reference_codes), voice.reference_text
        if voice.reference_audio is not None:
            t = time.perf_counter()
            with self._codec_lock:
                codes = self.codec.encode(np.asarray(voice.reference_audio, dtype=np.float32))
            timings.encode_reference_s += time.perf_counter() - t
            return codes, voice.reference_text
        return None, None


class LocalTake:
    """The local engine's side of one take (:class:`engine.take.SegmentRenderer`): prompts that
    fit the model's context, frames from ``frame_source`` (``generate_frames``' signature
    without the model: the take alone, or the batcher's), streamed codec decode."""

    verb = "synthesized"

    def __init__(self, pipeline: Pipeline, frame_source, cpu_turn=None):
        """``cpu_turn``: runs a codec chunk's decode in turn with other CPU work (the batcher's
        ``between_steps``); None: here, at once."""
        self.pipeline = pipeline
        self.cpu_turn = cpu_turn
        self.model, self.codec, self.tokenizer = pipeline.model, pipeline.codec, pipeline.tokenizer
        self.frame_source = frame_source
        self.sample_rate = self.codec.sample_rate
        self.num_codebooks = self.model.cfg.num_codebooks
        self.request: SynthesisRequest | None = None
        self.prompts: dict[int, tuple[np.ndarray, int]] = {}  # segment -> (prompt, its voice prefix)
        self._segment_count = 0

    def plan(self, request: SynthesisRequest, timings: Timings) -> tuple[list, bool]:
        """Every voice resolved once, every prompt built first: a bad segment, or one the model's
        context cannot hold, fails before any audio is produced."""
        from s2studio.engine.take import wanted_segments

        self.request = request
        references: dict[tuple, tuple] = {}

        def reference(segment):
            voice = voice_for(request, segment)
            if voice.key not in references:
                references[voice.key] = self.pipeline.resolve_voice(voice, timings)
            return references[voice.key]

        segments, prompts, segmented = self._segments_fitting_context(request, reference)
        wanted = wanted_segments(request, len(segments))
        self.prompts = {i: prompts[i] for i in wanted}
        self._segment_count = len(segments)
        return segments, segmented

    def _segments_fitting_context(self, request: SynthesisRequest, reference
                                  ) -> tuple[list, list[tuple[np.ndarray, int]], bool]:
        """The request's segments and every segment's prompt, each prompt short enough that
        it plus ``max_new_tokens`` fits the model's context. A text too long for one prompt is
        split into sentences (then clauses and spaces) at a character limit that makes every
        piece fit; the same request always splits the same way, so ``only_segments`` indices
        stay meaningful. Returns (segments, prompts, segmented)."""
        from s2studio.engine.model.generate import check_fits_context

        model, tok = self.model, self.tokenizer
        context, n_max = model.cfg.context_length, request.generation.max_new_tokens
        seg = request.segmentation

        def prompts_for(segments):
            if not segments:
                raise InputError("There is no text to speak: the text is empty or only whitespace.")
            return [build_prompt_for(tok, model, s.text, *reference(s)) for s in segments]

        def fits(prompts) -> bool:
            return max(p.shape[1] for p, _ in prompts) + n_max <= context

        segments = segments_of(request)
        prompts = prompts_for(segments)
        if fits(prompts):
            return segments, prompts, seg.enabled
        longest = max(range(len(prompts)), key=lambda i: prompts[i][0].shape[1])
        overhead = prompts[longest][0].shape[1] - len(tok.encode(segments[longest].text))
        if overhead + 1 + n_max > context:
            # Even one token of text would not fit: say which number to change.
            check_fits_context(overhead + 1, n_max, context)
        # Characters per token of this text, measured; start a little below the estimate and
        # tighten until every piece fits (tokens per character vary along a text).
        chars_per_token = len(segments[longest].text) / max(1, prompts[longest][0].shape[1] - overhead)
        max_chars = max(1, int(0.9 * (context - n_max - overhead) * chars_per_token))
        if seg.max_chars:
            max_chars = min(max_chars, seg.max_chars)
        while True:
            segments = split_request_text(request.text, seg, request.generation.seed, request.speaker_voices,
                                          fit_chars=max_chars)
            prompts = prompts_for(segments)
            if fits(prompts):
                log.info("the text is too long for one prompt (context %d, max_new_tokens %d): split into %d "
                         "segments of at most %d characters", context, n_max, len(segments), max_chars)
                return segments, prompts, True
            if max_chars == 1:
                worst = max(p.shape[1] for p, _ in prompts)
                check_fits_context(worst, n_max, context)  # raises: names the numbers
            max_chars = max(1, int(max_chars * 0.7))

    def render(self, segment, voice: VoiceChoice, seed: int, job: SynthesisJob, timings: Timings
               ) -> Generator[AudioChunk, None, SegmentOutcome]:
        from s2studio.engine.model.generate import GenerationStats

        request = self.request
        params = dataclasses.replace(request.generation, seed=seed)
        stats = GenerationStats()
        decoder = self.codec.stream_decoder()
        frames: list[np.ndarray] = []
        pending: list[np.ndarray] = []
        n_seg = self._segment_count
        prompt, prefix_len = self.prompts[segment.index]
        for frame in self.frame_source(prompt, params, cancel=job.cancel_event, stats=stats, prefix_len=prefix_len):
            frames.append(frame.codes)
            pending.append(frame.codes)
            if job.cancel_event.is_set():
                break  # Stop answers within one frame: no decode after a cancel
            if len(pending) >= request.stream_stride:
                yield self._decode_chunk(decoder, pending, len(frames), segment.index, n_seg, timings)
        if job.cancel_event.is_set():
            stats.stop_reason = "cancelled"
            del frames[len(frames) - len(pending):]  # keep codes and audio in step
            pending.clear()
        if pending:
            yield self._decode_chunk(decoder, pending, len(frames), segment.index, n_seg, timings)
        timings.prefill_s += stats.prefill_s
        timings.generate_s += stats.slow_s + stats.fast_s
        codes = np.stack(frames, axis=1) if frames else np.zeros((self.num_codebooks, 0), np.int32)
        return SegmentOutcome(stats.stop_reason, len(frames), codes)

    def _decode_chunk(self, decoder, pending: list[np.ndarray], frames_so_far: int, segment: int, n_seg: int,
                      timings: Timings) -> AudioChunk:
        codes = np.stack(pending, axis=1)

        def decode() -> np.ndarray:
            with self.pipeline._codec_lock:
                t = time.perf_counter()
                samples = decoder.feed(codes)
                timings.decode_s += time.perf_counter() - t  # the codec's own time, not the wait
                return samples

        samples = decode() if self.cpu_turn is None else self.cpu_turn(decode)
        if not np.isfinite(samples).all():  # NaN/Inf codec weights: one message, never a NaN WAV
            raise ModelFileError(decoder.codec.path,
                                 "the audio codec produced non-finite samples (NaN or infinity): its "
                                 "weights (c.*) or metadata are damaged. Download the model again.")
        timings.decode_chunks += 1
        chunk = AudioChunk(samples, self.sample_rate, segment, n_seg, frames_so_far - len(pending), len(pending))
        pending.clear()
        return chunk


def build_prompt_for(tok, model, text: str, ref_codes, ref_text) -> tuple[np.ndarray, int]:
    """The prompt of ``text`` and the length of its voice prefix (``build_prompt_and_prefix``)."""
    from s2studio.engine.text.prompt import build_prompt_and_prefix

    return build_prompt_and_prefix(tok, text, semantic_begin_id=model.cfg.semantic_begin_id,
                        num_codebooks=model.cfg.num_codebooks, ref_codes=ref_codes,
                        ref_text=ref_text if ref_codes is not None else None)
