"""A bounded FIFO of synthesis jobs, run by ``workers`` threads (one per take at a time).

With one worker the Pipeline runs one take at a time and requests take turns (s2.cpp answers
a second request with 503; here up to ``depth`` requests wait in arrival order and only a
request beyond that gets 503). With more workers, up to that many takes run at once, each on
its own thread, decoded together in the pipeline's batch (``Pipeline.synthesize(batched=
True)``: one pass over the weights per step for all of them); more wait, up to ``depth``. A
worker iterates its ``SynthesisJob`` and hands every chunk to the request's event loop as
soon as it is decoded. Cancelling a ticket (client gone) removes it from the queue if it is
still waiting, or cancels its job at the next frame boundary if it is running, so the next
request starts at once.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
import time
from dataclasses import dataclass

from s2studio.engine.pipeline import AudioChunk, SynthesisJob, SynthesisResult

log = logging.getLogger(__name__)


class QueueFull(Exception):
    pass


class ClientGone(Exception):
    """The client disconnected; nothing is sent any more."""


@dataclass(frozen=True)
class Chunk:
    chunk: AudioChunk


@dataclass(frozen=True)
class Done:
    result: SynthesisResult | None


@dataclass(frozen=True)
class Failed:
    error: BaseException


Event = Chunk | Done | Failed


class Ticket:
    """One request's place in the queue; ``next_event()`` awaits its chunks, then Done/Failed."""

    def __init__(self, job: SynthesisJob, loop: asyncio.AbstractEventLoop):
        self.job = job
        self._loop = loop
        self._events: asyncio.Queue[Event] = asyncio.Queue()
        self._cancelled = threading.Event()
        self.finished = threading.Event()  # set by the worker when the job has let go of the model

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self) -> None:
        """Safe from any thread, any number of times."""
        self._cancelled.set()
        self.job.cancel()

    def post(self, event: Event) -> None:
        """From the worker thread: deliver an event to the request's loop."""
        try:
            self._loop.call_soon_threadsafe(self._events.put_nowait, event)
        except RuntimeError:  # the loop is closed: the server is shutting down
            self.cancel()

    def abandon(self) -> None:
        """From the request's own loop: the client is gone; wake whoever awaits an event."""
        self.cancel()
        self._events.put_nowait(Failed(ClientGone()))

    async def next_event(self) -> Event:
        return await self._events.get()


class JobQueue:
    def __init__(self, depth: int, threads: int = 0, workers: int = 1):
        self.depth = depth
        self.threads = threads  # the server's CPU thread count (0: all cores), between requests
        self.workers = workers  # takes running at once
        self._waiting: collections.deque[Ticket] = collections.deque()
        self._admitted = 0  # requests given a place but not yet queued (still being read/decoded)
        self._active: list[Ticket] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._threads: list[threading.Thread] = []

    # ---- state, for /health -----------------------------------------------------------------
    @property
    def waiting(self) -> int:
        """Requests waiting for the model, including admitted ones still being prepared."""
        with self._cond:
            return len(self._waiting) + self._admitted

    @property
    def running(self) -> int:
        """Takes running now (at most ``workers``)."""
        with self._cond:
            return len(self._active)

    @property
    def busy(self) -> bool:
        return self.running > 0

    # ---- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        with self._cond:
            if self._threads:
                return
            self._stopping = False
            self._threads = [threading.Thread(target=self._work, name=f"s2studio-synthesis-{i}", daemon=True)
                             for i in range(self.workers)]
            for thread in self._threads:
                thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Cancel everything and wait (bounded) for the worker to leave."""
        with self._cond:
            self._stopping = True
            tickets = list(self._waiting) + self._active
            self._waiting.clear()
            self._cond.notify_all()
            threads, self._threads = self._threads, []
        for ticket in tickets:
            ticket.cancel()
            ticket.post(Failed(RuntimeError("The server is shutting down.")))
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    # ---- requests -----------------------------------------------------------------------------
    def _check_room(self) -> None:
        """(under the lock) ``QueueFull`` unless a request may join: ``workers`` running plus
        ``depth`` waiting (admitted ones included) is full."""
        if self._stopping:
            raise QueueFull("The server is shutting down.")
        occupied = len(self._active) + len(self._waiting) + self._admitted
        if occupied >= self.workers + self.depth:
            running = len(self._active)
            what = "one synthesis" if running == 1 else f"{running} syntheses"
            raise QueueFull(f"Server busy: {what} running and {occupied - running} waiting.")

    @contextlib.contextmanager
    def admission(self):
        """Hold a place in the queue while a request is read and its audio decoded, so a full
        queue answers 503 before any of that work (a reference upload can take seconds to
        decode). Yields ``submit(job) -> Ticket``; leaving without submitting frees the place."""
        with self._cond:
            self._check_room()
            self._admitted += 1
        held = True

        def submit(job: SynthesisJob) -> Ticket:
            nonlocal held
            ticket = Ticket(job, asyncio.get_running_loop())
            with self._cond:
                if self._stopping:
                    raise QueueFull("The server is shutting down.")
                self._admitted -= 1
                held = False
                self._waiting.append(ticket)
                self._cond.notify_all()
            return ticket

        try:
            yield submit
        finally:
            if held:
                with self._cond:
                    self._admitted -= 1

    def submit(self, job: SynthesisJob) -> Ticket:
        """Queue a job for the calling event loop; ``QueueFull`` when ``depth`` are waiting."""
        with self.admission() as submit:
            return submit(job)

    def withdraw(self, ticket: Ticket) -> None:
        """Cancel a ticket; if it is still waiting its place is freed at once."""
        ticket.cancel()
        with self._cond:
            try:
                self._waiting.remove(ticket)
            except ValueError:
                return
        ticket.finished.set()

    # ---- the worker thread --------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                ticket = self._waiting.popleft()
                self._active.append(ticket)
            try:
                if not ticket.cancelled:
                    self._run(ticket)
            finally:
                with self._cond:
                    self._active.remove(ticket)
                ticket.finished.set()

    def _run(self, ticket: Ticket) -> None:
        from s2studio.engine.threads import set_threads

        # The operator's thread count for every job. s2.cpp lets each request choose
        # (n_threads); here a client never does: {"n_threads": 20000} started 20 000 threads.
        # torch's count is process-wide, so it is set again in case anything else in the
        # process changed it.
        set_threads(self.threads)
        try:
            for chunk in ticket.job:
                ticket.post(Chunk(chunk))
            ticket.post(Done(ticket.job.result))
        except Exception as exc:  # handed to the request, which turns it into a status code
            ticket.post(Failed(exc))

