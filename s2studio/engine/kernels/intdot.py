"""The integer-dot-product GEMV for K-quant and Q8_0 blocks: the C rows of ``_qdot`` (built by
pip from ``_qdot.c`` when a compiler exists), split over numba's thread pool.

Decode GEMVs (at most ``MAX_KERNEL_ROWS`` activation rows) of Q4_K/Q5_K/Q6_K/Q3_K/Q2_K and Q8_0
weights come here when the extension is present: the activations are quantized to integers
per 256 values (one float scale each) and multiplied as integers against the weights, which
the float32 numba kernels (the fallback, and the prefill's dequantizer) cannot do:
- K-quants: int8 activations (ggml's "Q8_K"), by default in two planes, the values and what
  they missed, fed to the kernel as extra activation rows;
- Q8_0: int8 activations (one plane), or by default int16 ones (as precise as two int8
  planes, and cheaper for Q8_0: its int8 weights are widened once per block for all rows).
The point for Q8_0 is batching: the numba kernel converts the weights to float32 once per
activation row, so 4 rows cost 2-2.5x one; here each weight block is loaded once and each row
costs a few integer instructions (docs/performance.md). Q8_0 rows that are not a multiple of
256 (32-value blocks; only tiny test models) get zero-padded activations.

Accuracy, against the exact dequantize-then-matmul, relative to |x||w|: one int8 plane ~4e-4
typical (each activation rounded to 1/254 of its block's largest magnitude; ~0.7 % of the
output's RMS for Gaussian activations), two planes or int16 ~1e-5 (tests/engine/test_intdot.py:
bounds 3e-3 and 3e-5).

Rows are independent: an activation row's output is bit-identical whatever the other rows are,
and however many (each row has its own accumulators and the same operation order), which
batching requests into one GEMV relies on.
For several activation rows the Q8_0 kernels work in register tiles (a few weight rows x a few
activation rows, every accumulator in a register: ~1.4x at the prefill's 16 rows per call) that
keep each row's operation order, so their outputs are those of the per-row loops bit for bit
(``set_tiled``).

Which activations, which schedule, and whether this path runs at all are chosen in one place,
``backend`` (its ``KernelSettings``); this module is the mechanism.

Threads: the rows are claimed in tasks from a shared counter, so a thread that the OS
deschedules does not hold the others up. By default (``GemvSchedule.POOL``, POSIX builds) the
threads are the extension's own (``_pool.c``): the caller starts at once, its workers spin a
little between GEMVs, and nobody sleeps in a barrier, which on this VM cost ~60-100 µs per GEMV
in OpenMP's passive regions. Elsewhere, or with ``dynamic``, each thread of a numba ``prange``
calls the C function once (linked as an external symbol, so numba's on-disk cache still works),
on the OpenMP/workqueue pool the other kernels use. Both take the engine's thread count.
"""

from __future__ import annotations

import logging
import os

import numpy as np

from s2studio.engine.kernels import backend
from s2studio.engine.kernels import common as kcommon
from s2studio.engine.modes import GemvSchedule, IntDot

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

# The level the extension chose at import (the best this CPU offers), before anything forces one.
_BEST_LEVEL = None if _qdot is None else _qdot.level()

_HAS_POOL = _qdot is not None and bool(getattr(_qdot, "POOL", 0))
_gemv = None
if _qdot is not None and kcommon.numba is not None:
    import llvmlite.binding as _llvm
    from numba import prange, types

    for _name, _addr in _qdot.addresses().items():
        _llvm.add_symbol(_name, _addr)
    _i64 = types.int64
    _c_rows = types.ExternalFunction("s2q_gemv_rows", types.void(*([_i64] * 12)))
    _c_tasks = types.ExternalFunction("s2q_gemv_tasks", types.void(*([_i64] * 13)))
    _c_quant = types.ExternalFunction("s2q_quantize_q8k", types.void(*([_i64] * 6)))
    _c_quant16 = types.ExternalFunction("s2q_quantize_i16", types.void(*([_i64] * 4)))
    if _HAS_POOL:
        _c_pool = types.ExternalFunction("s2q_pool_gemv", types.void(*([_i64] * 12)))
    else:  # never called: the pool schedule is not offered (pool_available)
        _c_pool = _c_rows

    def _all_rows_py(type_id, raw, xq, xd, xbs, m, cols, out, rows, workers):
        """The C kernel over every row of ``raw`` (pointers as int64): ``workers`` > 0: that many
        threads each claim ROWS_PER_TASK rows at a time (dynamic); 0: a static split; -1: the
        same claiming on the extension's own threads (_pool.c), no OpenMP region."""
        if workers < 0:
            _c_pool(type_id, raw.ctypes.data, raw.shape[1], rows, ROWS_PER_TASK, xq, xd, xbs, m, cols, out, rows)
        elif workers > 0:
            nxt = np.zeros(1, np.int64)
            for _w in prange(workers):
                _c_tasks(type_id, raw.ctypes.data, raw.shape[1], rows, ROWS_PER_TASK, xq, xd, xbs, m, cols, out,
                         rows, nxt.ctypes.data)
        else:
            n_tasks = (rows + ROWS_PER_TASK - 1) // ROWS_PER_TASK
            for t in prange(n_tasks):
                r0 = t * ROWS_PER_TASK
                r1 = min(rows, r0 + ROWS_PER_TASK)
                _c_rows(type_id, raw.ctypes.data, raw.shape[1], r0, r1, xq, xd, xbs, m, cols, out, rows)

    _all_rows = kcommon._jit(_all_rows_py)

    def _gemv_py(type_id, raw, x, out, planes, workers):
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
        _all_rows(type_id, raw, xq.ctypes.data, xd.ctypes.data, xbs.ctypes.data, mm, cols, o.ctypes.data, rows,
                  workers)
        if planes == 2:
            for i in range(m):
                for r in range(rows):
                    out[i, r] = o[i, r] + o[m + i, r]

    def _gemv_i16_py(type_id, raw, x, out, workers):
        """Q8_0 against int16 activations (the precise mode for Q8_0: see _qdot.c)."""
        m, cols = x.shape
        rows = raw.shape[0]
        xq = np.empty((m, cols), np.int16)
        xd = np.empty((m, cols // 256), np.float32)
        _c_quant16(x.ctypes.data, m * cols, xq.ctypes.data, xd.ctypes.data)
        _all_rows(type_id, raw, xq.ctypes.data, xd.ctypes.data, 0, m, cols, out.ctypes.data, rows, workers)

    # Serial wrappers (quantize, then the one parallel region in _all_rows): parallel=True here
    # would find nothing to parallelise and say so at every compile.
    _gemv = kcommon._jit(_gemv_py, parallel=False)
    _gemv_i16 = kcommon._jit(_gemv_i16_py, parallel=False)


def built() -> bool:
    """The extension is importable and numba can call it (whatever the settings say)."""
    return _gemv is not None


def import_error() -> str | None:
    return _IMPORT_ERROR


def available() -> bool:
    """Built, and not switched off by the kernel settings (backend.KernelSettings.int_dot)."""
    return built() and backend.settings().int_dot != IntDot.OFF


def handles(type_name: str) -> bool:
    return backend.int_dot_ready(type_name)


def gemv(type_name: str, raw: np.ndarray, x: np.ndarray, out: np.ndarray, planes: int | None = None,
         schedule: GemvSchedule | None = None) -> None:
    """out (m, rows) = x (m, cols) float32, C-contiguous, m <= 16, times the blocks ``raw``ᵀ.
    ``planes``: 1 = int8 activations; 2 = plus their int8-quantized residual (Q8_0: int16).
    ``planes`` and ``schedule`` default to the kernel settings' (backend.settings())."""
    cols = x.shape[1]
    if cols % ACT_BLOCK:
        # Only Q8_0 (32-value blocks) has such rows, in tiny test models; S2 Pro's are all
        # multiples of 256. Zeros leave each 256-chunk's scale (its largest |x|) unchanged and
        # meet no weights: the kernel takes the weight-block count from raw's row length.
        padded = np.zeros((x.shape[0], cols + ACT_BLOCK - cols % ACT_BLOCK), np.float32)
        padded[:, :cols] = x
        x = padded
    chosen = backend.settings()
    planes = chosen.planes if planes is None else planes
    workers = _workers(chosen.schedule if schedule is None else schedule)
    if type_name == "Q8_0" and planes == 2:
        _gemv_i16(_qdot.Q8_0_I16, raw, x, out, workers)
    else:
        _gemv(TYPE_IDS[type_name], raw, x, out, planes, workers)


POOL_SPIN_ENV = "S2_POOL_SPIN_US"
POOL_SPIN_US = 100  # default: about the longest gap between two GEMVs of a frame (see _pool.c)
POOL_SPIN_MAX_US = 100_000  # the most _qdot.pool_configure takes
_pool_config: tuple[int, int] | None = None


def pool_available() -> bool:
    """Whether the extension has its own GEMV threads (POSIX builds: _pool.c)."""
    return _gemv is not None and _HAS_POOL


def pool_spin_us() -> int:
    """How long an idle pool worker spins before it sleeps, µs: ``S2_POOL_SPIN_US`` (0-100000)
    or the default."""
    word = os.environ.get(POOL_SPIN_ENV, "").strip()
    if not word:
        return POOL_SPIN_US
    try:
        value = int(word)
        if not 0 <= value <= POOL_SPIN_MAX_US:
            raise ValueError
    except ValueError:
        log.warning("%s=%s ignored: use a whole number of microseconds from 0 to %d", POOL_SPIN_ENV, word,
                    POOL_SPIN_MAX_US)
        return POOL_SPIN_US
    return value


def effective_schedule(schedule: GemvSchedule) -> GemvSchedule:
    """The schedule that runs for the setting ``schedule``: pool falls back to dynamic where the
    extension has no pool."""
    return GemvSchedule.DYNAMIC if schedule == GemvSchedule.POOL and not _HAS_POOL else schedule


def _workers(schedule: GemvSchedule) -> int:
    """``_all_rows``' worker argument for ``schedule``: the numba threads (dynamic), 0 (static),
    -1 (the pool, sized to the numba thread count: the engine's --threads)."""
    threads = kcommon.numba.get_num_threads()
    if schedule == GemvSchedule.STATIC:
        return 0
    if schedule == GemvSchedule.POOL and _HAS_POOL:
        if _pool_config is None or _pool_config[0] != threads:  # a spin set earlier is kept
            _configure_pool(threads, pool_spin_us() if _pool_config is None else _pool_config[1])
        return -1
    return threads


def _configure_pool(threads: int, spin_us: int) -> None:
    global _pool_config
    _pool_config = (threads, spin_us)
    if _HAS_POOL:
        _qdot.pool_configure(threads, spin_us)


def set_pool_spin(spin_us: int | None) -> None:
    """Use ``spin_us`` (0-100000) for the pool workers' spin from the next GEMV on; None: the
    environment's or the default again (benchmarks compare spins in one process)."""
    if spin_us is not None and not 0 <= spin_us <= POOL_SPIN_MAX_US:
        raise ValueError(f"pool spin {spin_us} us: use 0-{POOL_SPIN_MAX_US}")
    threads = kcommon.numba.get_num_threads() if kcommon.numba is not None else 1
    _configure_pool(threads, pool_spin_us() if spin_us is None else spin_us)


def pool_stats() -> dict:
    """The pool's counters: jobs published, joins by its workers, workers running, their spin,
    and how often a worker slept without spinning because the machine was busy."""
    jobs, joined, running, spin, naps = _qdot.pool_stats() if _HAS_POOL else (0, 0, 0, 0, 0)
    return {"jobs": jobs, "joined": joined, "workers": running, "spin_us": spin, "busy_naps": naps}


def describe() -> str:
    """Which K-quant/Q8_0 decode GEMV path runs, and why (backend.describe says it per type)."""
    return backend.int_dot_status()


def level() -> str | None:
    return None if _qdot is None else _qdot.level()


def set_level(name: str) -> None:
    """Force one instruction set (tests: every path this CPU has is checked). Users force one
    through the kernel settings (backend.KernelSettings.level, S2_KERNEL_LEVEL)."""
    _qdot.set_level(name)


def levels() -> list[str]:
    """The instruction sets this CPU offers, weakest first (the x86 ones are not a chain:
    avxvnni is offered without the AVX-512 levels on most CPUs that have it)."""
    return [] if _qdot is None else list(_qdot.levels())


def best_level() -> str | None:
    """The level used unless one is forced: the best this CPU offers."""
    return _BEST_LEVEL


def avxvnni_encoding() -> str:
    """How the avxvnni level's dot-product instructions run here: "vex" (the CPU has AVX-VNNI),
    "evex" (it has AVX-512 VNNI + VL only: the same instructions' 256-bit EVEX form, the same
    integers), "" where the level is not offered."""
    return "" if _qdot is None else _qdot.avxvnni_encoding()


def set_tiled(on: bool) -> None:
    """The register-tiled Q8_0 rows (the default, where a level has them) or, off, the per-row
    loops for every activation-row count: the same outputs bit for bit, so this is only for the
    tests that check it and for benchmarks (benchmarks/bench_int_rows.py --compare)."""
    _qdot.set_tiled(on)
