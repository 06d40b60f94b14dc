"""``s2studio --self-test``: prove that this installation (above all a frozen bundle) works.

A bundle that only fails when a user clicks Generate is a broken bundle nobody noticed, so CI
runs this inside the built app: every import the app needs (a module PyInstaller missed shows
up here, not on a user's machine), a tiny random model written to a temp folder (the bundle has
no test data), about one second of speech through the real ``Pipeline`` and codec, an audio file
written and read back through libsndfile, and the studio window opened and closed through the
real startup path. Exit code 0 when all passed, 1 otherwise, with one line per step.

The window step gets the app's entry function from the caller (``s2studio.cli``, the one module
allowed to reach into the app), so this module depends on the app only through that argument.
All of the app's folders point into the temp folder: the self-test never touches user settings.
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Callable

# Everything the app imports somewhere, eagerly or lazily. Subcommand modules are loaded by
# name at run time, so a bundler cannot see them; list them here so a missing one fails loudly.
REQUIRED_MODULES = (
    "numpy", "torch", "gguf", "tokenizers", "soundfile", "soxr", "platformdirs",
    "PySide6.QtCore", "PySide6.QtGui", "PySide6.QtWidgets",
    "s2studio.audio", "s2studio.engine.pipeline", "s2studio.engine.codec", "s2studio.engine.voices",
    "s2studio.cli.synth", "s2studio.cli.codec_cmds", "s2studio.cli.voices_cmd", "s2studio.cli.trace",
    "s2studio.cli.serve", "s2studio.devtools.tiny_model", "s2studio.engine.warmup", "numba", "llvmlite",
)
# Needed by one feature but not declared as a hard dependency: a bundle must carry them (its user
# cannot pip install), a source checkout only gets a warning.
FEATURE_MODULES = {"huggingface_hub": "downloading the model from the welcome screen"}
FRAMES = 22  # 22 frames x 2048 samples at 44.1 kHz: about one second of audio
WINDOW_TIMEOUT_MS = 60_000
APP_DIR_VARS = ("S2STUDIO_CONFIG_DIR", "S2STUDIO_LOG_DIR", "S2STUDIO_VOICES_DIR", "S2STUDIO_MODELS_DIR",
                "S2STUDIO_CACHE_DIR")


def _say(text: str) -> None:
    # A windowed Windows build has no stdout at all (sys.stdout is None): stay silent there.
    if sys.stdout is not None:
        print(text, flush=True)


def check_imports(work: Path) -> str:
    for name in REQUIRED_MODULES:
        importlib.import_module(name)
    missing = []
    for name, feature in FEATURE_MODULES.items():
        try:
            importlib.import_module(name)
        except ImportError:
            if getattr(sys, "frozen", False):
                raise
            missing.append(f"warning: no {name}, so no {feature}")
    import torch

    return "; ".join([f"{len(REQUIRED_MODULES) + len(FEATURE_MODULES)} modules; torch {torch.__version__}", *missing])


def check_audio_devices(work: Path) -> str:
    """PortAudio is optional (the app runs without sound cards); report, never fail, when the
    library itself is missing. A sounddevice *module* missing from the bundle is a real failure."""
    try:
        import sounddevice
    except OSError as err:
        return f"warning: no PortAudio ({err}); install libportaudio2 for playback/recording"
    return f"PortAudio {sounddevice.get_portaudio_version()[1]}"


def check_synthesis(work: Path) -> str:
    import numpy as np

    from s2studio.audio import read_audio, write_wav
    from s2studio.devtools.tiny_model import make_tiny_model
    from s2studio.engine.params import GenerationParams
    from s2studio.engine.pipeline import EngineSettings, Pipeline, SynthesisRequest

    tiny = make_tiny_model(work / "model")
    pipeline = Pipeline(EngineSettings(str(tiny.model_path), str(tiny.tokenizer_path), codec_mode="cpu"))
    params = GenerationParams(max_new_tokens=FRAMES, min_tokens_before_end=FRAMES, seed=0)
    result = pipeline.synthesize(SynthesisRequest("Hello from the self-test.", generation=params)).run_to_end()
    audio = np.asarray(result.audio)
    expected = FRAMES * tiny.samples_per_frame
    if audio.shape != (expected,) or not np.isfinite(audio).all() or float(np.abs(audio).max()) == 0.0:
        raise AssertionError(f"bad audio: shape {audio.shape} (want ({expected},)), "
                             f"peak {float(np.abs(audio).max()) if audio.size else 'n/a'}")
    # Round-trip through libsndfile, which the soundfile wheel (and so the bundle) must carry.
    wav = work / "take.wav"
    write_wav(wav, audio, result.sample_rate)
    back = read_audio(wav, result.sample_rate, max_seconds=None, check_reference=False)
    if back.shape != (expected,):
        raise AssertionError(f"WAV round trip changed the length: {back.shape} != {expected}")
    return f"{expected / result.sample_rate:.2f} s of audio, {result.codes.shape[1]} frames, stop={result.stop_reason}"


def check_quantized_kernels(work: Path) -> str:
    """The numba kernels compile (llvmlite's LLVM is in the bundle) and compute a Q8_0 GEMV equal
    to dequantize-then-matmul; where the C integer kernels are built (in the bundle: the
    _qdot extension), a Q4_K and a Q8_0 GEMV through them too. The result names the path."""
    import gguf
    import numpy as np
    import torch

    from s2studio.engine.kernels import common as kcommon
    from s2studio.engine.kernels.qmatrix import QuantMatrix, supported_types

    if not kcommon.available():
        raise AssertionError(f"numba is not usable: {kcommon.IMPORT_ERROR}")
    rng = np.random.default_rng(0)
    raw = gguf.quants.quantize(rng.standard_normal((40, 256)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
    want_w = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.Q8_0).astype(np.float64)
    x = rng.standard_normal((2, 256)).astype(np.float32)
    got = QuantMatrix("Q8_0", raw, (40, 256), int_dot=False).matmul_t(torch.from_numpy(x)).numpy()
    want = x @ want_w.T
    err = float(np.abs(got - want).max() / np.abs(want).max())
    if err > 1e-5:
        raise AssertionError(f"Q8_0 GEMV is off by {err:.2e} (relative)")
    from s2studio.engine.kernels import backend

    if backend.int_dot_ready("Q4_K"):  # the C integer kernels were built and are on: check them too
        from s2studio.devtools.quant_blocks import dequantized, random_blocks

        for type_name in ("Q4_K", "Q8_0"):
            blocks = random_blocks(type_name, 40, 256, seed=0)
            want_k = dequantized(type_name, blocks, 256).astype(np.float64)
            got_k = QuantMatrix(type_name, blocks, (40, 256), int_dot=True).matmul_t(torch.from_numpy(x)).numpy()
            want = x @ want_k.T
            err_k = float(np.abs(got_k - want).max() / np.abs(want).max())
            if err_k > 1e-3:
                raise AssertionError(f"{type_name} integer GEMV is off by {err_k:.2e} (relative)")
    pool = check_gemv_pool()
    import numba

    layer = numba.threading_layer()
    note = ""
    if layer == "workqueue":  # works, but slower next to torch's OpenMP threads: say why
        try:
            from numba.np.ufunc import omppool  # noqa: F401
        except ImportError as exc:
            note = f" (no OpenMP pool: {exc})"
    return (f"types {', '.join(sorted(supported_types()))}; numba {numba.__version__} "
            f"({layer} threads{note}); GEMV rel. error {err:.1e}{pool}; {backend.describe()}")


def check_gemv_pool() -> str:
    """Where the integer GEMV runs on the extension's own threads (kernels/_pool.c, the default
    schedule on POSIX), they start in this build and give the static split's numbers."""
    import numpy as np

    from s2studio.engine.kernels import backend, intdot
    from s2studio.engine.kernels import common as kcommon
    from s2studio.engine.modes import GemvSchedule

    if not (backend.int_dot_ready("Q8_0") and intdot.pool_available()
            and intdot.effective_schedule(backend.settings().schedule) == GemvSchedule.POOL
            and kcommon.numba.config.NUMBA_NUM_THREADS >= 2):  # one core: the caller alone, no pool
        return ""
    from s2studio.devtools.quant_blocks import random_blocks

    before = kcommon.numba.get_num_threads()
    kcommon.sync_threads(2)  # one worker at least, whatever this machine's core count
    try:
        blocks = random_blocks("Q8_0", 2000, 512, seed=1)
        x = np.random.default_rng(1).standard_normal((1, 512)).astype(np.float32)
        want = np.empty((1, 2000), np.float32)
        intdot.gemv("Q8_0", blocks, x, want, schedule=GemvSchedule.STATIC)
        got = np.empty_like(want)
        for _ in range(20):
            intdot.gemv("Q8_0", blocks, x, got, schedule=GemvSchedule.POOL)
            if not np.array_equal(got, want):
                raise AssertionError("the GEMV pool's rows differ from the static split's")
        stats = intdot.pool_stats()
    finally:
        kcommon.sync_threads(before)
    if stats["workers"] < 1:
        raise AssertionError("the GEMV pool started no worker thread")
    return f"; GEMV pool {stats['workers']} worker(s), {stats['joined']} joins in {stats['jobs']} jobs"


# Calls of a void Qt method for the None-refcount check, and how far None's refcount may move
# over them (other threads and caches may take or drop a few references meanwhile).
QT_VOID_CALLS = 20_000
QT_NONE_REFCOUNT_TOLERANCE = 50


def none_refcount_drift(calls: int = QT_VOID_CALLS, batch: int = 1_000) -> int:
    """How much ``sys.getrefcount(None)`` changes over ``calls`` calls of ``QLabel.setText``
    (a Qt method returning nothing). A sound PySide6 gives about 0.

    PySide6-Essentials 6.12.0 on Python < 3.12 drops one reference to None per such call, so
    after a few thousand calls the interpreter aborts with "Fatal Python error: none_dealloc"
    (pyproject.toml excludes that release). The calls run in batches and stop at the first batch
    that drifts, and references taken from None are given back (Py_IncRef), so that measuring a
    broken Qt reports a number instead of aborting the process that measures.
    On Python >= 3.12 None is immortal: its refcount never changes and this returns 0 even on a
    leaking Qt, which is then harmless. The check still runs there (it passes trivially)."""
    import ctypes

    from PySide6.QtWidgets import QApplication, QLabel

    QApplication.instance() or QApplication(["s2studio"])
    label = QLabel()
    label.setText("warm-up")  # first-call caches (string conversion, method lookup) settle here
    drift = 0
    done = 0
    while done < calls:
        n = min(batch, calls - done)
        before = sys.getrefcount(None)
        for _ in range(n):
            label.setText("x")
        step = sys.getrefcount(None) - before
        done += n
        drift += step
        if step < 0:  # give None back what the broken binding took
            for _ in range(-step):
                ctypes.pythonapi.Py_IncRef(ctypes.py_object(None))
        if abs(drift) > QT_NONE_REFCOUNT_TOLERANCE:
            break
    label.deleteLater()
    return drift


def check_qt_refcounts(work: Path) -> str:
    """PySide6 keeps Python's reference counts straight (a leaking build aborts the app)."""
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    import PySide6

    drift = none_refcount_drift()
    if abs(drift) > QT_NONE_REFCOUNT_TOLERANCE:
        raise AssertionError(f"PySide6 {PySide6.__version__} corrupts None's reference count ({drift:+d} "
                             f"within {QT_VOID_CALLS} QLabel.setText calls); the app would abort with "
                             "'none_dealloc'. Install another PySide6-Essentials release.")
    return f"PySide6 {PySide6.__version__}: None refcount drift {drift:+d} over {QT_VOID_CALLS} void calls"


def check_window(open_app: Callable[[list[str]], int], work: Path) -> str:
    """Run the real app start-up, close the window once it is shown, and require a clean exit."""
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(["s2studio"])
    seen: dict[str, object] = {}

    def close_when_shown() -> None:
        window = getattr(app, "main_window", None)
        if window is None or not window.isVisible():
            QTimer.singleShot(100, close_when_shown)  # start-up not finished yet
            return
        seen["title"] = window.windowTitle()
        window.close()  # the real close path: cancels the worker, saves settings
        app.quit()

    def give_up() -> None:
        seen["timeout"] = True
        app.exit(3)

    QTimer.singleShot(0, close_when_shown)
    QTimer.singleShot(WINDOW_TIMEOUT_MS, give_up)
    code = open_app(["s2studio"])
    if seen.get("timeout"):
        raise AssertionError(f"the main window did not appear within {WINDOW_TIMEOUT_MS // 1000} s")
    if code != 0:
        raise AssertionError(f"the app exited with code {code}")
    if not (work / "config" / "settings.json").is_file():
        raise AssertionError("closing the window did not save settings (closeEvent did not run)")
    return f"window '{seen.get('title')}' opened and closed on '{app.platformName()}'"


def run_self_test(open_app: Callable[[list[str]], int]) -> int:
    """``open_app``: the app's entry function (``s2studio.app.run_app``). Returns the exit code."""
    from s2studio import __version__

    frozen = "bundle" if getattr(sys, "frozen", False) else "source"
    _say(f"s2studio {__version__} self-test ({frozen}, Python {sys.version.split()[0]}, {sys.platform})")
    saved = {var: os.environ.get(var) for var in APP_DIR_VARS}
    failures = 0
    # ignore_cleanup_errors: on Windows the app's open log file cannot be deleted yet.
    with tempfile.TemporaryDirectory(prefix="s2studio-selftest-", ignore_cleanup_errors=True) as tmp:
        work = Path(tmp)
        for var in APP_DIR_VARS:
            os.environ[var] = str(work / var.removeprefix("S2STUDIO_").removesuffix("_DIR").lower())
        steps = [("imports", check_imports), ("audio devices", check_audio_devices),
                 ("quantized kernels", check_quantized_kernels), ("Qt refcounts", check_qt_refcounts),
                 ("synthesis", check_synthesis), ("window", lambda w: check_window(open_app, w))]
        try:
            for name, step in steps:
                start = time.perf_counter()
                try:
                    detail = step(work)
                except Exception:  # noqa: BLE001 - report every failure and keep going
                    failures += 1
                    _say(f"FAIL {name}:\n{traceback.format_exc()}")
                    continue
                _say(f"ok   {name} ({time.perf_counter() - start:.1f} s): {detail}")
        finally:
            for var, value in saved.items():
                if value is None:
                    os.environ.pop(var, None)
                else:
                    os.environ[var] = value
    _say("self-test passed" if not failures else f"self-test FAILED ({failures} step(s))")
    return 0 if not failures else 1
