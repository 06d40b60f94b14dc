"""The reference workbench's analysis (no Qt): where a long clip's best 5–30 s lie, and what is
wrong with the part kept (clipping, a loud room, its loudness).

"Find the best part": voice activity detection (s2studio/engine/voice_activity.py, Silero VAD,
which needs torch and so lives in the engine) finds the speech; ``best_window`` here joins it into
runs broken by long pauses and scores every 5–30 s window of a run: no clipped samples first, then
a quiet noise floor between the words, a steady level from phrase to phrase, little silence, and
some length (10–15 s is plenty for a voice).

Levelling: a reference is saved at ``REFERENCE_TARGET_LUFS`` integrated loudness (peaks kept under
``REFERENCE_PEAK_CEILING_DBFS`` by the limiter in ``loudness.py``), so voices recorded quietly or
hot sound alike to the codec.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from s2studio.audio import loudness

MIN_WINDOW_S = 5.0
MAX_WINDOW_S = 30.0
LONG_PAUSE_S = 1.0  # a pause longer than this ends a run: a reference should flow
EDGE_PAD_S = 0.15  # kept before the first and after the last word, so no syllable is cut
CLIP_LEVEL = 0.999  # |x| at or above this is a clipped sample (int16 full scale is 0.99997)
NOISY_FLOOR_DBFS = -50.0  # a quietest moment louder than this: the room is heard
# The noise floor is the RMS of the quietest 0.1 s: short enough to fall between words (pauses in
# fluent speech are 0.2-0.5 s; ACX's half second would measure the speech itself there).
NOISE_WINDOW_S = 0.1
REFERENCE_TARGET_LUFS = -20.0
REFERENCE_PEAK_CEILING_DBFS = -1.0
REFERENCE_LEVEL = loudness.LoudnessPreset("reference", "lufs", REFERENCE_TARGET_LUFS, REFERENCE_PEAK_CEILING_DBFS)
_SILENT_DBFS = -90.0  # what "no noise at all" counts as in a score (digital silence is -inf)


@dataclass(frozen=True)
class ClipCheck:
    """What the part kept measures, and the warnings worth showing (each with its numbers)."""

    duration_s: float
    integrated_lufs: float
    peak_dbfs: float
    noise_floor_dbfs: float
    clipped_samples: int
    first_clip_s: float | None
    warnings: list[str] = field(default_factory=list)

    @property
    def level_note(self) -> str:
        if not math.isfinite(self.integrated_lufs):
            return "Loudness: too short or silent to measure; saved as it is."
        change = REFERENCE_TARGET_LUFS - self.integrated_lufs
        how = "kept as it is" if abs(change) <= 0.5 else f"{'raised' if change > 0 else 'lowered'} by {abs(change):.1f} dB"
        return (f"Loudness {self.integrated_lufs:.1f} LUFS, peak {self.peak_dbfs:.1f} dBFS: saved levelled to "
                f"{REFERENCE_TARGET_LUFS:g} LUFS ({how}, peaks under {REFERENCE_PEAK_CEILING_DBFS:g} dBFS).")


def check_clip(samples: np.ndarray, sample_rate: int) -> ClipCheck:
    """Clipping, the noise floor (the quietest tenth of a second) and the loudness of ``samples``."""
    x = np.asarray(samples, dtype=np.float32)
    clipped = np.flatnonzero(np.abs(x) >= CLIP_LEVEL)
    first = float(clipped[0]) / sample_rate if len(clipped) else None
    floor = loudness.noise_floor_dbfs(x, sample_rate, NOISE_WINDOW_S)
    warnings = []
    if len(clipped):
        warnings.append(f"{len(clipped)} clipped sample{'s' if len(clipped) != 1 else ''}, the first at "
                        f"{first:.1f} s: record with less gain, or keep another part.")
    if math.isfinite(floor) and floor > NOISY_FLOOR_DBFS:
        warnings.append(f"Noise floor {floor:.0f} dBFS (the quietest tenth of a second): a quieter room helps "
                        f"(under {NOISY_FLOOR_DBFS:g} dBFS is good).")
    return ClipCheck(len(x) / sample_rate, loudness.integrated_lufs(x, sample_rate), loudness.peak_dbfs(x),
                     floor, len(clipped), first, warnings)


def level_reference(samples: np.ndarray, sample_rate: int) -> np.ndarray:
    """``samples`` at ``REFERENCE_TARGET_LUFS`` with peaks under the ceiling (unchanged if silent)."""
    return loudness.normalise(samples, sample_rate, REFERENCE_LEVEL)


# ---- the best window ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Proposal:
    start: int  # samples
    end: int
    score: float
    reason: str  # for the panel: what makes this part the best


def _db_rms(x: np.ndarray) -> float:
    return max(_SILENT_DBFS, loudness.rms_dbfs(x)) if len(x) else _SILENT_DBFS


def _score(samples: np.ndarray, rate: int, segments: list[tuple[int, int]], start: int, end: int):
    """(clipped sample count, score) of the window start..end made of ``segments``."""
    part = samples[start:end]
    clipped = int(np.count_nonzero(np.abs(part) >= CLIP_LEVEL))
    duration = (end - start) / rate
    speech = sum(e - s for s, e in segments) / max(1, end - start)
    levels = [_db_rms(samples[s:e]) for s, e in segments if e - s >= int(0.2 * rate)]
    unsteady = float(np.std(levels)) if len(levels) > 1 else 0.0
    # the noise between the words: the quietest tenth of a second of the window
    floor = loudness.noise_floor_dbfs(part, rate, NOISE_WINDOW_S)
    floor = max(_SILENT_DBFS, floor) if math.isfinite(floor) else _SILENT_DBFS
    score = (2.0 * min(duration, 15.0) / 15.0 + speech - unsteady / 6.0
             - max(0.0, floor - NOISY_FLOOR_DBFS - 10.0) / 10.0)
    return clipped, score, floor, unsteady


def best_window(samples: np.ndarray, sample_rate: int, speech: list[tuple[int, int]]) -> Proposal | None:
    """The best 5–30 s window made of whole speech segments with no long pause inside, or None
    when no run of speech is 5 s long."""
    x = np.asarray(samples, dtype=np.float32)
    rate = sample_rate
    long_pause = int(LONG_PAUSE_S * rate)
    pad = int(EDGE_PAD_S * rate)
    runs: list[list[tuple[int, int]]] = []
    for seg in speech:
        if runs and seg[0] - runs[-1][-1][1] <= long_pause:
            runs[-1].append(seg)
        else:
            runs.append([seg])
    best = None
    for run in runs:
        for i in range(len(run)):
            # the longest window from segment i that fits in 30 s (padding included)
            j = i
            while j + 1 < len(run) and run[j + 1][1] - run[i][0] + 2 * pad <= MAX_WINDOW_S * rate:
                j += 1
            start, end = max(0, run[i][0] - pad), min(len(x), run[j][1] + pad)
            if end - start > MAX_WINDOW_S * rate:  # one segment alone longer than 30 s: its first 30 s
                end = start + int(MAX_WINDOW_S * rate)
            if end - start < MIN_WINDOW_S * rate:
                continue
            segs = [(max(s, start), min(e, end)) for s, e in run[i:j + 1] if s < end]
            clipped, score, floor, unsteady = _score(x, rate, segs, start, end)
            key = (-clipped, score)
            if best is None or key > best[0]:
                best = (key, start, end, clipped, floor, unsteady)
    if best is None:
        return None
    (_, score), start, end, clipped, floor, unsteady = best
    floor_text = "digital silence" if floor <= _SILENT_DBFS else f"{floor:.0f} dBFS"
    reason = (f"{(end - start) / rate:.1f} s of speech with no pause over {LONG_PAUSE_S:g} s"
              + (f", {clipped} clipped samples (no part without clipping is 5 s long)" if clipped else ", no clipping")
              + f", noise between words {floor_text}, level steady within {unsteady:.1f} dB")
    return Proposal(start, end, score, reason)
