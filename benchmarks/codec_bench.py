"""Codec decode cost: one-shot vs incremental streaming, and whether streaming stays flat.

    python benchmarks/codec_bench.py                       # tiny golden model (fast)
    python benchmarks/codec_bench.py --model BIG/full.gguf --seconds 60 --strides 4,16

Reports, for random codes:
- one-shot ``Codec.decode`` cost in ms per second of audio (and the real-time factor);
- streaming ``StreamDecoder.feed`` at each stride: ms per second of audio, and the ratio of
  the mean per-chunk time over the last 10 % of a long utterance to the first 10 % (after a
  warm-up). s2.cpp re-decodes a ~150-frame window per chunk; ours should stay flat (<= 1.5);
- s2.cpp's windowed offline schedule (``decode_windowed``) for comparison, if --windowed;
- with --ab: streaming at the first stride with the CPU fast paths (fused Snake, one-channel
  output conv as GEMM) on and off, alternating in this process (the machine is shared, so
  alternate rather than run one after the other), with min/median/max, the load average of
  each run, and the SNR of "on" against "off";
- with --ab-transconv: the same, switching only the transposed convs between the polyphase
  conv1d (on: the same bits whatever the thread count) and oneDNN's transposed conv (off).
  MKL's strict mode (MKL_CBWR, the header line shows it) is per process: run once with
  ``MKL_CBWR=AUTO`` (MKL's default) to compare.

Full-size codec: ``python tools/make_full_s2.py --codec full ...`` (large; write it outside
the repository).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# s2studio first: it sets the app's OpenMP policy (idle threads sleep), which only takes effect
# before torch loads; timings with spinning threads differ a lot on a busy machine.
import s2studio  # noqa: E402,F401
import numpy as np  # noqa: E402
import torch  # noqa: E402

from s2studio.engine.codec import Codec, layers  # noqa: E402

DEFAULT_MODEL = ROOT / "tests" / "data" / "golden" / "codec_roundtrip" / "model.gguf"


def random_codes(codec: Codec, frames: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([rng.integers(0, n, size=frames) for n in codec.cfg.codebook_sizes()]).astype(np.int32)


def bench_one_shot(codec: Codec, codes: np.ndarray, repeats: int) -> float:
    codec.decode(codes[:, : min(8, codes.shape[1])])  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        codec.decode(codes)
        best = min(best, time.perf_counter() - t0)
    return best


def bench_stream(codec: Codec, codes: np.ndarray, stride: int) -> dict:
    dec = codec.stream_decoder()
    # Warm-up on a separate utterance so allocator/kernel setup does not count as "start".
    for a in range(0, 4 * stride, stride):
        dec.feed(codes[:, a:a + stride])
    dec.reset()
    times = []
    total = codes.shape[1] - codes.shape[1] % stride
    for a in range(0, total, stride):
        t0 = time.perf_counter()
        dec.feed(codes[:, a:a + stride])
        times.append(time.perf_counter() - t0)
    t = np.array(times)
    k = max(1, len(t) // 10)
    spf = codec.samples_per_frame / codec.sample_rate
    return {
        "stride": stride,
        "chunks": len(t),
        "ms_per_audio_s": float(t.sum() / (total * spf) * 1e3),
        "chunk_ms_median": float(np.median(t) * 1e3),
        "chunk_ms_start": float(np.median(t[:k]) * 1e3),
        "chunk_ms_end": float(np.median(t[-k:]) * 1e3),
        "end_over_start": float(np.median(t[-k:]) / np.median(t[:k])),
    }


FAST_PATHS = ("FUSED_SNAKE", "SINGLE_OUTPUT_GEMM")


def bench_ab(codec: Codec, codes: np.ndarray, stride: int, repeats: int, switches=FAST_PATHS) -> dict:
    """The ``layers`` switches on vs off, alternating; seconds per audio second and SNR(on vs off)."""
    spf = codec.samples_per_frame / codec.sample_rate
    total = codes.shape[1] - codes.shape[1] % stride

    def run(on: bool) -> tuple[float, np.ndarray]:
        for name in switches:
            setattr(layers, name, on)
        dec = codec.stream_decoder()
        t0 = time.perf_counter()
        out = np.concatenate([dec.feed(codes[:, a:a + stride]) for a in range(0, total, stride)])
        return (time.perf_counter() - t0) / (total * spf), out

    try:
        run(True), run(False)  # warm-up (and the numba compile)
        times: dict = {"on": [], "off": []}
        loads, outs = [], {}
        for _ in range(repeats):
            for name in ("off", "on"):
                loads.append(float(open("/proc/loadavg").read().split()[0]) if os.path.exists("/proc/loadavg") else 0.0)
                t, outs[name] = run(name == "on")
                times[name].append(t)
    finally:
        for name in switches:
            setattr(layers, name, True)
    ref = outs["off"].astype(np.float64)
    snr = float(10 * np.log10(np.sum(ref ** 2) / max(np.sum((ref - outs["on"]) ** 2), 1e-30)))
    res = {name: {"s_per_audio_s_min": min(v), "median": float(np.median(v)), "max": max(v)}
           for name, v in times.items()}
    res.update(stride=stride, loadavg_min=min(loads), loadavg_max=max(loads), snr_on_vs_off_db=snr)
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(DEFAULT_MODEL), help="GGUF with a codec (default: tiny golden)")
    ap.add_argument("--seconds", type=float, default=60.0, help="utterance length for streaming (default 60)")
    ap.add_argument("--oneshot-seconds", type=float, default=10.0, help="length for the one-shot decode")
    ap.add_argument("--strides", default="1,4,16", help="streaming chunk sizes in frames")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch default)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--windowed", action="store_true", help="also time s2.cpp's windowed schedule")
    ap.add_argument("--ab", action="store_true", help="fast paths on vs off, alternating (see above)")
    ap.add_argument("--ab-transconv", action="store_true",
                    help="polyphase transposed convs on vs oneDNN's, alternating (see above)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    t0 = time.perf_counter()
    codec = Codec.from_gguf(args.model, device=args.device)
    load_s = time.perf_counter() - t0
    spf_s = codec.samples_per_frame / codec.sample_rate
    frames_long = int(round(args.seconds / spf_s))
    frames_one = int(round(args.oneshot_seconds / spf_s))
    codes = random_codes(codec, max(frames_long, frames_one))

    res = {"model": args.model, "device": args.device, "threads": torch.get_num_threads(),
           "load_s": load_s, "latent_dim": codec.cfg.latent_dim}
    say = (lambda *a: None) if args.json else (lambda *a: print(*a, flush=True))
    say(f"model {args.model}  device {args.device}  threads {res['threads']}  load {load_s:.2f} s  "
        f"MKL_CBWR={os.environ.get('MKL_CBWR', '')}")
    one = bench_one_shot(codec, codes[:, :frames_one], args.repeats)
    o = res["one_shot"] = {"frames": frames_one, "s": one, "ms_per_audio_s": one / (frames_one * spf_s) * 1e3,
                           "rtf": one / (frames_one * spf_s)}
    say(f"one-shot decode  {o['frames']} frames: {o['ms_per_audio_s']:.1f} ms per audio second (RTF {o['rtf']:.3f})")
    if args.windowed:
        t0 = time.perf_counter()
        codec.decode_windowed(codes[:, :frames_long])
        w = time.perf_counter() - t0
        res["s2cpp_windowed"] = {"frames": frames_long, "s": w, "ms_per_audio_s": w / (frames_long * spf_s) * 1e3}
        say(f"s2.cpp windowed  {frames_long} frames: {res['s2cpp_windowed']['ms_per_audio_s']:.1f} ms per audio second")
    say(f"streaming over {frames_long} frames ({frames_long * spf_s:.0f} s):")
    say("  stride  chunks  ms/audio-s  chunk-ms(start)  chunk-ms(end)  end/start")
    res["stream"] = []
    for stride in args.strides.split(","):
        s = bench_stream(codec, codes[:, :frames_long], int(stride))
        res["stream"].append(s)
        say(f"  {s['stride']:6d}  {s['chunks']:6d}  {s['ms_per_audio_s']:10.1f}  {s['chunk_ms_start']:15.2f}"
            f"  {s['chunk_ms_end']:13.2f}  {s['end_over_start']:9.2f}")
    if args.ab:
        ab = res["ab"] = bench_ab(codec, codes[:, :frames_long], int(args.strides.split(",")[0]), args.repeats)
        say(f"A/B at stride {ab['stride']} (load average {ab['loadavg_min']:.1f}-{ab['loadavg_max']:.1f}), "
            "s per audio second min/median/max:")
        for name in ("off", "on"):
            v = ab[name]
            say(f"  fast paths {name:3s}  {v['s_per_audio_s_min']:.3f} / {v['median']:.3f} / {v['max']:.3f}")
        say(f"  SNR on vs off: {ab['snr_on_vs_off_db']:.1f} dB")
    if args.ab_transconv:
        ab = res["ab_transconv"] = bench_ab(codec, codes[:, :frames_long], int(args.strides.split(",")[0]),
                                            args.repeats, ("POLYPHASE_TRANSCONV",))
        say(f"A/B transposed convs at stride {ab['stride']} (load average {ab['loadavg_min']:.1f}-"
            f"{ab['loadavg_max']:.1f}), s per audio second min/median/max:")
        for name, what in (("off", "oneDNN"), ("on", "polyphase")):
            v = ab[name]
            say(f"  {what:9s}  {v['s_per_audio_s_min']:.3f} / {v['median']:.3f} / {v['max']:.3f}")
        say(f"  SNR polyphase vs oneDNN: {ab['snr_on_vs_off_db']:.1f} dB")
    if args.json:
        print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
