#!/usr/bin/env python3
"""Where one frame's time goes: every kind of op of the Slow-AR step and the 9 Fast-AR calls,
with its time, its bytes and how far it is from what reading those bytes costs.

    python benchmarks/profile_frame.py --model MODEL.gguf [--frames 12] [--prompt-tokens 300]
    python benchmarks/profile_frame.py --make tiny          # seconds; checks the script runs
    python benchmarks/profile_frame.py --model MODEL.gguf --glue-ab   # C glue and torch's, frame by frame

The frame loop runs as the app runs it (``generate_frames``, dynamic steps); the ops are timed
by wrapping the engine's functions in this process only (``transformer.rms_norm``, the
contexts' ``linear`` and ``attend``, ``apply_rope``, ``qkv_heads`` (the QKV split, QK-norm and
RoPE: with ``S2_GLUE=c`` one C call; with torch, the norms and RoPE inside it count here, not
twice), ``add_rms_norm``, the embedding, the head, the sampler), so
the table's rows add up to the measured frame minus "glue" (Python, elementwise adds and
products, tensor shuffles between the timed calls). Bytes are what an op must read: a matmul
its weight, attention the keys and values of the cache, the head its rows. "x floor" is the
op's time over ``bytes / bandwidth`` (the streaming-read bandwidth measured in the same run).
The per-call timer costs ~1 µs over ~700 calls a frame: under 1 % of a full-size frame.

``--glue-ab``: the profiled frames alternate between the C glue and torch's ops (``S2_GLUE``,
``KernelSettings.glue``: switched before each frame's Slow-AR step), each phase reported per
setting, so both are measured in the same minutes of a machine whose speed drifts.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import json
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import s2studio  # noqa: E402,F401  (before torch: its OpenMP pool sleeps, as in the app)
import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench_engine import ensure_model, make_prompt, weight_bytes_per_frame  # noqa: E402
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

    def add(self, op: str, dt: float, nbytes: int = 0) -> None:
        if self.recording:
            key = (self.phase, op)
            self.time[key] += dt
            self.bytes[key] += nbytes
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
        prof.add(_KINDS.get(id(w), "matmul (other)"), time.perf_counter() - t, weight_nbytes(w))
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
    a = ap.parse_args(argv)
    threads = set_threads(a.threads)
    path = pathlib.Path(a.model) if a.model else ensure_model(a.make, pathlib.Path(a.cache_dir))
    probe = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_engine.py"), "--bandwidth-only",
                            str(a.bandwidth_gb), "--threads", str(threads)], check=True, capture_output=True,
                           text=True)
    bw = float(probe.stdout.strip()) * 1e9
    model, _ = load_dual_ar(path)
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
    header = f"{'phase':<18} {'op':<24} {'calls':>6} {'ms/frame':>9} {'%':>6} {'MB/frame':>9} {'GB/s':>6} {'x floor':>8}"
    floor_ms = wb["frame"] / bw * 1000
    summary = {}
    for g in (("c", "torch") if a.glue_ab else (None,)):
        tag = f" [{g}]" if g else ""
        nf = max(prof.frames[g], 1) if g else n
        frame_ms = 1000 * sum(prof.phase_time[p + tag] for p in ("slow step", "fast calls")) / nf
        summary[g or "frame"] = frame_ms
        for phase in (p + tag for p in ("slow step", "fast calls")):
            print(header if phase.startswith("slow") else "")
            ops = sorted((k for k in prof.time if k[0] == phase), key=lambda k: -prof.time[k])
            measured = 0.0
            for key in ops:
                ms = 1000 * prof.time[key] / nf
                measured += ms
                mb = prof.bytes[key] / nf / 1e6
                gbps = prof.bytes[key] / prof.time[key] / 1e9 if prof.bytes[key] else 0.0
                floor = prof.bytes[key] / nf / bw * 1000
                row = {"phase": phase, "op": key[1], "calls": prof.calls[key] // nf, "ms": round(ms, 6),
                       "MB": round(mb, 2), "GBps": round(gbps, 2),
                       "x_floor": round(ms / floor, 2) if floor else None}
                rows.append(row)
                print(f"{phase:<18} {key[1]:<24} {row['calls']:>6} {ms:>9.2f} {100 * ms / frame_ms:>5.1f}% "
                      f"{mb:>9.1f} {gbps:>6.1f} {row['x_floor'] if row['x_floor'] else '':>8}")
            phase_ms = 1000 * prof.phase_time[phase] / nf
            glue = phase_ms - measured
            rows.append({"phase": phase, "op": "glue (untimed)", "ms": round(glue, 6)})
            print(f"{phase:<18} {'glue (untimed)':<24} {'':>6} {glue:>9.2f} {100 * glue / frame_ms:>5.1f}%")
            print(f"{phase:<18} {'= total':<24} {'':>6} {phase_ms:>9.2f} {100 * phase_ms / frame_ms:>5.1f}%")
        print(f"\nframe{tag} {frame_ms:.1f} ms over {nf} frames; weights {wb['frame'] / 1e9:.3f} GB/frame, "
              f"floor {floor_ms:.1f} ms: {frame_ms / floor_ms:.2f}x floor")
    print(f"unprofiled: {1000 * (st.slow_s + st.fast_s) / max(st.frames, 1):.1f} ms/frame incl. the first frame"
          + (" (both settings)" if a.glue_ab else ""))
    if a.glue_ab:
        print(f"C glue / torch glue, profiled frames: {summary['c'] / summary['torch']:.3f}")
    frame_ms = summary.get("frame", sum(summary.values()) / len(summary))
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps({"rows": rows, "frame_ms": frame_ms, "frame_ms_by_glue": summary, "floor_ms": floor_ms,
                                                    "bandwidth_GBps": bw / 1e9, "threads": threads}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
