"""K-quant (and Q4_0) CPU kernels, registered into ``common.KERNELS``.

Same contract as the Q8_0 kernels in ``common`` (read its docstring first): for each of
Q4_K, Q5_K, Q6_K, Q3_K, Q2_K and Q4_0, a GEMV on the raw GGUF blocks with float32 activations,
a float32 dequantization for the prefill GEMM and a row gather. The dequantized values are
bit-exact with ``gguf.quants.dequantize`` (compiled without fastmath and in gguf-py's order;
every product there is exact anyway: an 11-bit float16 times small integers).

GEMV structure, per group of 8 weight rows (one pass over the activations feeds the 8 rows):
- the super-block scales of the 8 rows are decoded once per group, for all activation rows:
  the packed 6-bit scales with 32-bit SWAR operations (ggml's ``utmp`` shuffle), ``d``/``dmin``
  through the float16 table, then one vectorized loop per row makes the float32 ``d*sc`` and
  ``dmin*m`` of all its blocks;
- the inner loop over 16 or 32 weights is ``acc[k, j] += (d*sc)[k] * (q[k, j] * x[j])`` with a
  constant trip count, vectorized over j; the integer unpacking stays in 8-bit lanes;
- the ``- dmin*m`` term (Q4_K, Q5_K, Q2_K) never enters the inner loop: per sub-block it is
  ``dmin*m * sum(x over the sub-block)`` and those sums are the same for every row, so it is one
  dot product per row at the end. The ``-32``/``-4``/``-8`` offsets of Q6_K/Q3_K/Q4_0 are
  applied to the 8-bit integers (exact, whatever the mean of the activations);
- the next group's rows are prefetched, spread over the current group's inner loop: a group's
  rows are short streams (1-2 KB each) that the hardware prefetcher picks up too late.

Getting LLVM to vectorize that from numba took a few rules, all used below:
- the 8 rows are unrolled by hand (8 calls of a small ``_*_step`` function that LLVM inlines):
  LLVM does not unroll a loop over rows with a body this large by itself, and then vectorizes
  across the rows (gathers) or not at all;
- the indices of the inner loop are unsigned: numba adds a negative-index wraparound to signed
  indices, which hides from LLVM that consecutive j are consecutive bytes;
- the accumulators and the 8 rows' scales are on the stack (``_stack_f32``), so LLVM knows they
  alias neither the weights nor the activations: no run-time overlap checks, no scalar copy;
- numba runs LLVM without the SLP vectorizer: short fixed loops (8 or 16 values) stay scalar,
  hence the scale decoding as one long loop per row;
- no whole-array expressions (``a[:] = 0``, ``a.sum()``, ``np.zeros``) in the parallel
  kernels, and helpers are separate functions rather than numba-inlined: both cost seconds of
  compile time (the first call of each kernel compiles it; the result is cached on disk).

Each type's GEMV spells out the same group/row/block loop around its own step function. That
repetition is deliberate: the loop is where the rules above live, and a shared driver taking
the step as a first-class function argument would put each type's performance in numba's
hands (inlining through a dispatcher argument) for code that was tuned by measurement.

Importing this module always succeeds; without numba it registers nothing.
"""

from __future__ import annotations

import numpy as np

from s2studio.engine.kernels import common as kcommon
from s2studio.engine.kernels.common import _CACHE, _jit, numba

if numba is not None:
    from llvmlite import ir as _ir
    from numba import njit, prange
    from numba import types as _types
    from numba.core import cgutils as _cgutils
    from numba.extending import intrinsic as _intrinsic

    @_intrinsic
    def _prefetch(typingctx, arr, i, j):
        """Software prefetch of ``arr[i, j]`` (``llvm.prefetch``, read, all cache levels)."""
        def codegen(context, builder, sig, args):
            aryty = sig.args[0]
            ary = context.make_array(aryty)(context, builder, args[0])
            ptr = _cgutils.get_item_pointer(context, builder, aryty, ary, [args[1], args[2]],
                                            wraparound=False, boundscheck=False)
            i32 = _ir.IntType(32)
            fnty = _ir.FunctionType(_ir.VoidType(), [ptr.type, i32, i32, i32])
            fn = _cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
            rw, locality, data = (_ir.Constant(i32, v) for v in (0, 3, 1))
            builder.call(fn, [ptr, rw, locality, data])
            return context.get_dummy_value()
        return _types.none(arr, i, j), codegen

    @_intrinsic
    def _stack_f32(typingctx, n):
        """Pointer to ``n`` (a literal) float32 on the stack of the calling function.

        The small per-task arrays of the inner loops (accumulators, the 8 rows' scales) live
        there instead of on the heap: LLVM then knows they alias nothing else, vectorizes the
        loops without run-time overlap checks and keeps no scalar fallback copy of them."""
        if not isinstance(n, _types.IntegerLiteral):
            return None
        count = n.literal_value

        def codegen(context, builder, sig, args):
            with builder.goto_entry_block():
                p = builder.alloca(_ir.ArrayType(_ir.FloatType(), count))
                p.align = 64
            zero = _ir.Constant(_ir.IntType(32), 0)
            return builder.gep(p, [zero, zero])
        return _types.CPointer(_types.float32)(n), codegen
else:  # pragma: no cover - exercised only where numba is missing
    njit = None
    prange = range


def _inline(fn):
    if numba is None:
        return None
    return njit(boundscheck=False, cache=_CACHE, nogil=True, inline="always")(fn)


def _fn(fn):
    """A helper or sequential kernel, without fastmath (LLVM inlines the small ones)."""
    if numba is None:
        return None
    return njit(boundscheck=False, cache=_CACHE, nogil=True)(fn)


def _fn_fast(fn):
    """A helper of the GEMV kernels (fastmath: free summation order)."""
    if numba is None:
        return None
    return njit(fastmath=True, boundscheck=False, cache=_CACHE, nogil=True)(fn)


def _jit_exact(fn):
    """Parallel kernel without fastmath (bit-exact dequantized values)."""
    if numba is None:
        return None
    return njit(parallel=True, fastmath=False, boundscheck=False, cache=_CACHE, nogil=True)(fn)


# ------------------------------------------------------------------------------ shared helpers

def _f16_py(raw, r, o, table):
    """float32 value of the little-endian float16 at byte ``o`` of row ``r``."""
    return table[np.int64(raw[r, o]) | (np.int64(raw[r, o + 1]) << 8)]


def _splat2_py(d64, k, i, bits):
    """Two copies of float32 ``bits`` packed in one uint64 store (half the scalar stores)."""
    v = np.uint64(bits)
    d64[k, i] = v | (v << np.uint64(32))


def _s8_py(v, off):
    """float32 of ``v - off`` as an 8-bit integer (v is an unpacked quant, off its offset)."""
    return np.float32(np.int8(np.int64(v) - off))


def _zero_py(a):
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            a[i, j] = 0


def _row_sum_py(a, i):
    t = np.float32(0)
    for j in range(a.shape[1]):
        t += a[i, j]
    return t


# Whole-array expressions (a[:] = 0, a.sum(), np.zeros) are avoided in the parallel kernels:
# numba turns each into a nested parallel loop, which costs seconds of compile time.
_zero = _fn(_zero_py)
_row_sum = _fn_fast(_row_sum_py)
_s8 = _fn(_s8_py)
_f16 = _fn(_f16_py)
_splat2 = _fn(_splat2_py)


def _scale_min_k4_py(raw, r, o, j):
    """6-bit (scale, min) of sub-block j of the Q4_K/Q5_K block at byte ``o`` (get_scale_min_k4)."""
    if j < 4:
        sc = np.int64(raw[r, o + 4 + j]) & 63
        mn = np.int64(raw[r, o + 8 + j]) & 63
    else:
        sc = (np.int64(raw[r, o + 8 + j]) & 15) | ((np.int64(raw[r, o + j]) >> 6) << 4)
        mn = (np.int64(raw[r, o + 8 + j]) >> 4) | ((np.int64(raw[r, o + 4 + j]) >> 6) << 4)
    return sc, mn


_scale_min_k4 = _fn(_scale_min_k4_py)


def _k4_scales_py(words, r, w, sw, k, b):
    """Unpack the 12 scale bytes of a Q4_K/Q5_K block (32-bit words w..w+2 of row r) into
    sw[k, 4b:4b+4] = bytes sc0..sc7, m0..m7 (ggml's utmp shuffle)."""
    u0 = words[r, w]
    u1 = words[r, w + 1]
    u2 = words[r, w + 2]
    m6 = np.uint32(0x3F3F3F3F)
    m4 = np.uint32(0x0F0F0F0F)
    m2 = np.uint32(0x30303030)
    sw[k, 4 * b] = u0 & m6
    sw[k, 4 * b + 1] = (u2 & m4) | ((u0 >> np.uint32(2)) & m2)
    sw[k, 4 * b + 2] = u1 & m6
    sw[k, 4 * b + 3] = ((u2 >> np.uint32(4)) & m4) | ((u1 >> np.uint32(2)) & m2)


_k4_scales = _fn(_k4_scales_py)


def _sub_sums_k_py(x, nb):
    """sxx[m, 16b + 8 + i] = sum of x[m] over sub-block i (32 values) of block b, zero at
    16b + i: laid out like the decoded (d*sc x8, dmin*m x8) vector of each block, so that the
    whole min term of a row is one dot product with it."""
    sxx = np.empty((x.shape[0], nb * 16), np.float32)
    _zero(sxx)
    for m in range(x.shape[0]):
        for b in range(nb):
            for i in range(8):
                a = np.float32(0)
                for j in range(32):
                    a += x[m, b * 256 + i * 32 + j]
                sxx[m, b * 16 + 8 + i] = a
    return sxx


_sub_sums_k = _fn_fast(_sub_sums_k_py)


def _small_gemv_py(gather, raw, x, out, table):
    """GEMV of a matrix of fewer than 8 rows: dequantized rows, plain dot products."""
    rows = raw.shape[0]
    buf = np.empty((rows, x.shape[1]), np.float32)
    ids = np.empty(rows, np.int64)
    for r in range(rows):
        ids[r] = r
    gather(raw, ids, buf, table)
    for m in range(x.shape[0]):
        for r in range(rows):
            a = np.float32(0)
            for c in range(x.shape[1]):
                a += buf[r, c] * x[m, c]
            out[m, r] = a


_small_gemv = _inline(_small_gemv_py)


# ------------------------------------------------------------------------------ Q4_K
# block_q4_K, 144 bytes: f16 d, f16 dmin, 12 bytes of 6-bit (scale, min) for 8 sub-blocks of
# 32, 128 bytes qs; sub-block 2p+s is nibble s of qs[32p : 32p+32].
# value = (d*sc) * q - dmin*m, q in [0, 15].

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
                buf[y + j] = d0 * np.float32(np.uint8(v & np.uint8(15))) - n0
                buf[y + 32 + j] = d1 * np.float32(np.uint8(v >> np.uint8(4))) - n1


_q4_k_row = _fn(_q4_k_row_py)


def _q4_k_step_py(raw, r, acc, k, o, j, xl, xh, d0, d1):
    """One weight row of the Q4_K GEMV inner loop (called for each of the 8 rows; LLVM
    inlines it)."""
    v = raw[r, o + j]
    acc[k, j] += (d0[k] * (np.float32(np.uint8(v & np.uint8(15))) * xl)
                  + d1[k] * (np.float32(np.uint8(v >> np.uint8(4))) * xh))


_q4_k_step = _fn_fast(_q4_k_step_py)


def _q4_k_gemv(raw, x, out, table):
    rows = raw.shape[0]
    n_x = x.shape[0]
    nb = x.shape[1] // 256
    if rows < 8:  # too few rows for the 8-row kernel: dequantize them
        _small_gemv(q4_k_gather, raw, x, out, table)
        return
    sxx = _sub_sums_k(x, nb)
    words = raw.view(np.uint32)
    halves = raw.view(np.uint16)
    bits = table.view(np.uint32)
    n_groups = (rows + 7) // 8
    for t in prange((n_groups + 3) // 4):
        acc = numba.carray(_stack_f32(256), (8, 32))
        sw = np.empty((8, nb * 4), np.uint32)
        sb = sw.view(np.uint8)  # per block: sc0..sc7, m0..m7 (bytes)
        dexp = np.empty((8, nb * 16), np.float32)  # per block: d x8, dmin x8
        d64 = dexp.view(np.uint64)
        fl = np.empty((8, nb * 16), np.float32)  # per block: d*sc x8, dmin*m x8
        d0 = numba.carray(_stack_f32(8), 8)
        d1 = numba.carray(_stack_f32(8), 8)
        for g in range(t * 4, min(n_groups, t * 4 + 4)):
            r0 = min(g * 8, rows - 8)  # the last group overlaps the previous one
            k0 = g * 8 - r0  # and writes only its own rows
            for k in range(8):
                r = r0 + k
                rf = min(r + 16, rows - 1)
                for b in range(nb):
                    _prefetch(raw, rf, b * 144)  # also keeps LLVM from vectorizing this loop
                    # over b with gathers and scatters (slower on the CPUs tried)
                    _k4_scales(words, r, b * 36 + 1, sw, k, b)
                    hd = bits[halves[r, b * 72]]
                    hm = bits[halves[r, b * 72 + 1]]
                    for i in range(4):
                        _splat2(d64, k, b * 8 + i, hd)
                        _splat2(d64, k, b * 8 + 4 + i, hm)
            for k in range(8):
                for s in range(nb * 16):
                    fl[k, s] = dexp[k, s] * np.float32(sb[k, s])
            u0 = np.uint64(r0)
            for m in range(n_x):
                um = np.uint64(m)
                _zero(acc)
                for b in range(nb):
                    for p in range(4):
                        if m == 0 and p < 3:  # the next group's rows, while this group computes
                            for k in range(8):
                                _prefetch(raw, min(r0 + 8 + k, rows - 1), b * 144 + p * 64)
                        for k in range(8):
                            d0[k] = fl[k, b * 16 + 2 * p]
                            d1[k] = fl[k, b * 16 + 2 * p + 1]
                        o = np.uint64(b * 144 + 16 + p * 32)
                        xo = np.uint64(b * 256 + p * 64)
                        for j in range(np.uint64(32)):
                            xl = x[um, xo + j]
                            xh = x[um, xo + np.uint64(32) + j]
                            _q4_k_step(raw, u0, acc, np.uint64(0), o, j, xl, xh, d0, d1)
                            _q4_k_step(raw, u0 + np.uint64(1), acc, np.uint64(1), o, j, xl, xh, d0,
                                       d1)
                            _q4_k_step(raw, u0 + np.uint64(2), acc, np.uint64(2), o, j, xl, xh, d0,
                                       d1)
                            _q4_k_step(raw, u0 + np.uint64(3), acc, np.uint64(3), o, j, xl, xh, d0,
                                       d1)
                            _q4_k_step(raw, u0 + np.uint64(4), acc, np.uint64(4), o, j, xl, xh, d0,
                                       d1)
                            _q4_k_step(raw, u0 + np.uint64(5), acc, np.uint64(5), o, j, xl, xh, d0,
                                       d1)
                            _q4_k_step(raw, u0 + np.uint64(6), acc, np.uint64(6), o, j, xl, xh, d0,
                                       d1)
                            _q4_k_step(raw, u0 + np.uint64(7), acc, np.uint64(7), o, j, xl, xh, d0,
                                       d1)
                for k in range(k0, 8):
                    mt = np.float32(0)
                    for s in range(nb * 16):
                        mt += fl[k, s] * sxx[m, s]
                    out[m, r0 + k] = _row_sum(acc, k) - mt


def _q4_k_dequant_f32(raw, out, table):
    for r in prange(raw.shape[0]):
        _q4_k_row(raw, r, out[r], table)


def _q4_k_gather(raw, ids, out, table):
    for i in range(ids.shape[0]):
        _q4_k_row(raw, ids[i], out[i], table)


q4_k_gemv = _jit(_q4_k_gemv)
q4_k_dequant_f32 = _jit_exact(_q4_k_dequant_f32)
q4_k_gather = _fn(_q4_k_gather)


# ------------------------------------------------------------------------------ Q5_K
# block_q5_K, 176 bytes: f16 d, f16 dmin, 12 bytes of 6-bit (scale, min) as in Q4_K, 32 bytes
# qh, 128 bytes qs. Sub-block 2p+s: low 4 bits = nibble s of qs[32p : 32p+32], 5th bit = bit
# 2p+s of qh[0:32]. value = (d*sc) * q - dmin*m, q in [0, 31].

def _q5_k_row_py(raw, r, buf, table):
    for b in range(buf.shape[0] // 256):
        o = b * 176
        d = _f16(raw, r, o, table)
        dmin = _f16(raw, r, o + 2, table)
        for p in range(4):
            sc0, m0 = _scale_min_k4(raw, r, o, 2 * p)
            sc1, m1 = _scale_min_k4(raw, r, o, 2 * p + 1)
            d0 = d * np.float32(sc0)
            d1 = d * np.float32(sc1)
            n0 = dmin * np.float32(m0)
            n1 = dmin * np.float32(m1)
            q = o + 48 + p * 32
            y = b * 256 + p * 64
            b0 = np.uint8(1 << (2 * p))
            b1 = np.uint8(2 << (2 * p))
            for j in range(32):
                v = raw[r, q + j]
                h = raw[r, o + 16 + j]
                lo = (v & np.uint8(15)) | (np.uint8(16) if np.uint8(h & b0) != np.uint8(0) else np.uint8(0))
                hi = (v >> np.uint8(4)) | (np.uint8(16) if np.uint8(h & b1) != np.uint8(0) else np.uint8(0))
                buf[y + j] = d0 * np.float32(np.uint8(lo)) - n0
                buf[y + 32 + j] = d1 * np.float32(np.uint8(hi)) - n1


_q5_k_row = _fn(_q5_k_row_py)


def _q5_k_step_py(raw, r, acc, k, o, oh, j, m0, m1, xl, xh, d0, d1):
    """One weight row of the Q5_K GEMV inner loop (called for each of the 8 rows; LLVM
    inlines it). The 5th bits are tested with masks rather than shifted by 2p: a variable
    shift would make LLVM widen the whole loop to 64-bit lanes."""
    v = raw[r, o + j]
    h = raw[r, oh + j]
    lo = (v & np.uint8(15)) | (np.uint8(16) if np.uint8(h & m0) != np.uint8(0) else np.uint8(0))
    hi = (v >> np.uint8(4)) | (np.uint8(16) if np.uint8(h & m1) != np.uint8(0) else np.uint8(0))
    acc[k, j] += d0[k] * (np.float32(np.uint8(lo)) * xl) + d1[k] * (np.float32(np.uint8(hi)) * xh)


_q5_k_step = _fn_fast(_q5_k_step_py)


def _q5_k_gemv(raw, x, out, table):
    rows = raw.shape[0]
    n_x = x.shape[0]
    nb = x.shape[1] // 256
    if rows < 8:  # too few rows for the 8-row kernel: dequantize them
        _small_gemv(q5_k_gather, raw, x, out, table)
        return
    sxx = _sub_sums_k(x, nb)
    words = raw.view(np.uint32)
    halves = raw.view(np.uint16)
    bits = table.view(np.uint32)
    n_groups = (rows + 7) // 8
    n_tasks = (n_groups + 3) // 4
    for t in prange(n_tasks):
        acc = numba.carray(_stack_f32(256), (8, 32))
        sw = np.empty((8, nb * 4), np.uint32)
        sb = sw.view(np.uint8)
        dexp = np.empty((8, nb * 16), np.float32)
        d64 = dexp.view(np.uint64)
        fl = np.empty((8, nb * 16), np.float32)
        d0 = numba.carray(_stack_f32(8), 8)
        d1 = numba.carray(_stack_f32(8), 8)
        for g in range(t * 4, min(n_groups, t * 4 + 4)):
            r0 = min(g * 8, rows - 8)
            k0 = g * 8 - r0
            for k in range(8):
                r = r0 + k
                rf = min(r + 16, rows - 1)
                for b in range(nb):
                    _prefetch(raw, rf, b * 176)  # also keeps LLVM from vectorizing this loop
                    # over b with gathers and scatters (slower on the CPUs tried)
                    _k4_scales(words, r, b * 44 + 1, sw, k, b)
                    hd = bits[halves[r, b * 88]]
                    hm = bits[halves[r, b * 88 + 1]]
                    for i in range(4):
                        _splat2(d64, k, b * 8 + i, hd)
                        _splat2(d64, k, b * 8 + 4 + i, hm)
            for k in range(8):
                for s in range(nb * 16):
                    fl[k, s] = dexp[k, s] * np.float32(sb[k, s])
            u0 = np.uint64(r0)
            for m in range(n_x):
                um = np.uint64(m)
                _zero(acc)
                for b in range(nb):
                    for p in range(4):
                        if m == 0 and p < 3:  # the next group's rows, while this group computes
                            for k in range(8):
                                _prefetch(raw, min(r0 + 8 + k, rows - 1), b * 176 + p * 64)
                        for k in range(8):
                            d0[k] = fl[k, b * 16 + 2 * p]
                            d1[k] = fl[k, b * 16 + 2 * p + 1]
                        o = np.uint64(b * 176 + 48 + p * 32)
                        oh = np.uint64(b * 176 + 16)
                        xo = np.uint64(b * 256 + p * 64)
                        m0 = np.uint8(1 << (2 * p))
                        m1 = np.uint8(2 << (2 * p))
                        for j in range(np.uint64(32)):
                            xl = x[um, xo + j]
                            xh = x[um, xo + np.uint64(32) + j]
                            _q5_k_step(raw, u0, acc, np.uint64(0), o, oh, j, m0, m1, xl, xh, d0, d1)
                            _q5_k_step(raw, u0 + np.uint64(1), acc, np.uint64(1), o, oh, j, m0, m1,
                                       xl, xh, d0, d1)
                            _q5_k_step(raw, u0 + np.uint64(2), acc, np.uint64(2), o, oh, j, m0, m1,
                                       xl, xh, d0, d1)
                            _q5_k_step(raw, u0 + np.uint64(3), acc, np.uint64(3), o, oh, j, m0, m1,
                                       xl, xh, d0, d1)
                            _q5_k_step(raw, u0 + np.uint64(4), acc, np.uint64(4), o, oh, j, m0, m1,
                                       xl, xh, d0, d1)
                            _q5_k_step(raw, u0 + np.uint64(5), acc, np.uint64(5), o, oh, j, m0, m1,
                                       xl, xh, d0, d1)
                            _q5_k_step(raw, u0 + np.uint64(6), acc, np.uint64(6), o, oh, j, m0, m1,
                                       xl, xh, d0, d1)
                            _q5_k_step(raw, u0 + np.uint64(7), acc, np.uint64(7), o, oh, j, m0, m1,
                                       xl, xh, d0, d1)
                for k in range(k0, 8):
                    mt = np.float32(0)
                    for s in range(nb * 16):
                        mt += fl[k, s] * sxx[m, s]
                    out[m, r0 + k] = _row_sum(acc, k) - mt


def _q5_k_dequant_f32(raw, out, table):
    for r in prange(raw.shape[0]):
        _q5_k_row(raw, r, out[r], table)


def _q5_k_gather(raw, ids, out, table):
    for i in range(ids.shape[0]):
        _q5_k_row(raw, ids[i], out[i], table)


q5_k_gemv = _jit(_q5_k_gemv)
q5_k_dequant_f32 = _jit_exact(_q5_k_dequant_f32)
q5_k_gather = _fn(_q5_k_gather)


# ------------------------------------------------------------------------------ Q6_K
# block_q6_K, 210 bytes: 128 bytes ql (low 4 bits), 64 bytes qh (high 2 bits), 16 int8 scales
# (sub-blocks of 16), f16 d. In each half h (128 values): value l + 32i (l < 32, i < 4) takes
# nibble i//2 of ql[64h + l + 32(i%2)] and bits 2i..2i+1 of qh[32h + l], scale 8h + l//16 + 2i.
# value = (d*sc) * (q - 32), q in [0, 63].

def _q6_k_row_py(raw, r, buf, table):
    for b in range(buf.shape[0] // 256):
        o = b * 210
        d = _f16(raw, r, o + 208, table)
        for h in range(2):
            for half in range(2):
                s = o + 192 + h * 8 + half
                c0 = d * np.float32(np.int8(raw[r, s]))
                c1 = d * np.float32(np.int8(raw[r, s + 2]))
                c2 = d * np.float32(np.int8(raw[r, s + 4]))
                c3 = d * np.float32(np.int8(raw[r, s + 6]))
                ql = o + h * 64 + half * 16
                qh = o + 128 + h * 32 + half * 16
                y = b * 256 + h * 128 + half * 16
                for j in range(16):
                    a = raw[r, ql + j]
                    c = raw[r, ql + 32 + j]
                    q = raw[r, qh + j]
                    h0 = (q & np.uint8(3)) << np.uint8(4)
                    h1 = ((q >> np.uint8(2)) & np.uint8(3)) << np.uint8(4)
                    h2 = ((q >> np.uint8(4)) & np.uint8(3)) << np.uint8(4)
                    h3 = (q >> np.uint8(6)) << np.uint8(4)
                    buf[y + j] = c0 * _s8((a & np.uint8(15)) | h0, 32)
                    buf[y + 32 + j] = c1 * _s8((c & np.uint8(15)) | h1, 32)
                    buf[y + 64 + j] = c2 * _s8((a >> np.uint8(4)) | h2, 32)
                    buf[y + 96 + j] = c3 * _s8((c >> np.uint8(4)) | h3, 32)


_q6_k_row = _fn(_q6_k_row_py)


def _q6_k_step_py(raw, r, acc, k, o1, oh, j, x0, x1, x2, x3, c0, c1, c2, c3):
    """One weight row of the Q6_K GEMV inner loop (called for each of the 8 rows, inlined by
    LLVM: it does not unroll a loop over rows with a body this large by itself)."""
    a = raw[r, o1 + j]
    c = raw[r, o1 + np.uint64(32) + j]
    q = raw[r, oh + j]
    h0 = (q & np.uint8(3)) << np.uint8(4)
    h1 = ((q >> np.uint8(2)) & np.uint8(3)) << np.uint8(4)
    h2 = ((q >> np.uint8(4)) & np.uint8(3)) << np.uint8(4)
    h3 = (q >> np.uint8(6)) << np.uint8(4)
    v0 = _s8((a & np.uint8(15)) | h0, 32)
    v1 = _s8((c & np.uint8(15)) | h1, 32)
    v2 = _s8((a >> np.uint8(4)) | h2, 32)
    v3 = _s8((c >> np.uint8(4)) | h3, 32)
    acc[k, j] += (c0[k] * (v0 * x0) + c1[k] * (v1 * x1)) + (c2[k] * (v2 * x2) + c3[k] * (v3 * x3))


_q6_k_step = _fn_fast(_q6_k_step_py)


def _q6_k_gemv(raw, x, out, table):
    rows = raw.shape[0]
    n_x = x.shape[0]
    nb = x.shape[1] // 256
    if rows < 8:  # too few rows for the 8-row kernel: dequantize them
        _small_gemv(q6_k_gather, raw, x, out, table)
        return
    halves = raw.view(np.uint16)
    bits = table.view(np.uint32)
    n_groups = (rows + 7) // 8
    n_tasks = (n_groups + 3) // 4
    for t in prange(n_tasks):
        acc = numba.carray(_stack_f32(128), (8, 16))
        hw = np.empty((8, nb * 8), np.uint16)
        sb = hw.view(np.int8)  # the 16 int8 scales of each block
        dexp = np.empty((8, nb * 16), np.float32)  # d x16 per block
        d64 = dexp.view(np.uint64)
        fl = np.empty((8, nb * 16), np.float32)  # d*sc x16 per block
        c0 = numba.carray(_stack_f32(8), 8)
        c1 = numba.carray(_stack_f32(8), 8)
        c2 = numba.carray(_stack_f32(8), 8)
        c3 = numba.carray(_stack_f32(8), 8)
        for g in range(t * 4, min(n_groups, t * 4 + 4)):
            r0 = min(g * 8, rows - 8)
            k0 = g * 8 - r0
            for k in range(8):
                r = r0 + k
                rf = min(r + 16, rows - 1)
                for b in range(nb):
                    _prefetch(raw, rf, b * 210)  # also keeps LLVM from vectorizing this loop
                    # over b with gathers and scatters (slower on the CPUs tried)
                    for i in range(8):
                        hw[k, b * 8 + i] = halves[r, b * 105 + 96 + i]
                    hd = bits[halves[r, b * 105 + 104]]
                    for i in range(8):
                        _splat2(d64, k, b * 8 + i, hd)
            for k in range(8):
                for s in range(nb * 16):
                    fl[k, s] = dexp[k, s] * np.float32(sb[k, s])
            # unsigned indices: numba then emits no negative-index wraparound, which would
            # hide from LLVM that the loads are consecutive
            u0 = np.uint64(r0)
            for m in range(n_x):
                _zero(acc)
                for b in range(nb):
                    for h in range(2):
                        for half in range(2):
                            if m == 0:  # the next group's rows, while this group computes
                                line = b * 210 + h * 128 + half * 64
                                for k in range(8):
                                    _prefetch(raw, min(r0 + 8 + k, rows - 1), line)
                            s = b * 16 + h * 8 + half
                            for k in range(8):
                                c0[k] = fl[k, s]
                                c1[k] = fl[k, s + 2]
                                c2[k] = fl[k, s + 4]
                                c3[k] = fl[k, s + 6]
                            o1 = np.uint64(b * 210 + h * 64 + half * 16)
                            oh = np.uint64(b * 210 + 128 + h * 32 + half * 16)
                            xo = np.uint64(b * 256 + h * 128 + half * 16)
                            um = np.uint64(m)
                            for j in range(np.uint64(16)):
                                x0 = x[um, xo + j]
                                x1 = x[um, xo + np.uint64(32) + j]
                                x2 = x[um, xo + np.uint64(64) + j]
                                x3 = x[um, xo + np.uint64(96) + j]
                                _q6_k_step(raw, u0, acc, np.uint64(0), o1, oh, j, x0, x1, x2, x3,
                                           c0, c1, c2, c3)
                                _q6_k_step(raw, u0 + np.uint64(1), acc, np.uint64(1), o1, oh, j,
                                           x0, x1, x2, x3, c0, c1, c2, c3)
                                _q6_k_step(raw, u0 + np.uint64(2), acc, np.uint64(2), o1, oh, j,
                                           x0, x1, x2, x3, c0, c1, c2, c3)
                                _q6_k_step(raw, u0 + np.uint64(3), acc, np.uint64(3), o1, oh, j,
                                           x0, x1, x2, x3, c0, c1, c2, c3)
                                _q6_k_step(raw, u0 + np.uint64(4), acc, np.uint64(4), o1, oh, j,
                                           x0, x1, x2, x3, c0, c1, c2, c3)
                                _q6_k_step(raw, u0 + np.uint64(5), acc, np.uint64(5), o1, oh, j,
                                           x0, x1, x2, x3, c0, c1, c2, c3)
                                _q6_k_step(raw, u0 + np.uint64(6), acc, np.uint64(6), o1, oh, j,
                                           x0, x1, x2, x3, c0, c1, c2, c3)
                                _q6_k_step(raw, u0 + np.uint64(7), acc, np.uint64(7), o1, oh, j,
                                           x0, x1, x2, x3, c0, c1, c2, c3)
                for k in range(k0, 8):
                    out[m, r0 + k] = _row_sum(acc, k)


def _q6_k_dequant_f32(raw, out, table):
    for r in prange(raw.shape[0]):
        _q6_k_row(raw, r, out[r], table)


def _q6_k_gather(raw, ids, out, table):
    for i in range(ids.shape[0]):
        _q6_k_row(raw, ids[i], out[i], table)


q6_k_gemv = _jit(_q6_k_gemv)
q6_k_dequant_f32 = _jit_exact(_q6_k_dequant_f32)
q6_k_gather = _fn(_q6_k_gather)


# ------------------------------------------------------------------------------ Q4_0
# block_q4_0, 18 bytes: f16 d, 16 bytes qs; value j < 16 is the low nibble of qs[j], value
# j + 16 the high one. value = d * (q - 8).

def _q4_0_row_py(raw, r, buf, table):
    nb = buf.shape[0] // 32
    # 16, computed so that LLVM does not know it: a loop known to run 16 times is unrolled and
    # stays scalar (numba has no SLP vectorizer), this one is vectorized
    n16 = buf.shape[0] // max(nb, 1) // 2
    for b in range(nb):
        o = b * 18
        d = _f16(raw, r, o, table)
        for j in range(n16):
            v = raw[r, o + 2 + j]
            buf[b * 32 + j] = d * _s8(v & np.uint8(15), 8)
            buf[b * 32 + 16 + j] = d * _s8(v >> np.uint8(4), 8)


_q4_0_row = _fn(_q4_0_row_py)


def _q4_0_step_py(raw, r, acc, k, o, j, xl, xh, dd):
    """One weight row of the Q4_0 GEMV inner loop (called for each of the 8 rows; LLVM
    inlines it)."""
    v = raw[r, o + j]
    lo = np.float32(np.int8(np.int64(v & np.uint8(15)) - 8))
    hi = np.float32(np.int8(np.int64(v >> np.uint8(4)) - 8))
    acc[k, j] += dd[k] * (lo * xl + hi * xh)


_q4_0_step = _fn_fast(_q4_0_step_py)


def _q4_0_gemv(raw, x, out, table):
    rows = raw.shape[0]
    n_x = x.shape[0]
    nb = x.shape[1] // 32
    if rows < 8:  # too few rows for the 8-row kernel: dequantize them
        _small_gemv(q4_0_gather, raw, x, out, table)
        return
    halves = raw.view(np.uint16)
    n_groups = (rows + 7) // 8
    for t in prange((n_groups + 3) // 4):
        acc = numba.carray(_stack_f32(128), (8, 16))
        dd = numba.carray(_stack_f32(8), 8)
        for g in range(t * 4, min(n_groups, t * 4 + 4)):
            r0 = min(g * 8, rows - 8)  # the last group overlaps the previous one
            k0 = g * 8 - r0  # and writes only its own rows
            u0 = np.uint64(r0)
            for m in range(n_x):
                um = np.uint64(m)
                _zero(acc)
                for b in range(nb):
                    if m == 0:  # the next group's rows, while this group computes
                        for k in range(8):
                            _prefetch(raw, min(r0 + 8 + k, rows - 1), b * 18)
                    for k in range(8):
                        dd[k] = table[halves[r0 + k, b * 9]]
                    o = np.uint64(b * 18 + 2)
                    xo = np.uint64(b * 32)
                    for j in range(np.uint64(16)):
                        xl = x[um, xo + j]
                        xh = x[um, xo + np.uint64(16) + j]
                        _q4_0_step(raw, u0, acc, np.uint64(0), o, j, xl, xh, dd)
                        _q4_0_step(raw, u0 + np.uint64(1), acc, np.uint64(1), o, j, xl, xh, dd)
                        _q4_0_step(raw, u0 + np.uint64(2), acc, np.uint64(2), o, j, xl, xh, dd)
                        _q4_0_step(raw, u0 + np.uint64(3), acc, np.uint64(3), o, j, xl, xh, dd)
                        _q4_0_step(raw, u0 + np.uint64(4), acc, np.uint64(4), o, j, xl, xh, dd)
                        _q4_0_step(raw, u0 + np.uint64(5), acc, np.uint64(5), o, j, xl, xh, dd)
                        _q4_0_step(raw, u0 + np.uint64(6), acc, np.uint64(6), o, j, xl, xh, dd)
                        _q4_0_step(raw, u0 + np.uint64(7), acc, np.uint64(7), o, j, xl, xh, dd)
                for k in range(k0, 8):
                    out[m, r0 + k] = _row_sum(acc, k)


def _q4_0_dequant_f32(raw, out, table):
    for r in prange(raw.shape[0]):
        _q4_0_row(raw, r, out[r], table)


def _q4_0_gather(raw, ids, out, table):
    for i in range(ids.shape[0]):
        _q4_0_row(raw, ids[i], out[i], table)


q4_0_gemv = _jit(_q4_0_gemv)
q4_0_dequant_f32 = _jit_exact(_q4_0_dequant_f32)
q4_0_gather = _fn(_q4_0_gather)


# ------------------------------------------------------------------------------ Q2_K
# block_q2_K, 84 bytes: 16 scale bytes (low nibble: scale, high nibble: min, sub-blocks of 16),
# 64 bytes qs, f16 d, f16 dmin. In each half h (128 values): value l + 32u (l < 32, u < 4) is
# bits 2u..2u+1 of qs[32h + l], sub-block 8h + 2u + l//16.
# value = (d*sc) * q - dmin*m, q in [0, 3].

def _q2_k_row_py(raw, r, buf, table):
    for b in range(buf.shape[0] // 256):
        o = b * 84
        d = _f16(raw, r, o + 80, table)
        dmin = _f16(raw, r, o + 82, table)
        for h in range(2):
            for half in range(2):
                s = o + h * 8 + half  # scale byte of value u: s + 2u
                d0 = d * np.float32(raw[r, s] & np.uint8(15))
                d1 = d * np.float32(raw[r, s + 2] & np.uint8(15))
                d2 = d * np.float32(raw[r, s + 4] & np.uint8(15))
                d3 = d * np.float32(raw[r, s + 6] & np.uint8(15))
                m0 = dmin * np.float32(raw[r, s] >> np.uint8(4))
                m1 = dmin * np.float32(raw[r, s + 2] >> np.uint8(4))
                m2 = dmin * np.float32(raw[r, s + 4] >> np.uint8(4))
                m3 = dmin * np.float32(raw[r, s + 6] >> np.uint8(4))
                q = o + 16 + h * 32 + half * 16
                y = b * 256 + h * 128 + half * 16
                for j in range(16):
                    v = raw[r, q + j]
                    buf[y + j] = d0 * np.float32(np.uint8(v & np.uint8(3))) - m0
                    buf[y + 32 + j] = d1 * np.float32(np.uint8((v >> np.uint8(2)) & np.uint8(3))) - m1
                    buf[y + 64 + j] = d2 * np.float32(np.uint8((v >> np.uint8(4)) & np.uint8(3))) - m2
                    buf[y + 96 + j] = d3 * np.float32(np.uint8(v >> np.uint8(6))) - m3


_q2_k_row = _fn(_q2_k_row_py)


def _q2_k_step_py(raw, r, acc, k, o, j, x0, x1, x2, x3, c0, c1, c2, c3):
    """One weight row of the Q2_K GEMV inner loop (called for each of the 8 rows; LLVM
    inlines it)."""
    v = raw[r, o + j]
    v0 = np.float32(np.uint8(v & np.uint8(3)))
    v1 = np.float32(np.uint8((v >> np.uint8(2)) & np.uint8(3)))
    v2 = np.float32(np.uint8((v >> np.uint8(4)) & np.uint8(3)))
    v3 = np.float32(np.uint8(v >> np.uint8(6)))
    acc[k, j] += (c0[k] * (v0 * x0) + c1[k] * (v1 * x1)) + (c2[k] * (v2 * x2) + c3[k] * (v3 * x3))


_q2_k_step = _fn_fast(_q2_k_step_py)


def _q2_k_gemv(raw, x, out, table):
    rows = raw.shape[0]
    n_x = x.shape[0]
    nb = x.shape[1] // 256
    if rows < 8:  # too few rows for the 8-row kernel: dequantize them
        _small_gemv(q2_k_gather, raw, x, out, table)
        return
    # sxx[m, 32b + 16 + s] = sum of x over sub-block s (16 values) of block b, zero at 32b + s
    sxx = np.empty((n_x, nb * 32), np.float32)
    _zero(sxx)
    for m in range(n_x):
        for s in range(nb * 16):
            a = np.float32(0)
            for j in range(16):
                a += x[m, s * 16 + j]
            sxx[m, (s // 16) * 32 + 16 + s % 16] = a
    words = raw.view(np.uint32)
    halves = raw.view(np.uint16)
    bits = table.view(np.uint32)
    n_groups = (rows + 7) // 8
    for t in prange((n_groups + 3) // 4):
        acc = numba.carray(_stack_f32(128), (8, 16))
        sw = np.empty((8, nb * 8), np.uint32)
        sb = sw.view(np.uint8)  # per block: sc0..sc15, m0..m15 (bytes)
        dexp = np.empty((8, nb * 32), np.float32)  # per block: d x16, dmin x16
        d64 = dexp.view(np.uint64)
        fl = np.empty((8, nb * 32), np.float32)  # per block: d*sc x16, dmin*m x16
        c0 = numba.carray(_stack_f32(8), 8)
        c1 = numba.carray(_stack_f32(8), 8)
        c2 = numba.carray(_stack_f32(8), 8)
        c3 = numba.carray(_stack_f32(8), 8)
        for g in range(t * 4, min(n_groups, t * 4 + 4)):
            r0 = min(g * 8, rows - 8)  # the last group overlaps the previous one
            k0 = g * 8 - r0  # and writes only its own rows
            for k in range(8):
                r = r0 + k
                rf = min(r + 16, rows - 1)
                for b in range(nb):
                    _prefetch(raw, rf, b * 84)  # also keeps LLVM from vectorizing this loop
                    # over b with gathers and scatters (slower on the CPUs tried)
                    for i in range(4):
                        w = words[r, b * 21 + i]
                        sw[k, b * 8 + i] = w & np.uint32(0x0F0F0F0F)
                        sw[k, b * 8 + 4 + i] = (w >> np.uint32(4)) & np.uint32(0x0F0F0F0F)
                    hd = bits[halves[r, b * 42 + 40]]
                    hm = bits[halves[r, b * 42 + 41]]
                    for i in range(8):
                        _splat2(d64, k, b * 16 + i, hd)
                        _splat2(d64, k, b * 16 + 8 + i, hm)
            for k in range(8):
                for s in range(nb * 32):
                    fl[k, s] = dexp[k, s] * np.float32(sb[k, s])
            u0 = np.uint64(r0)
            for m in range(n_x):
                um = np.uint64(m)
                _zero(acc)
                for b in range(nb):
                    for h in range(2):
                        for half in range(2):
                            if m == 0 and half == 0:  # the next group's rows, while this one computes
                                for k in range(8):
                                    _prefetch(raw, min(r0 + 8 + k, rows - 1), b * 84 + h * 64)
                            s = b * 32 + h * 8 + half
                            for k in range(8):
                                c0[k] = fl[k, s]
                                c1[k] = fl[k, s + 2]
                                c2[k] = fl[k, s + 4]
                                c3[k] = fl[k, s + 6]
                            o = np.uint64(b * 84 + 16 + h * 32 + half * 16)
                            xo = np.uint64(b * 256 + h * 128 + half * 16)
                            for j in range(np.uint64(16)):
                                x0 = x[um, xo + j]
                                x1 = x[um, xo + np.uint64(32) + j]
                                x2 = x[um, xo + np.uint64(64) + j]
                                x3 = x[um, xo + np.uint64(96) + j]
                                _q2_k_step(raw, u0, acc, np.uint64(0), o, j, x0, x1, x2, x3, c0,
                                           c1, c2, c3)
                                _q2_k_step(raw, u0 + np.uint64(1), acc, np.uint64(1), o, j,
                                           x0, x1, x2, x3, c0, c1, c2, c3)
                                _q2_k_step(raw, u0 + np.uint64(2), acc, np.uint64(2), o, j,
                                           x0, x1, x2, x3, c0, c1, c2, c3)
                                _q2_k_step(raw, u0 + np.uint64(3), acc, np.uint64(3), o, j,
                                           x0, x1, x2, x3, c0, c1, c2, c3)
                                _q2_k_step(raw, u0 + np.uint64(4), acc, np.uint64(4), o, j,
                                           x0, x1, x2, x3, c0, c1, c2, c3)
                                _q2_k_step(raw, u0 + np.uint64(5), acc, np.uint64(5), o, j,
                                           x0, x1, x2, x3, c0, c1, c2, c3)
                                _q2_k_step(raw, u0 + np.uint64(6), acc, np.uint64(6), o, j,
                                           x0, x1, x2, x3, c0, c1, c2, c3)
                                _q2_k_step(raw, u0 + np.uint64(7), acc, np.uint64(7), o, j,
                                           x0, x1, x2, x3, c0, c1, c2, c3)
                for k in range(k0, 8):
                    mt = np.float32(0)
                    for s in range(nb * 32):
                        mt += fl[k, s] * sxx[m, s]
                    out[m, r0 + k] = _row_sum(acc, k) - mt


def _q2_k_dequant_f32(raw, out, table):
    for r in prange(raw.shape[0]):
        _q2_k_row(raw, r, out[r], table)


def _q2_k_gather(raw, ids, out, table):
    for i in range(ids.shape[0]):
        _q2_k_row(raw, ids[i], out[i], table)


q2_k_gemv = _jit(_q2_k_gemv)
q2_k_dequant_f32 = _jit_exact(_q2_k_dequant_f32)
q2_k_gather = _fn(_q2_k_gather)


# ------------------------------------------------------------------------------ Q3_K
# block_q3_K, 110 bytes: 32 bytes hmask, 64 bytes qs, 12 bytes of 6-bit scales (16 sub-blocks
# of 16), f16 d. In each half h (128 values): value l + 32u (l < 32, u < 4) has low bits
# 2u..2u+1 of qs[32h + l] and high bit 4h+u of hmask[l], sub-block 8h + 2u + l//16.
# value = (d*(sc - 32)) * (q - 4), q = low | high << 2 in [0, 7].

def _q3_k_scales_py(halves, r, w, sw, k, b):
    """Unpack the 12 scale bytes of a Q3_K block (halfwords w..w+5 of row r: the 110-byte
    blocks are only 2-byte aligned) into sw[k, 4b:4b+4] = the 16 6-bit scales (bytes)."""
    a0 = np.uint32(halves[r, w]) | (np.uint32(halves[r, w + 1]) << np.uint32(16))
    a1 = np.uint32(halves[r, w + 2]) | (np.uint32(halves[r, w + 3]) << np.uint32(16))
    t = np.uint32(halves[r, w + 4]) | (np.uint32(halves[r, w + 5]) << np.uint32(16))
    m4 = np.uint32(0x0F0F0F0F)
    m2 = np.uint32(0x03030303)
    sw[k, 4 * b] = (a0 & m4) | ((t & m2) << np.uint32(4))
    sw[k, 4 * b + 1] = (a1 & m4) | (((t >> np.uint32(2)) & m2) << np.uint32(4))
    sw[k, 4 * b + 2] = ((a0 >> np.uint32(4)) & m4) | (((t >> np.uint32(4)) & m2) << np.uint32(4))
    sw[k, 4 * b + 3] = ((a1 >> np.uint32(4)) & m4) | (((t >> np.uint32(6)) & m2) << np.uint32(4))


_q3_k_scales = _fn(_q3_k_scales_py)


def _q3_k_row_py(raw, r, buf, table):
    halves = raw.view(np.uint16)
    sw = numba.carray(_stack_f32(4), (1, 4)).view(np.uint32)
    sb = sw.view(np.uint8)
    for b in range(buf.shape[0] // 256):
        o = b * 110
        d = _f16(raw, r, o + 108, table)
        _q3_k_scales(halves, r, b * 55 + 48, sw, 0, 0)
        for h in range(2):
            for half in range(2):
                s = h * 8 + half  # scale of value u: s + 2u
                d0 = d * np.float32(np.int64(sb[0, s]) - 32)
                d1 = d * np.float32(np.int64(sb[0, s + 2]) - 32)
                d2 = d * np.float32(np.int64(sb[0, s + 4]) - 32)
                d3 = d * np.float32(np.int64(sb[0, s + 6]) - 32)
                q = o + 32 + h * 32 + half * 16
                y = b * 256 + h * 128 + half * 16
                for j in range(16):
                    v = raw[r, q + j]
                    hm = raw[r, o + half * 16 + j]
                    hh = np.uint8(hm >> np.uint8(4)) if h else hm
                    buf[y + j] = d0 * _s8((v & np.uint8(3)) | ((hh & np.uint8(1)) << np.uint8(2)), 4)
                    buf[y + 32 + j] = d1 * _s8(
                        ((v >> np.uint8(2)) & np.uint8(3)) | ((hh & np.uint8(2)) << np.uint8(1)), 4)
                    buf[y + 64 + j] = d2 * _s8(((v >> np.uint8(4)) & np.uint8(3)) | (hh & np.uint8(4)), 4)
                    buf[y + 96 + j] = d3 * _s8((v >> np.uint8(6)) | ((hh & np.uint8(8)) >> np.uint8(1)), 4)


_q3_k_row = _fn(_q3_k_row_py)


def _q3_k_step_py(raw, r, acc, k, o, oh, j, h, x0, x1, x2, x3, c0, c1, c2, c3):
    """One weight row of the Q3_K GEMV inner loop (called for each of the 8 rows; LLVM
    inlines it)."""
    v = raw[r, o + j]
    hm = raw[r, oh + j]
    hh = np.uint8(hm >> np.uint8(4)) if h else hm  # two constant shifts rather than one variable
    v0 = _s8((v & np.uint8(3)) | ((hh & np.uint8(1)) << np.uint8(2)), 4)
    v1 = _s8(((v >> np.uint8(2)) & np.uint8(3)) | ((hh & np.uint8(2)) << np.uint8(1)), 4)
    v2 = _s8(((v >> np.uint8(4)) & np.uint8(3)) | (hh & np.uint8(4)), 4)
    v3 = _s8((v >> np.uint8(6)) | ((hh & np.uint8(8)) >> np.uint8(1)), 4)
    acc[k, j] += (c0[k] * (v0 * x0) + c1[k] * (v1 * x1)) + (c2[k] * (v2 * x2) + c3[k] * (v3 * x3))


_q3_k_step = _fn_fast(_q3_k_step_py)


def _q3_k_gemv(raw, x, out, table):
    rows = raw.shape[0]
    n_x = x.shape[0]
    nb = x.shape[1] // 256
    if rows < 8:  # too few rows for the 8-row kernel: dequantize them
        _small_gemv(q3_k_gather, raw, x, out, table)
        return
    halves = raw.view(np.uint16)
    bits = table.view(np.uint32)
    n_groups = (rows + 7) // 8
    for t in prange((n_groups + 3) // 4):
        acc = numba.carray(_stack_f32(128), (8, 16))
        sw = np.empty((8, nb * 4), np.uint32)
        sb = sw.view(np.uint8)  # per block: the 16 scales + 32 (bytes)
        dexp = np.empty((8, nb * 16), np.float32)  # d x16 per block
        d64 = dexp.view(np.uint64)
        fl = np.empty((8, nb * 16), np.float32)  # d*(sc-32) x16 per block
        c0 = numba.carray(_stack_f32(8), 8)
        c1 = numba.carray(_stack_f32(8), 8)
        c2 = numba.carray(_stack_f32(8), 8)
        c3 = numba.carray(_stack_f32(8), 8)
        for g in range(t * 4, min(n_groups, t * 4 + 4)):
            r0 = min(g * 8, rows - 8)  # the last group overlaps the previous one
            k0 = g * 8 - r0  # and writes only its own rows
            for k in range(8):
                r = r0 + k
                rf = min(r + 16, rows - 1)
                for b in range(nb):
                    _prefetch(raw, rf, b * 110)  # also keeps LLVM from vectorizing this loop
                    # over b with gathers and scatters (slower on the CPUs tried)
                    _q3_k_scales(halves, r, b * 55 + 48, sw, k, b)
                    hd = bits[halves[r, b * 55 + 54]]
                    for i in range(8):
                        _splat2(d64, k, b * 8 + i, hd)
            for k in range(8):
                for s in range(nb * 16):
                    fl[k, s] = dexp[k, s] * np.float32(np.int64(sb[k, s]) - 32)
            u0 = np.uint64(r0)
            for m in range(n_x):
                um = np.uint64(m)
                _zero(acc)
                for b in range(nb):
                    for h in range(2):
                        for half in range(2):
                            if m == 0 and half == 0:  # the next group's rows, while this one computes
                                for k in range(8):
                                    _prefetch(raw, min(r0 + 8 + k, rows - 1), b * 110 + h * 64)
                            s = b * 16 + h * 8 + half
                            for k in range(8):
                                c0[k] = fl[k, s]
                                c1[k] = fl[k, s + 2]
                                c2[k] = fl[k, s + 4]
                                c3[k] = fl[k, s + 6]
                            o = np.uint64(b * 110 + 32 + h * 32 + half * 16)
                            oh = np.uint64(b * 110 + half * 16)
                            xo = np.uint64(b * 256 + h * 128 + half * 16)
                            for j in range(np.uint64(16)):
                                x0 = x[um, xo + j]
                                x1 = x[um, xo + np.uint64(32) + j]
                                x2 = x[um, xo + np.uint64(64) + j]
                                x3 = x[um, xo + np.uint64(96) + j]
                                _q3_k_step(raw, u0, acc, np.uint64(0), o, oh, j, h,
                                           x0, x1, x2, x3, c0, c1, c2, c3)
                                _q3_k_step(raw, u0 + np.uint64(1), acc, np.uint64(1), o, oh, j, h,
                                           x0, x1, x2, x3, c0, c1, c2, c3)
                                _q3_k_step(raw, u0 + np.uint64(2), acc, np.uint64(2), o, oh, j, h,
                                           x0, x1, x2, x3, c0, c1, c2, c3)
                                _q3_k_step(raw, u0 + np.uint64(3), acc, np.uint64(3), o, oh, j, h,
                                           x0, x1, x2, x3, c0, c1, c2, c3)
                                _q3_k_step(raw, u0 + np.uint64(4), acc, np.uint64(4), o, oh, j, h,
                                           x0, x1, x2, x3, c0, c1, c2, c3)
                                _q3_k_step(raw, u0 + np.uint64(5), acc, np.uint64(5), o, oh, j, h,
                                           x0, x1, x2, x3, c0, c1, c2, c3)
                                _q3_k_step(raw, u0 + np.uint64(6), acc, np.uint64(6), o, oh, j, h,
                                           x0, x1, x2, x3, c0, c1, c2, c3)
                                _q3_k_step(raw, u0 + np.uint64(7), acc, np.uint64(7), o, oh, j, h,
                                           x0, x1, x2, x3, c0, c1, c2, c3)
                for k in range(k0, 8):
                    out[m, r0 + k] = _row_sum(acc, k)


def _q3_k_dequant_f32(raw, out, table):
    for r in prange(raw.shape[0]):
        _q3_k_row(raw, r, out[r], table)


def _q3_k_gather(raw, ids, out, table):
    for i in range(ids.shape[0]):
        _q3_k_row(raw, ids[i], out[i], table)


q3_k_gemv = _jit(_q3_k_gemv)
q3_k_dequant_f32 = _jit_exact(_q3_k_dequant_f32)
q3_k_gather = _fn(_q3_k_gather)


# ------------------------------------------------------------------------------ Q8_0
# block_q8_0, 34 bytes: f16 d + 32 int8 qs; value = d * q.

def _q8_0_step_py(raw, r, acc, k, o, j, xv, dd):
    acc[k, j] += dd[k] * (np.float32(np.int8(raw[r, o + j])) * xv)


_q8_0_step = _fn_fast(_q8_0_step_py)


def _q8_0_gemv(raw, x, out, table):
    rows = raw.shape[0]
    n_x = x.shape[0]
    nb = x.shape[1] // 32
    if rows < 8:
        _small_gemv(q8_0_gather, raw, x, out, table)
        return
    halves = raw.view(np.uint16)  # 34-byte blocks: d is half b*17 of the row
    n_groups = (rows + 7) // 8
    for t in prange((n_groups + 3) // 4):
        acc = numba.carray(_stack_f32(256), (8, 32))
        dd = numba.carray(_stack_f32(8), 8)
        for g in range(t * 4, min(n_groups, t * 4 + 4)):
            r0 = min(g * 8, rows - 8)  # the last group overlaps the previous one
            k0 = g * 8 - r0  # and writes only its own rows
            u0 = np.uint64(r0)
            for m in range(n_x):
                um = np.uint64(m)
                _zero(acc)
                for b in range(nb):
                    if m == 0:
                        for k in range(8):
                            _prefetch(raw, min(r0 + 8 + k, rows - 1), b * 34)
                    for k in range(8):
                        dd[k] = table[halves[r0 + k, b * 17]]
                    o = np.uint64(b * 34 + 2)
                    xo = np.uint64(b * 32)
                    for j in range(np.uint64(32)):
                        xv = x[um, xo + j]
                        _q8_0_step(raw, u0, acc, np.uint64(0), o, j, xv, dd)
                        _q8_0_step(raw, u0 + np.uint64(1), acc, np.uint64(1), o, j, xv, dd)
                        _q8_0_step(raw, u0 + np.uint64(2), acc, np.uint64(2), o, j, xv, dd)
                        _q8_0_step(raw, u0 + np.uint64(3), acc, np.uint64(3), o, j, xv, dd)
                        _q8_0_step(raw, u0 + np.uint64(4), acc, np.uint64(4), o, j, xv, dd)
                        _q8_0_step(raw, u0 + np.uint64(5), acc, np.uint64(5), o, j, xv, dd)
                        _q8_0_step(raw, u0 + np.uint64(6), acc, np.uint64(6), o, j, xv, dd)
                        _q8_0_step(raw, u0 + np.uint64(7), acc, np.uint64(7), o, j, xv, dd)
                for k in range(k0, 8):
                    out[m, r0 + k] = _row_sum(acc, k)


q8_0_gemv = _jit(_q8_0_gemv)


def _q8_0_row_py(raw, r, buf, table):
    nb = buf.shape[0] // 32
    n32 = buf.shape[0] // max(nb, 1)  # 32, hidden from LLVM so the loop is vectorized (see Q4_0)
    for b in range(nb):
        o = b * 34
        d = _f16(raw, r, o, table)
        for j in range(n32):
            buf[b * 32 + j] = d * np.float32(np.int8(raw[r, o + 2 + j]))


_q8_0_row = _fn(_q8_0_row_py)


def _q8_0_dequant_f32(raw, out, table):
    for r in prange(raw.shape[0]):
        _q8_0_row(raw, r, out[r], table)


def _q8_0_gather(raw, ids, out, table):
    for i in range(ids.shape[0]):
        _q8_0_row(raw, ids[i], out[i], table)


q8_0_dequant_f32 = _jit_exact(_q8_0_dequant_f32)
q8_0_gather = _fn(_q8_0_gather)


if numba is not None:
    kcommon.register("Q4_K", kcommon.Kernels(256, 144, q4_k_gemv, q4_k_dequant_f32, q4_k_gather))
    kcommon.register("Q5_K", kcommon.Kernels(256, 176, q5_k_gemv, q5_k_dequant_f32, q5_k_gather))
    kcommon.register("Q6_K", kcommon.Kernels(256, 210, q6_k_gemv, q6_k_dequant_f32, q6_k_gather))
    kcommon.register("Q4_0", kcommon.Kernels(32, 18, q4_0_gemv, q4_0_dequant_f32, q4_0_gather))
    kcommon.register("Q2_K", kcommon.Kernels(256, 84, q2_k_gemv, q2_k_dequant_f32, q2_k_gather))
    kcommon.register("Q3_K", kcommon.Kernels(256, 110, q3_k_gemv, q3_k_dequant_f32, q3_k_gather))
    kcommon.register("Q8_0", kcommon.Kernels(32, 34, q8_0_gemv, q8_0_dequant_f32, q8_0_gather))
