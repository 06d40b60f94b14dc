"""One-pass Snake (y = x + sin²(αx)/α) for float32 CPU tensors, compiled with numba.

Why: torch runs Snake as four passes (αx, sin, square, scale-and-add) over every sample of
every decoder channel, about 30 times per chunk, each pass a separate OpenMP region. One
fused, vectorized pass measured 1.5 vs 2.6 ms for 96 ch x 32768 samples at best, and far
less under CPU contention, where every extra parallel region waits for a time slice.

numba's ``np.sin`` is a scalar libm call (no SVML here), which does not vectorize, so sin²
is computed with an explicit polynomial: sin² has period π, so u = αx is reduced to
r = u - kπ with |r| <= π/2 (in float64, exact enough for any |u| < 2^40), and sin(r) is its
odd Taylor series to r^15 (truncation error < 1e-11). Only αx is rounded to float32 first,
as torch does, so the result matches torch's float32 Snake to float32 rounding
(tests/engine/test_codec_snake.py bounds the difference).

numba is optional at run time: ``usable()`` is False without it, or when the kernel fails to
compile or to reproduce a few known values (logged once), and the codec then uses the torch
form.
"""

from __future__ import annotations

import logging
import math
import os

import numpy as np

try:
    from numba import njit, prange
except Exception:  # pragma: no cover - exercised only where numba is missing
    njit = None

# Same rule as engine/kernels/common.py: cache compiled code only beside the .py source.
_CACHE = os.path.isfile(__file__) and os.environ.get("S2_NUMBA_CACHE", "1") != "0"

_INV_PI = 1.0 / math.pi
_PI = math.pi
# sin(r) = r·Σ c_n r^(2n), c_n = (-1)^n / (2n+1)!
_C0, _C1, _C2, _C3, _C4, _C5, _C6, _C7 = ((-1.0) ** n / math.factorial(2 * n + 1) for n in range(8))


log = logging.getLogger(__name__)


def available() -> bool:
    return njit is not None


_usable: bool | None = None


def usable() -> bool:
    """numba present and the compiled kernel checked once against math.sin (compiles it)."""
    global _usable
    if _usable is None:
        _usable = False
        if available():
            try:
                x = np.array([[-7.5, -1.0, 0.0, 0.3, 2.0, 123.25]], dtype=np.float32)
                alpha, inv = np.array([1.7], np.float32), np.array([1 / 1.7], np.float32)
                out = np.zeros((1, 8), np.float32)
                snake_into(x, alpha, inv, out, 2)
                want = [v + math.sin(float(np.float32(1.7) * np.float32(v))) ** 2 / 1.7 for v in x[0]]
                _usable = bool(np.all(out[0, :2] == 0) and np.allclose(out[0, 2:], want, rtol=0, atol=1e-4))
                if not _usable:
                    log.warning("fused Snake kernel gave wrong values; using the torch form")
            except Exception as exc:  # a broken numba/LLVM install must not stop decoding
                log.warning("fused Snake kernel unavailable (%s: %s); using the torch form",
                            type(exc).__name__, exc)
    return _usable


def _snake_into(x, alpha, inv_alpha, out, off):
    """out[c, off + i] = x[c, i] + inv_alpha[c]·sin²(alpha[c]·x[c, i])."""
    n_ch, length = x.shape
    for c in prange(n_ch):
        a = alpha[c]
        ia = inv_alpha[c]
        for i in range(length):
            v = x[c, i]
            u = float(a * v)  # float32 product, as torch's α·x, then float64 from here on
            k = math.floor(u * _INV_PI + 0.5)
            r = u - k * _PI
            r2 = r * r
            p = _C7
            p = p * r2 + _C6
            p = p * r2 + _C5
            p = p * r2 + _C4
            p = p * r2 + _C3
            p = p * r2 + _C2
            p = p * r2 + _C1
            p = p * r2 + _C0
            s = r * p
            out[c, off + i] = v + ia * (s * s)


_kernel = (njit(parallel=True, fastmath=True, boundscheck=False, cache=_CACHE, nogil=True)(_snake_into)
           if njit is not None else None)


def snake_into(x: np.ndarray, alpha: np.ndarray, inv_alpha: np.ndarray, out: np.ndarray, off: int) -> None:
    """``_snake_into`` on C-contiguous float32 arrays only (``out`` must be one already).

    One specialization, always: numba reuses an already compiled any-layout version for later
    contiguous arguments, and versions vectorized differently may round differently under
    fastmath, so the numbers would depend on what the process happened to pass first."""
    if not (out.flags.c_contiguous and out.dtype == np.float32):
        raise ValueError("snake_into writes into a C-contiguous float32 array")
    _kernel(np.ascontiguousarray(x, dtype=np.float32), np.ascontiguousarray(alpha, dtype=np.float32),
            np.ascontiguousarray(inv_alpha, dtype=np.float32), out, off)
