"""Sound cards: device lists, an output player and a recorder, on ``sounddevice``.

This is the only module that imports ``sounddevice``, and it does so lazily: on Linux the
wheel carries no PortAudio, so ``import sounddevice`` raises ``OSError("PortAudio library not
found")``. Every such failure becomes an :class:`AudioDeviceError` whose text
says what to do; callers disable recording/playback and show that text, and everything else
(generating, exporting) keeps working.

Rules the PortAudio callbacks follow (they run on PortAudio's real-time thread): they never touch Qt, never block, and
only copy small blocks. The player pulls from a *source* object (``read(n) -> float32[n]``,
thread-safe, never blocking); the app provides the sources (a jitter buffer for live audio, a
clip with a seekable position for replay). Microphones are opened at their own default rate
(a fixed 44.1 kHz fails with -9997 on many devices) and the take is resampled afterwards.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from s2studio.audio.resample import resample
from s2studio.audio.validation import CODEC_SAMPLE_RATE
from s2studio.errors import S2Error

log = logging.getLogger(__name__)

MAX_RECORDING_SECONDS = 120.0
# What the device may hold ahead of the speaker. PortAudio's "high" default let PulseAudio
# buffer ~330 ms, all of which was still heard after Stop (tests/app/test_real_sound.py); at
# 60 ms Stop is silent within 100 ms and a busy machine still keeps the callback fed.
OUTPUT_LATENCY_SECONDS = 0.06

_backend = None
_backend_error: "AudioDeviceError | None" = None


class AudioDeviceError(S2Error):
    """No usable sound device (no PortAudio, no device, device busy or refused)."""


def _friendly(err: BaseException) -> str:
    text = str(err)
    if "PortAudio library not found" in text:
        if sys.platform.startswith("linux"):
            return ("Audio playback and recording need the PortAudio library, which is not installed "
                    "(on Debian/Ubuntu: sudo apt install libportaudio2). Generating and exporting still work.")
        return "The PortAudio audio library could not be loaded, so playback and recording are off."
    if isinstance(err, ImportError):
        return "The sounddevice package is not installed, so playback and recording are off."
    if "-9996" in text or "-9997" in text:
        hint = (" On Windows, check Settings > Privacy > Microphone." if sys.platform == "win32" else
                " On macOS, check System Settings > Privacy & Security > Microphone." if sys.platform == "darwin"
                else "")
        return f"The audio device refused to open ({text}).{hint}"
    return f"The audio device could not be used: {text}"


def backend():
    """The ``sounddevice`` module, imported on first use; raises :class:`AudioDeviceError`."""
    global _backend, _backend_error
    if _backend is not None:
        return _backend
    if _backend_error is not None:
        raise _backend_error
    try:
        import sounddevice
    except (OSError, ImportError) as err:
        _backend_error = AudioDeviceError(_friendly(err))
        log.warning("audio unavailable: %s", err)
        raise _backend_error from None
    _backend = sounddevice
    return _backend


def forget_backend() -> None:
    """Retry the import next time (after installing PortAudio, or in tests)."""
    global _backend, _backend_error
    _backend = _backend_error = None


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str
    channels: int
    default_samplerate: float
    is_default: bool = False


@dataclass(frozen=True)
class AudioStatus:
    can_play: bool
    can_record: bool
    reason: str = ""  # why something is off ("" when both work)


def list_devices() -> tuple[list[DeviceInfo], list[DeviceInfo]]:
    """(input devices, output devices); raises :class:`AudioDeviceError`."""
    sd = backend()
    try:
        devices = sd.query_devices()
        default_in, default_out = _default_indices(sd)
    except Exception as err:  # PortAudioError is an Exception subclass; a dead server raises others
        raise AudioDeviceError(_friendly(err)) from err
    inputs, outputs = [], []
    for i, d in enumerate(devices):
        rate = float(d.get("default_samplerate") or CODEC_SAMPLE_RATE)
        if d.get("max_input_channels", 0) > 0:
            inputs.append(DeviceInfo(i, d["name"], int(d["max_input_channels"]), rate, i == default_in))
        if d.get("max_output_channels", 0) > 0:
            outputs.append(DeviceInfo(i, d["name"], int(d["max_output_channels"]), rate, i == default_out))
    return inputs, outputs


def _default_indices(sd) -> tuple[int, int]:
    default = sd.default.device
    try:
        return int(default[0]), int(default[1])
    except (TypeError, IndexError):
        return int(default), int(default)


def audio_status() -> AudioStatus:
    try:
        inputs, outputs = list_devices()
    except AudioDeviceError as err:
        return AudioStatus(False, False, str(err))
    reasons = []
    if not outputs:
        reasons.append("no audio output device was found, so playback is off")
    if not inputs:
        reasons.append("no microphone was found, so recording is off")
    reason = "; ".join(reasons)
    return AudioStatus(bool(outputs), bool(inputs), reason[:1].upper() + reason[1:] + "." if reason else "")


def _device_index(name: str, devices: list[DeviceInfo]) -> int | None:
    """A device chosen by name in the settings, or None (the system default) if it is gone."""
    if not name:
        return None
    for d in devices:
        if d.name == name:
            return d.index
    log.warning("audio device %r is not connected; using the default", name)
    return None


class PlaybackSource(Protocol):
    def read(self, frames: int) -> np.ndarray:
        """Exactly ``frames`` float32 samples; zeros where there is nothing to play. Never blocks."""


def stream_lost(stream) -> bool:
    """The stream died under us: the device was unplugged or the sound server went away.
    PortAudio marks such a stream inactive (its callback is never called again); a stream we
    stopped ourselves is None, so this is never true after ``stop()``."""
    return stream is not None and not stream.active


class OutputPlayer:
    """Plays a :class:`PlaybackSource` on an output device (mono, float32)."""

    def __init__(self, source: PlaybackSource, sample_rate: int = CODEC_SAMPLE_RATE, device_name: str = "",
                 blocksize: int = 1024):
        self.source = source
        self.sample_rate = sample_rate
        self._device_name = device_name
        self._blocksize = blocksize
        self._stream = None

    def _callback(self, outdata, frames, _time, status) -> None:
        if status:
            log.debug("playback status: %s", status)
        outdata[:, 0] = self.source.read(frames)

    def start(self) -> None:
        sd = backend()
        _inputs, outputs = list_devices()
        if not outputs:
            raise AudioDeviceError("No audio output device was found.")
        try:
            self._stream = sd.OutputStream(samplerate=self.sample_rate, channels=1, dtype="float32",
                                           blocksize=self._blocksize, callback=self._callback,
                                           latency=OUTPUT_LATENCY_SECONDS,
                                           device=_device_index(self._device_name, outputs))
            self._stream.start()
        except Exception as err:
            self._stream = None
            raise AudioDeviceError(_friendly(err)) from err

    @property
    def active(self) -> bool:
        return self._stream is not None

    @property
    def device_lost(self) -> bool:
        return stream_lost(self._stream)

    @property
    def latency_seconds(self) -> float:
        """How long a sample takes from ``read`` to the speaker (0 when not playing)."""
        stream = self._stream
        try:
            return float(stream.latency) if stream is not None else 0.0
        except Exception:  # a dead stream may not answer
            return 0.0

    def stop(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            try:
                # abort, not stop: PortAudio's stop plays out what the device has buffered (a few
                # hundred ms through PulseAudio), and Stop must silence the speakers at once; the
                # end of a clip is not lost, AudioService waits out the latency before this.
                stream.abort()
                stream.close()
            except Exception as err:  # closing a vanished device must not take the app down
                log.warning("closing the output stream failed: %s", err)


class Recorder:
    """Records mono audio from a microphone at its native rate; ``stop()`` returns 44.1 kHz."""

    def __init__(self, device_name: str = "", max_seconds: float = MAX_RECORDING_SECONDS):
        self._device_name = device_name
        self._max_samples = 0
        self._max_seconds = max_seconds
        self._lock = threading.Lock()
        self._blocks: list[np.ndarray] = []
        self._count = 0
        self._level = 0.0
        self._rate = CODEC_SAMPLE_RATE
        self._stream = None
        self._started_at = 0.0

    def _callback(self, indata, frames, _time, status) -> None:
        if status:
            log.debug("recording status: %s", status)
        block = indata[:, 0].copy()
        with self._lock:
            if self._count < self._max_samples:
                self._blocks.append(block[: self._max_samples - self._count])
                self._count += len(self._blocks[-1])
            self._level = float(np.max(np.abs(block))) if len(block) else 0.0

    def start(self) -> None:
        sd = backend()
        inputs, _outputs = list_devices()
        if not inputs:
            raise AudioDeviceError("No microphone was found.")
        index = _device_index(self._device_name, inputs)
        info = next((d for d in inputs if d.index == index), None) or next(
            (d for d in inputs if d.is_default), inputs[0])
        self._rate = int(info.default_samplerate) or CODEC_SAMPLE_RATE
        self._max_samples = int(self._max_seconds * self._rate)
        with self._lock:
            self._blocks, self._count, self._level = [], 0, 0.0
        try:
            self._stream = sd.InputStream(samplerate=self._rate, channels=1, dtype="float32",
                                          callback=self._callback, device=info.index)
            self._stream.start()
        except Exception as err:
            self._stream = None
            raise AudioDeviceError(_friendly(err)) from err
        self._started_at = time.monotonic()

    @property
    def recording(self) -> bool:
        return self._stream is not None

    @property
    def device_lost(self) -> bool:
        return stream_lost(self._stream)


    @property
    def level(self) -> float:
        """Peak of the latest block, 0..1."""
        with self._lock:
            return self._level

    @property
    def elapsed_seconds(self) -> float:
        with self._lock:
            return self._count / self._rate if self._rate else 0.0

    @property
    def full(self) -> bool:
        with self._lock:
            return self._count >= self._max_samples > 0

    def stop(self) -> np.ndarray:
        """Stop and return the take, mono float32 at the codec rate (44.1 kHz)."""
        stream, self._stream = self._stream, None
        if stream is not None:
            try:
                stream.stop()
                stream.close()
            except Exception as err:
                log.warning("closing the input stream failed: %s", err)
        with self._lock:
            take = np.concatenate(self._blocks) if self._blocks else np.zeros(0, np.float32)
            self._blocks = []
        return resample(take, self._rate, CODEC_SAMPLE_RATE)
