"""CPU kernels that compute directly on GGUF quantized blocks (numba, compiled on first use).

Why numba: torch's own int8/int4 weight-only CPU kernels ran at 0.2-0.6 GB/s on the reference
machine and a dequantized float16 copy doubles resident memory. These loops are written so
LLVM vectorizes them (AVX2/AVX-512 on x86, NEON on ARM):
- each call works on 8 weight rows at once, so one load of the activations feeds 8 rows;
- partial sums stay per lane (``acc[k, j]``) for a whole row and are reduced once at the end,
  instead of a horizontal sum per 32-weight block (that alone was 3x slower);
- the activations stay float32 (ggml quantizes them to 8 bits for Q8_0; we do not, so the
  result is the exact dequantize-then-matmul up to float32 summation order).
Measured on the 2-core AVX-512 test machine: ~10 GB/s of Q8_0 blocks per core, i.e. a
9728x2560 matrix in 1.3 ms where torch's float16 GEMV on the dequantized copy takes 1.4 ms.

Block layouts (ggml ``block_q8_0``): 34 bytes = float16 scale ``d`` + 32 int8 ``qs``;
value = d * q. The float16 scale is decoded through a 65536-entry table, as ggml does.

Every kernel takes the raw blocks as a C-contiguous uint8 array (rows, row_bytes), exactly the
bytes of the GGUF file (memory-mapped: nothing is copied at load).
"""

from __future__ import annotations

import logging
import os

import numpy as np

log = logging.getLogger(__name__)

try:  # numba is optional at run time: without it the engine dequantizes to float16 at load.
    import numba
    from numba import njit, prange
    IMPORT_ERROR: str | None = None
except Exception as exc:  # pragma: no cover - exercised only where numba is missing
    numba = None
    IMPORT_ERROR = f"{type(exc).__name__}: {exc}"

# Caching compiled code (seconds saved per start) needs the .py source beside the module: the
# bundle ships these two modules as source too (packaging/s2studio.spec); without the source
# numba would refuse to cache and fail at the first call, so then we compile every start.
_CACHE = os.path.isfile(__file__) and os.environ.get("S2_NUMBA_CACHE", "1") != "0"

ROWS_PER_STEP = 8  # weight rows sharing one pass over the activations
ROWS_PER_TASK = 32  # rows per parallel work item (a multiple of ROWS_PER_STEP)
MAX_KERNEL_ROWS = 16  # activation rows handled by the GEMV kernels; more goes to dequant + GEMM

F16_TABLE = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)


def available() -> bool:
    return numba is not None


def _jit(fn):
    if numba is None:
        return None
    return njit(parallel=True, fastmath=True, boundscheck=False, cache=_CACHE, nogil=True)(fn)


def _q8_0_gemv(raw, x, out, table):
    """out[m, r] = sum_k dequant(raw)[r, k] * x[m, k] for every activation row m."""
    rows = raw.shape[0]
    n_in = x.shape[1]
    n_blocks = n_in // 32
    qs = raw.view(np.int8)
    n_tasks = (rows + 31) // 32
    for t in prange(n_tasks):
        acc = np.empty((8, 32), np.float32)
        d = np.empty(8, np.float32)
        r_end = min(rows, t * 32 + 32)
        for r0 in range(t * 32, r_end, 8):
            n = min(8, r_end - r0)
            for m in range(x.shape[0]):
                acc[:] = 0
                for b in range(n_blocks):
                    o = b * 34
                    xo = b * 32
                    for k in range(n):
                        d[k] = table[np.int64(raw[r0 + k, o]) | (np.int64(raw[r0 + k, o + 1]) << 8)]
                    if n == 8:  # the common case, written with a constant row count to vectorize
                        for j in range(32):
                            xv = x[m, xo + j]
                            for k in range(8):
                                acc[k, j] += d[k] * (np.float32(qs[r0 + k, o + 2 + j]) * xv)
                    else:
                        for j in range(32):
                            xv = x[m, xo + j]
                            for k in range(n):
                                acc[k, j] += d[k] * (np.float32(qs[r0 + k, o + 2 + j]) * xv)
                for k in range(n):
                    out[m, r0 + k] = acc[k].sum()


def _q8_0_dequant_bf16(raw, out, table):
    """bfloat16 bit patterns (round to nearest even) of the values: out uint16 (rows, cols).
    Used to feed oneDNN's bfloat16 GEMM at prefill without a float32 copy of the matrix."""
    rows = raw.shape[0]
    cols = out.shape[1]
    n_blocks = cols // 32
    qs = raw.view(np.int8)
    n_tasks = (rows + 15) // 16
    for t in prange(n_tasks):
        buf = np.empty(cols, np.float32)
        bits = buf.view(np.uint32)
        for r in range(t * 16, min(rows, t * 16 + 16)):
            for b in range(n_blocks):
                o = b * 34
                d = table[np.int64(raw[r, o]) | (np.int64(raw[r, o + 1]) << 8)]
                for j in range(32):
                    buf[b * 32 + j] = d * np.float32(qs[r, o + 2 + j])
            for c in range(cols):
                u = bits[c]
                out[r, c] = np.uint16((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))
                                      >> np.uint32(16))


def _q8_0_gather(raw, ids, out, table):
    """float32 rows ``ids`` of the matrix (embedding lookups): out (len(ids), cols)."""
    n_blocks = out.shape[1] // 32
    qs = raw.view(np.int8)
    for i in range(ids.shape[0]):
        r = ids[i]
        for b in range(n_blocks):
            o = b * 34
            d = table[np.int64(raw[r, o]) | (np.int64(raw[r, o + 1]) << 8)]
            for j in range(32):
                out[i, b * 32 + j] = d * np.float32(qs[r, o + 2 + j])


q8_0_gemv = _jit(_q8_0_gemv)
q8_0_dequant_bf16 = _jit(_q8_0_dequant_bf16)
q8_0_gather = None if numba is None else njit(fastmath=True, boundscheck=False, cache=_CACHE,
                                               nogil=True)(_q8_0_gather)


class Kernels:
    """The three operations a quantized matrix needs, for one GGUF block type."""

    def __init__(self, block_elems: int, block_bytes: int, gemv, dequant_bf16, gather):
        self.block_elems = block_elems
        self.block_bytes = block_bytes
        self.gemv = gemv  # (raw, x f32 (m, cols), out f32 (m, rows), table)
        self.dequant_bf16 = dequant_bf16  # (raw, out uint16 (rows, cols), table)
        self.gather = gather  # (raw, ids int64, out f32 (n, cols), table)


KERNELS: dict[str, Kernels] = {}
if numba is not None:
    KERNELS["Q8_0"] = Kernels(32, 34, q8_0_gemv, q8_0_dequant_bf16, q8_0_gather)


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
