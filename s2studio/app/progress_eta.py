"""Progress that tells time: how far into the current sentence, time elapsed, time left.

The model stops a sentence when it decides to, so a sentence's length is only known when it is
done. Before that it is estimated from its text (the speaking rate of ``estimated_seconds``,
times the codec's frame rate), capped at the take's frame budget; once sentences finish, the
frames they really took per estimated frame correct the estimates of the rest. Time left =
the frames still expected × the measured wall-clock milliseconds per frame (prefill and
decoding included, which is what the user waits for).
"""

from __future__ import annotations

from dataclasses import dataclass

from s2studio.app.requests import GenerationProgress
from s2studio.app.widgets.script_editor import estimated_seconds

FRAMES_PER_SECOND = 44100 / 2048  # the S2 codec: one frame of 10 codes per 2048 samples


def clock(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 60}:{seconds % 60:02d}"


@dataclass(frozen=True)
class Estimate:
    segment_percent: int  # 0..100 within the current segment (99 until it is done)
    elapsed_s: float
    remaining_s: float | None  # None until a frame has been measured
    ms_per_frame: float | None

    def describe(self) -> str:
        parts = [f"{clock(self.elapsed_s)} elapsed"]
        if self.remaining_s is not None:
            parts.append(f"about {clock(self.remaining_s)} left")
        if self.ms_per_frame is not None:
            parts.append(f"{self.ms_per_frame:.0f} ms/frame")
        return " · ".join(parts)


class EtaEstimator:
    def __init__(self, segments: list[tuple[int, str]], max_frames: int):
        """``segments``: (index, text) of the segments this job generates, in order."""
        self.order = [index for index, _ in segments]
        self.expected = {index: self._guess(text, max_frames) for index, text in segments}
        self.max_frames = max(1, max_frames)
        self.done_frames: dict[int, int] = {}  # segment -> frames it really took
        self._current = None
        self._current_frames = 0

    @staticmethod
    def _guess(text: str, max_frames: int) -> float:
        return float(min(max(1, max_frames), max(4.0, estimated_seconds(text) * FRAMES_PER_SECOND)))

    def _scale(self) -> float:
        """Frames really taken per estimated frame, over the finished segments (1 before any)."""
        done = [(self.done_frames[i], self.expected[i]) for i in self.done_frames if i in self.expected]
        if not done:
            return 1.0
        return sum(f for f, _ in done) / max(1.0, sum(e for _, e in done))

    def update(self, p: GenerationProgress) -> Estimate:
        index = p.segment - 1
        if self._current is not None and index != self._current:
            self.done_frames[self._current] = self._current_frames
        self._current = index
        self._current_frames = p.segment_frames
        if p.segment_done:
            self.done_frames[index] = p.segment_frames
        scale = self._scale()
        expected_now = min(self.max_frames, self.expected.get(index, self.max_frames) * scale)
        if p.segment_done:
            percent = 100
        else:
            percent = min(99, int(100 * p.segment_frames / max(1.0, expected_now)))
        later = self.order[self.order.index(index) + 1:] if index in self.order else []
        remaining_frames = (0 if p.segment_done else max(0.0, expected_now - p.segment_frames)) + sum(
            min(self.max_frames, self.expected[i] * scale) for i in later)
        ms = 1000.0 * p.elapsed_seconds / p.frames if p.frames > 0 else None
        remaining = remaining_frames * ms / 1000.0 if ms is not None else None
        return Estimate(percent, p.elapsed_seconds, remaining, ms)
