"""What the output player plays: a jitter buffer for live audio, a seekable clip for replay.

Both are read from the PortAudio callback thread and written from the UI thread, so every
method takes a lock and none of them blocks or allocates much (a callback that waits makes the sound card drop audio).

Live playback: generation delivers chunks of ~0.19 s at irregular times. The buffer waits for
``preroll`` seconds before it starts, so ordinary jitter never starves it. If the model is
slower than real time it does run dry; then it fades the last few samples out (no click),
plays silence, and waits for ``preroll`` again before resuming with a fade-in — one clean
pause instead of a stutter on every chunk.
"""

from __future__ import annotations

import threading
from collections import deque

import numpy as np

FADE_SAMPLES = 128  # ~3 ms at 44.1 kHz: long enough to avoid a click, too short to hear


class JitterBuffer:
    def __init__(self, sample_rate: int, preroll_seconds: float = 0.3):
        self.sample_rate = sample_rate
        self.preroll = int(preroll_seconds * sample_rate)
        self._lock = threading.Lock()
        self._chunks: deque[np.ndarray] = deque()
        self._offset = 0  # samples already consumed from _chunks[0]
        self._buffered = 0
        self._playing = False
        self._ended = False
        self._fade_in_next = False
        self.played = 0  # real samples played (not the silence inserted on underrun)
        self.underruns = 0

    def push(self, samples: np.ndarray) -> None:
        x = np.ascontiguousarray(samples, dtype=np.float32)
        if not len(x):
            return
        with self._lock:
            self._chunks.append(x)
            self._buffered += len(x)

    def end(self) -> None:
        """No more audio will come: play out what is left without waiting for pre-roll."""
        with self._lock:
            self._ended = True

    def clear(self) -> None:
        with self._lock:
            self._chunks.clear()
            self._offset = self._buffered = 0
            self._playing = False
            self._ended = True

    @property
    def drained(self) -> bool:
        with self._lock:
            return self._ended and self._buffered == 0

    @property
    def buffered_seconds(self) -> float:
        with self._lock:
            return self._buffered / self.sample_rate

    def read(self, frames: int) -> np.ndarray:
        out = np.zeros(frames, dtype=np.float32)
        with self._lock:
            if not self._playing:
                if self._buffered >= self.preroll or (self._ended and self._buffered):
                    self._playing = True
                else:
                    return out
            n = self._take_into(out)
            if n < frames and not self._ended:
                # Underrun: fade out what we have and wait for pre-roll again.
                self.underruns += 1
                self._playing = False
                self._fade_in_next = True
                tail = min(FADE_SAMPLES, n)
                if tail:
                    out[n - tail:n] *= np.linspace(1.0, 0.0, tail, dtype=np.float32)
            self.played += n
        return out

    def _take_into(self, out: np.ndarray) -> int:
        n = 0
        while n < len(out) and self._chunks:
            head = self._chunks[0]
            k = min(len(out) - n, len(head) - self._offset)
            out[n:n + k] = head[self._offset:self._offset + k]
            n += k
            self._offset += k
            if self._offset == len(head):
                self._chunks.popleft()
                self._offset = 0
        self._buffered -= n
        if self._fade_in_next and n:
            ramp = min(FADE_SAMPLES, n)
            out[:ramp] *= np.linspace(0.0, 1.0, ramp, dtype=np.float32)
            self._fade_in_next = False
        return n


class ClipSource:
    """A finished take (or a reference clip) with a play position; pausing is just not
    reading (the caller stops the stream), seeking moves the position."""

    def __init__(self, samples: np.ndarray, sample_rate: int, start: int = 0, stop: int | None = None):
        self.samples = np.ascontiguousarray(samples, dtype=np.float32)
        self.sample_rate = sample_rate
        self._lock = threading.Lock()
        self._stop = len(self.samples) if stop is None else min(stop, len(self.samples))
        self._pos = max(0, min(start, self._stop))

    def read(self, frames: int) -> np.ndarray:
        out = np.zeros(frames, dtype=np.float32)
        with self._lock:
            k = min(frames, self._stop - self._pos)
            if k > 0:
                out[:k] = self.samples[self._pos:self._pos + k]
                self._pos += k
        return out

    def seek(self, sample: int) -> None:
        with self._lock:
            self._pos = max(0, min(int(sample), self._stop))

    @property
    def position(self) -> int:
        with self._lock:
            return self._pos

    @property
    def finished(self) -> bool:
        with self._lock:
            return self._pos >= self._stop
