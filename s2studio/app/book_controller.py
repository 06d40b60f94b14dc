"""The Book view's controller: one book project open at a time, rendered in the background.

Qt glue over the Qt-free book package (``s2studio/book``): importing a manuscript into a book
project folder, editing it (narrator, chapter voices, cast, dictionary, the book's sampling
settings, a sentence's text, another take of a sentence) with every change saved at once,
rendering it on a thread of its own, exporting it. The keys follow the saved voices' content:
their digests are refreshed when the book opens, a voice is given to it, the voice library
changes (``voices_changed``) and before each render.

The render shares the studio's engine: ``InferenceWorker.engine_for`` loads the one model (or
connects to the server) under the worker's lock, and ``BookRenderer`` drives N sentences at once
through it. **A studio take goes first**: when the worker starts a studio job the render yields —
its sentences in flight are stopped at their next frame (they are rendered again later; finished
sentences are on disk already) — and it resumes by itself when the worker is idle again.
A pause by the user lets the sentences in flight finish and keeps them.

States: ``idle`` (nothing to do or never started), ``rendering``, ``pausing`` (waiting for the
sentences in flight), ``paused`` (by the user), ``waiting`` (yielded to a studio take), ``done``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import re
import threading
from pathlib import Path

from PySide6.QtCore import QObject, QThread, Signal

from s2studio.book import BookProject, BookRenderer, Manuscript, RenderSummary, SentenceRef, import_book
from s2studio.book.project import BOOK_FILE
from s2studio.errors import InputError, S2Error

log = logging.getLogger(__name__)

BOOK_EXTENSIONS = (".txt", ".md", ".markdown", ".epub")
# The book's own sampling settings a user can change in the Book view, with the ranges of the
# studio's controls (app/widgets/settings_dialog.py); the engine accepts more (engine/limits.py),
# so a value set beyond them by ``s2studio render`` is kept as long as it is not changed.
SAMPLING_RANGES: dict[str, tuple[float, float]] = {
    "temperature": (0.0, 2.0), "top_p": (0.0, 1.0), "top_k": (0, 4096), "max_new_tokens": (1, 8192)}
SAMPLING_LABELS = {"temperature": "Temperature", "top_p": "Top-p", "top_k": "Top-k",
                   "max_new_tokens": "Max frames per sentence"}
IDLE, RENDERING, PAUSING, PAUSED, WAITING, DONE = "idle", "rendering", "pausing", "paused", "waiting", "done"


def is_book_file(path: str | os.PathLike[str]) -> bool:
    return Path(path).suffix.lower() in BOOK_EXTENSIONS


def book_folder_for(root: Path, title: str) -> Path:
    """A new folder under ``root`` named after the book (``Title``, ``Title-2``, …)."""
    slug = re.sub(r"[^\w]+", "-", title, flags=re.UNICODE).strip("-_")[:60] or "book"
    folder, n = root / slug, 1
    while folder.exists():
        n += 1
        folder = root / f"{slug}-{n}"
    return folder


class _RenderThread(QThread):
    """Runs one ``BookRenderer.run`` (blocking, with its own sentence threads) off the UI thread."""

    progressed = Signal(object)  # RenderProgress
    summary = Signal(object)  # RenderSummary
    failed = Signal(object)  # WorkerError

    def __init__(self, engine_for, settings, project: BookProject, parallel: int | None,
                 chapters: list[int] | None, priority: int | None):
        super().__init__()
        self.setObjectName("book-render")
        self._engine_for, self._settings = engine_for, settings
        self.project, self.parallel, self.chapters, self.priority = project, parallel, chapters, priority
        self.renderer: BookRenderer | None = None
        self._ready = threading.Event()
        self._stop_before_start = ""  # "pause"/"cancel" asked while the engine was still loading

    def run(self) -> None:
        from s2studio.app.worker import describe_error

        try:
            engine = self._engine_for(self._settings)
            renderer = BookRenderer(engine, self.project, parallel=self.parallel, on_progress=self.progressed.emit)
            renderer.prioritise(self.priority)
            self.renderer = renderer
            self._ready.set()
            if self._stop_before_start:
                self.summary.emit(RenderSummary(stopped="paused" if self._stop_before_start == "pause"
                                                else "cancelled"))
                return
            self.summary.emit(renderer.run(self.chapters))
        except BaseException as exc:  # noqa: BLE001 - the thread's boundary: the view shows a banner
            if not isinstance(exc, S2Error):
                log.exception("book render failed")
            self.failed.emit(describe_error(exc))
        finally:
            self._ready.set()

    def stop(self, how: str) -> None:
        """``pause`` (finish the sentences in flight) or ``cancel`` (drop them)."""
        renderer = self.renderer
        if renderer is None:
            self._stop_before_start = how
            return
        renderer.pause() if how == "pause" else renderer.cancel()


class _ExportThread(QThread):
    chapter_written = Signal(object)  # ChapterOutput
    done = Signal(object)  # list[ChapterOutput]
    failed = Signal(object)  # WorkerError

    def __init__(self, project: BookProject, outdir: str, fmt: str, loudness: str, book_format: str | None):
        super().__init__()
        self.setObjectName("book-export")
        self.args = (project, outdir, fmt, loudness, book_format)

    def run(self) -> None:
        from s2studio.app.worker import describe_error
        from s2studio.book.mastering import export_book

        project, outdir, fmt, loudness, book_format = self.args
        try:
            outputs = export_book(project, outdir, fmt=fmt, loudness=loudness, book_format=book_format,
                                  on_chapter=self.chapter_written.emit)
            self.done.emit(outputs)
        except BaseException as exc:  # noqa: BLE001 - the thread's boundary
            if not isinstance(exc, S2Error):
                log.exception("book export failed")
            self.failed.emit(describe_error(exc))


class BookController(QObject):
    opened = Signal(object)  # BookProject (None: closed)
    changed = Signal()  # the manuscript or its render state changed: views refresh
    state_changed = Signal(str)
    progressed = Signal(object)  # RenderProgress
    render_finished = Signal(object)  # RenderSummary
    exported = Signal(object)  # list[ChapterOutput]
    export_progress = Signal(object)  # ChapterOutput
    problem = Signal(str)
    notice = Signal(str)

    def __init__(self, parent, *, engine_for, engine_config, books_root, parallel=lambda: None,
                 voices=lambda: None):
        """``engine_for(settings)`` gives the loaded engine (thread-safe); ``engine_config()`` the
        settings the studio uses now; ``books_root()`` the folder new books are made in;
        ``parallel()`` the sentences at once (None: the hardware's default); ``voices()`` the
        voice library the engine reads saved voices from (their digests are in the keys)."""
        super().__init__(parent)
        self._engine_for, self._engine_config, self._voices = engine_for, engine_config, voices
        self._books_root, self._parallel = books_root, parallel
        self.project: BookProject | None = None
        self.state = IDLE
        self._thread: _RenderThread | None = None
        self._export: _ExportThread | None = None
        self._priority: int | None = None
        self._again = False  # something changed during the render: run once more when it ends
        self._studio_busy = False
        self.fingerprint = ""  # the last render's settings part of the keys ("" before one)

    # ---- opening ------------------------------------------------------------------------------
    def import_file(self, path: str) -> BookProject | None:
        """A manuscript → a new book project in the books folder, opened. Errors: the banner."""
        import random

        if self.rendering:
            self.problem.emit("Pause the book's render before importing another book.")
            return None
        try:
            imported = import_book(path)
            manuscript = Manuscript.from_import(imported, seed=random.SystemRandom().randrange(2**63))
            root = Path(self._books_root())
            root.mkdir(parents=True, exist_ok=True)
            folder = book_folder_for(root, manuscript.title or Path(path).stem)
            project = BookProject.create(folder, manuscript, cover=imported.cover, cover_mime=imported.cover_mime)
        except S2Error as exc:
            self.problem.emit(str(exc))
            return None
        except OSError as exc:
            self.problem.emit(f"Book {path}: cannot be imported ({exc.strerror or exc}).")
            return None
        self._adopt(project)
        skipped = sum(1 for c in manuscript.chapters if not c.included)
        self.notice.emit(f"Imported “{manuscript.title}”: {len(manuscript.chapters)} chapter(s), "
                         f"{manuscript.sentence_count} sentence(s)"
                         + (f"; {skipped} left out as front matter or empty (tick them to include)" if skipped else "")
                         + ".")
        return project

    def open_folder(self, folder: str, *, quiet: bool = False) -> BookProject | None:
        if self.rendering:
            self.problem.emit("Pause the book's render before opening another book.")
            return None
        try:
            project = BookProject.open(folder)
        except S2Error as exc:
            if not quiet:
                self.problem.emit(str(exc))
            return None
        self._adopt(project)
        return project

    def _adopt(self, project: BookProject) -> None:
        self.project = project
        self._priority = None
        self._set_state(IDLE)
        self._refresh_fingerprint()
        if self._refresh_digests():  # a voice saved again while the book was closed
            try:
                project.save()
            except (S2Error, OSError) as exc:
                self.problem.emit(f"Book {project.folder}: cannot be saved ({exc}).")
        self.opened.emit(project)

    @staticmethod
    def is_book_folder(folder: str) -> bool:
        return bool(folder) and os.path.isfile(os.path.join(folder, BOOK_FILE))

    def _refresh_fingerprint(self) -> None:
        """The keys need the engine's name, known without loading (``model_info(load=False)``
        on the renderer's engine); until a render has run, the name comes from the settings."""
        if self.project is None:
            return
        from s2studio.book.renderer import STREAM_STRIDE

        settings = self._engine_config()
        name = os.path.basename(getattr(settings, "model_path", "") or "")
        engine = f"{name}|stride={STREAM_STRIDE}" if name else self._engine_of_last_render()
        if not engine:
            return  # a server, never rendered on: the first render sets it
        self.project.fingerprint = self.project.manuscript.settings_fingerprint(engine)

    def _engine_of_last_render(self) -> str:
        """The engine part of the keys the last render used (a server's model name is known only
        from a render): kept when the book's sampling settings change."""
        try:
            engine = json.loads(self.project.fingerprint or "{}").get("engine")
        except (ValueError, AttributeError):
            return ""
        return engine if isinstance(engine, str) else ""

    def _refresh_digests(self) -> bool:
        """The digests of the book's saved voices as the library holds them now (a voice saved
        again under its id gives its sentences new keys); True when one changed."""
        return self.project.refresh_voice_digests(self._voices())

    def voices_changed(self) -> None:
        """The voice library changed (a voice saved, re-recorded or deleted): the sentences of a
        voice saved again under its id show as not rendered, and render again."""
        if self.project is not None and self._refresh_digests():
            self._save(digests_fresh=True)

    # ---- editing (every change saved at once) ----------------------------------------------------
    def _save(self, digests_fresh: bool = False) -> bool:
        if not digests_fresh:
            self._refresh_digests()  # a voice just given to the book needs its digest in the keys
        try:
            self.project.save()
        except (S2Error, OSError) as exc:
            self.problem.emit(f"Book {self.project.folder}: cannot be saved ({exc}).")
            return False
        self._changed()
        return True

    def _changed(self) -> None:
        if self.rendering:
            self._again = True  # the running render planned without this change
        self.changed.emit()

    def set_narrator(self, voice: str | None) -> None:
        self.project.manuscript.voice = voice or None
        self._save()

    def set_chapter_voice(self, chapter: int, voice: str | None) -> bool:
        """The chapter's narrator (None: the book's narrator). Its sentences without a voice of
        their own or a character's get new keys: they alone render again."""
        chapters = self.project.manuscript.chapters
        if isinstance(chapter, bool) or not isinstance(chapter, int) or not 0 <= chapter < len(chapters):
            self.problem.emit(f"The book has chapters 1 to {len(chapters)}; there is no chapter {chapter!r}.")
            return False
        if voice is not None and (not isinstance(voice, str) or not voice.strip()):
            self.problem.emit(f"Chapter {chapter + 1}: the voice must be a saved voice's id.")
            return False
        chapters[chapter].voice = voice.strip() if voice else None
        return self._save()

    def set_sampling(self, **values) -> bool:
        """The book's own sampling settings (``temperature``, ``top_p``, ``top_k``,
        ``max_new_tokens``), saved with the book. They are part of every sentence's key: the
        whole book renders again (its old audio stays in the folder: the old values find it)."""
        if self.project is None:
            return False
        if self.rendering:
            self.problem.emit("Pause the book's render before changing its sampling settings: the sentences "
                              "being rendered use the present ones.")
            return False
        current = self.project.manuscript.generation
        for name, value in values.items():
            if name not in SAMPLING_RANGES:
                self.problem.emit(f"{name!r} is not a sampling setting of the book.")
                return False
            low, high = SAMPLING_RANGES[name]
            label = SAMPLING_LABELS[name]
            whole = isinstance(low, int)
            if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)) or (
                    isinstance(value, float) and not math.isfinite(value)):
                self.problem.emit(f"{label} must be {'a whole number' if whole else 'a number'} from {low:g} to "
                                  f"{high:g}, not {value!r}.")
                return False
            if value != getattr(current, name) and not low <= value <= high:
                self.problem.emit(f"{label} must be from {low:g} to {high:g}, not {value:g}.")
                return False
        new = dataclasses.replace(current, **values)
        try:
            new.validated()
        except InputError as exc:
            self.problem.emit(str(exc))
            return False
        if new == current:
            return True
        self.project.manuscript.generation = new
        self._refresh_fingerprint()
        return self._save()

    def rendered_count(self) -> int:
        """Sentences of the whole book that have audio under their present keys."""
        project = self.project
        if project is None:
            return 0
        m = project.manuscript
        return sum(1 for j in m.jobs(list(range(len(m.chapters))), project.fingerprint) if project.is_rendered(j.key))

    def set_included(self, chapter: int, included: bool) -> None:
        self.project.manuscript.chapters[chapter].include = bool(included)
        self._save()

    def set_character(self, name: str, voice: str | None) -> bool:
        try:
            self.project.manuscript.cast.set_character(name, voice)
        except InputError as exc:
            self.problem.emit(str(exc))
            return False
        return self._save()

    def remove_character(self, name: str) -> None:
        cast = self.project.manuscript.cast
        cast.characters.pop(name, None)
        for speaker in [s for s, n in cast.speakers.items() if n == name]:
            del cast.speakers[speaker]
        for chapter in self.project.manuscript.chapters:
            for paragraph in chapter.paragraphs:
                if paragraph.character == name:
                    paragraph.character = None
        self._save()

    def assign_speaker(self, speaker: int, name: str | None) -> bool:
        cast = self.project.manuscript.cast
        try:
            if name:
                cast.assign_speaker(speaker, name)
            else:
                cast.speakers.pop(speaker, None)
        except InputError as exc:
            self.problem.emit(str(exc))
            return False
        return self._save()

    def set_paragraph_character(self, ref: SentenceRef, name: str | None) -> None:
        self.project.manuscript.chapters[ref.chapter].paragraphs[ref.paragraph].character = name or None
        self._save()

    def add_pronunciation(self, phrase: str, say: str, match_case: bool) -> bool:
        try:
            self.project.manuscript.dictionary.add(phrase, say, match_case=match_case)
        except InputError as exc:
            self.problem.emit(str(exc))
            return False
        return self._save()

    def remove_pronunciation(self, phrase: str, match_case: bool) -> None:
        self.project.manuscript.dictionary.remove(phrase, match_case=match_case)
        self._save()

    def edit_sentence(self, ref: SentenceRef, text: str) -> bool:
        """New text for one sentence: it alone renders again (its key changes)."""
        try:
            self.project.manuscript.edit_sentence(ref, text)
        except InputError as exc:
            self.problem.emit(str(exc))
            return False
        if self._save():
            self._render_soon(ref.chapter)
            return True
        return False

    def regenerate(self, ref: SentenceRef) -> None:
        """Another take of one sentence (a new seed); the others keep theirs."""
        import random

        self.project.manuscript.reseed_sentence(ref, random.SystemRandom().randrange(2**63))
        if self._save():
            self._render_soon(ref.chapter)

    def _render_soon(self, chapter: int) -> None:
        """An edited sentence is rendered at once when the book is idle or done (not when the user
        paused it: pause means pause)."""
        if self.state in (IDLE, DONE):
            self.render(priority=chapter)

    # ---- what is rendered ------------------------------------------------------------------------
    def status_of(self, ref: SentenceRef) -> str:
        """``rendered``, ``failed`` or ``missing``."""
        job = self.project.manuscript.job(ref, self.project.fingerprint)
        if self.project.is_rendered(job.key):
            return "rendered"
        return "failed" if self.project.failure(job.key) else "missing"

    def failure_of(self, ref: SentenceRef) -> str | None:
        return self.project.failure(self.project.manuscript.job(ref, self.project.fingerprint).key)

    def chapter_progress(self, chapter: int) -> tuple[int, int]:
        return self.project.chapter_progress(chapter)

    def audio_from(self, ref: SentenceRef):
        """(samples, rate, sentence starts) from ``ref`` to the end of its chapter, as the chapter
        file will space them, up to the first sentence not rendered yet; None when ``ref`` itself
        is not rendered."""
        import numpy as np

        m = self.project.manuscript
        chapter = m.chapters[ref.chapter]
        pieces, starts, rate, at = [], [], None, 0
        for p, s, _ in chapter.sentences():
            if (p, s) < (ref.paragraph, ref.sentence):
                continue
            job = m.job(SentenceRef(ref.chapter, p, s), self.project.fingerprint)
            if not self.project.is_rendered(job.key):
                break
            audio, r = self.project.audio_of(job.key)
            rate = rate or r
            if pieces:
                gap = np.zeros(int(rate * (m.sentence_pause_ms if s else m.paragraph_pause_ms) / 1000), np.float32)
                pieces.append(gap)
                at += len(gap)
            starts.append(((p, s), at))
            pieces.append(audio)
            at += len(audio)
        if not pieces:
            return None
        return np.concatenate(pieces), rate, starts

    # ---- rendering ----------------------------------------------------------------------------
    @property
    def rendering(self) -> bool:
        return self._thread is not None

    def render(self, chapters: list[int] | None = None, priority: int | None = None) -> bool:
        """Render every missing sentence of the included chapters (``priority``'s first)."""
        if self.project is None:
            return False
        if priority is not None:
            self.prioritise(priority)
        if self._thread is not None:
            return True
        if self._studio_busy:
            self._set_state(WAITING)
            return True
        if self._refresh_digests():  # here, not on the render's thread: the UI's keys follow at once
            self._save(digests_fresh=True)
        settings = self._engine_config()
        thread = _RenderThread(self._engine_for, settings, self.project, self._parallel(), chapters, self._priority)
        thread.progressed.connect(self.progressed)
        thread.progressed.connect(lambda _p: self.changed.emit())
        thread.summary.connect(self._on_summary)
        thread.failed.connect(self._on_failed)
        thread.finished.connect(self._on_thread_finished)
        self._again = False
        self._thread = thread
        self._set_state(RENDERING)
        thread.start()
        return True

    def prioritise(self, chapter: int | None) -> None:
        """Render this chapter's missing sentences next (the one being listened to)."""
        self._priority = chapter
        thread = self._thread
        if thread is not None and thread.renderer is not None:
            thread.renderer.prioritise(chapter)

    def pause(self) -> None:
        """Start no new sentence; those in flight finish and are kept."""
        if self._thread is not None:
            self._thread.stop("pause")
            self._set_state(PAUSING)
        elif self.state == WAITING:
            self._set_state(PAUSED)

    def resume(self) -> None:
        self.render()

    def cancel(self, wait_ms: int = 0) -> bool:
        """Stop now (the window closes): sentences in flight are dropped; True when stopped."""
        thread = self._thread
        if thread is None:
            return True
        thread.stop("cancel")
        return thread.wait(wait_ms) if wait_ms else False

    def studio_busy(self, busy: bool) -> None:
        """The worker started (True) or ended (False) a studio job: the book yields, then resumes."""
        self._studio_busy = busy
        if busy and self._thread is not None and self.state == RENDERING:
            self._thread.stop("cancel")
            self._set_state(WAITING)
        elif not busy and self.state == WAITING and self._thread is None:
            self.render()

    def _on_summary(self, summary: RenderSummary) -> None:
        self.fingerprint = self.project.fingerprint
        self.render_finished.emit(summary)
        if summary.failures:
            ref, message = summary.failures[0]
            self.problem.emit(f"{summary.failed} sentence(s) could not be rendered (chapter {ref.chapter + 1}: "
                              f"{message}); they are tried again on the next render.")

    def _on_failed(self, error) -> None:
        self.problem.emit(error.message)
        self._set_state(IDLE)

    def _on_thread_finished(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.deleteLater()
        self.changed.emit()
        if self.state == PAUSING:
            self._set_state(PAUSED)
        elif self.state == WAITING:
            if not self._studio_busy:
                self.render()
        elif self.state == RENDERING:
            if self._again:
                self.render()
            else:
                self._set_state(DONE if self._all_rendered() else IDLE)

    def _all_rendered(self) -> bool:
        m = self.project.manuscript
        return all(self.project.is_rendered(j.key) for j in m.jobs(None, self.project.fingerprint))

    def _set_state(self, state: str) -> None:
        if state != self.state:
            self.state = state
            self.state_changed.emit(state)

    # ---- export ---------------------------------------------------------------------------------
    def export(self, outdir: str, fmt: str = "mp3", loudness: str = "acx", book_format: str | None = "m4b") -> bool:
        if self.project is None or self._export is not None:
            return False
        thread = _ExportThread(self.project, outdir, fmt, loudness, book_format)
        thread.chapter_written.connect(self.export_progress)
        thread.done.connect(self.exported)
        thread.failed.connect(lambda error: self.problem.emit(error.message))
        thread.finished.connect(self._on_export_finished)
        self._export = thread
        thread.start()
        return True

    @property
    def exporting(self) -> bool:
        return self._export is not None

    def _on_export_finished(self) -> None:
        thread, self._export = self._export, None
        if thread is not None:
            thread.deleteLater()

    def shutdown(self, timeout_ms: int = 20_000) -> bool:
        """The window closes: stop the render (finished sentences are on disk) and the export."""
        ok = True
        if self._thread is not None:
            self._thread.stop("cancel")
            ok = self._thread.wait(timeout_ms)
        if self._export is not None:
            ok = self._export.wait(timeout_ms) and ok
        return ok
