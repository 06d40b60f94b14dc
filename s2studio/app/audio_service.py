"""The window's one door to the sound card: playback (live or clip) and recording.

Wraps ``s2studio.audio.devices`` for the UI thread. The PortAudio callbacks only touch the
sources in ``playback.py``; this object polls them with a 30 ms QTimer and emits positions and
levels as ordinary signals (no Qt call ever runs on the audio thread). When audio is unavailable (no PortAudio, no
device) ``status`` says why and every method is a harmless no-op that reports the reason.
"""

from __future__ import annotations

import logging
import time

import numpy as np
from PySide6.QtCore import QObject, QTimer, Signal

from s2studio.app.playback import ClipSource, JitterBuffer
from s2studio.audio import devices

log = logging.getLogger(__name__)

POLL_MS = 30
DRAIN_MARGIN_SECONDS = 0.05  # after the last sample was handed to the device, before its stream closes

DEVICE_GONE = ("The sound output stopped: the device was unplugged or the sound server went away. "
               "Playback has stopped; the take is kept.")
MIC_GONE = ("The microphone stopped: it was unplugged or the sound server went away. "
            "The recording so far is kept.")


class AudioService(QObject):
    position_changed = Signal(str, int)  # owner ("output", "reference"), sample position
    playback_stopped = Signal(str)  # owner
    level_changed = Signal(float, float)  # recording peak level, elapsed seconds
    recording_limit_reached = Signal()
    recording_interrupted = Signal()  # the microphone went away: stop and keep what was recorded
    problem = Signal(str)  # a device error while starting or running

    def __init__(self, parent=None):
        super().__init__(parent)
        self.status = devices.audio_status()
        self.output_device = ""
        self.input_device = ""
        self._player: devices.OutputPlayer | None = None
        self._source: ClipSource | JitterBuffer | None = None
        self._owner = ""
        self._live_offset = 0  # where the live buffer's first sample sits in the take
        self._finished_at: float | None = None  # when the source ran out (the device still plays its buffer)
        self._recorder: devices.Recorder | None = None
        self._timer = QTimer(self)
        self._timer.setInterval(POLL_MS)
        self._timer.timeout.connect(self._poll)

    def refresh(self) -> None:
        """Look at the devices again (after the settings changed or PortAudio was installed)."""
        devices.forget_backend()
        self.status = devices.audio_status()

    # ---- playback -----------------------------------------------------------------------
    @property
    def playing_owner(self) -> str:
        return self._owner if self._player is not None else ""

    def play_clip(self, owner: str, samples: np.ndarray, sample_rate: int, start: int = 0,
                  stop: int | None = None) -> bool:
        return self._start(owner, ClipSource(samples, sample_rate, start, stop), sample_rate)

    def start_live(self, owner: str, sample_rate: int) -> bool:
        self._live_offset = 0
        return self._start(owner, JitterBuffer(sample_rate), sample_rate)

    def push_live(self, samples: np.ndarray) -> None:
        if isinstance(self._source, JitterBuffer):
            self._source.push(samples)

    def end_live(self) -> None:
        if isinstance(self._source, JitterBuffer):
            self._source.end()

    @property
    def live_buffer(self) -> JitterBuffer | None:
        return self._source if isinstance(self._source, JitterBuffer) else None

    def seek(self, sample: int) -> None:
        if isinstance(self._source, ClipSource):
            self._source.seek(sample)

    def stop(self) -> None:
        player, self._player = self._player, None
        owner, self._owner = self._owner, ""
        self._source = None
        if player is not None:
            player.stop()
            self.playback_stopped.emit(owner)
        self._update_timer()

    def _start(self, owner: str, source, sample_rate: int) -> bool:
        self.stop()
        if not self.status.can_play:
            return False
        player = devices.OutputPlayer(source, sample_rate, self.output_device)
        try:
            player.start()
        except devices.AudioDeviceError as err:
            self.problem.emit(str(err))
            return False
        self._player, self._source, self._owner = player, source, owner
        self._finished_at = None
        self._update_timer()
        return True

    # ---- recording ----------------------------------------------------------------------
    @property
    def recording(self) -> bool:
        return self._recorder is not None

    def start_recording(self) -> bool:
        if not self.status.can_record:
            return False
        self.stop()
        recorder = devices.Recorder(self.input_device)
        try:
            recorder.start()
        except devices.AudioDeviceError as err:
            self.problem.emit(str(err))
            return False
        self._recorder = recorder
        self._update_timer()
        return True

    def stop_recording(self) -> np.ndarray:
        recorder, self._recorder = self._recorder, None
        self._update_timer()
        return recorder.stop() if recorder is not None else np.zeros(0, np.float32)

    # ---- polling ------------------------------------------------------------------------
    def _update_timer(self) -> None:
        if self._player is not None or self._recorder is not None:
            self._timer.start()
        else:
            self._timer.stop()

    def _poll(self) -> None:
        if self._recorder is not None:
            if self._recorder.device_lost:
                log.warning("the microphone's stream died while recording")
                self.problem.emit(MIC_GONE)
                self.recording_interrupted.emit()
                return
            self.level_changed.emit(self._recorder.level, self._recorder.elapsed_seconds)
            if self._recorder.full:
                self.recording_limit_reached.emit()
        if self._player is not None and self._player.device_lost:
            log.warning("the output stream died while playing %s", self._owner)
            self.stop()
            self.problem.emit(DEVICE_GONE)
            return
        source = self._source
        if isinstance(source, ClipSource):
            self.position_changed.emit(self._owner, source.position)
            if source.finished:
                self._stop_when_heard()
        elif isinstance(source, JitterBuffer):
            self.position_changed.emit(self._owner, source.played)
            if source.drained:
                self._stop_when_heard()

    def _stop_when_heard(self) -> None:
        """The source gave its last sample; the device still holds up to its latency of audio.
        Closing the stream now would cut the end of the take off, so wait that long first."""
        now = time.monotonic()
        if self._finished_at is None:
            self._finished_at = now
        wait = (self._player.latency_seconds if self._player is not None else 0.0) + DRAIN_MARGIN_SECONDS
        if now - self._finished_at >= wait:
            self.stop()
