"""Per machine and block type: compute on the quantized blocks, or dequantize to float16?

Decided once by timing both GEMVs on this machine (``--dtype auto``), then cached per machine,
thread count and library versions. The quantized kernels keep resident memory at the file's
size and read fewer bytes per weight, so they are kept unless they are clearly slower: more
than ``SLOWER_LIMIT`` (2) times torch's float16 GEMV per matrix (e.g. a CPU where LLVM vectorizes
them poorly). ``--dtype quantized`` skips the test and always keeps them.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch

from s2studio.engine.kernels import common as kcommon
from s2studio.engine.kernels.qmatrix import QuantMatrix
from s2studio.engine.verdict_cache import cache_dir, machine_key, read_entry, write_entry

log = logging.getLogger(__name__)

# Generous on purpose: dequantizing costs 2-4x the memory, and a busy moment during the one-time
# measurement can make either side look up to 2x slower (seen on the 2-core test machine).
SLOWER_LIMIT = 2.0
CACHE_VERSION = 1
# 4 matrices of 4096x4096: 70 MB of Q8_0 blocks, 134 MB of float16 - past the last-level cache,
# so both are timed at memory speed, as in a real decode step.
BENCH_ROWS = BENCH_COLS = 4096
BENCH_MATRICES = 4


@dataclass(frozen=True)
class KernelVerdict:
    type_name: str
    keep_quantized: bool
    quantized_ms: float  # per matrix
    float16_ms: float
    from_cache: bool = False

    @property
    def reason(self) -> str:
        return (f"{self.type_name} GEMV {self.quantized_ms:.2f} ms vs float16 {self.float16_ms:.2f} ms per "
                f"{BENCH_ROWS}x{BENCH_COLS} matrix{' (cached)' if self.from_cache else ''}")


def decide(type_name: str, quantized_ms: float, float16_ms: float) -> KernelVerdict:
    return KernelVerdict(type_name, quantized_ms <= SLOWER_LIMIT * float16_ms, quantized_ms, float16_ms)


def _interleaved_best(a_calls, b_calls, rounds: int = 10) -> tuple[float, float]:
    """Best time per call (ms) of each list, the two timed in alternation: a busy moment on
    the machine then slows both sides, not one, and the best of several rounds ignores it."""
    for call in (*a_calls, *b_calls):  # warm-up (and first touch of the pages)
        call()
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        for i, calls in enumerate((a_calls, b_calls)):
            t0 = time.perf_counter()
            for call in calls:
                call()
            best[i] = min(best[i], (time.perf_counter() - t0) / len(calls) * 1000)
    return best[0], best[1]


def measure(type_name: str) -> KernelVerdict:
    """Time the quantized GEMV against float16 on synthetic matrices of the same shape. The
    blocks are zeros, written (not calloc's shared zero page): the kernels' speed does not
    depend on the values, and zeros cannot produce denormals."""
    kern = kcommon.KERNELS[type_name]
    row_bytes = BENCH_COLS // kern.block_elems * kern.block_bytes
    qms = []
    for _ in range(BENCH_MATRICES):
        raw = np.empty((BENCH_ROWS, row_bytes), np.uint8)
        raw.fill(0)
        raw.setflags(write=False)  # as the memory map: the kernels warm_up compiled, not new ones
        qms.append(QuantMatrix(type_name, raw, (BENCH_ROWS, BENCH_COLS)))
    hs = [torch.randn(BENCH_ROWS, BENCH_COLS).half() for _ in range(BENCH_MATRICES)]
    x = torch.randn(1, BENCH_COLS)
    xh = x.half()
    q_ms, f_ms = _interleaved_best([lambda q=q: q.matmul_t(x) for q in qms],
                                   [lambda h=h: torch.nn.functional.linear(xh, h) for h in hs])
    return decide(type_name, q_ms, f_ms)


# ---- cache ----------------------------------------------------------------------------------

def default_cache_path() -> str:
    return os.path.join(cache_dir(), "cpu_kernels.json")


def cache_key(type_name: str) -> str:
    import numba

    from s2studio.engine.kernels import backend

    # The GEMV stack (C integer kernels, their level and schedule, or numba) changes the timing:
    # another stack is measured again.
    path = backend.describe([type_name])
    return machine_key(str(torch.get_num_threads()), torch.__version__, numba.__version__, type_name, path)


def read_cache(path: str, key: str) -> KernelVerdict | None:
    e = read_entry(path, CACHE_VERSION, key)
    try:
        return None if e is None else KernelVerdict(str(e["type_name"]), bool(e["keep_quantized"]),
                                                     float(e["quantized_ms"]), float(e["float16_ms"]), True)
    except (KeyError, TypeError, ValueError):
        return None  # damaged entry: measure again


def write_cache(path: str, key: str, verdict: KernelVerdict) -> None:
    entry = asdict(verdict)
    entry.pop("from_cache")
    write_entry(path, CACHE_VERSION, key, entry)


def verdict_for(type_name: str, cache_path: str | None = None) -> KernelVerdict:
    """The cached verdict for this machine, or a fresh measurement (about a second)."""
    path = cache_path or default_cache_path()
    key = cache_key(type_name)
    v = read_cache(path, key)
    if v is None:
        v = measure(type_name)
        write_cache(path, key, v)
    return v


def types_to_keep(type_names, cache_path: str | None = None) -> frozenset[str]:
    keep = set()
    for name in sorted(type_names):
        v = verdict_for(name, cache_path)
        log.info("CPU weights in %s: %s (%s)", name, "kept quantized" if v.keep_quantized else
                 "dequantized to float16, the faster here", v.reason)
        if v.keep_quantized:
            keep.add(name)
    return frozenset(keep)
