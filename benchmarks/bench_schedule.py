#!/usr/bin/env python3
"""The integer GEMV's thread schedules side by side on one loaded model, in alternation.

    python benchmarks/bench_schedule.py --model s2-full-q8_0.gguf [--schedules dynamic,pool]
                                        [--rounds 4] [--frames 8] [--busy 1]

Each round generates ``--frames`` frames (after a two-frame warm-up) once per schedule, in turn,
so that the VM's drift falls on every schedule alike; the table gives each schedule's median and
best ms/frame over the rounds, its ratio to the first schedule's, and the frame's floor: its
weight bytes over the speed at which this process reads the model's own weight pages
(``bench_engine.weights_read_gbps``, just before the rounds; the development VM's read
bandwidth swings between ~30 and ~63 GB/s from run to run, so read each run's "x floor" with
its own bandwidth). The codes
of every schedule are compared with the first's: the schedules only share out rows, so they
must be identical. ``--busy N`` runs N CPU-bound competitor processes during all rounds (a
busy desktop). ``pool@US`` is the pool with its workers spinning US microseconds (0-100000)
before they sleep (``pool`` alone: ``S2_POOL_SPIN_US`` or the default), so spins can be compared
in one run: ``--schedules pool@0,pool@30,pool@100,pool@300``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import pathlib
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import s2studio  # noqa: E402,F401  (before torch: its OpenMP pool sleeps, as in the app)
import numpy as np  # noqa: E402

from bench_engine import ensure_model, make_prompt, start_competitors, weight_bytes_per_frame, weights_read_gbps  # noqa: E402
from s2studio.engine.kernels import backend, intdot  # noqa: E402
from s2studio.engine.model.generate import GenerationParams, GenerationStats, generate_frames  # noqa: E402
from s2studio.engine.model.loader import load_dual_ar  # noqa: E402
from s2studio.engine.modes import GemvSchedule  # noqa: E402
from s2studio.engine.threads import set_threads  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Arm:
    """One column of the comparison: a schedule, and for the pool its workers' spin."""

    word: str
    schedule: GemvSchedule
    spin_us: int | None = None


def parse_schedule(word: str) -> Arm:
    """``dynamic``, ``static``, ``pool`` or ``pool@US``."""
    name, _, spin = word.strip().partition("@")
    schedule = GemvSchedule.parse(name)
    if not spin:
        return Arm(word.strip(), schedule)
    if schedule != GemvSchedule.POOL or not spin.isdigit() or not 0 <= int(spin) <= intdot.POOL_SPIN_MAX_US:
        raise ValueError(f"{word!r}: a spin is given to the pool only, in whole microseconds "
                         f"0-{intdot.POOL_SPIN_MAX_US} (pool@100)")
    return Arm(word.strip(), schedule, int(spin))


def run_frames(model, prompt, frames: int) -> tuple[float, np.ndarray]:
    """ms per frame (Slow step + Fast calls, as GenerationStats counts them) and the codes."""
    im_end = model.cfg.semantic_end_id + 1  # never produced before min_tokens_before_end
    params = GenerationParams(max_new_tokens=frames, temperature=0.8, top_p=0.8, top_k=30, seed=0,
                              min_tokens_before_end=frames)
    st = GenerationStats()
    codes = [f.codes for f in generate_frames(model, prompt, params, im_end_id=im_end, stats=st)]
    steps = max(st.frames - 1, 1)
    return 1000 * (st.slow_s / steps + st.fast_s / max(st.frames, 1)), np.stack(codes, axis=1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--model")
    src.add_argument("--make", choices=["tiny", "full-q8_0", "full-q4_k"])
    ap.add_argument("--cache-dir", default=str(ROOT / "bench-models"))
    ap.add_argument("--schedules", default="dynamic,pool", help="comma-separated GemvSchedule words")
    ap.add_argument("--rounds", type=int, default=4, choices=range(1, 101), metavar="1..100")
    ap.add_argument("--frames", type=int, default=8, choices=range(2, 1001), metavar="2..1000")
    ap.add_argument("--prompt-tokens", type=int, default=16, choices=range(1, 2049), metavar="1..2048")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--busy", type=int, default=0, choices=range(0, 17), metavar="0..16")
    ap.add_argument("--bandwidth-gb", type=float, default=2.0)
    ap.add_argument("--json", action="store_true", help="print JSON only")
    a = ap.parse_args(argv)
    try:
        schedules = [parse_schedule(w) for w in a.schedules.split(",") if w.strip()]
    except ValueError as exc:
        ap.error(str(exc))
    if any(s.schedule == GemvSchedule.POOL for s in schedules) and not intdot.pool_available():
        ap.error("the pool schedule is not available here (no _qdot pool: Windows, or the C kernels not built)")

    threads = set_threads(a.threads)
    path = pathlib.Path(a.model) if a.model else ensure_model(a.make, pathlib.Path(a.cache_dir))
    model, _plan = load_dual_ar(path, device="cpu", dtype="auto")
    bw = weights_read_gbps(model)
    if not bw:  # no quantized matrices (a float16 file): a fresh array's read, in a child process
        probe = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_engine.py"), "--bandwidth-only",
                                str(a.bandwidth_gb), "--threads", str(threads)], check=True, capture_output=True,
                               text=True)
        bw = float(probe.stdout.strip())
    prompt = make_prompt(model, a.prompt_tokens)
    floor_ms = weight_bytes_per_frame(model)["frame"] / (bw * 1e9) * 1000
    base = backend.settings()

    @contextlib.contextmanager
    def configured(arm: Arm):
        intdot.set_pool_spin(arm.spin_us)
        with backend.configured(backend.KernelSettings(base.int_dot, arm.schedule, base.level, base.prefill,
                                                       base.attention, base.glue)):
            yield

    for arm in schedules:  # warm-up: compilation, first-call allocations, the pool's threads
        with configured(arm):
            run_frames(model, prompt, 2)
    times: dict[Arm, list[float]] = {arm: [] for arm in schedules}
    reference = None
    identical = True
    competitors = start_competitors(a.busy)
    try:
        for _ in range(a.rounds):
            for arm in schedules:
                with configured(arm):
                    ms, codes = run_frames(model, prompt, a.frames)
                times[arm].append(ms)
                if reference is None:
                    reference = codes
                identical = identical and np.array_equal(codes, reference)
    finally:
        for proc in competitors:
            proc.kill()
            proc.wait()
        intdot.set_pool_spin(None)
    first = statistics.median(times[schedules[0]])
    rows = [{"schedule": s.word, "median_ms": round(statistics.median(t), 1), "best_ms": round(min(t), 1),
             "x_first": round(statistics.median(t) / first, 3), "x_floor": round(statistics.median(t) / floor_ms, 3)}
            for s, t in times.items()]
    out = {"model": str(path), "threads": threads, "busy": a.busy, "bandwidth_GBps": round(bw, 2),
           "floor_ms": round(floor_ms, 1), "frames": a.frames, "rounds": a.rounds,
           "default_spin_us": intdot.pool_spin_us(), "codes_identical": identical, "pool": intdot.pool_stats(), "rows": rows}
    if a.json:
        print(json.dumps(out))
    else:
        print(f"{path.name}: {threads} threads, {a.busy} competitors, read bandwidth {bw:.1f} GB/s, "
              f"floor {floor_ms:.1f} ms/frame, {a.rounds} rounds of {a.frames} frames, pool spin {out['default_spin_us']} us "
              "unless given")
        print(f"{'schedule':<12} {'median ms':>10} {'best ms':>9} {'x first':>8} {'x floor':>8}")
        for r in rows:
            print(f"{r['schedule']:<12} {r['median_ms']:>10} {r['best_ms']:>9} {r['x_first']:>8} {r['x_floor']:>8}")
        print("codes identical across schedules:", identical)
    return 0 if identical else 1


if __name__ == "__main__":
    raise SystemExit(main())
