"""Dialogues: a script with ``<|speaker:N|>`` tags, each speaker spoken in a voice of its own.

The engine clones one reference voice per prompt (the reference is always speaker 0 of the
prompt, see engine/text/prompt.py), so a faithful multi-voice take is several takes: the script
is cut where the speaker changes, each turn is synthesised with that speaker's saved voice as
the reference (its tag removed: the turn is a monologue in that voice), and the turns are joined
with the pipeline's sentence pause into one take. ``DialogueJob`` has a ``SynthesisJob``'s
interface (iterate for chunks, ``result``, ``cancel()``), so the worker streams it like any take.

Text before the first tag, and speakers mapped to no saved voice, use the voice panel's choice.
"""

from __future__ import annotations

import dataclasses
import random
import re
import threading
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from s2studio.errors import InputError
from s2studio.engine.pipeline import AudioChunk, SegmentResult, SynthesisRequest, SynthesisResult, Timings

SPEAKER_TAG_RE = re.compile(r"<\|speaker:(\d+)\|>")


@dataclass(frozen=True)
class Turn:
    speaker: int | None  # None: text before the first speaker tag
    text: str  # the turn's words, its speaker tag removed


def speakers_in(text: str) -> list[int]:
    """The speaker numbers the script's tags name, in order of first appearance."""
    seen: list[int] = []
    for m in SPEAKER_TAG_RE.finditer(text or ""):
        n = int(m.group(1))
        if n not in seen:
            seen.append(n)
    return seen


def split_turns(text: str) -> list[Turn]:
    """The script cut at every speaker change; consecutive turns of one speaker are joined and
    turns with nothing to say are dropped (a bare tag only changes who speaks next)."""
    turns: list[Turn] = []
    speaker: int | None = None
    pos = 0
    pieces: list[tuple[int | None, str]] = []
    for m in SPEAKER_TAG_RE.finditer(text):
        pieces.append((speaker, text[pos:m.start()]))
        speaker, pos = int(m.group(1)), m.end()
    pieces.append((speaker, text[pos:]))
    for who, words in pieces:
        words = words.strip()
        if not words:
            continue
        if turns and turns[-1].speaker == who:
            turns[-1] = Turn(who, f"{turns[-1].text} {words}")
        else:
            turns.append(Turn(who, words))
    return turns


def turn_request(base: SynthesisRequest, turn: Turn, voices: dict[int, str]) -> SynthesisRequest:
    """The request for one turn: the speaker's saved voice, or the base request's own voice."""
    voice_id = voices.get(turn.speaker) if turn.speaker is not None else None
    if voice_id is None:
        return dataclasses.replace(base, text=turn.text)
    return dataclasses.replace(base, text=turn.text, voice=voice_id, reference_audio=None, reference_codes=None,
                               reference_text=None)


class DialogueJob:
    """Synthesises the turns one after another on ``engine`` (a Pipeline or RemoteEngine)."""

    def __init__(self, engine, base: SynthesisRequest, voices: dict[int, str]):
        if base.generation.seed is None:
            # One seed for the whole dialogue (each turn would otherwise draw its own), so the seed
            # the history shows, locked, makes the same dialogue again.
            seed = random.SystemRandom().randrange(2**63)
            base = dataclasses.replace(base, generation=dataclasses.replace(base.generation, seed=seed))
        self._engine = engine
        self._cancel = threading.Event()
        self._current = None  # the turn's SynthesisJob running now
        self._lock = threading.Lock()
        self.requests = [turn_request(base, t, voices) for t in split_turns(base.text)]
        if not self.requests:
            raise InputError("There is no text to speak: the script has speaker tags but no words.")
        self.pause_ms = base.segmentation.pause_ms
        self.result: SynthesisResult | None = None
        # every turn's job is created (and so validated) before any audio is made
        self._jobs = [engine.synthesize(r) for r in self.requests]
        self._counts = [len(engine.segments_of(r)) for r in self.requests]

    def cancel(self) -> None:
        self._cancel.set()
        with self._lock:
            job = self._current
        if job is not None:
            job.cancel()

    def __iter__(self) -> Iterator[AudioChunk]:
        return self._run()

    def _run(self) -> Iterator[AudioChunk]:
        total = sum(self._counts)
        audio: list[np.ndarray] = []
        codes: list[np.ndarray] = []
        segments: list[SegmentResult] = []
        timings = Timings()
        seed, stop_reason, rate, offset = None, "cancelled", 0, 0
        for i, job in enumerate(self._jobs):
            if self._cancel.is_set():
                stop_reason = "cancelled"
                break
            with self._lock:
                self._current = job
            if self._cancel.is_set():
                job.cancel()
            for chunk in job:
                yield dataclasses.replace(chunk, segment=offset + chunk.segment, segment_count=total)
            part = job.result
            if part is None:
                stop_reason = "cancelled"
                break
            rate = part.sample_rate
            seed = part.seed if seed is None else seed
            start = sum(len(a) for a in audio)
            segments += [dataclasses.replace(s, index=offset + s.index, start_sample=start + s.start_sample,
                                             end_sample=start + s.end_sample) for s in part.segments]
            audio.append(part.audio)
            codes.append(part.codes)
            _add_timings(timings, part.timings)
            stop_reason = part.stop_reason
            offset += self._counts[i]
            if part.cancelled:
                break
            if i < len(self._jobs) - 1 and self.pause_ms > 0:
                silence = np.zeros(int(round(self.pause_ms * rate / 1000)), np.float32)
                audio.append(silence)
                last_frames = part.segments[-1].codes.shape[1] if part.segments else 0
                yield AudioChunk(silence, rate, offset - 1, total, last_frames, 0)
        joined = np.concatenate(audio) if audio else np.zeros(0, np.float32)
        timings.audio_s = len(joined) / rate if rate else 0.0
        all_codes = np.concatenate(codes, axis=1) if codes else np.zeros((0, 0), np.int32)
        self.result = SynthesisResult(joined.astype(np.float32, copy=False), rate, all_codes, seed or 0,
                                      stop_reason, segments, timings)

    def run_to_end(self) -> SynthesisResult:
        for _ in self:
            pass
        assert self.result is not None
        return self.result


def _add_timings(into: Timings, part: Timings) -> None:
    for f in ("load_s", "encode_reference_s", "prefill_s", "generate_s", "decode_s", "total_s", "frames",
              "decode_chunks"):
        setattr(into, f, getattr(into, f) + getattr(part, f))
    if not into.first_audio_s:
        into.first_audio_s = part.first_audio_s
