#!/usr/bin/env python3
"""Decode GEMV per GGUF block type against this machine's memory-bandwidth floor.

    python benchmarks/gemv_types.py [--threads 2] [--rows 9728 --cols 2560] [--matrices 10] [--m 1,2,4,8]
    python benchmarks/gemv_types.py --cpu-seconds [--m 1,4]   # work per byte, see below
    python benchmarks/gemv_types.py --levels avx2,avxvnni,avx512vnni   # the C kernels per level

For each type: ``--matrices`` random-block matrices (together larger than the caches) are
multiplied by ``--m`` activation rows in turn, so every call streams its blocks from memory;
the best of ``--rounds`` rounds is kept, every round timing every type, path and the
bandwidth. The float32 numba kernel and the C integer kernel (when built; activations in one
int8 plane, or two: int8 plus the int8 residual; for Q8_0 the second column is int16
activations, its precise mode) are timed in alternation, so a busy moment slows both.
``x floor`` = ms / (bytes of one matrix / streaming-read bandwidth measured in the same run).
The machine may be shared: run it twice and read ranges, and note the load average printed
at the top.

``--m 1,2,4,8``: activation rows per call (the server batches requests into one GEMV); one
table per m. ``--cpu-seconds``: one thread, one matrix small enough for the caches, timed in
CPU seconds (``time.process_time``): GB of blocks per CPU-second, the work per byte, which a
shared machine's load does not distort as much as wall-clock times.

``--levels a,b,...``: the C integer kernel at each of these instruction-set levels (of
``intdot.levels()``), timed in alternation in every round like the paths; the last columns are
each level's time over the first level's, per activation mode.
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
from s2studio.engine.kernels import backend  # noqa: E402
from s2studio.engine.kernels import common as kcommon  # noqa: E402
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
    ap.add_argument("--m", default="1", help="activation rows per call, comma-separated: 1,2,4,8")
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--cpu-seconds", action="store_true",
                    help="1 thread, a 1024-row matrix in the caches, GB per CPU-second")
    ap.add_argument("--levels", default="",
                    help="C kernel levels to compare, comma-separated (default: the one in use)")
    args = ap.parse_args()
    args.levels = [lv for lv in args.levels.split(",") if lv] or [intdot.level()]
    for lv in args.levels:
        if lv not in intdot.levels():
            ap.error(f"--levels: {lv} is not offered by this CPU (it offers {', '.join(intdot.levels())})")
    if args.cpu_seconds:
        args.threads, args.rows, args.matrices = 1, 1024, 1
    set_threads(args.threads)
    kcommon.sync_threads(args.threads)
    print(f"loadavg {loadavg()}; {backend.describe(TYPES)}")
    for m in (int(v) for v in args.m.split(",")):
        if args.cpu_seconds:
            per_cpu_second(args, m)
        else:
            against_the_floor(args, m)


def loadavg() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3]) if os.path.exists("/proc/loadavg") else "?"


def random_matrices(name: str, rows: int, cols: int, count: int, rng) -> list[np.ndarray]:
    kern = kcommon.KERNELS[name]
    row_bytes = cols // kern.block_elems * kern.block_bytes
    mats = []
    for _ in range(count):
        raw = rng.integers(0, 256, size=(rows, row_bytes), dtype=np.uint8)
        # small float16 scales at both ends of each block: no inf/NaN/denormal slow paths
        raw.reshape(rows, -1, kern.block_bytes)[:, :, :2] = 0x10
        raw.reshape(rows, -1, kern.block_bytes)[:, :, -2:] = 0x10
        raw.setflags(write=False)
        mats.append(raw)
    return mats


def path_calls(name: str, mats, rows: int, cols: int, m: int, levels) -> dict:
    """path -> list of calls, one per matrix: the float32 numba kernel, the C integer kernel
    with one and with two activation planes (Q8_0: int16 activations), where it handles the
    type, at each of ``levels`` (set before each call: a C call, negligible beside a GEMV)."""
    x = torch.randn(m, cols)
    xn = x.numpy()
    out = np.empty((m, rows), np.float32)
    fl = [QuantMatrix(name, r, (rows, cols), int_dot=False) for r in mats]
    calls = {"float": [lambda q=q: q.matmul_t(x) for q in fl]}
    if intdot.handles(name):
        for lv in levels:
            for planes in (1, 2):
                calls[f"int{planes}@{lv}"] = [lambda r=r, p=planes, lv=lv: (intdot.set_level(lv),
                                                                            intdot.gemv(name, r, xn, out, p))
                                              for r in mats]
    return calls


def columns(levels) -> tuple[list[str], str]:
    keys = ["float"] + [f"int{p}@{lv}" for lv in levels for p in (1, 2)]
    heads = ["float32 (numba)"] + [f"{lv}: int8, 1 plane | {lv}: 2 planes (Q8_0: int16)" for lv in levels]
    if len(levels) > 1:
        heads += [f"{lv} ÷ {levels[0]} (1 plane / 2 planes)" for lv in levels[1:]]
    return keys, " | ".join(heads)


def ratio_cells(best: dict, name, levels) -> list[str]:
    """Each later level's time over the first level's (lower is faster)."""
    cells = []
    for lv in levels[1:]:
        r = [best.get((name, f"int{p}@{lv}")) / best[name, f"int{p}@{levels[0]}"]
             if (name, f"int{p}@{levels[0]}") in best else None for p in (1, 2)]
        cells.append(" / ".join("—" if v is None else f"{v:.3f}" for v in r))
    return cells


def per_cpu_second(args, m: int) -> None:
    rng = np.random.default_rng(0)
    print(f"\nm = {m}: one thread, {args.rows}x{args.cols} in the caches, GB of blocks per CPU-second "
          f"(best of {args.rounds} rounds)")
    keys, heads = columns(args.levels)
    print(f"| type | {heads} |")
    print("|---" * (1 + heads.count("|") + 1) + "|")
    for name in args.types.split(","):
        raw = random_matrices(name, args.rows, args.cols, 1, rng)[0]
        calls = path_calls(name, [raw], args.rows, args.cols, m, args.levels)
        reps = max(3, int(2e8 // raw.nbytes))  # ~0.2 GB of blocks per timing
        best = {}
        for k, (c,) in calls.items():
            c()
        for _ in range(args.rounds):
            for k, (c,) in calls.items():
                t0 = time.process_time()
                for _ in range(reps):
                    c()
                best[k] = min(best.get(k, float("inf")), (time.process_time() - t0) / reps)
        cells = [f"{raw.nbytes / best[k] / 1e9:.1f}" if k in best else "—" for k in keys]
        # GB per CPU-second: the ratio of the first level's rate to each later one's is its time ratio
        cells += ratio_cells({(name, k): v for k, v in best.items()}, name, args.levels)
        print(f"| {name} | {' | '.join(cells)} |", flush=True)
    print(f"load after: {loadavg()}")


def against_the_floor(args, m: int) -> None:
    rng = np.random.default_rng(0)
    calls = {}  # (type, path) -> list of calls, one per matrix
    sizes = {}
    for name in args.types.split(","):
        mats = random_matrices(name, args.rows, args.cols, args.matrices, rng)
        sizes[name] = mats[0].nbytes / 1e6
        for path, cs in path_calls(name, mats, args.rows, args.cols, m, args.levels).items():
            calls[name, path] = cs
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
    print(f"\nm = {m} activation rows; bandwidth {bw:.1f} GB/s (best of {args.rounds}, {args.threads} threads); "
          f"load after: {loadavg()}")
    keys, heads = columns(args.levels)
    print(f"| type | MB per matrix | floor ms | {heads} |  (ms, × floor)")
    print("|---" * (3 + heads.count("|") + 1) + "|")
    for name, mb in sizes.items():
        floor = mb / bw
        cells = [f"{best[name, k]:.2f} ({best[name, k] / floor:.1f}×)" if (name, k) in best else "—"
                 for k in keys]
        cells += ratio_cells(best, name, args.levels)
        print(f"| {name} | {mb:.1f} | {floor:.2f} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()
