"""The manuscript: chapters → paragraphs → sentences, each sentence with its seed, its voice
(per book, chapter, paragraph's character, speaker turn, or its own) and a key that names its
audio.

Sentences are the engine's own segments (``engine.take.split_request_text``, sentences cut at
clauses past ``MAX_SENTENCE_CHARS``); a paragraph with ``<|speaker:N|>`` tags is cut into its
turns first (the tag removed, the speaker kept). A sentence's **key** is a hash of what the model
reads (the text after the pronunciation dictionary), its voice (the id and, for a saved voice,
a digest of its content: :mod:`~s2studio.book.voice_digests`), its seed and the book's render
settings: its audio is stored under that key, so editing one sentence's text, voice or
pronunciation, or saving its voice again under the same id, changes only those sentences' keys
and only they are rendered again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field

from s2studio.book.cast import Cast
from s2studio.book.dictionary import PronunciationDictionary
from s2studio.engine.api import Segmentation
from s2studio.engine.params import GenerationParams
from s2studio.engine.take import split_request_text, split_turns
from s2studio.errors import InputError

MAX_SENTENCE_CHARS = 300  # longer sentences are cut at clauses: one prompt stays small
SEED_LIMIT = 2**63


@dataclass
class Sentence:
    text: str  # as shown
    seed: int
    speaker: int | None = None  # the <|speaker:N|> turn it belongs to
    voice: str | None = None  # its own voice (overrides everything else)


@dataclass
class Paragraph:
    sentences: list[Sentence]
    character: str | None = None  # a cast member who speaks the whole paragraph

    @property
    def text(self) -> str:
        return " ".join(s.text for s in self.sentences)


@dataclass
class Chapter:
    title: str
    paragraphs: list[Paragraph]
    skip_reason: str | None = None  # "front matter" / "empty": left out of a render unless included
    include: bool | None = None  # None: included unless it has a skip reason
    voice: str | None = None  # the chapter's narrator, if not the book's

    @property
    def included(self) -> bool:
        return self.include if self.include is not None else self.skip_reason is None

    def sentences(self):
        for p, paragraph in enumerate(self.paragraphs):
            for s, sentence in enumerate(paragraph.sentences):
                yield p, s, sentence


@dataclass(frozen=True)
class SentenceRef:
    chapter: int
    paragraph: int
    sentence: int


@dataclass(frozen=True)
class SentenceJob:
    """One sentence as the renderer sees it: where it is, what the model reads, with which
    voice and seed, and its key."""

    ref: SentenceRef
    model_text: str
    voice: str | None
    seed: int
    key: str


@dataclass
class Manuscript:
    title: str
    author: str = ""
    language: str = ""
    chapters: list[Chapter] = field(default_factory=list)
    voice: str | None = None  # the narrator: a saved voice id (None: the model's own voice)
    cast: Cast = field(default_factory=Cast)
    dictionary: PronunciationDictionary = field(default_factory=PronunciationDictionary)
    generation: GenerationParams = GenerationParams()  # its seed is the book's base seed
    sentence_pause_ms: int = 350  # room tone between sentences of a paragraph
    paragraph_pause_ms: int = 800
    chapter_pause_ms: int = 2000  # before and after each chapter file's speech
    # saved voice id (as the book spells it) -> digest of its codes and transcript, part of the
    # keys of the sentences it speaks: a voice saved again under the same id renders them again.
    # Refreshed from the voice library (book/voice_digests.py) before a render and when the
    # library changes; a voice without a digest (the model's own, one the library lacks, a
    # server's own) keys as before digests existed.
    voice_digests: dict[str, str] = field(default_factory=dict)

    # ---- building ---------------------------------------------------------------------------
    @classmethod
    def from_import(cls, imported, *, seed: int = 0) -> "Manuscript":
        """A manuscript from :func:`s2studio.book.importing.import_book`'s chapters. A sentence's
        seed comes from the book's seed and the sentence's own text (its n-th occurrence, so a
        repeated "Yes." gets a seed each time), and is kept with it from then on: importing an
        edited file again gives every unchanged sentence its old seed, hence its old key and
        audio, and only changed sentences are rendered again."""
        book = cls(imported.title, imported.author, imported.language,
                   generation=GenerationParams(seed=seed))
        seen: dict[str, int] = {}
        for ch in imported.chapters:
            book.chapters.append(Chapter(ch.title, [cls._paragraph(t, seed, seen) for t in ch.paragraphs],
                                         ch.skip_reason))
        return book

    @staticmethod
    def _paragraph(text: str, base_seed: int, seen: dict[str, int]) -> Paragraph:
        sentences = []
        for speaker, piece in split_paragraph(text):
            occurrence = seen.get(piece, 0)
            seen[piece] = occurrence + 1
            sentences.append(Sentence(piece, sentence_seed(base_seed, piece, occurrence), speaker))
        return Paragraph(sentences)

    # ---- editing ------------------------------------------------------------------------------
    def sentence(self, ref: SentenceRef) -> Sentence:
        try:
            return self.chapters[ref.chapter].paragraphs[ref.paragraph].sentences[ref.sentence]
        except (IndexError, TypeError):
            raise InputError(f"The book has no sentence {ref.chapter + 1}.{ref.paragraph + 1}.{ref.sentence + 1}.") \
                from None

    def edit_sentence(self, ref: SentenceRef, text: str) -> None:
        """New text for one sentence (its seed and voice kept: only it renders again)."""
        text = " ".join(str(text).split())
        if not text:
            raise InputError("A sentence needs some text; delete it instead.")
        self.sentence(ref).text = text

    def reseed_sentence(self, ref: SentenceRef, seed: int) -> None:
        """Another take of one sentence: a new seed, a new key."""
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEED_LIMIT:
            raise InputError(f"A seed is a whole number from 0 to 2**63-1, not {seed!r}.")
        self.sentence(ref).seed = seed

    # ---- what the model reads -----------------------------------------------------------------
    def voice_for(self, ref: SentenceRef) -> str | None:
        """The sentence's own voice, else its speaker's character, else its paragraph's
        character, else the chapter's voice, else the book's narrator."""
        chapter = self.chapters[ref.chapter]
        paragraph = chapter.paragraphs[ref.paragraph]
        sentence = paragraph.sentences[ref.sentence]
        if sentence.voice:
            return sentence.voice
        if sentence.speaker is not None:
            known, voice = self.cast.voice_of(self.cast.speakers.get(sentence.speaker))
            if known:
                return voice
        known, voice = self.cast.voice_of(paragraph.character)
        if known:
            return voice
        return chapter.voice or self.voice

    def voices_used(self) -> set[str]:
        """Every saved voice id the book names: narrator, chapters, cast, sentences' own."""
        used = {self.voice} | {c.voice for c in self.chapters} | set(self.cast.characters.values())
        used |= {s.voice for c in self.chapters for p in c.paragraphs for s in p.sentences}
        return {v for v in used if v}

    def settings_fingerprint(self, engine_name: str = "") -> str:
        """What, besides text, voice and seed, changes a sentence's audio."""
        g = dataclasses.asdict(dataclasses.replace(self.generation, seed=None))
        return json.dumps({"generation": g, "engine": engine_name}, sort_keys=True, default=str)

    def job(self, ref: SentenceRef, fingerprint: str) -> SentenceJob:
        sentence = self.sentence(ref)
        model_text = self.dictionary.apply(sentence.text)
        voice = self.voice_for(ref)
        parts = [model_text, voice, sentence.seed, fingerprint]
        digest = self.voice_digests.get(voice, "") if voice else ""
        if digest:  # only then: a sentence without a saved voice keeps the key it had before digests
            parts.append(digest)
        key = hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]
        return SentenceJob(ref, model_text, voice, sentence.seed, key)

    def jobs(self, chapters: list[int] | None = None, fingerprint: str = "") -> list[SentenceJob]:
        """Every sentence of the given chapters (default: the included ones), in reading order."""
        wanted = chapters if chapters is not None else [i for i, c in enumerate(self.chapters) if c.included]
        return [self.job(SentenceRef(c, p, s), fingerprint)
                for c in wanted for p, s, _ in self.chapters[c].sentences()]

    @property
    def sentence_count(self) -> int:
        return sum(len(p.sentences) for c in self.chapters for p in c.paragraphs)


def split_paragraph(text: str) -> list[tuple[int | None, str]]:
    """A paragraph's sentences as (speaker, text): its ``<|speaker:N|>`` turns first (tag
    removed), each cut into the engine's sentences."""
    seg = Segmentation(enabled=True, max_chars=MAX_SENTENCE_CHARS)
    turns = split_turns(text) if "<|speaker:" in text else []
    parts = [(t.speaker, t.text) for t in turns] if turns else [(None, text)]
    out = []
    for speaker, part in parts:
        if not part.strip():
            continue
        for piece in split_request_text(part, seg):
            if piece.text.strip():
                out.append((speaker, piece.text.strip()))
    return out


def sentence_seed(base_seed: int, text: str, occurrence: int = 0) -> int:
    """The seed of the ``occurrence``-th sentence reading ``text``: the engine's own derivation
    (``derive_segment_seed``, reached through the public take module) with an index made from
    the text's hash."""
    from s2studio.engine.api import SynthesisRequest
    from s2studio.engine.take import segment_seed

    index = int.from_bytes(hashlib.sha256(f"{occurrence}\0{text}".encode()).digest()[:8], "big")
    return segment_seed(SynthesisRequest(text="."), base_seed, index, True)
