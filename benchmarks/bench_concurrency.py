#!/usr/bin/env python3
"""Time N takes decoded together (the server's batch) against one take alone.

    python benchmarks/bench_concurrency.py --model /path/s2-full-q8_0.gguf [--concurrency 1,2,4,8]
        [--frames 16] [--prompt-tokens 48] [--rounds 2]

For each N, N takes start at once on N threads through one ``FrameBatcher`` (as N concurrent
``/generate`` requests do, without the codec and HTTP); every take has its own seed and
prompt, and exactly ``--frames`` frames (the model may not end early). Reported per N:
- ms/frame per take: the decode steps it took part in, prefills excluded (its stats'
  ``slow_s + fast_s`` per frame), as mean and range over the takes — the latency a client sees;
- frames/s: N takes' frames per second of decoding (N × 1000 / ms per frame) and its ratio to
  one take alone ("x alone"): what batching buys in throughput;
- wall s: from the first take's start to the last one's end, prefills included.
``alone`` is ``generate_frames`` (the app/CLI path), N=1 through the batcher is its overhead.
Rounds interleave the Ns (1,2,4,8,1,2,4,8, ...), so a machine shared with other work slows
every N alike; the load average before each run is printed beside it. Compare ratios within a
run, never absolute times across machines.

``--attention c,torch``: every round runs every N once per decode-attention path (the C
kernel, torch's ops: ``KernelSettings.attention``), on the one loaded model; each path's
"x alone" is against its own alone run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import statistics
import sys
import threading
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from s2studio.engine.batching import MAX_BATCH, FrameBatcher  # noqa: E402
from s2studio.engine.kernels import backend  # noqa: E402
from s2studio.engine.model.generate import GenerationParams, GenerationStats, generate_frames  # noqa: E402
from s2studio.engine.model.loader import load_dual_ar  # noqa: E402
from s2studio.engine.threads import set_threads  # noqa: E402


def loadavg() -> str:
    try:
        return " ".join(pathlib.Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def make_prompt(model, n_tokens: int, seed: int) -> np.ndarray:
    """A text-only prompt of n tokens; content doesn't affect timing."""
    c = model.cfg
    rng = np.random.default_rng(seed)
    p = np.zeros((c.num_codebooks + 1, n_tokens), dtype=np.int32)
    p[0] = rng.integers(0, min(c.semantic_begin_id, 256), n_tokens)
    return p


def take_params(frames: int, seed: int) -> GenerationParams:
    return GenerationParams(max_new_tokens=frames, temperature=0.8, top_p=0.8, top_k=30, seed=seed,
                            min_tokens_before_end=frames)


def run_alone(model, im_end: int, frames: int, prompt_tokens: int) -> dict:
    st = GenerationStats()
    t0 = time.perf_counter()
    codes = [f.codes for f in generate_frames(model, make_prompt(model, prompt_tokens, 0), take_params(frames, 0),
                                              im_end_id=im_end, stats=st)]
    wall = time.perf_counter() - t0
    model.release_cache()
    return {"ms_frame": [st.ms_per_frame], "wall_s": wall, "codes0": np.stack(codes, axis=1)}


def run_batched(model, im_end: int, n: int, frames: int, prompt_tokens: int) -> dict:
    batcher = FrameBatcher(model, im_end, max_batch=min(n, MAX_BATCH))
    stats = [GenerationStats() for _ in range(n)]
    errors: list[BaseException] = []

    codes0: list[np.ndarray] = []

    def consume(i: int) -> None:
        try:
            for f in batcher.frames(make_prompt(model, prompt_tokens, i), take_params(frames, i), stats=stats[i]):
                if i == 0:
                    codes0.append(f.codes)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    batcher.wait_idle()
    if errors:
        raise errors[0]
    assert all(s.frames == frames for s in stats), [s.frames for s in stats]
    return {"ms_frame": [s.ms_per_frame for s in stats], "wall_s": wall, "largest_batch": batcher.largest_batch,
            "codes0": np.stack(codes0, axis=1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="GGUF file to time")
    ap.add_argument("--concurrency", default="1,2,4,8", help=f"comma-separated takes at once (1..{MAX_BATCH})")
    ap.add_argument("--frames", type=int, default=16, help="frames per take")
    ap.add_argument("--prompt-tokens", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds over all Ns")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps")
    ap.add_argument("--json", action="store_true", help="print JSON only")
    ap.add_argument("--attention", default="", help="comma-separated decode attention paths to compare "
                    "(c, torch); default: the kernel settings' (S2_ATTENTION)")
    a = ap.parse_args(argv)
    attentions = [w.strip() for w in a.attention.split(",") if w.strip()] or [backend.settings().attention.value]
    settings_for = {w: dataclasses.replace(backend.settings(), attention=w) for w in attentions}
    ns = [int(x) for x in a.concurrency.split(",")]
    if any(not 1 <= n <= MAX_BATCH for n in ns):
        ap.error(f"--concurrency values must be 1..{MAX_BATCH}")

    threads = set_threads(a.threads)
    t0 = time.perf_counter()
    model, _ = load_dual_ar(pathlib.Path(a.model), device=a.device)
    load_s = time.perf_counter() - t0
    im_end = model.cfg.semantic_end_id + 1  # any non-semantic id: never produced with min_tokens
    run_alone(model, im_end, 2, a.prompt_tokens)  # warm-up: first-call allocations, kernel compiles
    run_batched(model, im_end, 2, 2, a.prompt_tokens)

    runs: list[dict] = []
    alone_codes = None
    for r in range(a.rounds):
        for att in attentions:
            with backend.configured(settings_for[att]):
                for n in ["alone", *ns]:
                    load = loadavg()
                    res = run_alone(model, im_end, a.frames, a.prompt_tokens) if n == "alone" else \
                        run_batched(model, im_end, n, a.frames, a.prompt_tokens)
                    res.update(round=r, n=n, loadavg=load, attention=att)
                    runs.append(res)
                    # Take 0 has the alone run's prompt and seed: batched, it must make the same codes.
                    codes0 = res.pop("codes0")
                    if n == "alone":
                        alone_codes = codes0
                    else:
                        res["same_codes_as_alone"] = bool(np.array_equal(codes0, alone_codes))
                    if not a.json:
                        ms = res["ms_frame"]
                        print(f"round {r} attention {att} N={n!s:>5}: ms/frame {statistics.mean(ms):7.1f} "
                              f"(takes {min(ms):.1f}-{max(ms):.1f}), wall {res['wall_s']:.1f} s, load {load}, "
                              f"same codes as alone: {res.get('same_codes_as_alone', '-')}", file=sys.stderr)

    def summary(n, att) -> dict:
        rs = [x for x in runs if x["n"] == n and x["attention"] == att]
        means = [statistics.mean(x["ms_frame"]) for x in rs]
        k = 1 if n == "alone" else n
        return {"n": n, "attention": att, "ms_frame_mean": [round(m, 1) for m in means],
                "frames_per_s": [round(k * 1000 / m, 2) for m in means],
                "wall_s": [round(x["wall_s"], 1) for x in rs], "loadavg": [x["loadavg"] for x in rs],
                "same_codes_as_alone": all(x.get("same_codes_as_alone", True) for x in rs)}

    rows = []
    for att in attentions:
        block = [summary(n, att) for n in ["alone", *ns]]
        base = block[0]["ms_frame_mean"]
        for row in block:
            row["x_alone_ms_frame"] = [round(m / b, 2) for m, b in zip(row["ms_frame_mean"], base)]
            row["x_alone_throughput"] = [round(f * b / 1000, 2) for f, b in zip(row["frames_per_s"], base)]
        rows += block
    out = {"model": str(a.model), "threads": threads, "frames": a.frames, "prompt_tokens": a.prompt_tokens,
           "load_s": round(load_s, 1), "rows": rows}
    print(json.dumps(out, indent=None if a.json else 1))
    if not a.json:
        print("\n| attention | N | ms/frame per take | × alone | frames/s (all takes) | × alone | load avg |",
              file=sys.stderr)
        print("|---|---|---|---|---|---|---|", file=sys.stderr)
        for row in rows:
            rng = lambda xs: f"{min(xs):g}–{max(xs):g}" if len(xs) > 1 else f"{xs[0]:g}"  # noqa: E731
            print(f"| {row['attention']} | {row['n']} | {rng(row['ms_frame_mean'])} | {rng(row['x_alone_ms_frame'])} | "
                  f"{rng(row['frames_per_s'])} | {rng(row['x_alone_throughput'])} | "
                  f"{', '.join(row['loadavg'])} |", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
