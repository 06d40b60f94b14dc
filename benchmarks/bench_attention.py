#!/usr/bin/env python3
"""Decode attention per call: torch's ops against the C kernel (engine/kernels/attention.py),
at the full-size model's shapes, no model file needed.

    python benchmarks/bench_attention.py [--threads 2] [--positions 70,600] [--batch 8] [--rounds 7]
        [--cache-dtype float32|float16] [--min-work N]

Each case runs a decode step's attention the way the engine calls it (the context's
``attend``: attention, then the new k/v stored in the cache) over every layer of a stack, so
the caches come from memory as in a real frame (36 Slow-AR layers of 8 KV heads × 128,
float32 caches holding float16-rounded values, as ``DualAR.make_cache`` makes them on the
CPU; the Fast-AR's 4 layers over a frame's 9 calls, its float32 cache of 10 positions).
Cases:
- ``slow@P``: one request's Slow-AR step at P cached positions (per layer);
- ``fast``: one Fast-AR call (4 layers), the mean over a frame's 9 (positions 0-1, 2, ..., 9);
- ``batch B slow@P``: a batched step of B requests at P positions each (``BatchedContext``;
  per layer, all B requests).
The two paths are timed in alternation in every round and the best of ``--rounds`` is kept,
so a busy moment slows both; the machine may be shared: the load average is printed.
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
import torch  # noqa: E402

from s2studio.engine.kernels import attention, backend  # noqa: E402
from s2studio.engine.kernels.backend import KernelSettings  # noqa: E402
from s2studio.engine.model.transformer import (  # noqa: E402
    BatchedContext, DynamicContext, KVCache, RopeTable, Sequence)
from s2studio.engine.threads import set_threads  # noqa: E402

H, HKV, HD = 32, 8, 128
SLOW_LAYERS, FAST_LAYERS, CODEBOOKS = 36, 4, 10


class Cfg:
    n_kv_head, head_dim = HKV, HD


CACHE_DTYPE = torch.float32  # --cache-dtype


def filled_cache(layers: int, capacity: int, pos: int, round_f16: bool, gen: torch.Generator) -> KVCache:
    dtype = CACHE_DTYPE if round_f16 else torch.float32  # the Fast-AR's cache is never rounded
    cache = KVCache(Cfg, capacity, [torch.device("cpu")] * layers, dtype, round_f16)
    for layer in range(layers):
        cache.store(layer, 0, torch.randn(HKV, pos, HD, generator=gen), torch.randn(HKV, pos, HD, generator=gen))
    cache.n_past = pos
    return cache


def rows(b: int, gen: torch.Generator):
    """q, k, v of b requests' rows as layer_forward passes them."""
    q = torch.randn(b, H, HD, generator=gen).transpose(0, 1)
    k = torch.randn(b, HKV, HD, generator=gen).transpose(0, 1).contiguous()
    v = torch.randn(b, HKV, HD, generator=gen).transpose(0, 1).contiguous()
    return q, k, v


def slow_case(pos: int, gen):
    cache = filled_cache(SLOW_LAYERS, pos + 64, pos, True, gen)
    ctx = DynamicContext(RopeTable(HD, 1e6), pos, 1, cache)
    q, k, v = rows(1, gen)

    def run():
        for layer in range(SLOW_LAYERS):
            ctx.attend(layer, q, k, v)
    return run, SLOW_LAYERS


def fast_case(gen):
    """One frame's Fast-AR: the first call (positions 0 and 1 at once), then positions 2..9."""
    cache = filled_cache(FAST_LAYERS, CODEBOOKS, 0, False, gen)
    rope = RopeTable(HD, 1e6)
    first, one = rows(2, gen), rows(1, gen)
    calls = [(DynamicContext(rope, 0, 2, cache), first)]
    calls += [(DynamicContext(rope, pos, 1, cache), one) for pos in range(2, CODEBOOKS)]

    def run():
        for ctx, (q, k, v) in calls:
            for layer in range(FAST_LAYERS):
                ctx.attend(layer, q, k, v)
    return run, len(calls)  # per call: its 4 layers


def batch_case(b: int, pos: int, gen):
    caches = [filled_cache(SLOW_LAYERS, pos + 64, pos, True, gen) for _ in range(b)]
    ctx = BatchedContext(RopeTable(HD, 1e6), [Sequence(pos, 1, c) for c in caches])
    q, k, v = rows(b, gen)

    def run():
        for layer in range(SLOW_LAYERS):
            ctx.attend(layer, q, k, v)
    return run, SLOW_LAYERS


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--positions", default="70,600")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--cache-dtype", choices=("float32", "float16"), default="float32",
                    help="the Slow-AR cache's dtype (the engine's CPU default is float32 holding float16-rounded "
                         "values; float16 holds the same numbers in half the bytes)")
    ap.add_argument("--min-work", type=int, default=None,
                    help="attention.PARALLEL_MIN_WORK: from this much work the kernel's tasks are shared by the "
                         "threads (0: always)")
    args = ap.parse_args(argv)
    global CACHE_DTYPE
    CACHE_DTYPE = getattr(torch, args.cache_dtype)
    if args.min_work is not None:
        attention.PARALLEL_MIN_WORK = args.min_work
    if not attention.built():
        print("the C kernels are not built: nothing to compare")
        return 1
    threads = set_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    cases = {}
    for p in (int(x) for x in args.positions.split(",")):
        cases[f"slow@{p}"] = slow_case(p, gen)
    cases["fast"] = fast_case(gen)
    for p in (int(x) for x in args.positions.split(",")):
        cases[f"batch {args.batch} slow@{p}"] = batch_case(args.batch, p, gen)
    paths = {"torch": KernelSettings(attention="torch"), "C": KernelSettings(attention="c")}
    best = {(c, p): float("inf") for c in cases for p in paths}
    print(f"threads {threads}, Slow-AR cache {args.cache_dtype}, parallel from work {attention.PARALLEL_MIN_WORK}, "
          f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} at the start")
    for _ in range(args.rounds):
        for name, (run, calls) in cases.items():
            for path, settings in paths.items():
                with backend.configured(settings):
                    run()  # warm (the store's first touch, numba's first call)
                    t0 = time.perf_counter()
                    run()
                    best[(name, path)] = min(best[(name, path)], (time.perf_counter() - t0) / calls * 1e6)
    print(f"load average {os.getloadavg()[0]:.2f} at the end; best of {args.rounds} rounds, us per call")
    print(f"| case | torch | C | torch / C |\n|---|---|---|---|")
    for name in cases:
        a, b = best[(name, "torch")], best[(name, "C")]
        print(f"| {name} | {a:.1f} | {b:.1f} | {a / b:.1f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
