#!/usr/bin/env python3
"""Where one frame's time goes: every kind of op of the Slow-AR step and the 9 Fast-AR calls,
with its time, its bytes and how far it is from what reading those bytes costs.

    python benchmarks/profile_frame.py --model MODEL.gguf [--frames 12] [--prompt-tokens 300]
    python benchmarks/profile_frame.py --make tiny          # seconds; checks the script runs
    python benchmarks/profile_frame.py --model MODEL.gguf --glue-ab   # C glue and torch's, frame by frame
    python benchmarks/profile_frame.py --model MODEL.gguf --batch 4   # then a step of 4 takes at once

The frame loop runs as the app runs it (``generate_frames``, dynamic steps); the ops are timed
by wrapping the engine's functions in this process only (``transformer.rms_norm``, the
contexts' ``linear`` and ``attend``, ``apply_rope``, ``qkv_heads`` (the QKV split, QK-norm and
RoPE: with ``S2_GLUE=c`` one C call; with torch, the norms and RoPE inside it count here, not
twice), ``add_rms_norm``, the embedding, the head, the sampler), so
the table's rows add up to the measured frame minus "glue" (Python, elementwise adds and
products, tensor shuffles between the timed calls). Bytes are what an op must read: a matmul
its weight, attention the keys and values of the cache, the head its rows. "x floor" is the
op's time over ``bytes / bandwidth`` (the speed at which the run reads the model's own weight
pages, ``bench_engine.weights_read_gbps``; a fresh array's for a model without quantized ones).
The per-call timer costs ~1 µs over ~700 calls a frame: under 1 % of a full-size frame.

``--glue-ab``: the profiled frames alternate between the C glue and torch's ops (``S2_GLUE``,
``KernelSettings.glue``: switched before each frame's Slow-AR step), each phase reported per
setting, so both are measured in the same minutes of a machine whose speed drifts.

``--batch N``: after the frame alone, N takes are decoded together through the engine's
``FrameBatcher`` (what the server and ``s2studio render --parallel N`` run), and one step of
theirs (a frame for each take: the batched Fast-AR calls, then the batched Slow-AR step) is
profiled the same way, only steps with all N takes in them. Its matmul rows add the
multiply-adds per second (N rows per weight row), which is what bounds a batched step on a
small CPU; the last line says the step's time against the frame alone and what that makes
the throughput of N at once (unprofiled figures of both, same process).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import json
import pathlib
import statistics
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import s2studio  # noqa: E402,F401  (before torch: its OpenMP pool sleeps, as in the app)
import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench_engine import ensure_model, make_prompt, weight_bytes_per_frame, weights_read_gbps  # noqa: E402
from s2studio.engine.batching import MAX_BATCH, FrameBatcher  # noqa: E402
from s2studio.engine.kernels import backend  # noqa: E402
from s2studio.engine.kernels.qmatrix import QuantMatrix  # noqa: E402
from s2studio.engine.model import dual_ar, generate, transformer  # noqa: E402
from s2studio.engine.model.generate import GenerationParams, GenerationStats, generate_frames  # noqa: E402
from s2studio.engine.model.loader import load_dual_ar  # noqa: E402
from s2studio.engine.threads import set_threads  # noqa: E402


class Profile:
    """Time and bytes per (phase, op), and the phase's wall time."""

    def __init__(self):
        self.phase = "prefill"
        self.time = collections.defaultdict(float)
        self.bytes = collections.defaultdict(int)
        self.calls = collections.defaultdict(int)
        self.macs = collections.defaultdict(int)  # multiply-adds of the matmul rows
        self.phase_time = collections.defaultdict(float)
        self.recording = False
        self._since: float | None = None
        self.depth = 0  # timed calls in progress: one inside another is counted in the outer
        self.frames = collections.Counter()  # profiled frames per glue setting

    def switch(self, phase: str) -> None:
        """Phase ``phase`` begins now (None: the profiled frames are over)."""
        now = time.perf_counter()
        if self.recording and self._since is not None:
            self.phase_time[self.phase] += now - self._since
        self.phase, self._since = phase, now

    def add(self, op: str, dt: float, nbytes: int = 0, macs: int = 0) -> None:
        if self.recording:
            key = (self.phase, op)
            self.time[key] += dt
            self.bytes[key] += nbytes
            self.macs[key] += macs
            self.calls[key] += 1


def weight_nbytes(w) -> int:
    return w.nbytes if isinstance(w, QuantMatrix) else w.numel() * w.element_size()


_KINDS: dict[int, str] = {}  # id of a weight -> the op that reads it


def name_weights(model) -> None:
    for stack, tag in ((model.w.slow, "slow"), (model.w.fast, "fast")):
        for lw in stack.layers:
            _KINDS[id(lw.wqkv)] = "matmul wqkv"
            _KINDS[id(lw.wo)] = "matmul wo"
            _KINDS[id(lw.w1)] = "matmul w1 (gate)"
            _KINDS[id(lw.w3)] = "matmul w3 (up)"
            _KINDS[id(lw.w2)] = "matmul w2 (down)"
    _KINDS[id(model.w.fast_output)] = "head (fast output)"
    _KINDS[id(model.head_rows(model.cfg.semantic_end_id + 1))] = "head (sampled rows)"
    if model.w.fast_project_in is not None:
        _KINDS[id(model.w.fast_project_in)] = "matmul fast project-in"


@contextlib.contextmanager
def instrumented(model, prof: Profile, glue_ab: bool = False):
    """Wrap the engine's op functions with timers (this process only; restored afterwards)."""
    saved = []

    def patch(owner, name, wrapper):
        saved.append((owner, name, owner.__dict__[name]))
        setattr(owner, name, wrapper)

    real_linear = transformer.linear

    def timed_linear(x, w):
        t = time.perf_counter()
        y = real_linear(x, w)
        macs = x.numel() // x.shape[-1] * w.shape[0] * w.shape[1]
        prof.add(_KINDS.get(id(w), "matmul (other)"), time.perf_counter() - t, weight_nbytes(w), macs)
        return y

    def timed(op, real):
        def run(*a):
            prof.depth += 1
            t = time.perf_counter()
            try:
                return real(*a)
            finally:
                prof.depth -= 1
                if prof.depth == 0:
                    prof.add(op, time.perf_counter() - t)
        return run

    timed_rms = timed("rms_norm (+ qk-norm)", transformer.rms_norm)
    timed_rope = timed("rope", transformer.apply_rope)
    timed_heads = timed("qkv split+norm+rope", transformer.qkv_heads)
    timed_add_rms = timed("residual add + ffn norm", transformer.add_rms_norm)

    real_attend = transformer.DynamicContext.attend

    def timed_attend(self, layer, q, k, v):
        t = time.perf_counter()
        y = real_attend(self, layer, q, k, v)
        kv = self.cache.k[layer] if self.cache is not None else None
        nbytes = 2 * kv.shape[0] * (self.pos0 + self.n) * kv.shape[2] * kv.element_size() if kv is not None else 0
        prof.add("attention (+ KV store)", time.perf_counter() - t, nbytes)
        return y

    real_embed = dual_ar.DualAR.embed

    def timed_embed(self, tokens):
        t = time.perf_counter()
        y = real_embed(self, tokens)
        prof.add("embedding", time.perf_counter() - t)
        return y

    real_sample = generate.sample_token

    def timed_sample(*a, **kw):
        t = time.perf_counter()
        y = real_sample(*a, **kw)
        prof.add("sampling", time.perf_counter() - t)
        return y

    steps = generate.DynamicSteps

    glue_now = [backend.settings().glue.value]

    def phased(name, fn):
        def run(self, *a, **kw):
            if glue_ab and name == "slow step" and prof.recording:
                glue_now[0] = "torch" if glue_now[0] == "c" else "c"
                backend.configure(dataclasses.replace(backend.settings(), glue=glue_now[0]))
            # a phase lasts until the next begins: its sampling is in it
            prof.switch(f"{name} [{glue_now[0]}]" if glue_ab else name)
            if name == "slow step" and prof.recording:
                prof.frames[glue_now[0]] += 1
            return fn(self, *a, **kw)
        return run

    # linear is looked up at call time through the context (DynamicContext.linear is a staticmethod).
    patch(transformer.DynamicContext, "linear", staticmethod(timed_linear))
    patch(transformer, "linear", timed_linear)  # the head's and the fast output's (linear_grouped)
    patch(transformer, "rms_norm", timed_rms)
    patch(dual_ar, "rms_norm", timed_rms)  # the Fast-AR's final norm
    patch(transformer, "apply_rope", timed_rope)
    patch(transformer, "qkv_heads", timed_heads)
    patch(transformer, "add_rms_norm", timed_add_rms)
    patch(transformer.DynamicContext, "attend", timed_attend)
    patch(dual_ar.DualAR, "embed", timed_embed)
    patch(generate, "sample_token", timed_sample)
    patch(steps, "slow_step", phased("slow step", steps.__dict__["slow_step"]))
    patch(steps, "fast_start", phased("fast calls", steps.__dict__["fast_start"]))
    patch(steps, "fast_next", phased("fast calls", steps.__dict__["fast_next"]))
    try:
        yield
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)


@contextlib.contextmanager
def batch_phases(model, prof: Profile, batcher: FrameBatcher, n: int, first_step: int, last_step: int):
    """Phases of the batcher's steps (its batched Fast-AR calls, then its Slow-AR step), recorded
    for steps ``first_step``..``last_step`` when all ``n`` takes are in them; and the batched
    attention timed (``instrumented`` times the rest). This process only; restored afterwards."""
    saved = []

    def patch(owner, name, wrapper):
        saved.append((owner, name, owner.__dict__[name]))
        setattr(owner, name, wrapper)

    def phased(name, fn, starts_step):
        def run(self, *a, **kw):
            takes = len(a[1])  # caches or codes: one per take
            if starts_step:
                wanted = takes == n and first_step <= batcher.steps <= last_step
                if prof.recording and not wanted:
                    prof.switch(None)  # the previous step ends here
                    prof.recording = False
                elif wanted and not prof.recording:
                    prof.recording, prof._since = True, None
                if prof.recording:
                    prof.frames["batch"] += 1
            prof.switch(name)
            return fn(self, *a, **kw)
        return run

    real_attend = transformer.BatchedContext.attend

    def timed_attend(self, layer, q, k, v):
        t = time.perf_counter()
        y = real_attend(self, layer, q, k, v)
        kv = self.seqs[0].cache.k[layer]
        nbytes = sum(2 * kv.shape[0] * (s.pos0 + s.n) * kv.shape[2] * kv.element_size() for s in self.seqs)
        prof.add("attention (+ KV store)", time.perf_counter() - t, nbytes)
        return y

    d = dual_ar.DualAR
    patch(transformer.BatchedContext, "attend", timed_attend)
    patch(d, "fast_start_batch", phased("fast calls", d.__dict__["fast_start_batch"], True))
    patch(d, "fast_next_batch", phased("fast calls", d.__dict__["fast_next_batch"], False))
    patch(d, "forward_slow_batch", phased("slow step", d.__dict__["forward_slow_batch"], False))
    try:
        yield
    finally:
        if prof.recording:
            prof.switch(None)
            prof.recording = False
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)


def decode_together(model, prompt, params: GenerationParams, n: int, im_end: int, batcher: FrameBatcher
                    ) -> list[GenerationStats]:
    """``n`` takes of ``prompt`` (seeds 0..n-1) decoded together by ``batcher``, one thread each, as
    the server's requests are; returns each take's stats."""
    stats = [GenerationStats() for _ in range(n)]
    errors: list[BaseException] = []

    def take(i: int) -> None:
        try:
            for _ in batcher.frames(prompt, dataclasses.replace(params, seed=i), stats=stats[i]):
                pass
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=take, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    batcher.wait_idle()
    if errors:
        raise errors[0]
    return stats


def print_table(prof: Profile, phases: list[str], nf: int, frame_ms: float, bw: float, rows: list) -> None:
    """The rows of ``phases`` (per frame or step: ``nf`` of them), appended to ``rows`` too."""
    header = (f"{'phase':<18} {'op':<24} {'calls':>6} {'ms/frame':>9} {'%':>6} {'MB/frame':>9} {'GB/s':>6} "
              f"{'x floor':>8} {'GMAC/s':>7}")
    for phase in phases:
        print(header if phase == phases[0] else "")
        ops = sorted((k for k in prof.time if k[0] == phase), key=lambda k: -prof.time[k])
        measured = 0.0
        for key in ops:
            ms = 1000 * prof.time[key] / nf
            measured += ms
            mb = prof.bytes[key] / nf / 1e6
            gbps = prof.bytes[key] / prof.time[key] / 1e9 if prof.bytes[key] else 0.0
            gmacs = prof.macs[key] / prof.time[key] / 1e9 if prof.macs[key] else 0.0
            floor = prof.bytes[key] / nf / bw * 1000
            row = {"phase": phase, "op": key[1], "calls": prof.calls[key] // nf, "ms": round(ms, 6),
                   "MB": round(mb, 2), "GBps": round(gbps, 2), "GMACps": round(gmacs, 2),
                   "x_floor": round(ms / floor, 2) if floor else None}
            rows.append(row)
            print(f"{phase:<18} {key[1]:<24} {row['calls']:>6} {ms:>9.2f} {100 * ms / frame_ms:>5.1f}% "
                  f"{mb:>9.1f} {gbps:>6.1f} {row['x_floor'] if row['x_floor'] else '':>8} "
                  f"{f'{gmacs:.1f}' if gmacs else '':>7}")
        phase_ms = 1000 * prof.phase_time[phase] / nf
        glue = phase_ms - measured
        rows.append({"phase": phase, "op": "glue (untimed)", "ms": round(glue, 6)})
        print(f"{phase:<18} {'glue (untimed)':<24} {'':>6} {glue:>9.2f} {100 * glue / frame_ms:>5.1f}%")
        print(f"{phase:<18} {'= total':<24} {'':>6} {phase_ms:>9.2f} {100 * phase_ms / frame_ms:>5.1f}%")


def profile_batch(model, prompt, params: GenerationParams, n: int, im_end: int, frames: int, alone_ms: float,
                  bw: float, floor_ms: float) -> dict:
    """The batched step of ``n`` takes: unprofiled first (its time per step), then profiled."""
    batcher = FrameBatcher(model, im_end, max_batch=n)
    stats = decode_together(model, prompt, params, n, im_end, batcher)
    # Every take was in every step (they start together and make the same number of frames).
    step_ms = 1000 * statistics.median((s.slow_s + s.fast_s) / max(s.frames, 1) for s in stats)
    prof = Profile()
    batcher = FrameBatcher(model, im_end, max_batch=n)
    with instrumented(model, prof), batch_phases(model, prof, batcher, n, 3, frames - 1):
        decode_together(model, prompt, params, n, im_end, batcher)
    nf = max(prof.frames["batch"], 1)
    phases = [f"slow step x{n}", f"fast calls x{n}"]
    for key in list(prof.time):  # name the phases after the batch
        new = (key[0].replace("slow step", phases[0]).replace("fast calls", phases[1]), key[1])
        for table in (prof.time, prof.bytes, prof.macs, prof.calls):
            table[new] = table.pop(key)
    for old, new in zip(("slow step", "fast calls"), phases):
        prof.phase_time[new] = prof.phase_time.pop(old, 0.0)
    profiled_ms = 1000 * sum(prof.phase_time[p] for p in phases) / nf
    rows: list = []
    print(f"\n{n} takes at once: {nf} steps profiled (a frame for each take per step)")
    print_table(prof, phases, nf, profiled_ms, bw, rows)
    print(f"\nstep of {n} takes {profiled_ms:.1f} ms profiled, {step_ms:.1f} unprofiled = "
          f"{step_ms / alone_ms:.2f}x the frame alone ({alone_ms:.1f} ms) = {step_ms / floor_ms:.2f}x the floor; "
          f"throughput {n * alone_ms / step_ms:.2f}x one take")
    return {"takes": n, "rows": rows, "step_ms": step_ms, "step_ms_profiled": profiled_ms,
            "throughput_x": n * alone_ms / step_ms}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--model")
    src.add_argument("--make", choices=["tiny", "full-q8_0", "full-q4_k"])
    ap.add_argument("--cache-dir", default=str(ROOT / "bench-models"))
    ap.add_argument("--frames", type=int, default=12)
    ap.add_argument("--prompt-tokens", type=int, default=300)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--bandwidth-gb", type=float, default=2.0)
    ap.add_argument("--json", help="write the table here")
    ap.add_argument("--glue-ab", action="store_true", help="alternate the C glue and torch's, frame by frame")
    ap.add_argument("--batch", type=int, default=1, choices=range(1, MAX_BATCH + 1), metavar=f"1..{MAX_BATCH}",
                    help="then profile a step of this many takes decoded together (1: only the frame alone)")
    a = ap.parse_args(argv)
    if a.batch > 1 and a.frames < 6:
        ap.error("--batch needs --frames 6 or more (the steps with every take in them are profiled)")
    threads = set_threads(a.threads)
    path = pathlib.Path(a.model) if a.model else ensure_model(a.make, pathlib.Path(a.cache_dir))
    probe = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_engine.py"), "--bandwidth-only",
                            str(a.bandwidth_gb), "--threads", str(threads)], check=True, capture_output=True,
                           text=True)
    bw = float(probe.stdout.strip()) * 1e9
    model, _ = load_dual_ar(path)
    # The floor from the model's own weight pages where it has quantized ones, read in this
    # process just before the frames (the development VM's bandwidth swings 30-63 GB/s between runs).
    bw = weights_read_gbps(model) * 1e9 or bw
    im_end = model.cfg.semantic_end_id + 1
    prompt = make_prompt(model, a.prompt_tokens)
    for _ in generate_frames(model, prompt, GenerationParams(max_new_tokens=2, seed=0, min_tokens_before_end=2),
                             im_end_id=im_end, cuda_graphs="off"):
        pass  # warm-up (it also makes the sampled head rows, named next)
    name_weights(model)
    prof = Profile()
    st = GenerationStats()
    params = GenerationParams(max_new_tokens=a.frames, temperature=0.8, top_p=0.8, top_k=30, seed=0,
                              min_tokens_before_end=a.frames)
    before = backend.settings()
    with instrumented(model, prof, a.glue_ab):
        frames = generate_frames(model, prompt, params, im_end_id=im_end, stats=st, cuda_graphs="off")
        next(frames)  # the prefill and the first frame: not profiled
        prof.recording, prof._since = True, None  # from the next phase on
        n = sum(1 for _ in frames)  # each: a slow step, then a frame's fast calls
        prof.switch(None)
    backend.configure(before)
    n = max(n, 1)
    wb = weight_bytes_per_frame(model)
    rows = []
    print(f"{path.name}: {n} frames profiled after a {a.prompt_tokens}-token prompt, {threads} threads, "
          f"read bandwidth {bw / 1e9:.1f} GB/s")
    floor_ms = wb["frame"] / bw * 1000
    summary = {}
    for g in (("c", "torch") if a.glue_ab else (None,)):
        tag = f" [{g}]" if g else ""
        nf = max(prof.frames[g], 1) if g else n
        frame_ms = 1000 * sum(prof.phase_time[p + tag] for p in ("slow step", "fast calls")) / nf
        summary[g or "frame"] = frame_ms
        print_table(prof, [p + tag for p in ("slow step", "fast calls")], nf, frame_ms, bw, rows)
        print(f"\nframe{tag} {frame_ms:.1f} ms over {nf} frames; weights {wb['frame'] / 1e9:.3f} GB/frame, "
              f"floor {floor_ms:.1f} ms: {frame_ms / floor_ms:.2f}x floor")
    alone_ms = 1000 * (st.slow_s + st.fast_s) / max(st.frames, 1)
    print(f"unprofiled: {alone_ms:.1f} ms/frame incl. the first frame"
          + (" (both settings)" if a.glue_ab else ""))
    if a.glue_ab:
        print(f"C glue / torch glue, profiled frames: {summary['c'] / summary['torch']:.3f}")
    frame_ms = summary.get("frame", sum(summary.values()) / len(summary))
    doc = {"rows": rows, "frame_ms": frame_ms, "frame_ms_by_glue": summary, "floor_ms": floor_ms,
           "bandwidth_GBps": bw / 1e9, "threads": threads}
    if a.batch > 1:
        doc["batch"] = profile_batch(model, prompt, params, a.batch, im_end, a.frames, alone_ms, bw, floor_ms)
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
