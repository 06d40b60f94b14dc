"""Voice activity detection for the reference workbench: where a clip has speech, and the best
5–30 s of it to keep as a reference (scored by s2studio/audio/reference_check.py).

Silero VAD (the ``silero-vad`` package) ships its model files inside the package; its packaged
TorchScript model is loaded with ``load_silero_vad`` (torch only, no torchaudio). torch and
silero_vad are imported inside the functions: the app calls them off the UI thread, and nothing
pays for them until "Find the best part" is pressed.
"""

from __future__ import annotations

import threading
from typing import Callable

import numpy as np

from s2studio.audio.reference_check import Proposal, best_window

VAD_SAMPLE_RATE = 16000  # Silero VAD's rate (it also takes 8 kHz; 16 kHz is the better model)



class SearchCancelled(Exception):
    """``progress`` answered False: the clip or the part wanted changed, or the app is closing."""


_model_lock = threading.Lock()
_model = None


def _silero():
    """The ``silero_vad`` module. Importing it sets torch to one thread for the whole process;
    the engine's setting is put back at once."""
    import torch

    threads = torch.get_num_threads()
    try:
        import silero_vad
    finally:
        torch.set_num_threads(threads)
    return silero_vad


def _vad_model():
    """Silero VAD's packaged TorchScript model (``silero_vad/data/silero_vad.jit``), loaded once;
    no torchaudio needed."""
    global _model
    with _model_lock:
        if _model is None:
            import warnings

            with warnings.catch_warnings():  # its loader's importlib/torch.jit deprecations: not ours to fix
                warnings.simplefilter("ignore", DeprecationWarning)
                _model = _silero().load_silero_vad()
        return _model


def speech_regions(samples: np.ndarray, sample_rate: int,
                   progress: Callable[[float], bool] | None = None) -> list[tuple[int, int]]:
    """(start, end) sample ranges (at ``sample_rate``) where Silero VAD hears speech. ``progress``
    is called with the percentage done (every 32 ms of audio); when it returns False the search
    stops with ``SearchCancelled`` (a 15-minute clip takes tens of seconds)."""
    import torch

    from s2studio.audio.resample import resample

    x = np.asarray(samples, dtype=np.float32)
    if not len(x):
        return []
    y = x if sample_rate == VAD_SAMPLE_RATE else resample(x, sample_rate, VAD_SAMPLE_RATE)
    get_speech_timestamps = _silero().get_speech_timestamps
    model = _vad_model()
    with _model_lock:  # the model keeps state between chunks: one clip at a time
        with torch.inference_mode():
            stamps = get_speech_timestamps(torch.from_numpy(np.ascontiguousarray(y, dtype=np.float32)), model,
                                           sampling_rate=VAD_SAMPLE_RATE,
                                           progress_tracking_callback=_stopper(progress))
    scale = sample_rate / VAD_SAMPLE_RATE
    return [(min(len(x), int(s["start"] * scale)), min(len(x), int(s["end"] * scale))) for s in stamps]


def _stopper(progress: Callable[[float], bool] | None):
    if progress is None:
        return None

    def report(percent: float) -> None:
        if not progress(percent):
            raise SearchCancelled()

    return report


def propose_reference(samples: np.ndarray, sample_rate: int,
                      progress: Callable[[float], bool] | None = None) -> Proposal | None:
    """Voice activity detection, then ``best_window``: the part of a long clip to keep."""
    return best_window(samples, sample_rate, speech_regions(samples, sample_rate, progress))
