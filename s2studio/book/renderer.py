"""Rendering a book: N sentences in flight through the engine interface, in order of need,
every finished sentence stored at once (docs/book.md, "Rendering").

Each sentence is one take of its own (``SynthesisRequest`` with the sentence's model text, voice
and seed, no segmentation), so its audio is sample-identical to rendering that sentence alone.
``parallel`` > 1 keeps that many takes running on as many threads; the local engine decodes them
together (``synthesize(batched=True)``: one pass over the weights per step for all), a remote
engine sends them to its servers, which batch them. Sentences are taken in *order of need*: the
chapter asked for first (:meth:`BookRenderer.prioritise`, the one being listened to), then the
rest in reading order.

Only the calling thread writes to the project, after each sentence: ``pause()`` lets the
sentences in flight finish and be stored; ``cancel()`` stops them at their next frame (they are
lost and rendered again next time); a crash loses at most the sentences in flight.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from s2studio.book.manuscript import SentenceJob, SentenceRef
from s2studio.book.project import BookProject
from s2studio.engine.api import SynthesisRequest
from s2studio.errors import InputError, S2Error

log = logging.getLogger(__name__)

MAX_PARALLEL = 32  # sentences in flight; a local engine decodes at most LOCAL_MAX_PARALLEL together
LOCAL_MAX_PARALLEL = 8  # s2studio.engine.batching.MAX_BATCH (no torch import here)
STREAM_STRIDE = 16  # frames per codec call: part of the key (chunking could move a float's last bit)


def default_parallel(engine) -> int:
    """Sentences in flight when the user does not say: 4 on a CPU (4 at once measured 2.7–3.3×
    the throughput of one on 2 cores with the full-size Q8_0 file, docs/performance.md; 8 gave
    4.1–4.8× but each take's KV cache, up to ~0.4 GB with a full frame budget, is held 8 times),
    8 on a GPU (weights read once for 8 rows), 4 per server for a remote engine."""
    addresses = getattr(engine, "addresses", None)
    if addresses:
        return min(MAX_PARALLEL, 4 * len(addresses))
    device = str(engine.model_info(load=False).device or "cpu")
    return LOCAL_MAX_PARALLEL if device.startswith(("cuda", "mps")) else 4


def check_parallel(engine, parallel: int) -> int:
    limit = MAX_PARALLEL if getattr(engine, "addresses", None) else LOCAL_MAX_PARALLEL
    if isinstance(parallel, bool) or not isinstance(parallel, int) or not 1 <= parallel <= limit:
        raise InputError(f"parallel must be 1 to {limit} sentences at once with this engine, not {parallel!r}.")
    return parallel


@dataclass
class RenderProgress:
    chapter: int  # of the sentence just finished
    chapter_title: str
    chapter_done: int
    chapter_total: int
    done: int  # sentences of this run's plan finished (stored or failed)
    total: int
    elapsed_s: float
    eta_s: float | None  # None until a sentence has finished
    audio_s: float  # audio rendered this run
    failed: int
    job: SentenceJob | None = None


@dataclass
class RenderSummary:
    rendered: int = 0
    failed: int = 0
    skipped: int = 0  # already rendered
    audio_s: float = 0.0
    elapsed_s: float = 0.0
    stopped: str = ""  # "" finished, "paused", "cancelled"
    failures: list[tuple[SentenceRef, str]] = field(default_factory=list)


class BookRenderer:
    def __init__(self, engine, project: BookProject, *, parallel: int | None = None,
                 on_progress: Callable[[RenderProgress], None] | None = None):
        self.engine = engine
        self.project = project
        self.parallel = check_parallel(engine, parallel if parallel is not None else default_parallel(engine))
        self.on_progress = on_progress
        info = engine.model_info(load=False)
        project.fingerprint = project.manuscript.settings_fingerprint(f"{info.name}|stride={STREAM_STRIDE}")
        self.refresh_voices()
        self._lock = threading.Lock()
        self._pending: dict[int, list[SentenceJob]] = {}
        self._priority: int | None = None
        self._stop = threading.Event()
        self._cancel = threading.Event()
        self._in_flight: dict[int, object] = {}  # thread id -> SynthesisJob

    def refresh_voices(self) -> bool:
        """The digests of the book's saved voices as the engine's voice library holds them now
        (``book/voice_digests.py``): a voice saved again under its id gives its sentences new
        keys, so they are planned again. The book is saved when a digest changed."""
        changed = self.project.refresh_voice_digests(getattr(self.engine, "voices", None))
        if changed:
            self.project.save()
        return changed

    # ---- what to render -------------------------------------------------------------------------
    def plan(self, chapters: list[int] | None = None) -> list[SentenceJob]:
        """The sentences of ``chapters`` (default: the included ones) not rendered yet, in
        reading order. Sentences that failed last time are tried again."""
        m = self.project.manuscript
        if chapters is not None:
            for c in chapters:
                if not 0 <= c < len(m.chapters):
                    raise InputError(f"The book has chapters 1 to {len(m.chapters)}; there is no chapter {c + 1}.")
        return [j for j in m.jobs(chapters, self.project.fingerprint) if not self.project.is_rendered(j.key)]

    def prioritise(self, chapter: int | None) -> None:
        """Render ``chapter``'s missing sentences next (the one being listened to); None: reading order."""
        with self._lock:
            self._priority = chapter

    def regenerate(self, ref: SentenceRef, seed: int | None = None) -> SentenceJob:
        """Another take of one sentence: a new seed (drawn if not given), the manuscript saved;
        the next ``run`` renders it (and only it, of the sentences already rendered)."""
        import random

        self.project.manuscript.reseed_sentence(ref, seed if seed is not None
                                                else random.SystemRandom().randrange(2**63))
        self.project.save()
        return self.project.manuscript.job(ref, self.project.fingerprint)

    # ---- control from another thread -------------------------------------------------------------
    def pause(self) -> None:
        """Start no more sentences; those in flight finish and are kept; ``run`` then returns."""
        self._stop.set()

    def cancel(self) -> None:
        """Stop now: the sentences in flight end at their next frame and are not kept."""
        self._cancel.set()
        self._stop.set()
        with self._lock:
            jobs = list(self._in_flight.values())
        for job in jobs:
            job.cancel()

    # ---- the render -------------------------------------------------------------------------------
    def run(self, chapters: list[int] | None = None) -> RenderSummary:
        """Render every missing sentence of ``chapters``; blocks until done, paused or cancelled
        (call it from a worker thread in a UI). Progress after every sentence."""
        self._stop.clear()
        self._cancel.clear()
        self.refresh_voices()
        m = self.project.manuscript
        wanted = chapters if chapters is not None else [i for i, c in enumerate(m.chapters) if c.included]
        all_jobs = m.jobs(wanted, self.project.fingerprint)
        todo = self.plan(wanted)
        summary = RenderSummary(skipped=len(all_jobs) - len(todo))
        with self._lock:
            self._pending = {}
            for job in todo:
                self._pending.setdefault(job.ref.chapter, []).append(job)
        chapter_totals = {c: 0 for c in wanted}
        chapter_done = {c: 0 for c in wanted}
        for job in all_jobs:
            chapter_totals[job.ref.chapter] += 1
            if self.project.is_rendered(job.key):
                chapter_done[job.ref.chapter] += 1
        total_chars = sum(len(j.model_text) for j in todo) or 1
        done_chars = 0
        results: queue.SimpleQueue = queue.SimpleQueue()
        workers = [threading.Thread(target=self._work, args=(results,), name=f"s2studio-book-{i}", daemon=True)
                   for i in range(min(self.parallel, len(todo)))]
        t0 = time.perf_counter()
        for w in workers:
            w.start()
        finished_workers, done = 0, 0
        error: BaseException | None = None
        try:
            while finished_workers < len(workers):
                item = results.get()
                if item is None:
                    finished_workers += 1
                    continue
                kind, job, payload = item
                if kind == "bug":
                    error = error or payload
                    self.cancel()
                    continue
                if kind == "done":
                    audio, rate, stop_reason = payload
                    self.project.store(job, audio, rate, stop_reason)
                    summary.rendered += 1
                    summary.audio_s += len(audio) / rate
                    chapter_done[job.ref.chapter] += 1
                else:  # "failed": an S2Error for this sentence; the render goes on
                    self.project.store_failure(job, payload)
                    summary.failed += 1
                    summary.failures.append((job.ref, payload))
                done += 1
                done_chars += len(job.model_text)
                if self.on_progress is not None:
                    elapsed = time.perf_counter() - t0
                    eta = elapsed * (total_chars - done_chars) / done_chars if done_chars else None
                    c = job.ref.chapter
                    self.on_progress(RenderProgress(c, m.chapters[c].title, chapter_done[c], chapter_totals[c], done,
                                                    len(todo), elapsed, eta, summary.audio_s, summary.failed, job))
        except BaseException:
            self.cancel()  # Ctrl+C: end the takes at their next frame, then let the threads go
            for w in workers:
                w.join()
            raise
        for w in workers:
            w.join()
        if error is not None:
            raise error
        summary.elapsed_s = time.perf_counter() - t0
        if done < len(todo):
            summary.stopped = "cancelled" if self._cancel.is_set() else "paused"
        return summary

    def _next(self) -> SentenceJob | None:
        with self._lock:
            if self._stop.is_set() or not self._pending:
                return None
            chapter = self._priority if self._priority in self._pending else min(self._pending)
            jobs = self._pending[chapter]
            job = jobs.pop(0)
            if not jobs:
                del self._pending[chapter]
            return job

    def _work(self, results: queue.SimpleQueue) -> None:
        me = threading.get_ident()
        try:
            while True:
                job = self._next()
                if job is None:
                    return
                try:
                    synthesis = self.engine.synthesize(self.request_for(job), batched=self.parallel > 1)
                    with self._lock:
                        self._in_flight[me] = synthesis
                    if self._cancel.is_set():
                        synthesis.cancel()
                    result = synthesis.run_to_end()
                except S2Error as exc:
                    results.put(("failed", job, str(exc)))
                    continue
                finally:
                    with self._lock:
                        self._in_flight.pop(me, None)
                if result.cancelled or self._cancel.is_set():
                    return
                results.put(("done", job, (result.audio, result.sample_rate, result.stop_reason)))
        except BaseException as exc:  # a bug: the render stops and run() raises it
            results.put(("bug", None, exc))
        finally:
            results.put(None)

    def request_for(self, job: SentenceJob) -> SynthesisRequest:
        """The take of one sentence: exactly what rendering that sentence alone would ask for."""
        generation = dataclasses.replace(self.project.manuscript.generation, seed=job.seed)
        return SynthesisRequest(text=job.model_text, voice=job.voice, generation=generation,
                                stream_stride=STREAM_STRIDE)
