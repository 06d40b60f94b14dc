"""Several takes decoded together: one pass over the weights per step for all of them.

A decode step reads every weight of the Slow-AR and the Fast-AR to compute a few rows; on the
CPU that read, not the arithmetic, is the cost, so B takes stepped together cost little more
than one (docs/performance.md, "Many requests at once"). ``FrameBatcher`` runs a driver thread
that, between frames, admits one waiting take (its prefill runs alone: prompts differ in
length), then runs one batched step — Slow-AR for every take at its own position in its own
KV cache, then the Fast-AR's codebooks for all — and hands each take its frame. Takes leave
the batch when they end, are cancelled, or their consumer stops reading.

Each take keeps its own ``FrameSampler`` (seeded generator, RAS window, stop rules), and every
batched matmul gives each request's rows exactly what its own call would
(``transformer.linear_grouped``), so a seeded take yields the same frames batched as alone. The
maths is the one-request path's: ``DualAR``'s ``*_batch`` methods run the same layer function,
embedding and Fast-AR start in a ``transformer.BatchedContext``.

Callers use :meth:`FrameBatcher.frames` exactly like ``generate_frames``: from any number of
threads, each iterating its own take.

The takes' own CPU work that runs beside the batch (the codec decoding each take's audio) can be
handed to the driver with :meth:`FrameBatcher.between_steps`: it then runs between two steps,
not at the same time as one. On a CPU both would otherwise use every core at once: two thread
pools on two cores made the steps and the codec each ~2-3x slower (a 4-sentence book render
spent more time in the codec than in its frames), while in turn each runs at full speed.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import queue
import threading
import time
from typing import Iterator

import numpy as np
import torch

from s2studio.engine.kernels.common import MAX_KERNEL_ROWS
from s2studio.engine.model.dual_ar import DualAR
from s2studio.engine.model.generate import Frame, FrameSampler, GenerationStats
from s2studio.engine.model.prefix_cache import PrefixCache, prefill_prompt
from s2studio.engine.params import GenerationParams

log = logging.getLogger(__name__)

# Takes per step: the Fast-AR's first call has 2 rows per take, and the quantized GEMV kernels
# take at most MAX_KERNEL_ROWS activation rows per call (more rows: more calls, each reading
# every weight again).
MAX_BATCH = MAX_KERNEL_ROWS // 2

_END = object()  # posted to a take's queue after its last frame


class _SideJob:
    """Work handed to the driver to run between two steps (``between_steps``)."""

    def __init__(self, fn):
        self.fn = fn
        self.done = threading.Event()
        self.result = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.fn()
        except BaseException as exc:  # noqa: BLE001 - raised again in the thread that asked
            self.error = exc
        finally:
            self.done.set()


class _Take:
    """One take in the batcher: its sampler, its KV cache and the queue its consumer reads."""

    def __init__(self, sampler: FrameSampler, tokens: torch.Tensor, prefix_len: int):
        self.sampler = sampler
        self.tokens = tokens
        self.prefix_len = prefix_len
        self.cache = None
        self.out: queue.SimpleQueue = queue.SimpleQueue()
        self.abandoned = threading.Event()  # the consumer stopped reading

    def gone(self) -> bool:
        return self.abandoned.is_set()

    def finish(self) -> None:
        self.cache = None  # a long take's cache is large; free it now, not when the consumer ends
        self.out.put(_END)


class FrameBatcher:
    """Decodes the takes of several threads together, on one model."""

    def __init__(self, model: DualAR, im_end_id: int, *, max_batch: int = MAX_BATCH,
                 model_lock: threading.RLock | None = None, prefix_cache: PrefixCache | None = None):
        """``model_lock``: held for each prefill and step (the pipeline's lock: a take run alone,
        or a reload, then waits for the step to end, and a step for them). ``prefix_cache``:
        where the voice prefixes of the takes' prompts are kept (shared with the takes run
        alone: ``prefix_cache.prefill_prompt``)."""
        if not 1 <= max_batch <= MAX_BATCH:
            raise ValueError(f"max_batch must be 1..{MAX_BATCH}")
        self.model = model
        self.im_end_id = im_end_id
        self.max_batch = max_batch
        self.prefix_cache = prefix_cache
        self._model_lock = model_lock if model_lock is not None else contextlib.nullcontext()
        self._cond = threading.Condition()
        self._waiting: collections.deque[_Take] = collections.deque()
        self._active: list[_Take] = []
        self._side: collections.deque[_SideJob] = collections.deque()
        self._thread: threading.Thread | None = None
        self.steps = 0  # batched steps run (for tests and benchmarks)
        self.largest_batch = 0
        self.side_jobs = 0  # between_steps calls run by the driver

    @property
    def active(self) -> int:
        with self._cond:
            return len(self._active)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait for the driver thread to end (no take left); True if it has. A script should
        call this before exiting: a daemon thread stopped inside a torch call aborts the process."""
        with self._cond:
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    def between_steps(self, fn):
        """``fn()`` run on the driver thread between two steps, under the model lock, and its
        result returned here (its exception raised here). With no driver running (no take in the
        batch) it runs here, under the model lock. Side jobs run in the order they were asked
        for, before the next step."""
        with self._cond:
            job = None
            if self._thread is not None:  # the driver checks for side jobs before it may end
                job = _SideJob(fn)
                self._side.append(job)
                self._cond.notify_all()
        if job is None:
            with self._model_lock:
                return fn()
        job.done.wait()
        if job.error is not None:
            raise job.error
        return job.result

    def frames(self, prompt: np.ndarray, params: GenerationParams, *, cancel: threading.Event | None = None,
               stats: GenerationStats | None = None, prefix_len: int = 0) -> Iterator[Frame]:
        """As ``generate_frames``, with this take decoded in the shared batch (its voice prefix
        through the batcher's ``prefix_cache``). Bad input raises here, in the caller's thread,
        before the take joins."""
        stats = stats if stats is not None else GenerationStats()
        # The driver writes its own stats; they are copied to the caller's when the take ends
        # here, so a take that stops reading early never sees them change afterwards.
        sampler = FrameSampler(self.model, prompt, params, im_end_id=self.im_end_id, cancel=cancel,
                               stats=GenerationStats())
        stats.seed = sampler.stats.seed
        if sampler.cancelled():
            stats.stop_reason = "cancelled"
            return
        take = _Take(sampler, sampler.prompt_tokens(), prefix_len)
        stats.prompt_tokens = sampler.stats.prompt_tokens
        with self._cond:
            self._waiting.append(take)
            if self._thread is None:
                self._thread = threading.Thread(target=self._drive, name="s2studio-batch", daemon=True)
                self._thread.start()
            self._cond.notify_all()
        stop_reason = ""
        try:
            while True:
                item = take.out.get()
                if item is _END:
                    stop_reason = sampler.stats.stop_reason
                    return
                if isinstance(item, BaseException):
                    raise item
                stats.frames += 1
                yield item
                # As generate_frames: a cancel seen after a frame ends the take there, even if
                # the driver, a step ahead, has already made the next frame.
                if sampler.cancelled():
                    stop_reason = "cancelled"
                    return
        finally:
            take.abandoned.set()  # closed early: the driver drops it before its next step
            own = sampler.stats
            stats.prefill_s, stats.slow_s, stats.fast_s = own.prefill_s, own.slow_s, own.fast_s
            stats.stop_reason = stop_reason or stats.stop_reason

    # ---- the driver thread ---------------------------------------------------------------------
    def _drive(self) -> None:
        while True:
            with self._cond:
                if not self._waiting and not self._active and not self._side:
                    self._thread = None  # idle: the thread ends; the next take starts another
                    return
                admit = self._waiting.popleft() if self._waiting and len(self._active) < self.max_batch else None
                running = list(self._active)
                side = list(self._side)
                self._side.clear()
            with self._model_lock:
                for job in side:
                    job.run()
                self.side_jobs += len(side)
                if admit is not None:
                    self._prefill(admit)
                if running:
                    self._step(running)

    def _prefill(self, take: _Take) -> None:
        s, model = take.sampler, self.model
        if take.gone() or s.cancelled():
            s.stats.stop_reason = "cancelled"
            take.finish()
            return
        try:
            t0 = time.perf_counter()
            take.cache = model.make_cache(*s.cache_size(take.tokens.shape[1]))
            hidden = prefill_prompt(model, take.tokens, take.prefix_len, take.cache, self.prefix_cache)
            s.take_hidden(hidden, model.sampled_logits(hidden, self.im_end_id))
            s.stats.prefill_s = time.perf_counter() - t0
        except Exception as exc:  # the take's consumer raises it; the others go on
            take.cache = None
            take.out.put(exc)
            return
        take.tokens = None
        with self._cond:
            self._active.append(take)

    def _step(self, running: list[_Take]) -> None:
        """One frame for each running take, then the Slow-AR step of those that go on."""
        model, im_end = self.model, self.im_end_id
        staying: list[_Take] = []
        try:
            t_fast = time.perf_counter()
            starting, code0 = [], []
            for take in running:
                c0 = None if take.gone() else take.sampler.begin_frame()
                if c0 is None:
                    if take.gone():
                        take.sampler.stats.stop_reason = "cancelled"
                    take.finish()
                else:
                    starting.append(take)
                    code0.append(c0)
            if not starting:
                return
            self.steps += 1
            self.largest_batch = max(self.largest_batch, len(starting))
            samplers = [t.sampler for t in starting]
            caches, logits = model.fast_start_batch(torch.stack([s.hidden for s in samplers]), code0)
            codes = [s.take_codes(1, logits[i]) for i, s in enumerate(samplers)]
            for j in range(2, model.cfg.num_codebooks):
                logits = model.fast_next_batch(caches, codes, j)
                codes = [s.take_codes(j, logits[i]) for i, s in enumerate(samplers)]
            dt = time.perf_counter() - t_fast
            for take in starting:
                take.sampler.stats.fast_s += dt
                take.out.put(take.sampler.end_frame())
                if take.sampler.continues():
                    staying.append(take)
                else:
                    take.finish()
            if staying:
                t_slow = time.perf_counter()
                hidden = model.forward_slow_batch([t.sampler.column() for t in staying], [t.cache for t in staying])
                logits = model.sampled_logits_batch(hidden, im_end)
                for i, take in enumerate(staying):
                    take.sampler.take_hidden(hidden[i], logits[i])
                dt = time.perf_counter() - t_slow
                for take in staying:
                    take.sampler.stats.slow_s += dt
        except Exception as exc:  # every take of the step gets the error; the batcher goes on
            log.exception("batched decode step failed")
            for take in running:
                take.cache = None
                take.out.put(exc)
            staying = []
        finally:
            with self._cond:
                self._active = staying + [t for t in self._active if t not in running]
