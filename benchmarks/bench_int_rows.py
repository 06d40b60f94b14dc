#!/usr/bin/env python3
"""The Q8_0 integer GEMV (``intdot.gemv``) per activation-row count, on the full model's shapes.

    python benchmarks/bench_int_rows.py [--threads 2] [--m 1,4,8,16] [--rounds 5] [--shapes w13,w2,wqkv]
    python benchmarks/bench_int_rows.py --compare     # the tiled rows against the per-row ones
    python benchmarks/bench_int_rows.py --threads 1 --cpu-seconds --compare   # steadier when shared
    python benchmarks/bench_int_rows.py --prefill 48,64,128,256 --compare  # against the exact prefill
    python benchmarks/bench_int_rows.py --cold --m 1,4 --shapes w13,w2,wqkv,wo --modes i16  # x floor

For each shape, activation mode (int16: the precise mode, the prefill's and the default
decode's; int8: one plane) and m: the best of ``--rounds`` rounds of a few calls, as ms per
call, GMAC/s (rows x cols x m multiply-adds per call) and the call's time over the m = 1
call's of the same round set. Everything is timed in alternation within one round, so a busy
moment of a shared machine slows every column alike; compare ratios, not absolute times.

``--prefill 48,64,128``: a prefill's cost per matrix instead: ``QuantMatrix.int_rows`` (the integer
kernels, 16 rows per call; tiled, and with ``--compare`` untiled) against ``prefill_linear``
(the exact path: dequantize to float32 in chunks, torch's GEMM), for these row counts; where
the two cross is what ``qmatrix.INT_PREFILL_MAX_ROWS`` is set from.

``--compare``: every m is also run with the register-tiled rows switched off
(``intdot.set_tiled(False)``: the per-weight-row loops every m ran before them), and the
outputs of both are checked to be bit-identical.

``--cold``: each call reads another copy of the matrix (``--cold-mb`` 256 of copies in all), so its weights
come from memory as in a frame and not from the last-level cache, and the default path's time
is also given over the read floor (the matrix's bytes over the streaming-read bandwidth
measured at the start of the run, ``bench_engine.memory_bandwidth_gbps``).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import s2studio  # noqa: E402,F401  (first: it sets OMP_WAIT_POLICY before torch starts)
import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench_engine import memory_bandwidth_gbps  # noqa: E402
from s2studio.devtools.quant_blocks import random_blocks  # noqa: E402
from s2studio.engine.kernels import common as kcommon  # noqa: E402
from s2studio.engine.kernels import intdot  # noqa: E402
from s2studio.engine.kernels.qmatrix import QuantMatrix, prefill_linear  # noqa: E402
from s2studio.engine.threads import set_threads  # noqa: E402

# The full-size S2 Pro slow transformer's matrices (rows = out features, cols = in features).
SHAPES = {"w13": (9728, 2560), "w2": (2560, 9728), "wqkv": (6144, 2560), "wo": (2560, 4096)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--m", default="1,4,8,16")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=3, help="calls per timing")
    ap.add_argument("--shapes", default="w13,w2,wqkv")
    ap.add_argument("--modes", default="i16,i8", help="i16 (planes=2), i8 (planes=1)")
    ap.add_argument("--compare", action="store_true", help="also time the untiled rows (set_tiled(False))")
    ap.add_argument("--cold", action="store_true",
                    help="cycle copies of each matrix (together over the last-level cache) so the weights come "
                         "from memory, and give each call's time over the read floor measured in the same run")
    ap.add_argument("--cold-mb", type=int, default=256,
                    help="--cold: MB of copies cycled, together (default: 8x a 32 MB last-level cache)")
    ap.add_argument("--bandwidth-gb", type=float, default=1.0, help="--cold: size of the bandwidth probe")
    ap.add_argument("--cpu-seconds", action="store_true",
                    help="time in CPU seconds of this process (time.process_time), which other programs on a "
                         "shared machine distort less than wall-clock time; use with --threads 1")
    ap.add_argument("--prefill", default="", help="row counts: int_rows against the exact prefill_linear")
    ap.add_argument("--level", default="", help="force this instruction-set level (of intdot.levels())")
    args = ap.parse_args()
    if not intdot.built():
        ap.error(f"the integer kernels are not built here: {intdot.describe()}")
    if args.level:
        if args.level not in intdot.levels():
            ap.error(f"--level: {args.level} is not offered here ({', '.join(intdot.levels())})")
        intdot.set_level(args.level)
    set_threads(args.threads)
    kcommon.sync_threads(args.threads)
    if args.prefill:
        prefill(args, [int(v) for v in args.prefill.split(",")])
        return
    ms_list = [int(v) for v in args.m.split(",")]
    if any(not 1 <= m <= kcommon.MAX_KERNEL_ROWS for m in ms_list):
        ap.error(f"--m: each between 1 and {kcommon.MAX_KERNEL_ROWS}")
    # (label, the switch that turns the variant on when called with False): the default path
    # first; each other variant is timed in the same rounds and checked against it bit for bit.
    variants = [("default", None)]
    if args.compare:
        variants.append(("untiled", intdot.set_tiled))
    clock = time.process_time if args.cpu_seconds else time.perf_counter
    bw = memory_bandwidth_gbps(args.bandwidth_gb) * 1e9 if args.cold else None
    print(f"level {intdot.level()}, {args.threads} threads, best of {args.rounds} rounds x "
          f"{'one call per copy' if args.cold else f'{args.calls} calls'}, "
          f"{'CPU' if args.cpu_seconds else 'wall-clock'} time"
          + (f", weights cold (copies cycled), read bandwidth {bw / 1e9:.1f} GB/s" if bw else ""))
    for name in args.shapes.split(","):
        rows, cols = SHAPES[name]
        raw = random_blocks("Q8_0", rows, cols, rows + cols)
        raw.setflags(write=False)
        # --cold: enough copies that each call reads its weights from memory, as a frame does
        # (one matrix is 11-27 MB: a last-level cache of 32 MB would hold it between calls).
        copies = [raw] + [raw.copy() for _ in range(args.cold_mb * 1_000_000 // raw.nbytes if args.cold else 0)]
        calls = len(copies) if args.cold else args.calls
        x = np.random.default_rng(0).standard_normal((max(ms_list), cols)).astype(np.float32)
        for mode in args.modes.split(","):
            planes = 2 if mode == "i16" else 1
            keys = [(m, v) for m in ms_list for v, _ in variants]
            best = {k: float("inf") for k in keys}
            outs = {}
            for _ in range(args.rounds):
                for m, label in keys:
                    for v, switch in variants[1:]:
                        switch(v != label)
                    out = np.empty((m, rows), np.float32)
                    xm = np.ascontiguousarray(x[:m])
                    intdot.gemv("Q8_0", raw, xm, out, planes)  # warm
                    t0 = clock()
                    for c in range(calls):
                        intdot.gemv("Q8_0", copies[c % len(copies)], xm, out, planes)
                    best[(m, label)] = min(best[(m, label)], (clock() - t0) / calls)
                    outs[(m, label)] = out
            for _v, switch in variants[1:]:
                switch(True)
            print(f"\n{name} {rows}x{cols} Q8_0, {mode} activations")
            hdr = f"{'m':>3} {'ms':>8} {'GMAC/s':>7} {'x m=1':>6}" + (f" {'x floor':>7}" if bw else "")
            for v, _ in variants[1:]:
                hdr += f" {v + ' ms':>11} {'GMAC/s':>7} {'x m=1':>6} {'speedup':>7} same"
            print(hdr)
            for m in ms_list:
                line = ""
                for v, _ in variants:
                    s = best[(m, v)]
                    line += f" {s * 1e3:{11 if v != 'default' else 8}.2f} {rows * cols * m / s / 1e9:7.1f}"
                    line += f" {s / best[(ms_list[0], v)]:6.2f}"
                    if v == "default" and bw:
                        line += f" {s / (raw.nbytes / bw):7.2f}"
                    if v != "default":
                        same = np.array_equal(outs[(m, "default")], outs[(m, v)])
                        line += f" {s / best[(m, 'default')]:7.2f} {'yes' if same else 'NO'}"
                print(f"{m:>3}{line}")


def prefill(args, row_counts: list[int]) -> None:
    """Per matrix: int_rows (tiled; untiled too with --compare) against the exact path."""
    clock = time.process_time if args.cpu_seconds else time.perf_counter
    paths = ["int tiled"] + (["int untiled"] if args.compare else []) + ["exact"]
    print(f"level {intdot.level()}, {args.threads} threads, best of {args.rounds} rounds, "
          f"{'CPU' if args.cpu_seconds else 'wall-clock'} time, ms per call")
    for name in args.shapes.split(","):
        rows, cols = SHAPES[name]
        raw = random_blocks("Q8_0", rows, cols, rows + cols)
        raw.setflags(write=False)
        w = QuantMatrix("Q8_0", raw, (rows, cols), int_dot=True)
        x = torch.from_numpy(np.random.default_rng(0).standard_normal((max(row_counts), cols)).astype(np.float32))
        run = {"int tiled": lambda xm: w.int_rows(xm), "int untiled": lambda xm: w.int_rows(xm),
               "exact": lambda xm: prefill_linear(xm, (rows, cols), w._fill_rows)}
        best = {(n, p): float("inf") for n in row_counts for p in paths}
        for _ in range(args.rounds):
            for n in row_counts:
                for p in paths:
                    if hasattr(intdot, "set_tiled"):
                        intdot.set_tiled(p != "int untiled")
                    t0 = clock()
                    run[p](x[:n])
                    best[(n, p)] = min(best[(n, p)], clock() - t0)
        if hasattr(intdot, "set_tiled"):
            intdot.set_tiled(True)
        print(f"\n{name} {rows}x{cols} Q8_0 prefill")
        print(f"{'rows':>5}" + "".join(f" {p:>11}" for p in paths) + "  exact/int tiled")
        for n in row_counts:
            print(f"{n:>5}" + "".join(f" {best[(n, p)] * 1e3:11.1f}" for p in paths)
                  + f"  {best[(n, 'exact')] / best[(n, 'int tiled')]:6.2f}")


if __name__ == "__main__":
    main()
