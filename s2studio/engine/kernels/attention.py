"""Decode attention in C (``_attend.c``, built into the ``_qdot`` extension): the one-query-row
case of ``transformer.attend`` (a decode step: the Slow-AR's step, each Fast-AR call; the
Fast-AR's first call, two rows, runs as two) for caches on the CPU, every head of every
request of a step in one call, which also stores the fresh k/v in the cache.

Why: at one query row attention is almost no bytes but ~15 small torch calls per layer, ~12 %
of a frame alone and more in a batched step, where it was paid once per request
(docs/performance.md, "Decode attention in C"). Not bit-identical to the torch path (another
summation order and exp): tests/engine/test_attend_kernel.py bounds the difference; the
golden greedy takes still match s2.cpp.

Each (request, KV head) is one task computed by one thread in a fixed order, so a request's
output does not depend on the thread count or on the other requests of a batch.

Switch: ``backend.KernelSettings.attention`` (``S2_ATTENTION=torch`` turns it off); where the
extension is not built, or for a shape it does not take, ``transformer.attend`` uses torch.
"""

from __future__ import annotations

import numpy as np
import torch

from s2studio.engine.kernels import backend
from s2studio.engine.kernels import common as kcommon
from s2studio.engine.kernels import intdot  # noqa: F401  (gives numba's linker the extension's symbols)
from s2studio.engine.modes import AttentionKernel

try:
    from s2studio.engine.kernels import _qdot
except ImportError:  # no compiler at install time: intdot says why
    _qdot = None

_OK = _qdot is not None and hasattr(_qdot, "attend")
FIELDS = _qdot.ATTEND_FIELDS if _OK else 10
MAX_HEAD_DIM = _qdot.ATTEND_MAX_HEAD_DIM if _OK else 0
_DTYPES = {torch.float32: 0, torch.float16: 1}


# Below this much work (cached positions x query heads x head size, summed over the requests)
# one thread does it all: starting the pool's threads costs more than it saves (one request at
# 70-600 positions: no gain, measured). Above it the tasks are shared and both cores read the
# caches from memory (8 takes at 600 positions: 1.4x; bench_attention.py --min-work 0).
PARALLEL_MIN_WORK = 1 << 22

_parallel = None
if _OK and kcommon.numba is not None:
    from numba import prange, types

    _i64 = types.int64
    _c_tasks = types.ExternalFunction("s2q_attend_tasks", types.void(*([_i64] * 8)))

    def _parallel_py(table, n_seqs, h, hkv, hd, f16, workers):
        """Every thread of the region claims (request, KV head) tasks from one counter."""
        nxt = np.zeros(1, np.int64)
        status = np.zeros(1, np.int64)
        for _w in prange(workers):
            _c_tasks(table.ctypes.data, n_seqs, h, hkv, hd, f16, nxt.ctypes.data, status.ctypes.data)
        return status[0]

    _parallel = kcommon._jit(_parallel_py)


def _run(table: np.ndarray, n_seqs: int, h: int, hkv: int, hd: int, f16: int, work: int) -> int:
    """The table's tasks on this thread, or shared by the kernels' threads when there is
    enough work: the same bits either way (each task is computed whole by one thread)."""
    workers = kcommon.numba.get_num_threads() if _parallel is not None else 1
    if workers > 1 and work >= PARALLEL_MIN_WORK:
        return int(_parallel(table, n_seqs, h, hkv, hd, f16, min(workers, n_seqs * hkv)))
    return _qdot.attend_many(table.ctypes.data, n_seqs, h, hkv, hd, f16)


def built() -> bool:
    """The extension has the kernel (whatever the settings say)."""
    return _OK


def enabled() -> bool:
    """Built and not switched off (``KernelSettings.attention``)."""
    return _OK and backend.settings().attention == AttentionKernel.C


# The checks below run per layer and step: plain attribute reads (each torch property read
# costs ~0.1-0.3 us; ``device.type`` and ``is_contiguous`` more), layouts read from strides.
_F32 = torch.float32


def _cache_ok(kc: torch.Tensor, vc: torch.Tensor, hkv: int, hd: int, pos0: int) -> bool:
    """A cache layer (Hkv, capacity, hd) the kernel reads: on the CPU, float32 or float16,
    contiguous (as ``KVCache`` makes them), k and v alike, holding ``pos0`` positions."""
    shape = kc.shape
    return (kc.dtype in _DTYPES and vc.dtype is kc.dtype and kc.is_cpu and vc.is_cpu
            and shape[0] == hkv and shape[2] == hd and 0 <= pos0 <= shape[1] and vc.shape == shape
            and kc.stride() == (shape[1] * hd, hd, 1) and vc.stride() == (shape[1] * hd, hd, 1))


def _rows_ok(q: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor) -> bool:
    """q (H, B, hd), k_new/v_new (Hkv, B, hd), float32 on the CPU; each request's q one (H, hd)
    block (a column of the transpose of a contiguous (n, H, hd), as ``layer_forward`` makes
    it, or a contiguous (H, 1, hd)), k/v rows contiguous at any distance between KV heads and
    requests (columns of a contiguous (Hkv, n, hd)), the same for k and v; hd within the
    kernel's limit and H a multiple of Hkv."""
    h, b, hd = q.shape
    hkv = k_new.shape[0]
    qs, ks = q.stride(), k_new.stride()
    return (q.dtype is _F32 and k_new.dtype is _F32 and v_new.dtype is _F32 and q.is_cpu
            and k_new.shape == v_new.shape and k_new.shape[1] == b and k_new.shape[2] == hd
            and 0 < hd <= MAX_HEAD_DIM and h % hkv == 0
            and qs[0] == hd and qs[2] == 1 and ks[2] == 1 and v_new.stride() == ks)


# ``store``: what the kernel does with the fresh k/v after attending (KVCache.store's job,
# done in the same call: four torch ops per request and layer fewer).
NO_STORE, STORE, STORE_ROUNDED = 0, 1, 2


def store_mode(round_f16: bool) -> int:
    """The ``store`` argument that writes what ``KVCache.store`` would for a cache with
    ``round_f16``."""
    return STORE_ROUNDED if round_f16 else STORE


def decode(q: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor, k_cache: torch.Tensor,
           v_cache: torch.Tensor, pos0: int, store: int = NO_STORE) -> torch.Tensor | None:
    """One request's attention for one query row at position ``pos0`` (>= 0) over positions
    0..pos0-1 of ``k_cache``/``v_cache`` (Hkv, capacity, hd) plus its fresh k/v (q (H, 1, hd),
    k_new/v_new (Hkv, 1, hd)): (1, H*hd) float32, head-major, as ``transformer.attend``
    returns it; with ``store`` (:func:`store_mode`), k_new/v_new are then written at
    position ``pos0`` of the cache. None where the kernel does not apply (switched off, not
    built, another device, dtype or layout, no room at ``pos0`` to store): then use torch,
    the cache untouched."""
    if not _OK or backend.settings().attention != AttentionKernel.C or not _rows_ok(q, k_new, v_new):
        return None
    h, _, hd = q.shape
    hkv = k_new.shape[0]
    if not _cache_ok(k_cache, v_cache, hkv, hd, pos0) or (store and pos0 >= k_cache.shape[1]):
        return None
    out = torch.empty(1, h * hd, dtype=torch.float32)
    f16 = _DTYPES[k_cache.dtype]
    if pos0 * h * hd < PARALLEL_MIN_WORK or _parallel is None:  # the common case: no table
        rc = _qdot.attend(q.data_ptr(), k_new.data_ptr(), v_new.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(),
                          out.data_ptr(), pos0, k_cache.stride(0), k_new.stride(0), store, h, hkv, hd, f16)
    else:
        table = np.array([[q.data_ptr(), k_new.data_ptr(), v_new.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(),
                           out.data_ptr(), pos0, k_cache.stride(0), k_new.stride(0), store]], np.int64)
        rc = _run(table, 1, h, hkv, hd, f16, pos0 * h * hd)
    return out if rc == 0 else None


def decode_batch(q: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor, k_caches: list[torch.Tensor],
                 v_caches: list[torch.Tensor], pos0s: list[int], stores: list[int] | None = None
                 ) -> torch.Tensor | None:
    """:func:`decode` for B requests of a batched step, one row each (q (H, B, hd), k_new/v_new
    (Hkv, B, hd): request i's is column i), each at its own position ``pos0s[i]`` of its own
    cache layer, in one call: (B, H*hd), row i bit-identical to what :func:`decode` gives
    request i alone (the kernel computes each (request, KV head) apart, in the same order).
    ``stores``: per request, as :func:`decode`'s ``store`` (None: none). None where the kernel
    does not apply to every request (then no cache was touched)."""
    if not _OK or backend.settings().attention != AttentionKernel.C or not _rows_ok(q, k_new, v_new):
        return None
    h, b, hd = q.shape
    hkv = k_new.shape[0]
    dtype = k_caches[0].dtype
    stores = stores or [NO_STORE] * b
    if not all(kc.dtype == dtype and _cache_ok(kc, vc, hkv, hd, p) and (not st or p < kc.shape[1])
               for kc, vc, p, st in zip(k_caches, v_caches, pos0s, stores)):
        return None
    out = torch.empty(b, h * hd, dtype=torch.float32)
    table = np.empty((b, FIELDS), np.int64)
    qp, kp, vp, op = q.data_ptr(), k_new.data_ptr(), v_new.data_ptr(), out.data_ptr()
    qstep, kstep, nstride = 4 * q.stride(1), 4 * k_new.stride(1), k_new.stride(0)
    for i, (kc, vc, p, st) in enumerate(zip(k_caches, v_caches, pos0s, stores)):
        table[i] = (qp + qstep * i, kp + kstep * i, vp + kstep * i, kc.data_ptr(), vc.data_ptr(),
                    op + 4 * i * h * hd, p, kc.stride(0), nstride, st)
    rc = _run(table, b, h, hkv, hd, _DTYPES[dtype], sum(pos0s) * h * hd)
    return out if rc == 0 else None
