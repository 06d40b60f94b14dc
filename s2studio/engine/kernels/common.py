"""Shared machinery of the CPU kernels that compute directly on GGUF quantized blocks (numba,
compiled on first use); the kernels themselves, per block type, are in ``quant_types``.

Why numba: torch's own int8/int4 weight-only CPU kernels ran at 0.2-0.6 GB/s on the reference
machine and a dequantized float16 copy doubles resident memory. These loops are written so
LLVM vectorizes them (AVX2/AVX-512 on x86, NEON on ARM):
- each call works on 8 weight rows at once, so one load of the activations feeds 8 rows;
- partial sums stay per lane (``acc[k, j]``) for a whole row and are reduced once at the end,
  instead of a horizontal sum per 32-weight block (that alone was 3x slower);
- the activations stay float32 (ggml quantizes them to 8 bits for Q8_0; we do not, so the
  result is the exact dequantize-then-matmul up to float32 summation order).
(``quant_types`` adds more: software prefetch, unsigned indices, stack accumulators.) Measured
on the 2-core AVX-512 test machine: 22.8 GB/s of Q8_0 blocks, i.e. a 9728x2560 matrix in
1.16 ms where torch's float16 GEMV on a dequantized copy takes 1.43 ms (docs/performance.md).

Float16 block scales are decoded through a 65536-entry table (``F16_TABLE``), as ggml does.

Every kernel takes the raw blocks as a C-contiguous uint8 array (rows, row_bytes), exactly the
bytes of the GGUF file (memory-mapped: nothing is copied at load).
"""

from __future__ import annotations

import os

import numpy as np

try:  # numba is optional at run time: without it the engine dequantizes to float16 at load.
    import numba
    from numba import njit
    IMPORT_ERROR: str | None = None
except Exception as exc:  # pragma: no cover - exercised only where numba is missing
    numba = None
    IMPORT_ERROR = f"{type(exc).__name__}: {exc}"

# Caching compiled code (seconds saved per start) needs the .py source beside the module: the
# bundle ships these two modules as source too (packaging/s2studio.spec); without the source
# numba would refuse to cache and fail at the first call, so then we compile every start.
_CACHE = os.path.isfile(__file__) and os.environ.get("S2_NUMBA_CACHE", "1") != "0"

MAX_KERNEL_ROWS = 16  # activation rows handled by the GEMV kernels; more goes to dequant + GEMM

F16_TABLE = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)


def available() -> bool:
    return numba is not None


def _jit(fn, parallel: bool = True):
    if numba is None:
        return None
    return njit(parallel=parallel, fastmath=True, boundscheck=False, cache=_CACHE, nogil=True)(fn)


class Kernels:
    """The three operations a quantized matrix needs, for one GGUF block type."""

    def __init__(self, block_elems: int, block_bytes: int, gemv, dequant_f32, gather):
        self.block_elems = block_elems
        self.block_bytes = block_bytes
        self.gemv = gemv  # (raw, x f32 (m, cols), out f32 (m, rows), table)
        self.dequant_f32 = dequant_f32  # (raw, out f32 (rows, cols), table): exact values
        self.gather = gather  # (raw, ids int64, out f32 (n, cols), table)


KERNELS: dict[str, Kernels] = {}  # filled by quant_types (imported by qmatrix)


def register(type_name: str, kernels: Kernels) -> None:
    KERNELS[type_name] = kernels


_threads = 0


def sync_threads(n: int) -> None:
    """Use ``n`` kernel threads (the engine's --threads), capped at what numba started with."""
    global _threads
    if numba is None or n == _threads:
        return
    numba.set_num_threads(max(1, min(n, numba.config.NUMBA_NUM_THREADS)))
    _threads = n
