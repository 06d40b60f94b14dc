#!/usr/bin/env python3
"""Time the Dual-AR engine and read the result against this machine's memory bandwidth.

    python benchmarks/bench_engine.py --model MODEL.gguf [--frames 24] [--prompt-tokens 48]
    python benchmarks/bench_engine.py --make full-q8_0          # build (once, cached) and time
    python benchmarks/bench_engine.py --make tiny               # seconds; checks the script runs

Reports load time, prefill, Slow-AR ms/step and Fast-AR ms/frame (separately), the codec's
cost per second of audio on the generated codes, time to first audio when streaming, the
end-to-end real-time factor, peak RSS (and its ratio to the file size) and, measured in the same run, the streaming-read bandwidth of memory.
``--cuda-graphs on`` runs the decode steps as static shapes, captured as CUDA graphs on a CUDA
device (``eager``: static shapes, never captured; on the CPU both measure the eager static
steps; ``compile``: torch.compile where Triton exists); the default ``auto`` is what the app
does (graphs only with the whole model on one CUDA GPU). ``--busy N`` runs N CPU-bound competitor processes (as a browser or a compile would) during
the generation, to measure a busy desktop; compare with the same command without it. A decode step must read
every weight it uses once, so ``weight bytes per frame / bandwidth`` is a floor no engine can
beat; the "x floor" columns say how far above it we are (the bandwidth: the speed at which the
run reads the model's own quantized weight pages, ``weights_read_gbps``, where it has them;
else a fresh array's, ``fresh_memory_GBps`` either way). Ratios within one run are what to
compare across machines and commits, never absolute times.

``--make full-q8_0|full-q4_k|full-f16`` writes a full-size random-weight S2 Pro GGUF (the real
layout and sizes, random weights) with tools/make_full_s2.py (s2studio.devtools.full_model) into
--cache-dir (default ./bench-models, 3-10 GB), once.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# s2studio first: it sets OMP_WAIT_POLICY=PASSIVE before torch loads its OpenMP pool. Imported
# after torch, torch's idle workers spin, and the --busy figures measured that spinning, not
# the engine as the app and CLI run it (they import s2studio first).
import s2studio  # noqa: E402,F401
import numpy as np  # noqa: E402
import torch  # noqa: E402

from s2studio.engine.model.generate import GenerationParams, GenerationStats, generate_frames  # noqa: E402
from s2studio.engine.model.loader import load_dual_ar  # noqa: E402
from s2studio.engine.model.static_step import MODES as CUDA_GRAPH_MODES, resolve_mode  # noqa: E402
from s2studio.engine.model.step_cache import StepCache  # noqa: E402
from s2studio.engine.kernels.qmatrix import QuantMatrix  # noqa: E402
from s2studio.engine.threads import set_threads  # noqa: E402


def memory_bandwidth_gbps(gb: float = 2.0, reps: int = 5) -> float:
    """Median streaming-read bandwidth of a fresh float32 array (torch sum, current threads).

    On the development VM the read bandwidth swings between ~30 and ~63 GB/s from one run to
    the next (2026-12-08), for fresh memory and the model's weight pages alike, and the frames
    did not get faster in the fast runs: read a run's "x floor" with its bandwidth, and where a
    script has the model loaded take the floor from ``weights_read_gbps`` (the pages a decode
    step reads, in the same process, just before the timing). The values are distinct (arange),
    so that no page equals another for a host that merges or compresses pages."""
    t = torch.arange(int(gb * 1e9) // 4, dtype=torch.float32)  # touches every page, each one unlike the others
    t.sum()
    speeds = []
    for _ in range(reps):
        t0 = time.perf_counter()
        t.sum()
        speeds.append(t.numel() * 4 / (time.perf_counter() - t0) / 1e9)
    del t
    return statistics.median(speeds)


def weights_read_gbps(model, reps: int = 3) -> float:
    """Median read bandwidth of the loaded model's own Slow-AR matrices (torch sum over their
    bytes seen as float32, current threads): the speed at which a decode step can read those
    very pages, so the floor a frame is measured against. Only the quantized (CPU) matrices;
    0.0 where there are none (a float16 or GPU model: use memory_bandwidth_gbps)."""
    import warnings

    arrays = [w.raw for lw in model.w.slow.layers for w in (lw.wqkv, lw.wo, lw.w1, lw.w3, lw.w2)
              if isinstance(w, QuantMatrix)]
    if not arrays:
        return 0.0
    with warnings.catch_warnings():  # the map is read-only; the sum writes nothing
        warnings.simplefilter("ignore", UserWarning)
        views = [torch.from_numpy(a.reshape(-1)[: a.size // 4 * 4].view(np.float32)) for a in arrays]
    total = sum(v.numel() * 4 for v in views)
    speeds = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for v in views:
            v.sum()
        speeds.append(total / (time.perf_counter() - t0) / 1e9)
    return statistics.median(speeds)


def ensure_model(kind: str, cache_dir: pathlib.Path) -> pathlib.Path:
    cache_dir.mkdir(parents=True, exist_ok=True)
    # The generators (s2studio.devtools) run through their tools/ command lines in a child process:
    # in this one, their memory would count in the peak RSS this benchmark reports.
    tools = ROOT / "tools"
    if kind == "tiny":
        out = cache_dir / "tiny.gguf"
        tok = ROOT / "tests" / "data" / "golden" / "tts_f32" / "tokenizer.json"
        if not out.exists():
            subprocess.run([sys.executable, str(tools / "make_tiny_s2.py"), "--tokenizer", str(tok),
                            "--out", str(out), "--seed", "1"], check=True, stdout=subprocess.DEVNULL)
        return out
    dtype = kind.split("-", 1)[1]
    tok = cache_dir / "tokenizer-full.json"
    if not tok.exists():
        subprocess.run([sys.executable, str(tools / "make_full_tokenizer.py"), "--out", str(tok)], check=True,
                       stdout=subprocess.DEVNULL)
    out = cache_dir / f"s2-full-{dtype}.gguf"
    if not out.exists():
        tmp = out.with_suffix(".partial")
        print(f"building {out} (once; several GB)...", file=sys.stderr)
        subprocess.run([sys.executable, str(tools / "make_full_s2.py"), "--tokenizer", str(tok), "--out", str(tmp),
                        "--dtype", dtype], check=True, stdout=subprocess.DEVNULL)
        os.replace(tmp, out)
    return out


# A CPU-bound competitor: spins until the benchmark (its parent) is gone.
_SPIN = ("import os\nparent, n = os.getppid(), 0\nwhile True:\n    n += 1\n"
         "    if n % 5000000 == 0 and os.getppid() != parent:\n        break\n")


def start_competitors(count: int) -> list[subprocess.Popen]:
    """``count`` busy processes, unpinned (the scheduler places them, as on a desktop)."""
    procs = [subprocess.Popen([sys.executable, "-c", _SPIN]) for _ in range(count)]
    time.sleep(0.3)  # let them reach their loop
    return procs


def weight_bytes_per_frame(model) -> dict[str, int]:
    """Bytes of working weights one frame must read: the Slow-AR step (layers + the sampled
    head rows) and 9 Fast-AR positions (layers + fast head)."""
    def nbytes(t):  # a torch tensor, or a QuantMatrix (the GGUF blocks themselves)
        return t.nbytes if isinstance(t, QuantMatrix) else t.numel() * t.element_size()

    def stack(s):
        return sum(nbytes(getattr(lw, n)) for lw in s.layers for n in ("wqkv", "wo", "w1", "w2", "w3"))

    c = model.cfg
    emb = model.w.embeddings  # the sampled head rows are float16 when the table is quantized
    head = (c.codebook_size + 1) * c.slow.dim * (2 if isinstance(emb, QuantMatrix) else emb.element_size())
    slow = stack(model.w.slow) + head
    fast_call = stack(model.w.fast) + nbytes(model.w.fast_output)
    return {"slow_step": slow, "fast_frame": (c.num_codebooks - 1) * fast_call,
            "frame": slow + (c.num_codebooks - 1) * fast_call}


def codec_figures(path: pathlib.Path, codes: np.ndarray, stride: int) -> dict[str, float]:
    """Decode the generated codes on the CPU (as the app does by default on a CPU machine):
    the whole take at once, and the first streaming chunk of ``stride`` frames on its own."""
    from s2studio.engine.codec import Codec

    codec = Codec.from_gguf(path)
    codec.decode(codes[:, :2])  # warm-up
    t0 = time.perf_counter()
    audio = codec.decode(codes)
    decode_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    codec.stream_decoder().feed(codes[:, :stride])
    first = time.perf_counter() - t0
    return {"decode_s": decode_s, "audio_s": len(audio) / codec.sample_rate, "first_chunk_s": first}


def weight_format(model, plan) -> str:
    w = model.w.slow.layers[-1].w1
    if isinstance(w, QuantMatrix):
        return f"{w.type_name} kept quantized (CPU kernels)"
    return str(plan.dtype).replace("torch.", "")


def decode_steps_label(model, setting: str, steps: StepCache) -> str:
    """What ran the decode steps: dynamic, static eager, CUDA graphs (or their eager fallback)."""
    mode = resolve_mode(setting, model)
    dec = steps.decoder
    if mode == "off":
        return "dynamic"
    if dec is not None and dec.failed:
        return f"static, eager ({mode} failed: see the log)"
    return {"eager": "static, eager", "graph": "static, CUDA graphs", "compile": "static, torch.compile"}[mode]


def make_prompt(model, n_tokens: int) -> np.ndarray:
    """A text-only prompt of n tokens ending in <|voice|>-like ids; content doesn't affect timing."""
    c = model.cfg
    rng = np.random.default_rng(0)
    p = np.zeros((c.num_codebooks + 1, n_tokens), dtype=np.int32)
    p[0] = rng.integers(0, min(c.semantic_begin_id, 256), n_tokens)
    return p


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--bandwidth-only"]:
        set_threads(int(argv[3]))
        print(memory_bandwidth_gbps(float(argv[1])))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="GGUF file to time")
    src.add_argument("--make", choices=["tiny", "full-q8_0", "full-q4_k", "full-f16"],
                     help="generate (once) a random-weight model of this kind and time it")
    ap.add_argument("--cache-dir", default=str(ROOT / "bench-models"))
    ap.add_argument("--frames", type=int, default=24)
    ap.add_argument("--prompt-tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--bandwidth-gb", type=float, default=2.0, help="size of the bandwidth probe array")
    ap.add_argument("--json", action="store_true", help="print JSON only")
    ap.add_argument("--stream-stride", type=int, default=4, help="frames per streaming chunk (time to first audio)")
    ap.add_argument("--no-codec", action="store_true", help="skip the codec figures")
    ap.add_argument("--cuda-graphs", default="auto", choices=CUDA_GRAPH_MODES,
                    help="decode steps: static shapes / CUDA graphs (see above; default auto)")
    ap.add_argument("--busy", type=int, default=0, choices=range(0, 17), metavar="N",
                    help="CPU-bound competitor processes running while generating (0-16; default 0)")
    a = ap.parse_args(argv)

    threads = set_threads(a.threads)
    path = pathlib.Path(a.model) if a.model else ensure_model(a.make, pathlib.Path(a.cache_dir))
    # In a child process, so that the probe's array does not count in this process's peak RSS.
    probe = subprocess.run([sys.executable, __file__, "--bandwidth-only", str(a.bandwidth_gb), "--threads",
                            str(threads)], check=True, capture_output=True, text=True)
    bw = float(probe.stdout.strip())

    t0 = time.perf_counter()
    model, plan = load_dual_ar(path, device=a.device, dtype=a.dtype)
    load_s = time.perf_counter() - t0
    im_end = model.cfg.semantic_end_id + 1  # any non-semantic id: never produced with min_tokens
    prompt = make_prompt(model, a.prompt_tokens)
    params = GenerationParams(max_new_tokens=a.frames, temperature=0.8, top_p=0.8, top_k=30, seed=0,
                              min_tokens_before_end=a.frames)
    # Warm-up (first-call allocations; the graph captures: the same cache size as the timed
    # run while prompt + frames stay within one static_step.CACHE_BUCKET), then the timed run.
    step_cache = StepCache()  # keeps the warm-up's static steps (and graphs) for the timed run
    for _ in generate_frames(model, prompt, GenerationParams(max_new_tokens=2, seed=0, min_tokens_before_end=2),
                             im_end_id=im_end, cuda_graphs=a.cuda_graphs, step_cache=step_cache):
        pass
    st = GenerationStats()
    competitors = start_competitors(a.busy)
    try:
        frames = [f.codes for f in generate_frames(model, prompt, params, im_end_id=im_end, stats=st,
                                                   cuda_graphs=a.cuda_graphs, step_cache=step_cache)]
    finally:
        for proc in competitors:
            proc.kill()
            proc.wait()
    codec = codec_figures(path, np.stack(frames, axis=1), a.stream_stride) if not a.no_codec else {}
    steps = max(st.frames - 1, 1)
    slow_ms = 1000 * st.slow_s / steps
    fast_ms = 1000 * st.fast_s / max(st.frames, 1)
    wb = weight_bytes_per_frame(model)
    # The floor from the model's own weight pages where it has quantized ones, read just after the
    # timing (the fresh-array probe swings 30-63 GB/s between runs on the development VM).
    weights_bw = weights_read_gbps(model) if a.device == "cpu" else 0.0
    bw_probe, bw = bw, weights_bw or bw
    floor = {k: v / (bw * 1e9) * 1000 for k, v in wb.items()}
    out = {
        "model": str(path), "device": a.device,
        "decode_steps": decode_steps_label(model, a.cuda_graphs, step_cache),
        "weights": weight_format(model, plan),
        "threads": threads, "busy_competitors": a.busy, "bandwidth_GBps": round(bw, 2),
        "fresh_memory_GBps": round(bw_probe, 2), "floor_from": "weights" if weights_bw else "fresh memory",
        "load_s": round(load_s, 2), "prompt_tokens": a.prompt_tokens,
        "prefill_ms": round(1000 * st.prefill_s, 1), "frames": st.frames,
        "slow_ms_per_step": round(slow_ms, 2), "fast_ms_per_frame": round(fast_ms, 2),
        "ms_per_frame": round(slow_ms + fast_ms, 2),
        "frames_per_s": round(1000 / (slow_ms + fast_ms), 3),
        "realtime_factor": round((slow_ms + fast_ms) / (1000 / 21.533), 3),
        "weight_GB_per_frame": round(wb["frame"] / 1e9, 4),
        "floor_ms_per_frame": round(floor["frame"], 2),
        "x_floor_frame": round((slow_ms + fast_ms) / floor["frame"], 2),
        "x_floor_slow": round(slow_ms / floor["slow_step"], 2),
        "x_floor_fast": round(fast_ms / floor["fast_frame"], 2),
        "peak_rss_GB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2),
        "file_GB": round(path.stat().st_size / 1e9, 3),
        "peak_rss_x_file": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1e3 / path.stat().st_size, 2),
    }
    if codec:
        audio_s = codec["audio_s"]
        gen_s = st.prefill_s + st.frames * (slow_ms + fast_ms) / 1000
        out.update({
            "codec_ms_per_audio_s": round(1000 * codec["decode_s"] / audio_s, 1),
            "codec_first_chunk_ms": round(1000 * codec["first_chunk_s"], 1),
            "time_to_first_audio_ms": round(1000 * st.prefill_s + a.stream_stride * (slow_ms + fast_ms)
                                            + 1000 * codec["first_chunk_s"], 1),
            "end_to_end_rtf": round((gen_s + codec["decode_s"]) / audio_s, 3),
        })
    if a.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:>22}: {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
