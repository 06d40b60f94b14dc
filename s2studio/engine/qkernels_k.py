"""K-quant CPU kernels (Q4_K, Q5_K, Q6_K ...), registered into ``qkernels.KERNELS``.

Importing it must always succeed (no numba → registers nothing).
"""

from __future__ import annotations

import numpy as np

from . import qkernels
from .qkernels import _CACHE, _jit, numba

if numba is not None:
    from numba import njit, prange
else:  # pragma: no cover
    njit = None

    def prange(*a):  # noqa: D103
        return range(*a)


if numba is not None:
    from llvmlite import ir as _ir
    from numba import types as _types
    from numba.core import cgutils as _cgutils
    from numba.extending import intrinsic as _intrinsic

    @_intrinsic
    def _prefetch(typingctx, arr, i, j):
        """Software prefetch of ``arr[i, j]`` into all cache levels (``llvm.prefetch``)."""
        def codegen(context, builder, sig, args):
            aryty = sig.args[0]
            ary = context.make_array(aryty)(context, builder, args[0])
            ptr = _cgutils.get_item_pointer(context, builder, aryty, ary, [args[1], args[2]],
                                            wraparound=False, boundscheck=False)
            i32 = _ir.IntType(32)
            fnty = _ir.FunctionType(_ir.VoidType(), [ptr.type, i32, i32, i32])
            fn = _cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
            builder.call(fn, [ptr, _ir.Constant(i32, 0), _ir.Constant(i32, 3), _ir.Constant(i32, 1)])
            return context.get_dummy_value()
        return _types.none(arr, i, j), codegen


def _helper(fn):
    if numba is None:
        return None
    return njit(fastmath=False, boundscheck=False, cache=_CACHE, nogil=True, inline="always")(fn)


def _jit_exact(fn):
    """Parallel, without fastmath: the dequantized values must be bit-exact with gguf-py."""
    if numba is None:
        return None
    return njit(parallel=True, fastmath=False, boundscheck=False, cache=_CACHE, nogil=True)(fn)


def _njit_exact(fn):
    if numba is None:
        return None
    return njit(fastmath=False, boundscheck=False, cache=_CACHE, nogil=True)(fn)


def _bf16_row_py(buf, out, r):
    bits = buf.view(np.uint32)
    for c in range(out.shape[1]):
        u = bits[c]
        out[r, c] = np.uint16((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))
                              >> np.uint32(16))


def _f16_py(raw, r, o, table):
    return table[np.int64(raw[r, o]) | (np.int64(raw[r, o + 1]) << 8)]


def _sub_sums_py(x, sub):
    """Sums of x over each sub-block of ``sub`` elements: (m, cols // sub) float32."""
    n = x.shape[1] // sub
    s = np.empty((x.shape[0], n), np.float32)
    for m in range(x.shape[0]):
        for i in range(n):
            a = np.float32(0)
            for j in range(sub):
                a += x[m, i * sub + j]
            s[m, i] = a
    return s


_bf16_row = _helper(_bf16_row_py)
_f16 = _helper(_f16_py)
_sub_sums = _helper(_sub_sums_py)


# ---------------------------------------------------------------- Q4_K
# block_q4_K, 144 bytes: f16 d, f16 dmin, 12 bytes of packed 6-bit (scale, min) for 8
# sub-blocks of 32, 128 bytes qs. Sub-block 2p+s is nibble s of qs[32p : 32p+32].
# value = (d*sc) * q - (dmin*m).

def _scale_min_k4_py(raw, r, o, j):
    """6-bit (scale, min) of sub-block j of the Q4_K/Q5_K block at byte ``o`` (get_scale_min_k4)."""
    if j < 4:
        sc = np.int64(raw[r, o + 4 + j]) & 63
        mn = np.int64(raw[r, o + 8 + j]) & 63
    else:
        sc = (np.int64(raw[r, o + 8 + j]) & 15) | ((np.int64(raw[r, o + j]) >> 6) << 4)
        mn = (np.int64(raw[r, o + 8 + j]) >> 4) | ((np.int64(raw[r, o + 4 + j]) >> 6) << 4)
    return sc, mn


_scale_min_k4 = _helper(_scale_min_k4_py)


def _q4_k_row_py(raw, r, buf, table):
    for b in range(buf.shape[0] // 256):
        o = b * 144
        d = _f16(raw, r, o, table)
        dmin = _f16(raw, r, o + 2, table)
        for p in range(4):
            sc0, m0 = _scale_min_k4(raw, r, o, 2 * p)
            sc1, m1 = _scale_min_k4(raw, r, o, 2 * p + 1)
            d0 = d * np.float32(sc0)
            d1 = d * np.float32(sc1)
            n0 = dmin * np.float32(m0)
            n1 = dmin * np.float32(m1)
            q = o + 16 + p * 32
            y = b * 256 + p * 64
            for j in range(32):
                v = raw[r, q + j]
                buf[y + j] = d0 * np.float32(v & np.uint8(15)) - n0
                buf[y + 32 + j] = d1 * np.float32(v >> np.uint8(4)) - n1


_q4_k_row = _helper(_q4_k_row_py)


def _q4_k_gemv(raw, x, out, table):
    rows = raw.shape[0]
    n_x = x.shape[0]
    nb = x.shape[1] // 256
    ns = nb * 8
    if rows < 8:  # too few rows for the 8-row kernel: dequantize them
        buf = np.empty(x.shape[1], np.float32)
        for r in range(rows):
            _q4_k_row(raw, r, buf, table)
            for m in range(n_x):
                out[m, r] = np.sum(buf * x[m])
        return
    sx = _sub_sums(x, 32)
    words = raw.view(np.uint32)
    n_groups = (rows + 7) // 8
    n_tasks = (n_groups + 3) // 4
    for t in prange(n_tasks):
        acc = np.empty((n_x, 8, 32), np.float32)
        scl = np.empty((8, 8), np.float32)
        mns = np.empty((8, ns), np.float32)
        sw = np.empty((8, 4), np.uint32)
        sb = sw.view(np.uint8)
        d0 = np.empty(8, np.float32)
        d1 = np.empty(8, np.float32)
        for g in range(t * 4, min(n_groups, t * 4 + 4)):
            r0 = min(g * 8, rows - 8)  # the last group overlaps the previous one
            k0 = g * 8 - r0  # and writes only its own rows
            acc[:] = 0
            for b in range(nb):
                for k in range(8):
                    rn = min(r0 + 8 + k, rows - 1)  # the next group's rows, ahead of use
                    _prefetch(raw, rn, b * 144)
                    _prefetch(raw, rn, b * 144 + 64)
                    _prefetch(raw, rn, b * 144 + 128)
                    w = b * 36 + 1
                    u0 = words[r0 + k, w]
                    u1 = words[r0 + k, w + 1]
                    u2 = words[r0 + k, w + 2]
                    s03 = u0 & np.uint32(0x3F3F3F3F)
                    s47 = (u2 & np.uint32(0x0F0F0F0F)) | ((u0 >> np.uint32(2)) & np.uint32(0x30303030))
                    m03 = u1 & np.uint32(0x3F3F3F3F)
                    m47 = ((u2 >> np.uint32(4)) & np.uint32(0x0F0F0F0F)) | ((u1 >> np.uint32(2)) & np.uint32(0x30303030))
                    d = _f16(raw, r0 + k, b * 144, table)
                    dmin = _f16(raw, r0 + k, b * 144 + 2, table)
                    sw[k, 0] = s03
                    sw[k, 1] = s47
                    sw[k, 2] = m03
                    sw[k, 3] = m47
                    for i in range(8):
                        scl[k, i] = d * np.float32(sb[k, i])
                        mns[k, b * 8 + i] = dmin * np.float32(sb[k, 8 + i])
                for m in range(n_x):
                    for p in range(4):
                        for k in range(8):
                            d0[k] = scl[k, 2 * p]
                            d1[k] = scl[k, 2 * p + 1]
                        o = b * 144 + 16 + p * 32
                        xo = b * 256 + p * 64
                        for j in range(32):
                            xl = x[m, xo + j]
                            xh = x[m, xo + 32 + j]
                            for k in range(8):
                                v = raw[r0 + k, o + j]
                                acc[m, k, j] += (d0[k] * (np.float32(np.uint8(v & np.uint8(15))) * xl)
                                                 + d1[k] * (np.float32(np.uint8(v >> np.uint8(4))) * xh))
            for m in range(n_x):
                for k in range(k0, 8):
                    mt = np.float32(0)
                    for s in range(ns):
                        mt += mns[k, s] * sx[m, s]
                    out[m, r0 + k] = acc[m, k].sum() - mt


def _q4_k_dequant_bf16(raw, out, table):
    rows = raw.shape[0]
    n_tasks = (rows + 15) // 16
    for t in prange(n_tasks):
        buf = np.empty(out.shape[1], np.float32)
        for r in range(t * 16, min(rows, t * 16 + 16)):
            _q4_k_row(raw, r, buf, table)
            _bf16_row(buf, out, r)


def _q4_k_gather(raw, ids, out, table):
    for i in range(ids.shape[0]):
        _q4_k_row(raw, ids[i], out[i], table)


q4_k_gemv = _jit(_q4_k_gemv)
q4_k_dequant_bf16 = _jit_exact(_q4_k_dequant_bf16)
q4_k_gather = _njit_exact(_q4_k_gather)

if numba is not None:
    qkernels.register("Q4_K", qkernels.Kernels(256, 144, q4_k_gemv, q4_k_dequant_bf16, q4_k_gather))
