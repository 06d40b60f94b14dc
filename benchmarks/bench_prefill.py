#!/usr/bin/env python3
"""The prefill of a real model on its prefill paths, compared within one run (one load).

    python benchmarks/bench_prefill.py --model MODEL.gguf [--tokens 48,128,300] [--rounds 2] [--threads 2]

Per prompt length, the prefill (the whole forward pass over the prompt, as ``bench_engine.py``
times it: ``GenerationStats.prefill_s`` of a one-frame generation) on each path, the paths in
alternation in every round so that a busy moment of a shared machine slows them alike; the best
round is kept:
- ``int``: the integer kernels (``QuantMatrix.int_rows``, register-tiled Q8_0 rows);
- ``int untiled``: the same kernels with the tiles off (``intdot.set_tiled(False)``, the
  per-row loops they replaced; the same numbers bit for bit);
- ``exact``: dequantize-then-GEMM (``qmatrix.prefill_linear``).
Prompts longer than ``qmatrix.int_prefill_max_rows`` normally take the exact path; for this
measurement the ``int`` paths lift ``INT_PREFILL_MAX_ROWS`` (Q8_0 on AVX-512 has no limit
anyway) and ``exact`` runs with ``KernelSettings(prefill="exact")`` (calls of at most
``MAX_KERNEL_ROWS`` rows take the integer kernels on every path: the same in all three). The
model's weights must be Q8_0 or K-quants kept quantized (CPU).
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import s2studio  # noqa: E402,F401  (first: it sets OMP_WAIT_POLICY before torch starts)
import numpy as np  # noqa: E402

from benchmarks.bench_engine import make_prompt  # noqa: E402
from s2studio.engine.kernels import backend, intdot, qmatrix  # noqa: E402
from s2studio.engine.model.generate import GenerationParams, GenerationStats, generate_frames  # noqa: E402
from s2studio.engine.model.loader import load_dual_ar  # noqa: E402
from s2studio.engine.modes import PrefillPath  # noqa: E402
from s2studio.engine.threads import set_threads  # noqa: E402

PATHS = {"int": (True, PrefillPath.INT), "int untiled": (False, PrefillPath.INT),
         "exact": (True, PrefillPath.EXACT)}  # (tiled, prefill path)


def prefill_s(model, n_tokens: int, tiled: bool, path: PrefillPath) -> float:
    intdot.set_tiled(tiled)
    saved = qmatrix.INT_PREFILL_MAX_ROWS
    qmatrix.INT_PREFILL_MAX_ROWS = 1 << 30
    try:
        with backend.configured(dataclasses.replace(backend.settings(), prefill=path)):
            st = GenerationStats()
            params = GenerationParams(max_new_tokens=1, seed=0, min_tokens_before_end=1)
            for _ in generate_frames(model, make_prompt(model, n_tokens), params,
                                     im_end_id=model.cfg.semantic_end_id + 1, stats=st):
                pass
            return st.prefill_s
    finally:
        qmatrix.INT_PREFILL_MAX_ROWS = saved
        intdot.set_tiled(True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", default="48,128,300")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--paths", default=",".join(PATHS))
    a = ap.parse_args()
    paths = a.paths.split(",")
    if not set(paths) <= set(PATHS):
        ap.error(f"--paths: of {', '.join(PATHS)}")
    if not intdot.available():
        ap.error(f"the integer kernels are not available here: {intdot.describe()}")
    threads = set_threads(a.threads)
    model, _plan = load_dual_ar(pathlib.Path(a.model), device="cpu", dtype="auto")
    lengths = [int(v) for v in a.tokens.split(",")]
    prefill_s(model, 8, True, PrefillPath.INT)  # warm-up: first-call allocations
    best = {(n, p): np.inf for n in lengths for p in paths}
    for _ in range(a.rounds):
        for n in lengths:
            for p in paths:
                best[(n, p)] = min(best[(n, p)], prefill_s(model, n, *PATHS[p]))
    print(f"{a.model}, {threads} threads, level {intdot.level()}, best of {a.rounds} rounds, prefill seconds")
    print(f"{'tokens':>6}" + "".join(f" {p:>11}" for p in paths))
    for n in lengths:
        print(f"{n:>6}" + "".join(f" {best[(n, p)]:11.2f}" for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
