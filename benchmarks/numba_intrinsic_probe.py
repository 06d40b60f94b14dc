#!/usr/bin/env python3
"""Probe (issue 14 §2, option b): can numba emit x86 byte dot products without a C build?

A numba ``@intrinsic`` that emits ``llvm.x86.avx512.pmaddubs.w.512`` and ``pmaddw.d.512``
(64 u8 x s8 products per instruction) works: this prints whether the result is exact and the
speed of a bare u8 x s8 dot over an in-cache matrix, in GB per CPU-second. Needs AVX-512BW
(the instruction is emitted as is: on a CPU without it this dies of SIGILL, which is why such
code would need its own per-CPU dispatch). The engine uses the C extension instead
(docs/performance.md, "K-quants on integer dot products").

    python benchmarks/numba_intrinsic_probe.py
"""
import time

import numpy as np
from numba import njit, types
from numba.extending import intrinsic
from llvmlite import ir

@intrinsic
def dot64(typingctx, a_arr, a_off, b_arr, b_off):
    """sum over 64 bytes of u8 a[a_off:] * s8 b[b_off:] as 16 int32 lanes, reduced to int32."""
    sig = types.int32(a_arr, a_off, b_arr, b_off)
    def codegen(context, builder, signature, args):
        a, ao, b, bo = args
        aa = context.make_array(signature.args[0])(context, builder, a)
        ba = context.make_array(signature.args[2])(context, builder, b)
        v64 = ir.VectorType(ir.IntType(8), 64)
        pa = builder.bitcast(builder.gep(aa.data, [ao]), v64.as_pointer())
        pb = builder.bitcast(builder.gep(ba.data, [bo]), v64.as_pointer())
        va = builder.load(pa, align=1); vb = builder.load(pb, align=1)
        mod = builder.module
        i16x32 = ir.VectorType(ir.IntType(16), 32); i32x16 = ir.VectorType(ir.IntType(32), 16)
        f1 = mod.declare_intrinsic("llvm.x86.avx512.pmaddubs.w.512", fnty=ir.FunctionType(i16x32, [v64, v64]))
        f2 = mod.declare_intrinsic("llvm.x86.avx512.pmaddw.d.512", fnty=ir.FunctionType(i32x16, [i16x32, i16x32]))
        p = builder.call(f1, [va, vb])
        ones = ir.Constant(i16x32, [1] * 32)
        q = builder.call(f2, [p, ones])
        f3 = mod.declare_intrinsic("llvm.vector.reduce.add.v16i32", fnty=ir.FunctionType(ir.IntType(32), [i32x16]))
        return builder.call(f3, [q])
    return sig, codegen

@njit(nogil=True)
def total(a, b):
    s = 0
    for r in range(a.shape[0]):
        for o in range(0, a.shape[1], 64):
            s += dot64(a[r], o, b, o)
    return s

rng = np.random.default_rng(0)
a = rng.integers(0, 16, size=(1024, 2560), dtype=np.uint8)
b = rng.integers(-127, 128, size=2560, dtype=np.int8)
want = int((a.astype(np.int64) * b.astype(np.int64)).sum())
got = total(a, b)
print("correct:", got == want)
best = 9
for _ in range(7):
    t0 = time.process_time()
    for _ in range(20): total(a, b)
    best = min(best, (time.process_time() - t0) / 20)
print(f"u8 x s8 dot, 2.6 MB in cache: {a.nbytes / best / 1e9:.1f} GB/s per CPU-second")
