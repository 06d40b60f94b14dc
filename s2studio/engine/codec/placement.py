"""Where the codec runs: CPU or the engine's GPU (docs/spec/codec.md §7).

Modes (s2.cpp's CLI flags in brackets):
- ``auto`` [--codec-auto]: when the engine is on a GPU, time one decode of 8 frames on the CPU
  and on that GPU and keep the GPU only if it takes < 0.90x the CPU time. The codec is mostly
  convolutions over long, thin tensors; on a small or busy GPU it can lose to the CPU.
- ``follow`` [--codec-follow-backend]: same device as the engine, no benchmark.
- ``cpu`` [--codec-cpu]: always the CPU.

Unlike s2.cpp (which re-benchmarks at every launch, cold, and loads the whole GGUF per try) the
verdict is cached per machine + device + model file in a small JSON file, and the timing is
taken after a warm-up. If the GPU cannot be used at all (init or allocation fails), we fall back
to the CPU and log why. ``decide`` is the pure rule; everything else is plumbing around it.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np
import torch

from s2studio.engine.modes import CodecMode
from s2studio.engine.verdict_cache import cache_dir, machine_key, read_entry, write_entry

log = logging.getLogger(__name__)

MODES = tuple(CodecMode.choices())
GPU_MAX_RELATIVE_TIME = 0.90  # keep the GPU only when gpu_ms < 0.90 * cpu_ms
BENCH_FRAMES = 8
CACHE_VERSION = 1


@dataclass(frozen=True)
class BenchResult:
    ok: bool
    ms: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class CodecPlacement:
    device: str
    reason: str
    cpu_ms: float | None = None
    gpu_ms: float | None = None
    from_cache: bool = False


def needs_benchmark(mode: str, engine_device: str) -> bool:
    """Auto mode benchmarks only when the engine itself is on a GPU (s2.cpp: backend != CPU)."""
    return mode == "auto" and engine_device != "cpu"


def decide(mode: str, engine_device: str, cpu: BenchResult | None = None,
           gpu: BenchResult | None = None) -> CodecPlacement:
    """The placement rule, a pure function of the mode, the engine device and the timings."""
    if mode not in MODES:
        raise ValueError(f"codec placement mode must be one of {MODES}, not {mode!r}")
    if engine_device == "cpu":
        return CodecPlacement("cpu", "the engine runs on the CPU")
    if mode == "cpu":
        return CodecPlacement("cpu", "codec forced to the CPU")
    if mode == "follow":
        return CodecPlacement(engine_device, f"codec follows the engine onto {engine_device}")
    if cpu is None or gpu is None:
        raise ValueError("auto placement on a GPU needs both benchmark results")
    cpu_ms, gpu_ms = cpu.ms if cpu.ok else None, gpu.ms if gpu.ok else None
    if not gpu.ok:
        return CodecPlacement("cpu", f"{engine_device} failed the codec benchmark ({gpu.error}); using the CPU",
                              cpu_ms, gpu_ms)
    if not cpu.ok:
        return CodecPlacement(engine_device, f"the CPU failed the codec benchmark ({cpu.error})", cpu_ms, gpu_ms)
    if gpu.ms < GPU_MAX_RELATIVE_TIME * cpu.ms:
        return CodecPlacement(engine_device, f"{engine_device} decodes faster ({gpu.ms:.1f} ms vs CPU "
                                             f"{cpu.ms:.1f} ms for {BENCH_FRAMES} frames)", cpu_ms, gpu_ms)
    return CodecPlacement("cpu", f"the CPU is as fast or faster ({cpu.ms:.1f} ms vs {engine_device} "
                                 f"{gpu.ms:.1f} ms for {BENCH_FRAMES} frames)", cpu_ms, gpu_ms)


# ---- benchmark ------------------------------------------------------------------------------

def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def time_decode(codec, frames: int = BENCH_FRAMES, warmup: int = 1, repeats: int = 3) -> float:
    """Best-of-``repeats`` wall time (ms) of decoding ``frames`` all-zero frames, after warm-up."""
    codes = np.zeros((codec.num_codebooks, frames), dtype=np.int32)
    for _ in range(warmup):
        codec.decode_tensor(codes)
    _sync(codec.device)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = codec.decode_tensor(codes)
        _sync(codec.device)
        best = min(best, time.perf_counter() - t0)
        if out.numel() == 0:
            raise RuntimeError("decode returned no audio")
    return best * 1e3


def bench_device(load: Callable[[str], object], device: str) -> tuple[BenchResult, object | None]:
    """Load the codec on ``device`` and time it; any failure makes the result not-ok."""
    try:
        codec = load(device)
        return BenchResult(True, time_decode(codec)), codec
    except Exception as exc:  # a GPU that cannot init/allocate is a verdict, not a crash
        return BenchResult(False, error=f"{type(exc).__name__}: {exc}".strip()[:300]), None


# ---- cache ----------------------------------------------------------------------------------

def default_cache_path() -> str:
    return os.path.join(cache_dir(), "codec_placement.json")


def _device_name(device: str) -> str:
    try:
        if device.startswith("cuda") and torch.cuda.is_available():
            return torch.cuda.get_device_name(torch.device(device))
    except Exception:  # only used to build a cache key
        pass
    return device


def cache_key(model_path: str, engine_device: str, threads: int | None = None) -> str:
    """Machine + device + model file (+ torch version and threads, which change timings)."""
    try:
        st = os.stat(model_path)
        model_id = f"{os.path.realpath(model_path)}|{st.st_size}|{st.st_mtime_ns}"
    except OSError:
        model_id = os.path.realpath(model_path)
    return machine_key(torch.__version__, str(threads if threads is not None else torch.get_num_threads()),
                       engine_device, _device_name(engine_device), model_id)


def read_cache(path: str, key: str) -> CodecPlacement | None:
    entry = read_entry(path, CACHE_VERSION, key)
    try:
        return None if entry is None else CodecPlacement(
            str(entry["device"]), str(entry["reason"]), entry.get("cpu_ms"), entry.get("gpu_ms"), from_cache=True)
    except (KeyError, TypeError):
        return None  # damaged entry: just benchmark again


def write_cache(path: str, key: str, placement: CodecPlacement) -> None:
    entry = asdict(placement)
    entry.pop("from_cache")
    entry["time"] = time.time()
    write_entry(path, CACHE_VERSION, key, entry)


# ---- the whole thing ------------------------------------------------------------------------

def load_placed_codec(model_path: str, engine_device: str = "cpu", mode: str = "auto", *,
                      cache_path: str | None = None, use_cache: bool = True,
                      load: Callable[[str], object] | None = None, dtype: torch.dtype = torch.float32,
                      emulate_ggml: bool = False):
    """Choose the codec device and load the codec there. Returns ``(codec, CodecPlacement)``.

    ``load(device)`` builds a codec on a device (default: ``Codec.from_gguf(model_path, ...)``);
    tests inject fakes. A GPU that fails to load falls back to the CPU with a logged warning.
    """
    from s2studio.engine.codec.model import Codec

    if mode not in MODES:
        raise ValueError(f"codec placement mode must be one of {MODES}, not {mode!r}")
    if load is None:
        def load(device: str):
            return Codec.from_gguf(model_path, device=device, dtype=dtype, emulate_ggml=emulate_ggml)

    engine_device = str(engine_device)
    loaded: dict[str, object] = {}
    if needs_benchmark(mode, engine_device):
        path = cache_path or default_cache_path()
        key = cache_key(model_path, engine_device)
        placement = read_cache(path, key) if use_cache else None
        if placement is None:
            cpu_res, cpu_codec = bench_device(load, "cpu")
            gpu_res, gpu_codec = bench_device(load, engine_device)
            placement = decide(mode, engine_device, cpu_res, gpu_res)
            for dev, c in (("cpu", cpu_codec), (engine_device, gpu_codec)):
                if c is not None:
                    loaded[dev] = c
            write_cache(path, key, placement)
        log.info("codec on %s: %s%s", placement.device, placement.reason,
                 " (cached verdict)" if placement.from_cache else "")
    else:
        placement = decide(mode, engine_device)

    codec = loaded.get(placement.device)
    if codec is None:
        try:
            codec = load(placement.device)
        except Exception as exc:
            if placement.device == "cpu":
                raise
            # GPU init/alloc failure: s2.cpp warns and reloads on the CPU; so do we.
            from s2studio.errors import ModelFileError

            if isinstance(exc, ModelFileError):
                raise  # a bad file is bad on every device
            log.warning("codec could not be loaded on %s (%s: %s); falling back to the CPU",
                        placement.device, type(exc).__name__, exc)
            placement = CodecPlacement("cpu", f"{placement.device} failed to load the codec "
                                              f"({type(exc).__name__}); using the CPU",
                                       placement.cpu_ms, placement.gpu_ms, placement.from_cache)
            codec = load("cpu")
    return codec, placement
