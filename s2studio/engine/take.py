"""One take, assembled by one piece of code for every engine.

A take is: the request's text cut into segments (sentences, dialogue turns, or pieces that fit
the model's context), the segments asked for (all, or ``only_segments``), one seed each, every
segment's audio placed one after another with the pauses between them, post-processing, and one
:class:`~s2studio.engine.api.SynthesisResult`. That is the same whether the model runs here
(:class:`~s2studio.engine.pipeline.Pipeline`, alone or batched), on a server
(:class:`~s2studio.remote.RemoteEngine`) or speaks a dialogue with a voice per speaker; so
all of it lives here, and an engine supplies only a :class:`SegmentRenderer`: the prompts it can
build (``plan``) and "the chunks of one segment" (``render``).

Torch-free: the remote client (no torch) assembles its takes with it too.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from dataclasses import dataclass
from typing import Generator, Iterator, Protocol

import numpy as np

from s2studio.engine.api import AudioChunk, Segmentation, SegmentResult, SynthesisJob, SynthesisRequest, \
    SynthesisResult, Timings
from s2studio.engine.text.dialogue import speakers_in, split_turns
from s2studio.engine.text.segmentation import Segment, derive_segment_seed, pack_segments, split_text
from s2studio.errors import GenerationError, InputError

log = logging.getLogger(__name__)

__all__ = ["SegmentOutcome", "SegmentRenderer", "VoiceChoice", "assemble_take", "check_request", "segment_seed", "segments_of",
           "speakers_in", "split_request_text", "split_turns", "take_seed", "voice_for", "voices_of", "wanted_segments"]


# ---- who speaks a segment ------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class VoiceChoice:
    """The voice of one segment: a saved voice id, a reference (audio or codes, with its
    transcript), or none of them (the model's own voice)."""

    voice: str | None = None
    reference_audio: np.ndarray | None = None
    reference_codes: np.ndarray | None = None
    reference_text: str | None = None

    @property
    def key(self) -> tuple:
        """Equal for segments that share a voice (an engine resolves each voice once a take)."""
        if self.voice is not None:
            return ("voice", self.voice)
        return ("request",)


def voice_for(request: SynthesisRequest, segment: Segment) -> VoiceChoice:
    """A dialogue speaker's saved voice, or the request's own voice."""
    if request.speaker_voices and segment.speaker in request.speaker_voices:
        return VoiceChoice(voice=request.speaker_voices[segment.speaker])
    return _own_voice(request)


def voices_of(request: SynthesisRequest) -> list[VoiceChoice]:
    """Every voice the request's segments may be spoken in (its own, each dialogue speaker's),
    each once: what an engine checks before the take starts, without splitting the text."""
    speakers = dict.fromkeys((request.speaker_voices or {}).values())
    return [_own_voice(request)] + [VoiceChoice(voice=v) for v in speakers]


def _own_voice(request: SynthesisRequest) -> VoiceChoice:
    return VoiceChoice(request.voice, request.reference_audio, request.reference_codes, request.reference_text)


# ---- the segments of a text ----------------------------------------------------------------------
def split_request_text(text: str, segmentation: Segmentation, seed: int | None = None,
                       speaker_voices: dict[int, str] | None = None, *, fit_chars: int | None = None
                       ) -> list[Segment]:
    """The segments ``text`` is spoken in (``Segment``: index, text, speaker, pause after, seed).

    Without ``speaker_voices``: one segment, or its sentences when ``segmentation`` is enabled.
    With them (a dialogue): the text is cut into speaker turns first (tags removed), each turn
    split the same way, and turns are joined by ``segmentation.pause_ms``. ``fit_chars``: cut
    at that many characters so that every prompt fits the model's context (sentences, then
    clauses; packed into as few pieces as fit when sentences were not asked for)."""
    if not speaker_voices:
        return _split_part(text, segmentation, seed, fit_chars)
    turns = split_turns(text)
    if not turns:
        raise InputError("There is no text to speak: the script has speaker tags but no words.")
    segmented = segmentation.enabled or fit_chars is not None
    out: list[Segment] = []
    for turn in turns:
        for piece in _split_part(turn.text, segmentation, None, fit_chars):
            index = len(out)
            out.append(Segment(index, piece.text, turn.speaker, segmentation.pause_ms,
                               None if seed is None else (derive_segment_seed(seed, index) if segmented else seed)))
    if out:
        out[-1] = dataclasses.replace(out[-1], pause_after_ms=0)
    return out


def _split_part(text: str, segmentation: Segmentation, seed: int | None, fit_chars: int | None) -> list[Segment]:
    if fit_chars is None:
        if not segmentation.enabled:
            return [Segment(0, text, None, 0, seed)]
        return split_text(text, max_chars=segmentation.max_chars, mode=segmentation.mode,
                          pause_ms=segmentation.pause_ms, seed=seed)
    segments = split_text(text, max_chars=fit_chars, mode=segmentation.mode, pause_ms=segmentation.pause_ms,
                          seed=seed)
    if not segmentation.enabled:  # not asked for sentences: as few pieces as fit
        segments = pack_segments(segments, fit_chars, pause_ms=segmentation.pause_ms, seed=seed)
    return segments


def segments_of(request: SynthesisRequest) -> list[Segment]:
    """The segments a request's text is spoken in (before any re-split to fit a context)."""
    return split_request_text(request.text, request.segmentation, request.generation.seed, request.speaker_voices)


def wanted_segments(request: SynthesisRequest, n_segments: int) -> set[int]:
    """The segments a request asks for: all, or its ``only_segments`` (checked)."""
    wanted = set(range(n_segments)) if request.only_segments is None else set(request.only_segments)
    if not wanted <= set(range(n_segments)):
        raise InputError(f"The text has {n_segments} segments; cannot regenerate {sorted(wanted)}.")
    return wanted


def take_seed(request: SynthesisRequest) -> int:
    """The request's seed, or one drawn here so that the result can report it."""
    if request.generation.seed is not None:
        return request.generation.seed
    return random.SystemRandom().randrange(2**63)


def segment_seed(request: SynthesisRequest, base_seed: int, index: int, segmented: bool) -> int:
    """Segment ``index``'s seed: the request's own for it (a regenerated sentence), else derived
    from the take's seed, or the take's seed itself when the text is not segmented (one segment,
    or one per dialogue turn)."""
    if request.segment_seeds and index in request.segment_seeds:
        return int(request.segment_seeds[index])
    return derive_segment_seed(base_seed, index) if segmented else base_seed


def check_request(request: SynthesisRequest) -> None:
    """Every field of a request against its documented range (:mod:`s2studio.engine.limits`):
    one :class:`InputError` naming the field, before any work."""
    from s2studio.engine.limits import MAX_TEXT_CHARS, check

    text = request.text
    if not isinstance(text, str) or not text.strip():
        raise InputError("There is no text to speak: the text is empty or only whitespace.")
    if len(text) > MAX_TEXT_CHARS:
        raise InputError(f"text is {len(text)} characters long; at most {MAX_TEXT_CHARS} can be spoken in one "
                         "request. Split it into several.")
    check("stream_stride", request.stream_stride)
    seg = request.segmentation
    check("max_chars", seg.max_chars, label="segmentation.max_chars")
    check("pause_ms", seg.pause_ms, label="segmentation.pause_ms")
    if request.only_segments is not None:
        for i in request.only_segments:
            check("only_segments", i)
    for index, seed in (request.segment_seeds or {}).items():
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
            raise InputError(f"segment_seeds[{index}] must be a whole number from 0 to 2**63-1, not {seed!r}.")
    request.generation.validated()
    check_speaker_voices(request.speaker_voices)
    has_ref = request.reference_audio is not None or request.reference_codes is not None
    if request.voice is not None and has_ref:
        raise InputError("Give either a saved voice or reference audio, not both.")
    if has_ref and not (request.reference_text or "").strip():
        raise InputError("A reference voice needs the transcript of what is said in it.")
    if request.reference_audio is not None:
        n = int(np.shape(request.reference_audio)[-1]) if np.ndim(request.reference_audio) else 0
        check("reference_samples", n, label="reference_audio (samples at 44.1 kHz)")
    if request.reference_codes is not None:
        shape = np.shape(request.reference_codes)
        if len(shape) != 2:
            raise InputError(f"reference_codes must be a [codebooks, frames] array, not shape {shape}.")
        check("reference_frames", int(shape[1]), label="reference_codes (frames)")


def check_speaker_voices(speaker_voices) -> None:
    """A dialogue's speaker → voice map: speaker numbers 0..MAX_SPEAKER, voice ids as text
    (each is checked against the library when the take is planned)."""
    from s2studio.engine.limits import MAX_DIALOGUE_SPEAKERS

    if speaker_voices is None:
        return
    if not isinstance(speaker_voices, dict) or len(speaker_voices) > MAX_DIALOGUE_SPEAKERS:
        raise InputError(f"speaker_voices must map at most {MAX_DIALOGUE_SPEAKERS} speaker numbers to voice ids.")
    for speaker, voice in speaker_voices.items():
        if isinstance(speaker, bool) or not isinstance(speaker, int) or not 0 <= speaker < 1000:
            raise InputError(f"speaker_voices: a speaker is a number from 0 to 999, not {speaker!r}.")
        if not isinstance(voice, str) or not voice.strip():
            raise InputError(f"speaker_voices[{speaker}] must be a saved voice's id, not {voice!r}.")


# ---- what an engine supplies -----------------------------------------------------------------------
@dataclass
class SegmentOutcome:
    """How one segment's generation ended (returned by ``SegmentRenderer.render``)."""

    stop_reason: str  # "end" | "max_tokens" | "cancelled"
    frames: int  # audio frames made
    codes: np.ndarray | None = None  # int32 [num_codebooks, frames]; None: the engine has none


class SegmentRenderer(Protocol):
    """One take's engine side: ``plan`` once, then ``render`` each wanted segment."""

    sample_rate: int  # of the chunks (a remote engine learns it from the first answer)
    num_codebooks: int | None  # rows of the codes; None: this engine returns no codes
    verb: str  # for the take's log line: "synthesized", "fetched"

    def plan(self, request: SynthesisRequest, timings: Timings) -> tuple[list[Segment], bool]:
        """The segments the take is spoken in and whether it counts as segmented (for the
        seeds). Everything that can fail before audio (a voice, a prompt too long) fails here."""

    def render(self, segment: Segment, voice: VoiceChoice, seed: int, job: SynthesisJob, timings: Timings
               ) -> Generator[AudioChunk, None, SegmentOutcome]:
        """Yield the segment's audio chunks as they are made; return how it ended. Stops at the
        next frame once ``job.cancel_event`` is set (outcome "cancelled")."""


def assemble_take(request: SynthesisRequest, renderer: SegmentRenderer, job: SynthesisJob,
                  timings: Timings | None = None) -> Iterator[AudioChunk]:
    """Run the take: stream every chunk (pauses included) and leave the result in ``job.result``."""
    timings = timings if timings is not None else Timings()
    t_start = time.perf_counter()  # total_s and the real-time factor exclude loading
    segments, segmented = renderer.plan(request, timings)
    if not segments:
        raise InputError("There is no text to speak: the text is empty or only whitespace.")
    wanted = wanted_segments(request, len(segments))
    base_seed = take_seed(request)
    n_seg = len(segments)
    take: list[np.ndarray] = []  # audio pieces of the take, pauses included
    results: list[SegmentResult] = []
    made_frames = 0
    stop_reason = ""
    for seg in segments:
        if seg.index not in wanted:
            continue
        if job.cancel_event.is_set():
            stop_reason = "cancelled"
            break
        seed = segment_seed(request, base_seed, seg.index, segmented)
        pieces: list[np.ndarray] = []

        def keep(chunk: AudioChunk) -> None:
            pieces.append(chunk.samples)
            if not timings.first_audio_s and chunk.frame_count:
                timings.first_audio_s = time.perf_counter() - t_start

        outcome = yield from _watched(renderer.render(seg, voice_for(request, seg), seed, job, timings), keep)
        timings.frames += outcome.frames
        made_frames += outcome.frames
        stop_reason = outcome.stop_reason
        rate = renderer.sample_rate
        audio = _segment_audio(pieces, request, n_seg, rate)
        start = sum(len(a) for a in take)
        take.append(audio)
        codes = outcome.codes if outcome.codes is not None else np.zeros((0, 0), np.int32)
        results.append(SegmentResult(seg.index, seg.text, seed, codes, stop_reason, start, start + len(audio), audio,
                                     seg.speaker if request.is_dialogue else None))
        if stop_reason == "cancelled":
            break
        pause = int(round(seg.pause_after_ms * rate / 1000)) if seg.index < n_seg - 1 else 0
        if pause and request.only_segments is None:  # single sentences are regenerated without pauses
            silence = np.zeros(pause, np.float32)
            take.append(silence)
            yield AudioChunk(silence, rate, seg.index, n_seg, outcome.frames, 0)
    if not made_frames and stop_reason != "cancelled":
        raise GenerationError("The model ended the utterance before producing any audio. "
                              "Try other text, a higher temperature or another seed.")
    rate = renderer.sample_rate
    audio = np.concatenate(take) if take else np.zeros(0, dtype=np.float32)
    pp = request.postprocess
    if len(audio) and (pp.trim_silence or pp.normalize or pp.dynamic_normalize):
        from s2studio.audio import apply_postprocess

        audio = apply_postprocess(audio, rate, **dataclasses.asdict(pp))
    timings.audio_s = len(audio) / rate
    timings.total_s = time.perf_counter() - t_start
    job.result = SynthesisResult(audio.astype(np.float32, copy=False), rate, _take_codes(results, renderer),
                                 base_seed, stop_reason, results, timings, list(segments))
    log.info("%s %.2f s of audio (%d segment(s)) in %.2f s: %d frames, %.0f ms/frame, prefill %.2f s, "
             "codec %.2f s, seed %d, %s", renderer.verb, timings.audio_s, len(results), timings.total_s,
             timings.frames, timings.ms_per_frame, timings.prefill_s, timings.decode_s, base_seed, stop_reason)


def _watched(chunks: Generator[AudioChunk, None, SegmentOutcome], keep) -> Generator[AudioChunk, None, SegmentOutcome]:
    """Pass ``chunks`` on, showing each to ``keep`` first; returns the generator's outcome."""
    while True:
        try:
            chunk = next(chunks)
        except StopIteration as end:
            return end.value
        keep(chunk)
        yield chunk


def _segment_audio(pieces: list[np.ndarray], request: SynthesisRequest, n_seg: int, rate: int) -> np.ndarray:
    """A segment's pieces joined, its trailing silence trimmed when asked and the text has several
    segments (as s2.cpp does per segment)."""
    audio = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
    if request.postprocess.trim_silence and n_seg > 1 and len(audio):
        from s2studio.audio import trim_trailing_silence

        audio = trim_trailing_silence(audio, rate)
    return audio


def _take_codes(results: list[SegmentResult], renderer: SegmentRenderer) -> np.ndarray:
    if renderer.num_codebooks is None:
        return np.zeros((0, 0), np.int32)
    if not results:
        return np.zeros((renderer.num_codebooks, 0), np.int32)
    return np.concatenate([r.codes for r in results], axis=1)
