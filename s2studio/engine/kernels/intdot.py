"""The integer-dot-product GEMV for K-quant blocks: the C rows of ``_qdot`` (built by pip from
``_qdot.c`` when a compiler exists), split over numba's thread pool.

Decode GEMVs (at most ``MAX_KERNEL_ROWS`` activation rows) of Q4_K/Q5_K/Q6_K/Q3_K/Q2_K weights
come here when the extension is present: the activations are quantized to int8 per 256 values
(one float scale each, as ggml's "Q8_K") and multiplied as bytes against the weights, about
twice the speed of the float32 numba kernels, which stay as the fallback and for prefill.

Accuracy: quantizing the activations rounds each to 1/254 of its block's largest magnitude;
the result differs from the exact dequantize-then-matmul by about 0.3 % of the output's RMS for
Gaussian activations (measured in tests/engine/test_intdot.py, bounded there at 1 %).

Threads: no pool of our own. A numba ``prange`` over row ranges calls the C function per range
(linked as an external symbol, so numba's on-disk cache still works), so the work runs on the
same OpenMP/workqueue pool, with the same thread count, as the other kernels.
"""

from __future__ import annotations

import logging
import os

import numpy as np

from s2studio.engine.kernels import common as qkernels

log = logging.getLogger(__name__)

try:
    from s2studio.engine.kernels import _qdot
    _IMPORT_ERROR: str | None = None
except ImportError as exc:  # no compiler at install time, or a source checkout not built
    _qdot = None
    _IMPORT_ERROR = f"{type(exc).__name__}: {exc}"

TYPES = ("Q4_K", "Q5_K", "Q6_K", "Q3_K", "Q2_K", "Q8_0")
TYPE_IDS = {} if _qdot is None else {name: getattr(_qdot, name) for name in TYPES if hasattr(_qdot, name)}
ACT_BLOCK = 256  # activation values per int8 scale; Q8_0 rows of other lengths get zero-padded activations
ROWS_PER_TASK = 32  # rows per C call: small enough to balance 2-16 threads on 1024+ rows
# S2_INT_DOT: 2 (default) activations as two int8 planes, the values and what they missed;
# 1: one plane (ggml's Q8_K; faster, ~1 % error); 0: the float32 numba kernels.
_MODE = os.environ.get("S2_INT_DOT", "2").strip()
_DISABLED = _MODE == "0"
PLANES = 1 if _MODE == "1" else 2

_gemv = None
if _qdot is not None and qkernels.numba is not None:
    import llvmlite.binding as _llvm
    from numba import prange, types

    for _name, _addr in _qdot.addresses().items():
        _llvm.add_symbol(_name, _addr)
    _i64 = types.int64
    _c_rows = types.ExternalFunction("s2q_gemv_rows", types.void(*([_i64] * 12)))
    _c_quant = types.ExternalFunction("s2q_quantize_q8k", types.void(*([_i64] * 6)))
    _c_quant16 = types.ExternalFunction("s2q_quantize_i16", types.void(*([_i64] * 4)))

    def _gemv_py(type_id, raw, x, out, planes):
        m, cols = x.shape
        rows = raw.shape[0]
        nb = cols // 256
        mm = m * planes  # plane 2 = the residual, as extra activation rows of the same kernel
        xq = np.empty((mm, cols), np.int8)
        xd = np.empty((mm, nb), np.float32)
        xbs = np.empty((mm, nb * 16), np.int16)
        if planes == 2:
            res = np.empty((m, cols), np.float32)
            _c_quant(x.ctypes.data, m * cols, xq.ctypes.data, xd.ctypes.data, xbs.ctypes.data, res.ctypes.data)
            _c_quant(res.ctypes.data, m * cols, xq[m:].ctypes.data, xd[m:].ctypes.data, xbs[m:].ctypes.data, 0)
            o = np.empty((mm, rows), np.float32)
        else:
            _c_quant(x.ctypes.data, m * cols, xq.ctypes.data, xd.ctypes.data, xbs.ctypes.data, 0)
            o = out
        n_tasks = (rows + ROWS_PER_TASK - 1) // ROWS_PER_TASK
        for t in prange(n_tasks):
            r0 = t * ROWS_PER_TASK
            r1 = min(rows, r0 + ROWS_PER_TASK)
            _c_rows(type_id, raw.ctypes.data, raw.shape[1], r0, r1, xq.ctypes.data, xd.ctypes.data,
                    xbs.ctypes.data, mm, cols, o.ctypes.data, rows)
        if planes == 2:
            for i in range(m):
                for r in range(rows):
                    out[i, r] = o[i, r] + o[m + i, r]

    def _gemv_i16_py(type_id, raw, x, out):
        """Q8_0 against int16 activations (the precise mode for Q8_0: see _qdot.c)."""
        m, cols = x.shape
        rows = raw.shape[0]
        xq = np.empty((m, cols), np.int16)
        xd = np.empty((m, cols // 256), np.float32)
        _c_quant16(x.ctypes.data, m * cols, xq.ctypes.data, xd.ctypes.data)
        n_tasks = (rows + ROWS_PER_TASK - 1) // ROWS_PER_TASK
        for t in prange(n_tasks):
            r0 = t * ROWS_PER_TASK
            r1 = min(rows, r0 + ROWS_PER_TASK)
            _c_rows(type_id, raw.ctypes.data, raw.shape[1], r0, r1, xq.ctypes.data, xd.ctypes.data,
                    0, m, cols, out.ctypes.data, rows)

    _gemv = qkernels._jit(_gemv_py)
    _gemv_i16 = qkernels._jit(_gemv_i16_py)


def available() -> bool:
    return _gemv is not None and not _DISABLED


def handles(type_name: str) -> bool:
    return available() and type_name in TYPE_IDS


def gemv(type_name: str, raw: np.ndarray, x: np.ndarray, out: np.ndarray, planes: int | None = None) -> None:
    """out (m, rows) = x (m, cols) float32, C-contiguous, m <= 16, times the blocks ``raw``ᵀ.
    ``planes``: 1 = int8 activations; 2 = plus their int8-quantized residual."""
    cols = x.shape[1]
    if cols % ACT_BLOCK:
        # Only Q8_0 (32-value blocks) has such rows, in tiny test models; S2 Pro's are all
        # multiples of 256. Zeros leave each 256-chunk's scale (its largest |x|) unchanged and
        # meet no weights: the kernel takes the weight-block count from raw's row length.
        padded = np.zeros((x.shape[0], cols + ACT_BLOCK - cols % ACT_BLOCK), np.float32)
        padded[:, :cols] = x
        x = padded
    planes = PLANES if planes is None else planes
    if type_name == "Q8_0" and planes == 2:
        _gemv_i16(_qdot.Q8_0_I16, raw, x, out)
    else:
        _gemv(TYPE_IDS[type_name], raw, x, out, planes)


def describe() -> str:
    """One line for logs and the self-test: which K-quant GEMV path runs, and why."""
    if _qdot is None:
        return f"numba float32 (the C integer kernels are not built: {_IMPORT_ERROR})"
    if qkernels.numba is None:
        return "none (numba is missing)"
    if _DISABLED:
        return "numba float32 (S2_INT_DOT=0)"
    return f"C int8 dot products ({_qdot.level()}, {PLANES} activation plane{'s' if PLANES > 1 else ''})"


def level() -> str | None:
    return None if _qdot is None else _qdot.level()


def set_level(name: str) -> None:
    """Force one instruction set (tests: every path this CPU has is checked)."""
    _qdot.set_level(name)


def levels() -> list[str]:
    return [] if _qdot is None else list(_qdot.levels())
