"""Messages between the window and the inference worker: plain, immutable dataclasses.

They hold only Python/numpy values, so building one never imports torch; the worker turns
them into the engine's ``EngineSettings``/``SynthesisRequest`` on its own thread. Each request
records when it was made, so a Stop pressed before the worker even picked it up still
cancels it (see ``InferenceWorker.cancel``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from s2studio.app.settings import AppSettings


@dataclass(frozen=True)
class EngineConfig:
    model_path: str
    tokenizer_path: str = ""
    tokenizer_mode: str = "hf"
    device: str = "cpu"
    gpu_layers: int = -1
    threads: int = 0
    codec_mode: str = "auto"

    @classmethod
    def from_settings(cls, s: AppSettings) -> "EngineConfig":
        return cls(s.model_path, s.tokenizer_path, s.tokenizer_mode, s.device, s.gpu_layers, s.threads,
                   s.codec_mode)


@dataclass(frozen=True)
class SamplingConfig:
    max_new_tokens: int = 1024
    temperature: float = 0.8
    top_p: float = 0.8
    top_k: int = 30
    seed: int | None = None  # None: the engine draws one (reported in the result)

    @classmethod
    def from_settings(cls, s: AppSettings) -> "SamplingConfig":
        return cls(s.max_new_tokens, s.temperature, s.top_p, s.top_k, s.seed if s.seed_locked else None)


@dataclass(frozen=True)
class LoadRequest:
    engine: EngineConfig
    created: float = field(default_factory=time.monotonic)


@dataclass(frozen=True, eq=False)
class GenerateRequest:
    engine: EngineConfig
    text: str
    voice_id: str | None = None
    reference_audio: np.ndarray | None = None  # mono float32, 44.1 kHz
    reference_text: str = ""
    sampling: SamplingConfig = SamplingConfig()
    segmentation: bool = True
    segment_max_chars: int = 0
    pause_ms: int = 180
    trim_silence: bool = False
    normalize: bool = False
    dynamic_normalize: bool = False
    stream_stride: int = 4
    voice_label: str = ""  # what the history shows for the voice
    created: float = field(default_factory=time.monotonic)


@dataclass(frozen=True, eq=False)
class SaveVoiceRequest:
    engine: EngineConfig
    samples: np.ndarray  # mono float32, 44.1 kHz, already trimmed to the kept region
    transcript: str
    name: str
    created: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class GenerationProgress:
    segment: int  # 1-based
    segment_count: int
    frames: int  # frames generated so far in the whole take
    audio_seconds: float
    elapsed_seconds: float

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
