#!/usr/bin/env python3
"""Decode GEMV per GGUF block type against this machine's memory-bandwidth floor.

    python benchmarks/gemv_types.py [--threads 2] [--rows 9728 --cols 2560] [--matrices 10]

For each type: ``--matrices`` random-block matrices (together larger than the caches) are
multiplied by one activation row in turn, so every call streams its blocks from memory; the
best of ``--rounds`` rounds is kept, every round timing every type, path and the bandwidth. The float32 numba kernel and the C integer kernel (when
built; activations in one int8 plane, or two: int8 plus the int8 residual) are timed in alternation, so a busy moment slows both. ``x floor`` = ms / (bytes of one
matrix / streaming-read bandwidth measured in the same run). The machine may be shared: run it
twice and read ranges, and note the load average printed at the top.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import s2studio  # noqa: E402,F401  (first: it sets OMP_WAIT_POLICY before torch starts)
import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks.bench_engine import memory_bandwidth_gbps  # noqa: E402
from s2studio.engine.kernels import common as qkernels  # noqa: E402
from s2studio.engine.kernels import intdot  # noqa: E402
from s2studio.engine.kernels.qmatrix import QuantMatrix  # noqa: E402
from s2studio.engine.threads import set_threads  # noqa: E402

TYPES = ["Q8_0", "Q6_K", "Q5_K", "Q4_K", "Q4_0", "Q3_K", "Q2_K"]


def best_ms(calls, rounds):
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for c in calls:
            c()
        best = min(best, (time.perf_counter() - t0) / len(calls) * 1000)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", type=int, default=9728)
    ap.add_argument("--cols", type=int, default=2560)
    ap.add_argument("--matrices", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--m", type=int, default=1, help="activation rows")
    ap.add_argument("--types", default=",".join(TYPES))
    args = ap.parse_args()
    set_threads(args.threads)
    qkernels.sync_threads(args.threads)
    print(f"loadavg {open('/proc/loadavg').read().split()[:3] if os.path.exists('/proc/loadavg') else '?'}; "
          f"integer path: {intdot.describe()}")
    x = torch.randn(args.m, args.cols)
    xn = x.numpy()
    out = np.empty((args.m, args.rows), np.float32)
    rng = np.random.default_rng(0)
    calls = {}  # (type, path) -> list of calls, one per matrix
    sizes = {}
    for name in args.types.split(","):
        kern = qkernels.KERNELS[name]
        row_bytes = args.cols // kern.block_elems * kern.block_bytes
        mats = []
        for _ in range(args.matrices):
            raw = rng.integers(0, 256, size=(args.rows, row_bytes), dtype=np.uint8)
            # small float16 scales at both ends of each block: no inf/NaN/denormal slow paths
            raw.reshape(args.rows, -1, kern.block_bytes)[:, :, :2] = 0x10
            raw.reshape(args.rows, -1, kern.block_bytes)[:, :, -2:] = 0x10
            raw.setflags(write=False)
            mats.append(raw)
        sizes[name] = mats[0].nbytes / 1e6
        fl = [QuantMatrix(name, r, (args.rows, args.cols), int_dot=False) for r in mats]
        calls[name, "float"] = [lambda q=q: q.matmul_t(x) for q in fl]
        if intdot.handles(name):
            for planes in (1, 2):
                calls[name, f"int{planes}"] = [lambda r=r, p=planes, n=name: intdot.gemv(n, r, xn, out, p)
                                               for r in mats]
    for cs in calls.values():  # compile, first touch
        for c in cs:
            c()
    # Every round times every (type, path) and the bandwidth once: a busy moment on a shared
    # machine then touches all of them, and the best of the rounds is compared.
    best = {k: float("inf") for k in calls}
    bws = []
    for _ in range(args.rounds):
        bws.append(memory_bandwidth_gbps(0.5, reps=3))
        for k, cs in calls.items():
            best[k] = min(best[k], best_ms(cs, 1))
    bw = max(bws)
    print(f"bandwidth {bw:.1f} GB/s (best of {args.rounds}, {args.threads} threads); load after: "
          f"{open('/proc/loadavg').read().split()[:3] if os.path.exists('/proc/loadavg') else '?'}")
    print("| type | MB per matrix | floor ms | float32 activations ms (× floor) | int8, 1 plane | int8, 2 planes |")
    print("|---|---|---|---|---|---|")
    for name, mb in sizes.items():
        floor = mb / bw
        cells = [f"{best[name, k]:.2f} ({best[name, k] / floor:.1f}×)" if (name, k) in best else "—"
                 for k in ("float", "int1", "int2")]
        print(f"| {name} | {mb:.1f} | {floor:.2f} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()
