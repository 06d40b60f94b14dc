"""A book project on disk: a folder that holds the manuscript, its render state and every
rendered sentence, so a render can stop at any moment and continue later (docs/book.md).

    BOOK/book.json           the manuscript, cast, dictionary and settings (saved on each change)
    BOOK/render-state.json   key -> how that sentence's render ended (rewritten after each sentence)
    BOOK/sentences/KEY.npy   one sentence's audio, float32 mono at the engine's rate
    BOOK/cover.jpg|png       the cover, if the EPUB had one

Every file is written to a temporary file and renamed (``audio.atomic_file``), the sentence's
audio before the state that names it: after a crash, ``kill -9`` or power loss the state names
only sentences whose audio is complete, and at most the sentences in flight are lost. A state
entry whose audio file is missing or the wrong size counts as not rendered.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import threading

import numpy as np

from s2studio.book.cast import Cast
from s2studio.book.dictionary import PronunciationDictionary
from s2studio.book.manuscript import Chapter, Manuscript, Paragraph, Sentence, SentenceJob
from s2studio.engine.params import GenerationParams
from s2studio.errors import InputError

BOOK_FILE = "book.json"
STATE_FILE = "render-state.json"
SENTENCE_FOLDER = "sentences"
FORMAT_VERSION = 1
MAX_PROJECT_JSON_BYTES = 256 * 2**20
MAX_SENTENCE_SAMPLES = 44100 * 600  # ten minutes: no sentence is longer
MAX_VOICE_DIGESTS = 10_000  # one per saved voice the book names


class BookProject:
    def __init__(self, folder: str | os.PathLike[str], manuscript: Manuscript, state: dict | None = None,
                 cover: tuple[bytes, str] | None = None):
        self.folder = os.path.abspath(os.fspath(folder))
        self.manuscript = manuscript
        self._state: dict[str, dict] = state or {}
        self._lock = threading.Lock()  # the renderer's writer thread and a UI may both touch the state
        self._cover = cover

    # ---- opening and saving ---------------------------------------------------------------------
    @classmethod
    def create(cls, folder, manuscript: Manuscript, *, cover: bytes | None = None, cover_mime: str = "",
               overwrite: bool = False) -> "BookProject":
        folder = os.path.abspath(os.fspath(folder))
        if os.path.exists(os.path.join(folder, BOOK_FILE)) and not overwrite:
            raise InputError(f"Book folder {folder}: already holds a book; open it, or start over.")
        try:
            os.makedirs(os.path.join(folder, SENTENCE_FOLDER), exist_ok=True)
        except OSError as exc:
            raise InputError(f"Book folder {folder}: cannot be created ({exc.strerror or exc}).") from None
        project = cls(folder, manuscript)
        if cover:
            from s2studio.audio.atomic_file import atomic_output

            with atomic_output(project.cover_path_for(cover_mime)) as fh:
                fh.write(cover)
        project.save()
        project._write_state()
        return project

    @classmethod
    def open(cls, folder) -> "BookProject":
        from s2studio.audio.atomic_file import read_regular_file, remove_stale_temp_files

        folder = os.path.abspath(os.fspath(folder))
        path = os.path.join(folder, BOOK_FILE)
        try:
            data = json.loads(read_regular_file(path, MAX_PROJECT_JSON_BYTES, what="book project"))
        except FileNotFoundError:
            raise InputError(f"Book folder {folder}: has no {BOOK_FILE}; it is not a book project.") from None
        except (OSError, ValueError) as exc:
            raise InputError(f"Book project {path}: cannot be read ({exc}).") from None
        manuscript = manuscript_from_json(data, path)
        state: dict = {}
        fingerprint = None
        state_path = os.path.join(folder, STATE_FILE)
        if os.path.exists(state_path):
            try:
                raw = json.loads(read_regular_file(state_path, MAX_PROJECT_JSON_BYTES, what="render state"))
            except (OSError, ValueError) as exc:
                raise InputError(f"Render state {state_path}: cannot be read ({exc}); start over with --restart."
                                 ) from None
            sentences = raw.get("sentences") if isinstance(raw, dict) else None
            if isinstance(sentences, dict):
                state = {k: v for k, v in sentences.items() if _is_key(k) and isinstance(v, dict)}
            fingerprint = raw.get("fingerprint") if isinstance(raw, dict) else None
        os.makedirs(os.path.join(folder, SENTENCE_FOLDER), exist_ok=True)
        remove_stale_temp_files(os.path.join(folder, SENTENCE_FOLDER))  # a killed render's half-written files
        remove_stale_temp_files(folder)
        project = cls(folder, manuscript, state)
        project.fingerprint = fingerprint if isinstance(fingerprint, str) and len(fingerprint) < 10_000 else ""
        project.legacy_voice_keys = "voice_digests" not in data
        return project

    @classmethod
    def from_book_file(cls, path, folder, *, seed: int | None = None, restart: bool = False) -> "BookProject":
        """Import ``path`` into the project at ``folder``: a new project, or the existing one
        with its text replaced by the file's and its cast, dictionary, pauses and seed kept
        (``seed`` replaces the seed). Unchanged sentences keep their seeds, so their keys and
        audio; only changed ones render again. ``restart``: forget every rendered sentence."""
        import random

        from s2studio.book.importing import import_book

        imported = import_book(path)
        existing = cls.open(folder) if os.path.exists(os.path.join(os.fspath(folder), BOOK_FILE)) else None
        if seed is None:
            old_seed = existing.manuscript.generation.seed if existing is not None else None
            seed = old_seed if old_seed is not None else random.SystemRandom().randrange(2**63)
        manuscript = Manuscript.from_import(imported, seed=seed % 2**63)
        if existing is None:
            return cls.create(folder, manuscript, cover=imported.cover, cover_mime=imported.cover_mime)
        old = existing.manuscript
        manuscript.voice, manuscript.cast, manuscript.dictionary = old.voice, old.cast, old.dictionary
        manuscript.voice_digests = dict(old.voice_digests)
        manuscript.generation = dataclasses.replace(old.generation, seed=seed % 2**63)
        manuscript.sentence_pause_ms, manuscript.paragraph_pause_ms = old.sentence_pause_ms, old.paragraph_pause_ms
        manuscript.chapter_pause_ms = old.chapter_pause_ms
        existing.manuscript = manuscript
        existing.save()
        if restart:
            existing.restart()
        return existing

    def save(self) -> None:
        """The manuscript, atomically (call after every edit)."""
        from s2studio.audio.atomic_file import atomic_output

        data = json.dumps(manuscript_to_json(self.manuscript), ensure_ascii=False, indent=1).encode()
        with atomic_output(os.path.join(self.folder, BOOK_FILE)) as fh:
            fh.write(data)

    def _write_state(self) -> None:
        from s2studio.audio.atomic_file import atomic_output

        with self._lock:
            data = json.dumps({"version": FORMAT_VERSION, "fingerprint": self.fingerprint, "sentences": self._state},
                              separators=(",", ":")).encode()
        with atomic_output(os.path.join(self.folder, STATE_FILE)) as fh:
            fh.write(data)

    # ---- sentences ------------------------------------------------------------------------------
    def sentence_path(self, key: str) -> str:
        if not _is_key(key):
            raise InputError(f"{key!r} is not a sentence key.")
        return os.path.join(self.folder, SENTENCE_FOLDER, key + ".npy")

    def is_rendered(self, key: str) -> bool:
        with self._lock:
            entry = self._state.get(key)
        if not entry or "samples" not in entry:
            return False
        try:
            return os.path.getsize(self.sentence_path(key)) > 0
        except OSError:
            return False

    def status(self, key: str) -> str:
        """A sentence's state for a UI: "rendered", "failed" (see :meth:`failure`) or "missing"."""
        if self.is_rendered(key):
            return "rendered"
        return "failed" if self.failure(key) is not None else "missing"

    def failure(self, key: str) -> str | None:
        with self._lock:
            entry = self._state.get(key)
        return entry.get("error") if entry else None

    def store(self, job: SentenceJob, audio: np.ndarray, sample_rate: int, stop_reason: str) -> None:
        """A finished sentence: its audio, then the state naming it (both atomic)."""
        from s2studio.audio.atomic_file import atomic_output

        audio = np.ascontiguousarray(audio, dtype=np.float32)
        with atomic_output(self.sentence_path(job.key)) as fh:
            np.save(fh, audio, allow_pickle=False)
        with self._lock:
            self._state[job.key] = {"samples": int(len(audio)), "rate": int(sample_rate), "stop": stop_reason}
        self._write_state()

    def store_failure(self, job: SentenceJob, message: str) -> None:
        with self._lock:
            self._state[job.key] = {"error": str(message)[:500]}
        self._write_state()

    def audio_of(self, key: str) -> tuple[np.ndarray, int]:
        """A rendered sentence's audio and rate; checked against the state (a file from elsewhere
        cannot smuggle in an object array or a huge one)."""
        with self._lock:
            entry = dict(self._state.get(key) or {})
        path = self.sentence_path(key)
        try:
            audio = np.load(path, allow_pickle=False, mmap_mode="r")
        except (OSError, ValueError) as exc:
            raise InputError(f"Sentence audio {path}: cannot be read ({exc}); render it again.") from None
        if audio.dtype != np.float32 or audio.ndim != 1 or len(audio) > MAX_SENTENCE_SAMPLES or \
                len(audio) != entry.get("samples"):
            raise InputError(f"Sentence audio {path}: is not what the render state says; render it again.")
        return np.array(audio), int(entry.get("rate", 44100))

    def forget(self, keys) -> None:
        with self._lock:
            for key in keys:
                self._state.pop(key, None)
        self._write_state()

    def restart(self) -> None:
        """Drop every rendered sentence (``--restart``)."""
        with self._lock:
            self._state = {}
        shutil.rmtree(os.path.join(self.folder, SENTENCE_FOLDER), ignore_errors=True)
        os.makedirs(os.path.join(self.folder, SENTENCE_FOLDER), exist_ok=True)
        self._write_state()

    def prune(self) -> int:
        """Remove sentence audio no sentence of the manuscript names any more (old takes of
        edited sentences); returns how many files."""
        wanted = {job.key for job in self.manuscript.jobs(list(range(len(self.manuscript.chapters))),
                                                          self.fingerprint)}
        removed = 0
        folder = os.path.join(self.folder, SENTENCE_FOLDER)
        for name in os.listdir(folder):
            key = name[:-4] if name.endswith(".npy") else None
            if key and _is_key(key) and key not in wanted:
                os.unlink(os.path.join(folder, name))
                removed += 1
        with self._lock:
            for key in [k for k in self._state if k not in wanted]:
                del self._state[key]
        self._write_state()
        return removed

    # ---- saved voices in the keys ------------------------------------------------------------------
    # A book saved before voice digests existed (no "voice_digests" in its book.json): its audio
    # was stored under keys without them. The first refresh moves that audio to the new keys.
    legacy_voice_keys: bool = False

    def refresh_voice_digests(self, library) -> bool:
        """The digests of the saved voices the book uses, as ``library`` holds them now
        (``book/voice_digests.py``); True when one changed (the caller saves the book: keys
        changed). In a book from before digests, a rendered sentence with a saved voice keeps its
        audio: it is taken to be made with the voice as it is now (it was, unless the voice was
        saved again after that render: Regenerate it, or start over)."""
        from s2studio.book.voice_digests import library_digests

        m = self.manuscript
        if self.legacy_voice_keys and not self.fingerprint and self._state:
            return False  # the old keys' engine part is not known yet: the first render does this
        digests = library_digests(library, m.voices_used())
        adopt, self.legacy_voice_keys = self.legacy_voice_keys, False
        if digests == m.voice_digests:
            return False
        every = list(range(len(m.chapters)))
        old = {j.ref: j.key for j in m.jobs(every, self.fingerprint)} if adopt else {}
        m.voice_digests = digests
        if adopt:
            self._adopt_audio(old, {j.ref: j.key for j in m.jobs(every, self.fingerprint)})
        return True

    def _adopt_audio(self, old: dict, new: dict) -> None:
        """Rendered audio under a sentence's old key moved to its new key (file, then state)."""
        moved = 0
        for ref, old_key in old.items():
            new_key = new[ref]
            if new_key == old_key or self.is_rendered(new_key) or not self.is_rendered(old_key):
                continue
            try:
                os.replace(self.sentence_path(old_key), self.sentence_path(new_key))
            except OSError:
                continue  # it renders again
            with self._lock:
                self._state[new_key] = self._state.pop(old_key)
            moved += 1
        if moved:
            self._write_state()

    # ---- progress -------------------------------------------------------------------------------
    # The engine/settings part of the sentence keys: set by the renderer, kept in the render
    # state, so listening and exporting after a restart find the audio without an engine.
    fingerprint: str = ""

    def chapter_progress(self, chapter: int) -> tuple[int, int]:
        """(rendered, total) sentences of a chapter."""
        jobs = self.manuscript.jobs([chapter], self.fingerprint)
        return sum(1 for j in jobs if self.is_rendered(j.key)), len(jobs)

    # ---- cover ----------------------------------------------------------------------------------
    def cover_path_for(self, mime: str) -> str:
        return os.path.join(self.folder, "cover.png" if mime == "image/png" else "cover.jpg")

    def cover(self) -> tuple[bytes, str] | None:
        for name, mime in (("cover.jpg", "image/jpeg"), ("cover.png", "image/png")):
            path = os.path.join(self.folder, name)
            if os.path.isfile(path):
                from s2studio.audio.atomic_file import read_regular_file

                return read_regular_file(path, 20 * 2**20, what="cover image"), mime
        return None


def _is_key(key) -> bool:
    return isinstance(key, str) and len(key) == 32 and all(c in "0123456789abcdef" for c in key)


# ---- the manuscript as JSON ------------------------------------------------------------------------
def manuscript_to_json(m: Manuscript) -> dict:
    g = m.generation
    return {
        "format": "s2studio-book", "version": FORMAT_VERSION,
        "title": m.title, "author": m.author, "language": m.language, "voice": m.voice,
        "generation": {"max_new_tokens": g.max_new_tokens, "temperature": g.temperature, "top_p": g.top_p,
                       "top_k": g.top_k, "min_tokens_before_end": g.min_tokens_before_end, "ras": g.ras,
                       "seed": g.seed},
        "pauses_ms": {"sentence": m.sentence_pause_ms, "paragraph": m.paragraph_pause_ms,
                      "chapter": m.chapter_pause_ms},
        "cast": m.cast.to_json(), "dictionary": m.dictionary.to_json(),
        "voice_digests": dict(sorted(m.voice_digests.items())),
        "chapters": [{"title": c.title, "skip_reason": c.skip_reason, "include": c.include, "voice": c.voice,
                      "paragraphs": [{"character": p.character,
                                      "sentences": [[s.text, s.seed, s.speaker, s.voice] for s in p.sentences]}
                                     for p in c.paragraphs]} for c in m.chapters],
    }


def manuscript_from_json(data, where: str) -> Manuscript:
    """A book.json from anyone: every field checked, one message naming the file."""
    from s2studio.engine.limits import check

    def bad(what: str):
        return InputError(f"Book project {where}: {what}.")

    if not isinstance(data, dict) or data.get("format") != "s2studio-book":
        raise bad("is not an s2studio book project")
    if data.get("version") != FORMAT_VERSION:
        raise bad(f"has format version {data.get('version')!r}; this s2studio reads version {FORMAT_VERSION}")

    def text(value, what: str, optional: bool = False) -> str | None:
        if value is None and optional:
            return None
        if not isinstance(value, str) or len(value) > 100_000:
            raise bad(f"{what} must be text")
        return value

    gen = data.get("generation") or {}
    if not isinstance(gen, dict):
        raise bad("'generation' must be an object")
    try:
        generation = GenerationParams(**{k: gen[k] for k in ("max_new_tokens", "temperature", "top_p", "top_k",
                                                             "min_tokens_before_end", "ras", "seed") if k in gen})
        generation.validated()
    except (TypeError, InputError) as exc:
        raise bad(f"its generation settings are not valid ({exc})") from None
    pauses = data.get("pauses_ms") or {}
    if not isinstance(pauses, dict):
        raise bad("'pauses_ms' must be an object")
    m = Manuscript(text(data.get("title", ""), "the title") or "", text(data.get("author", ""), "the author") or "",
                   text(data.get("language", ""), "the language") or "", voice=text(data.get("voice"), "the voice", True),
                   cast=Cast.from_json(data.get("cast", {}), where),
                   dictionary=PronunciationDictionary.from_json(data.get("dictionary", []), where),
                   generation=generation)
    digests = data.get("voice_digests", {})  # absent in books made before digests: none known
    if not isinstance(digests, dict) or len(digests) > MAX_VOICE_DIGESTS or not all(
            isinstance(k, str) and 0 < len(k) <= 1000 and isinstance(v, str) and len(v) == 16
            and all(c in "0123456789abcdef" for c in v) for k, v in digests.items()):
        raise bad(f"'voice_digests' must map at most {MAX_VOICE_DIGESTS} voice ids to 16 hex digits")
    m.voice_digests = dict(digests)
    for name, attr in (("sentence", "sentence_pause_ms"), ("paragraph", "paragraph_pause_ms"),
                       ("chapter", "chapter_pause_ms")):
        if name in pauses:
            check("pause_ms", pauses[name], label=f"{where}: pauses_ms.{name}")
            setattr(m, attr, int(pauses[name]))
    chapters = data.get("chapters")
    if not isinstance(chapters, list):
        raise bad("'chapters' must be a list")
    for ci, c in enumerate(chapters):
        if not isinstance(c, dict) or not isinstance(c.get("paragraphs"), list):
            raise bad(f"chapter {ci + 1} must have a list of paragraphs")
        include = c.get("include")
        if include is not None and not isinstance(include, bool):
            raise bad(f"chapter {ci + 1}: 'include' must be true, false or null")
        chapter = Chapter(text(c.get("title", ""), f"chapter {ci + 1}'s title") or f"Chapter {ci + 1}", [],
                          text(c.get("skip_reason"), "a skip reason", True), include,
                          text(c.get("voice"), f"chapter {ci + 1}'s voice", True))
        for pi, p in enumerate(c["paragraphs"]):
            if not isinstance(p, dict) or not isinstance(p.get("sentences"), list):
                raise bad(f"chapter {ci + 1}, paragraph {pi + 1} must have a list of sentences")
            sentences = []
            for si, s in enumerate(p["sentences"]):
                where_s = f"chapter {ci + 1}, paragraph {pi + 1}, sentence {si + 1}"
                if not isinstance(s, list) or len(s) != 4:
                    raise bad(f"{where_s} must be [text, seed, speaker, voice]")
                stext, seed, speaker, voice = s
                if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
                    raise bad(f"{where_s}: its seed must be a whole number from 0 to 2**63-1")
                if speaker is not None and (isinstance(speaker, bool) or not isinstance(speaker, int)
                                            or not 0 <= speaker <= 999):
                    raise bad(f"{where_s}: its speaker must be a number from 0 to 999")
                sentences.append(Sentence(text(stext, where_s), seed, speaker, text(voice, f"{where_s}'s voice", True)))
            chapter.paragraphs.append(Paragraph(sentences, text(p.get("character"), "a character", True)))
        m.chapters.append(chapter)
    return m
