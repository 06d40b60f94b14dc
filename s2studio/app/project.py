"""The studio's project: the script, the voice, and every take kept sentence by sentence.

A take is the list of its sentences (the pipeline's segments); each sentence keeps every
version generated for it (audio + the seed that made it) and which one is chosen, and can be
locked. The take's audio is assembled from the chosen versions, with the pauses the pipeline
puts between segments and the take's post-processing, so regenerating one sentence never
touches the samples of the others.

Pure data and arithmetic (numpy, the audio layer): no Qt, so it is tested without a window.
Files are in ``project_file.py``.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

import numpy as np

from s2studio.audio import apply_postprocess


def new_id() -> str:
    return uuid.uuid4().hex[:16]


@dataclass(eq=False)
class SentenceVersion:
    """One generation of one sentence. The audio is never modified once made."""

    seed: int
    audio: np.ndarray  # float32 mono, after the per-segment trim, before the take's post-processing
    sample_rate: int
    stop_reason: str = "end"  # "end" | "max_tokens" | "cancelled"
    created: float = field(default_factory=time.time)
    id: str = field(default_factory=new_id)

    @property
    def seconds(self) -> float:
        return len(self.audio) / self.sample_rate


@dataclass(eq=False)
class Sentence:
    text: str
    pause_after_ms: int = 0  # silence after it in the take (0 for the last)
    versions: list[SentenceVersion] = field(default_factory=list)
    chosen: int = -1  # index into versions; -1: not generated yet
    locked: bool = False  # kept as it is when the take's other sentences are regenerated

    @property
    def current(self) -> SentenceVersion | None:
        return self.versions[self.chosen] if 0 <= self.chosen < len(self.versions) else None

    def add_version(self, version: SentenceVersion) -> None:
        self.versions.append(version)
        self.chosen = len(self.versions) - 1


@dataclass(eq=False)
class ProjectTake:
    text: str
    sentences: list[Sentence]
    base_seed: int
    voice_id: str | None = None
    voice_label: str = ""
    # how it was made: sampling, segmentation and post-processing, as plain JSON values
    settings: dict = field(default_factory=dict)
    stopped: bool = False
    stats: str = ""
    created: float = field(default_factory=time.time)
    id: str = field(default_factory=new_id)

    @property
    def sample_rate(self) -> int:
        for s in self.sentences:
            if s.current is not None:
                return s.current.sample_rate
        return 44100

    def spans(self) -> list[tuple[int, int]]:
        """(start, end) sample of each sentence's speech in the assembled take; a sentence not
        generated yet is an empty span where it would be."""
        spans, pos = [], 0
        rate = self.sample_rate
        last = max((i for i, s in enumerate(self.sentences) if s.current is not None), default=-1)
        for i, s in enumerate(self.sentences):
            n = len(s.current.audio) if s.current is not None else 0
            spans.append((pos, pos + n))
            pos += n
            if s.current is not None and i < last:
                pos += int(round(s.pause_after_ms * rate / 1000))
        return spans

    def assemble(self) -> np.ndarray:
        """The take: each sentence's chosen version, the pipeline's pauses between them (none after
        the last one made), then the take's post-processing, as the pipeline does for a whole take."""
        rate = self.sample_rate
        pieces: list[np.ndarray] = []
        made = [i for i, s in enumerate(self.sentences) if s.current is not None]
        for i in made:
            s = self.sentences[i]
            pieces.append(s.current.audio)
            if i != made[-1]:
                pause = int(round(s.pause_after_ms * rate / 1000))
                if pause:
                    pieces.append(np.zeros(pause, np.float32))
        audio = np.concatenate(pieces).astype(np.float32, copy=False) if pieces else np.zeros(0, np.float32)
        post = self.settings.get("postprocess", {})
        if len(audio) and any(post.get(k) for k in ("trim_silence", "normalize", "dynamic_normalize")):
            audio = apply_postprocess(audio, rate, trim_silence=bool(post.get("trim_silence")),
                                      normalize=bool(post.get("normalize")),
                                      dynamic_normalize=bool(post.get("dynamic_normalize")))
        return audio

    def sentence_at(self, sample: int) -> int | None:
        """The sentence being spoken at ``sample`` of the assembled take (a pause belongs to the
        sentence before it); None past the end."""
        spans = self.spans()
        following = None  # start of the next sentence that has audio, scanning backwards: O(n)
        for i in range(len(spans) - 1, -1, -1):
            start, end = spans[i]
            if end <= start:
                continue
            if start <= sample < (following if following is not None else end):
                return i
            following = start
        return None


@dataclass(eq=False)
class Project:
    script: str = ""
    voice_id: str | None = None
    voice_label: str = ""
    # a voice per speaker marker (<|speaker:N|> -> voice id), for multi-speaker scripts
    speaker_voices: dict[str, str] = field(default_factory=dict)
    takes: list[ProjectTake] = field(default_factory=list)
    current_take: str = ""

    def take(self, take_id: str) -> ProjectTake | None:
        return next((t for t in self.takes if t.id == take_id), None)
