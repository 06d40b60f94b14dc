"""The studio's takes as plain state and operations: no Qt, so it is tested without a window.

``TakesModel`` holds the project (app/project.py: takes, their sentences and every version of
each) and everything done to it: a finished take becomes a project take, regenerated sentences
become new versions, sentences are locked and their versions chosen or stepped, takes are
deleted, and a regeneration is described as the ``GenerateRequest`` that makes it. The Qt side
(app/takes_controller.py) only turns widget signals into these calls and shows the result;
files are app/project_file.py.

The model never runs a take: it says what to ask the engine for, and records what came back.
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np

from s2studio.app.project import Project, ProjectTake, Sentence, SentenceVersion
from s2studio.app.project_file import versions_of
from s2studio.app.requests import FinishedTake, GenerateRequest
from s2studio.engine.params import GenerationParams
from s2studio.engine.pipeline import EngineSettings, Segmentation

# every sampling field but the seed: a take keeps its base seed apart (ProjectTake.base_seed)
SAMPLING_FIELDS = {f.name for f in dataclasses.fields(GenerationParams)} - {"seed"}


class CannotRegenerate(Exception):
    """A take whose sentences cannot be made again one by one; the message is for the user."""


def new_seed() -> int:
    return random.SystemRandom().randrange(2**63)


def snapshot(project: Project) -> Project:
    """A structural copy for the saving thread: new lists, the same (immutable) audio."""
    return Project(script=project.script, voice_id=project.voice_id, voice_label=project.voice_label,
                   speaker_voices=dict(project.speaker_voices), current_take=project.current_take,
                   takes=[dataclasses.replace(t, settings=dict(t.settings), sentences=[
                       dataclasses.replace(s, versions=list(s.versions)) for s in t.sentences]) for t in project.takes])


def segmentation_of(settings: dict) -> Segmentation:
    seg = settings.get("segmentation", {})
    return Segmentation(enabled=bool(seg.get("enabled", True)), max_chars=int(seg.get("max_chars", 0)),
                        pause_ms=int(seg.get("pause_ms", 180)))


def take_settings(request: GenerateRequest) -> dict:
    """How a take was made, as plain JSON values (kept in the project file)."""
    return {
        # every sampling field but the seed (the take's base seed), so a regenerated sentence is
        # sampled exactly as the take was
        "sampling": {k: v for k, v in dataclasses.asdict(request.sampling).items() if k != "seed"},
        "segmentation": {"enabled": request.segmentation, "max_chars": request.segment_max_chars,
                         "pause_ms": request.pause_ms},
        "postprocess": {"trim_silence": request.trim_silence, "normalize": request.normalize,
                        "dynamic_normalize": request.dynamic_normalize},
        "voice_kind": "reference" if request.reference_audio is not None else
                      ("voice" if request.voice_id else "none"),
        "reference_text": request.reference_text,
        # a dialogue: each speaker's saved voice (engine/take.py)
        "speaker_voices": [[int(n), str(v)] for n, v in request.speaker_voices],
    }


def params_summary(settings: dict) -> str:
    s = settings.get("sampling", {})
    return (f"temp {s.get('temperature', 0):g} · top-p {s.get('top_p', 0):g} · top-k {s.get('top_k', 0)} · "
            f"max {s.get('max_new_tokens', 0)} frames")


def segment_audio(result, seg) -> np.ndarray:
    """A segment's own audio, as every engine's result carries it (engine.take)."""
    return np.asarray(seg.audio, np.float32)


def _version(result, seg) -> SentenceVersion:
    return SentenceVersion(int(seg.seed), segment_audio(result, seg), result.sample_rate, seg.stop_reason)


def sentences_of(request: GenerateRequest, result) -> tuple[list[Sentence], list[tuple[int, object]]]:
    """A finished take's sentences (no versions yet) and the (sentence index, segment) pairs made:
    the segments the engine really spoke the text in (a text too long for the model's context is
    split further; a dialogue is cut at its speaker turns first), made this time or not."""
    sentences = [Sentence(s.text, s.pause_after_ms) for s in result.all_segments]
    return sentences, [(seg.index, seg) for seg in result.segments]


class TakesModel:
    """The project being worked on, and every change made to its takes.

    ``unsaved_changes``: something changed since the project was last saved as (or opened from) a
    file. Reference clips that are not saved voices are kept for this session only (projects do
    not store them), so a take made with one can be regenerated until the app quits."""

    def __init__(self, project: Project | None = None):
        self.project = project or Project()
        self.unsaved_changes = False
        self._references: dict[str, tuple[np.ndarray, str]] = {}  # take id -> unsaved clip (this session)
        self.known_audio: set[str] = set()  # WAV names of versions this session had: the only ones it removes
        self.know_audio_of(self.project)

    # ---- the project as a whole ------------------------------------------------------------------
    def adopt(self, project: Project) -> None:
        """Another project (restored or opened) replaces this one."""
        self.project = project
        self.know_audio_of(project)

    def know_audio_of(self, project: Project) -> None:
        self.known_audio |= {f"{v.id}.wav" for v in versions_of(project)}

    def snapshot(self) -> Project:
        return snapshot(self.project)

    def take(self, take_id: str | None) -> ProjectTake | None:
        return self.project.take(take_id) if take_id else None

    def current(self) -> ProjectTake | None:
        """The take last shown (or the newest when none was)."""
        p = self.project
        return p.take(p.current_take) or (p.takes[-1] if p.takes else None)

    def set_script(self, text: str) -> None:
        self.project.script = text

    def show(self, take: ProjectTake) -> None:
        """The take on screen: the one a restored project shows first."""
        self.project.current_take = take.id

    # ---- takes from the engine --------------------------------------------------------------------
    def add_take(self, finished: FinishedTake, stats: str = "") -> ProjectTake:
        """A new take (complete, or stopped: the sentences not reached have no version yet)."""
        request, result = finished.request, finished.result
        sentences, made = sentences_of(request, result)
        for index, seg in made:
            version = _version(result, seg)
            if index < len(sentences) and (len(version.audio) or seg.stop_reason != "cancelled"):
                sentences[index].add_version(version)
        take = ProjectTake(text=request.text, sentences=sentences, base_seed=int(result.seed),
                           voice_id=request.voice_id, voice_label=request.voice_label, settings=take_settings(request),
                           stopped=bool(result.cancelled), stats=stats)
        if request.reference_audio is not None:
            self._references[take.id] = (request.reference_audio, request.reference_text)
        p = self.project
        p.takes.append(take)
        p.current_take = take.id
        p.voice_id, p.voice_label = request.voice_id, request.voice_label
        p.speaker_voices = {str(n): str(v) for n, v in request.speaker_voices}
        self.unsaved_changes = True
        return take

    def add_versions(self, finished: FinishedTake) -> ProjectTake | None:
        """Regenerated sentences: each becomes the chosen version of its sentence (a sentence
        stopped half-way is dropped: the old version stays). None: the take is gone."""
        take = self.take(finished.request.take_id)
        if take is None:
            return None
        result = finished.result
        for seg in result.segments:
            if seg.stop_reason == "cancelled" or seg.index >= len(take.sentences):
                continue
            take.sentences[seg.index].add_version(_version(result, seg))
        take.stopped = take.stopped and any(s.current is None for s in take.sentences)
        self.unsaved_changes = True
        return take

    # ---- sentences ------------------------------------------------------------------------------
    @staticmethod
    def unlocked(take: ProjectTake) -> list[int]:
        """What "Regenerate unlocked" asks for."""
        return [i for i, s in enumerate(take.sentences) if not s.locked]

    def set_locked(self, take: ProjectTake, index: int, locked: bool) -> bool:
        if not 0 <= index < len(take.sentences):
            return False
        take.sentences[index].locked = locked
        self.unsaved_changes = True
        return True

    def choose_version(self, take: ProjectTake, index: int, version: int) -> bool:
        if not 0 <= index < len(take.sentences) or not 0 <= version < len(take.sentences[index].versions):
            return False
        take.sentences[index].chosen = version
        self.unsaved_changes = True
        return True

    def step_version(self, take: ProjectTake, index: int, delta: int) -> bool:
        """The version before (-1) or after (+1) the chosen one, if there is one."""
        if not 0 <= index < len(take.sentences):
            return False
        return self.choose_version(take, index, take.sentences[index].chosen + delta)

    def delete_take(self, take_id: str) -> bool:
        before = len(self.project.takes)
        self.project.takes = [t for t in self.project.takes if t.id != take_id]
        self.unsaved_changes = True
        return len(self.project.takes) != before

    def regeneration(self, take: ProjectTake, indices: list[int], engine: EngineSettings,
                     seeds: dict[int, int] | None = None) -> GenerateRequest:
        """The request that makes these sentences of ``take`` again, sampled as the take was,
        each with its seed from ``seeds`` or a new one. Raises CannotRegenerate (why, for the user)."""
        settings = take.settings
        reference = self._references.get(take.id)
        if settings.get("voice_kind") == "reference" and reference is None:
            raise CannotRegenerate("This take was made with an unsaved reference clip, which projects do not "
                                   "keep, so its sentences cannot be regenerated after a restart. Save the clip "
                                   "as a voice and use it for new takes.")
        sampling = settings.get("sampling", {})
        seg = segmentation_of(settings)
        post = settings.get("postprocess", {})
        return GenerateRequest(
            engine=engine, text=take.text, voice_id=take.voice_id,
            reference_audio=reference[0] if reference else None, reference_text=reference[1] if reference else "",
            sampling=GenerationParams(**{k: v for k, v in sampling.items() if k in SAMPLING_FIELDS},
                                      seed=take.base_seed),
            segmentation=seg.enabled, segment_max_chars=seg.max_chars, pause_ms=seg.pause_ms,
            trim_silence=bool(post.get("trim_silence")), normalize=bool(post.get("normalize")),
            dynamic_normalize=bool(post.get("dynamic_normalize")), voice_label=take.voice_label,
            only_segments=tuple(sorted(indices)),
            # a dialogue's sentences are spoken by the same speakers' voices again
            speaker_voices=tuple((int(n), str(v)) for n, v in settings.get("speaker_voices") or ()),
            segment_seeds={i: (seeds or {}).get(i, new_seed()) for i in indices}, take_id=take.id)

    # ---- saving ----------------------------------------------------------------------------------
    def for_saving(self) -> tuple[Project, set[str]]:
        """A copy to write on another thread, and the WAV names an autosave may remove."""
        copy = snapshot(self.project)
        self.know_audio_of(copy)
        return copy, set(self.known_audio)

    def saved_as_file(self) -> None:
        self.unsaved_changes = False
