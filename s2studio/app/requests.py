"""Messages between the window and the inference worker: plain, immutable dataclasses.

They hold the engine's own torch-free value types (``EngineSettings``, ``GenerationParams``)
plus what only the app needs, so building one never imports torch; the worker turns them into
a ``SynthesisRequest`` on its own thread. Each request
records when it was made, so a Stop pressed before the worker even picked it up still
cancels it (see ``InferenceWorker.cancel``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from s2studio.app.settings import AppSettings
from s2studio.engine.api import PostProcess, Segmentation, SynthesisRequest
from s2studio.engine.params import GenerationParams
from s2studio.engine.pipeline import EngineSettings


def engine_settings(s: AppSettings) -> EngineSettings:
    """What the worker's pipeline should load, from the app's settings."""
    return EngineSettings(model_path=s.model_path, tokenizer_path=s.tokenizer_path or None,
                          tokenizer_mode=s.tokenizer_mode, device=s.device, gpu_layers=s.gpu_layers,
                          threads=s.threads, codec_mode=s.codec_mode)


def generation_params(s: AppSettings) -> GenerationParams:
    """Sampling for one take; an unlocked seed lets the engine draw one (reported in the result)."""
    return GenerationParams(max_new_tokens=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p,
                            top_k=s.top_k, seed=s.seed if s.seed_locked else None)


@dataclass(frozen=True)
class LoadRequest:
    engine: EngineSettings
    created: float = field(default_factory=time.monotonic)


@dataclass(frozen=True, eq=False)
class GenerateRequest:
    engine: EngineSettings
    text: str
    voice_id: str | None = None
    reference_audio: np.ndarray | None = None  # mono float32, 44.1 kHz
    reference_text: str = ""
    sampling: GenerationParams = GenerationParams()
    segmentation: bool = True
    segment_max_chars: int = 0
    pause_ms: int = 180
    trim_silence: bool = False
    normalize: bool = False
    dynamic_normalize: bool = False
    stream_stride: int = 4
    voice_label: str = ""  # what the history shows for the voice
    speaker_voices: tuple = ()  # ((speaker N, saved voice id), ...): a dialogue, see engine/take.py
    # Regenerating sentences of an existing take (app/take_model.py): which segments, with
    # which seeds, for which take ("" = a new take of the whole text).
    only_segments: tuple[int, ...] | None = None
    segment_seeds: dict | None = None
    take_id: str = ""
    created: float = field(default_factory=time.monotonic)


@dataclass(frozen=True, eq=False)
class SaveVoiceRequest:
    engine: EngineSettings
    samples: np.ndarray  # mono float32, 44.1 kHz, already trimmed to the kept region
    transcript: str
    name: str
    replace_id: str | None = None  # overwrite this saved voice (the user chose Replace)
    created: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class GenerationProgress:
    segment: int  # 1-based
    segment_count: int
    frames: int  # frames generated so far in the whole take
    audio_seconds: float
    elapsed_seconds: float
    segment_frames: int = 0  # frames generated so far in the current segment
    segment_done: bool = False  # the current segment is complete (its pause is being added)
    voice_cache: str = ""  # the local engine's voice prefix cache, in words ("" for a server)

    @property
    def real_time_factor(self) -> float:
        """Compute seconds per second of audio (< 1: faster than real time)."""
        return self.elapsed_seconds / self.audio_seconds if self.audio_seconds > 0 else float("inf")


@dataclass(frozen=True)
class LoadInfo:
    codec_device: str
    codec_reason: str  # the codec placement verdict (benchmark result or why it was chosen)
    load_seconds: float
    devices: tuple[tuple[str, str], ...]  # what torch reports: (id, description)


@dataclass(frozen=True, eq=False)
class FinishedTake:
    request: GenerateRequest
    result: object  # the engine's SynthesisResult (audio, sample_rate, seed, timings...)


@dataclass(frozen=True)
class WorkerError:
    message: str  # one sentence for the banner
    details: str  # traceback, for the Details view
    expected: bool  # True for the engine's own errors (bad file, bad input), False for bugs
    log_file: str = ""


def synthesis_request(request: GenerateRequest) -> SynthesisRequest:
    """The engine's request for a ``GenerateRequest`` (the worker runs it; the window asks its
    segments of the engine, so both see one split)."""
    return SynthesisRequest(
        text=request.text,
        voice=request.voice_id,
        reference_audio=request.reference_audio,
        reference_text=request.reference_text or None,
        generation=request.sampling,
        segmentation=Segmentation(enabled=request.segmentation, max_chars=request.segment_max_chars,
                                  pause_ms=request.pause_ms),
        postprocess=PostProcess(trim_silence=request.trim_silence, normalize=request.normalize,
                                dynamic_normalize=request.dynamic_normalize),
        stream_stride=request.stream_stride,
        only_segments=request.only_segments,
        segment_seeds=request.segment_seeds,
        # a dialogue: each speaker's turns in its own voice (engine.take)
        speaker_voices=dict(request.speaker_voices) or None,
    )
