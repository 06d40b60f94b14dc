"""``InferenceWorker``: the one QObject that owns the model, living on its own QThread.

Everything that touches torch happens in this object's slots, on the worker thread: the
engine is imported and warmed up on the first request (so the window is up before torch loads;
see ``_warm_up_engine``), the model loads lazily, and chunks travel back to the window as
queued signals. An exception never
crosses the thread: it becomes a :class:`WorkerError` on ``failed``.

Contract: signals ``loading(stage, fraction)``, ``progress(GenerationProgress)``,
``chunk(samples, rate)``, ``finished(FinishedTake)``, ``failed(WorkerError)``, ``cancelled()``;
slots ``submit(request)`` (connect it queued) and ``cancel()``, which is a plain thread-safe
method — a queued cancel would wait behind the very job it is meant to stop.

A take stopped after some audio was made emits ``stopped(FinishedTake)`` (the engine's result
holds exactly the chunks delivered so far) and then ``cancelled()``. ``query_devices()`` (connect
it queued) lists the CPU and the GPUs torch sees, on ``devices_found``, without loading a model.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
import traceback

from PySide6.QtCore import QObject, QThread, Signal, Slot

from s2studio.app import paths
from s2studio.app.requests import (
    FinishedTake,
    GenerateRequest,
    GenerationProgress,
    LoadInfo,
    LoadRequest,
    SaveVoiceRequest,
    WorkerError,
    synthesis_request,
)
from s2studio.errors import S2Error
from s2studio.engine.pipeline import EngineSettings

log = logging.getLogger(__name__)


def describe_error(exc: BaseException) -> WorkerError:
    details = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    log_file = str(paths.log_file())
    if isinstance(exc, S2Error):
        return WorkerError(str(exc), details, True, log_file)
    if isinstance(exc, MemoryError):
        return WorkerError("The computer ran out of memory. On the CPU the S2 Pro model needs about its file "
                           "size plus 1.5 GB of free RAM (about 10 GB with a float dtype or on a GPU); "
                           "close other programs, or use a smaller model file, and try again.", details, True, log_file)
    return WorkerError(f"Unexpected error ({type(exc).__name__}: {exc}). See Details; the log file has more.",
                       details, False, log_file)


class InferenceWorker(QObject):
    loading = Signal(str, float)  # stage, fraction of that stage
    loaded = Signal(object)  # LoadInfo
    progress = Signal(object)  # GenerationProgress
    chunk = Signal(object, int)  # float32 samples, sample rate
    finished = Signal(object)  # FinishedTake
    voice_saved = Signal(object)  # VoiceInfo
    failed = Signal(object)  # WorkerError
    cancelled = Signal()
    stopped = Signal(object)  # FinishedTake whose result.cancelled: the audio made until Stop
    devices_found = Signal(object)  # tuple of (device id, description)
    busy_changed = Signal(bool)

    def __init__(self, voices_folder: str):
        super().__init__()
        self._voices_folder = voices_folder
        self._pipeline = None
        self._remote = None  # RemoteEngine when the settings choose a server
        self._lock = threading.Lock()
        self._job = None  # the SynthesisJob running now
        self._cancelled_at = float("-inf")  # requests created before this are cancelled
        # The book renderer (app/book_controller.py) takes the engine from its own thread: loading
        # and reconfiguring happen under this lock, whichever thread asks.
        self._load_lock = threading.RLock()

    # ---- any thread ---------------------------------------------------------------------
    @Slot()
    def cancel(self) -> None:
        """Stop the running job at its next frame, and drop every request already submitted."""
        with self._lock:
            self._cancelled_at = time.monotonic()
            job = self._job
        if job is not None:
            job.cancel()  # sets the job's threading.Event directly

    def _is_cancelled(self, request) -> bool:
        with self._lock:
            return request.created <= self._cancelled_at

    def engine_for(self, settings):
        """The engine for ``settings`` (``EngineSettings`` or ``RemoteSettings``), loaded if it
        is not yet: the one model the studio uses, shared with the book renderer, which calls this
        from its own thread (a model is loaded once, not once per view). Raises what a load raises."""
        return self._ensure_loaded(settings)

    # ---- worker thread ------------------------------------------------------------------
    @Slot()
    def query_devices(self) -> None:
        """The devices the engine could run on: torch's cheap queries (no model, no GPU memory);
        here, on the worker's thread, because importing torch takes seconds."""
        try:
            _warm_up_engine()
            from s2studio.engine.pipeline import Pipeline

            found = tuple(Pipeline.available_devices())
        except Exception:  # noqa: BLE001 - a broken GPU driver must not stop the app: CPU only
            log.exception("listing the devices failed")
            found = (("cpu", "CPU"),)
        self.devices_found.emit(found)

    @Slot(object)
    def submit(self, request) -> None:
        if self._is_cancelled(request):
            self.cancelled.emit()
            return
        self.busy_changed.emit(True)
        try:
            if isinstance(request, LoadRequest):
                self._ensure_loaded(request.engine)
            elif isinstance(request, GenerateRequest):
                self._generate(request)
            elif isinstance(request, SaveVoiceRequest):
                self._save_voice(request)
            else:
                raise TypeError(f"unknown request {type(request).__name__}")
        except BaseException as exc:  # noqa: BLE001 - the boundary: nothing may escape the thread
            log.exception("request %s failed", type(request).__name__)
            self.failed.emit(describe_error(exc))
        finally:
            with self._lock:
                self._job = None
            self.busy_changed.emit(False)

    def _ensure_loaded(self, settings: EngineSettings):
        with self._load_lock:
            return self._ensure_loaded_locked(settings)

    def _ensure_loaded_locked(self, settings: EngineSettings):
        _warm_up_engine()
        from s2studio.engine.pipeline import Pipeline
        from s2studio.engine.voices import VoiceLibrary
        from s2studio.remote import RemoteSettings

        if isinstance(settings, RemoteSettings):
            return self._ensure_remote(settings)
        if not settings.model_path:
            raise _input_error("No model file is chosen yet. Open Settings (or the welcome page) and pick the "
                               "S2 Pro .gguf file.")
        if self._pipeline is None:
            self._pipeline = Pipeline(settings, voices=VoiceLibrary(self._voices_folder))
        else:
            self._pipeline.configure(settings)
        if not self._pipeline.is_loaded:
            t0 = time.perf_counter()
            last = {"stage": None, "frac": -1.0}

            def report(stage: str, frac: float) -> None:
                # The loader reports per tensor; a signal per 2 % is plenty for a progress bar.
                if stage != last["stage"] or frac - last["frac"] >= 0.02 or frac >= 1.0:
                    last["stage"], last["frac"] = stage, frac
                    self.loading.emit(stage, float(frac))

            try:
                self._pipeline.load(progress=report)
            except BaseException:
                self._pipeline.unload()  # a half-loaded model must not be mistaken for a good one
                raise

            info = self._pipeline.model_info(load=False)
            self.loaded.emit(LoadInfo(codec_device=info.codec_device or "", codec_reason=info.codec_reason,
                                      load_seconds=time.perf_counter() - t0,
                                      devices=tuple(self._pipeline.available_devices())))
        return self._pipeline

    def _ensure_remote(self, settings):
        """The engine on a server (``RemoteSettings``): checked with ``/health`` when first used
        or when the address or key changed; a local model stays loaded for when it is chosen again."""
        from s2studio.engine.voices import VoiceLibrary
        from s2studio.remote import RemoteEngine

        if self._remote is None or self._remote.settings != settings:
            t0 = time.perf_counter()
            engine = RemoteEngine(settings, voices=VoiceLibrary(self._voices_folder))
            address = engine.pick_server(set())  # the least busy that answers, with several
            self.loading.emit(f"Connecting to {address.url}", 0.0)
            info = engine.model_info()
            self._remote = engine
            others = len(engine.addresses) - 1
            self.loaded.emit(LoadInfo(codec_device=info.codec_device or "the server",
                                      codec_reason=info.codec_reason + (f" and {others} more server(s)" if others else ""),
                                      load_seconds=time.perf_counter() - t0, devices=()))
        return self._remote

    def _generate(self, request: GenerateRequest) -> None:
        engine = self._ensure_loaded(request.engine)
        if self._is_cancelled(request):
            self.cancelled.emit()
            return
        job = engine.synthesize(synthesis_request(request))
        with self._lock:
            self._job = job
            if request.created <= self._cancelled_at:
                job.cancel()
        t0 = time.perf_counter()
        audio_samples = 0
        frames = 0  # in the whole take so far
        segment_frames: dict[int, int] = {}  # per segment so far
        for chunk in job:
            audio_samples += len(chunk.samples)
            done = chunk.frame_count == 0  # a pause: the segment before it is complete
            if not done:
                now = chunk.frame_start + chunk.frame_count
                frames += now - segment_frames.get(chunk.segment, 0)
                segment_frames[chunk.segment] = now
            self.chunk.emit(chunk.samples, chunk.sample_rate)
            voice_cache = engine.model_info(load=False).prefix_cache  # no request: a lock, a few numbers
            self.progress.emit(GenerationProgress(chunk.segment + 1, chunk.segment_count, frames,
                                                  audio_samples / chunk.sample_rate, time.perf_counter() - t0,
                                                  segment_frames.get(chunk.segment, 0), done,
                                                  voice_cache.describe() if voice_cache is not None else ""))
        result = job.result
        if result is not None and result.cancelled and len(result.audio):
            self.stopped.emit(FinishedTake(request, result))
        if result is None or result.cancelled:
            self.cancelled.emit()
        else:
            self.finished.emit(FinishedTake(request, result))

    def _save_voice(self, request: SaveVoiceRequest) -> None:
        from s2studio.audio import CODEC_SAMPLE_RATE, validate_reference

        validate_reference(request.samples, CODEC_SAMPLE_RATE)
        engine = self._ensure_loaded(request.engine)
        profile = engine.encode_voice(request.samples, request.transcript)  # a server's codec, or ours
        info = self._library().save_profile(request.replace_id, profile, name=request.name,
                                            overwrite=request.replace_id is not None,
                                            reference_audio=request.samples)
        self.voice_saved.emit(info)

    def _library(self):
        from s2studio.engine.voices import VoiceLibrary

        return VoiceLibrary(self._voices_folder)


_warm_lock = threading.Lock()
_warmed = False


def _warm_up_engine() -> None:
    """The engine's one-time work (native libraries mapped with the GIL released, torch, numba
    and the engine imported, numba's first call made: ``engine.api.warm_up``) without a full
    garbage collection, then the heap it made frozen.

    Why: every event-loop gap over 50 ms during the first load and the first take
    (benchmarks/ui_latency.py) was a full (generation 2) collection of Python's cyclic garbage
    collector on this thread, 83-180 ms each: it holds the GIL while it walks every tracked
    object, and torch, numba and scipy bring ~250 000. So during the warm-up only the young
    generations are collected (cheap, and they free nearly all of the imports' garbage: ~50
    objects were left for a full collection, against ~7 400 with the collector off), and then
    ``gc.freeze()`` moves every object alive to the permanent generation, which later
    collections skip. Those are modules, classes and functions that live as long as the process
    does; the model is loaded after this, so it stays collectable."""
    global _warmed
    with _warm_lock:  # query_devices and the book renderer's first load may race here
        if _warmed:
            return
        from s2studio.engine.api import warm_up

        young, middle, old = gc.get_threshold()
        gc.set_threshold(young, middle, 1 << 30)  # no full collection until the freeze
        try:
            warm_up()
            # This worker's own lazy import (http, email: a full collection's worth of objects)
            # joins the frozen heap rather than triggering a collection of it first.
            import s2studio.remote  # noqa: F401
        finally:
            gc.freeze()
            gc.set_threshold(young, middle, old)
            _warmed = True


def _input_error(message: str) -> S2Error:
    from s2studio.errors import InputError

    return InputError(message)


class WorkerThread:
    """Creates the worker on its own QThread and stops it cleanly (cancel, quit, wait)."""

    def __init__(self, voices_folder: str):
        self.thread = QThread()
        self.thread.setObjectName("inference")
        self.worker = InferenceWorker(voices_folder)
        self.worker.moveToThread(self.thread)
        self.thread.start()

    def shutdown(self, timeout_ms: int = 10_000) -> bool:
        self.worker.cancel()
        self.thread.quit()
        return self.thread.wait(timeout_ms)
