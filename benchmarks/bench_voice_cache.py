#!/usr/bin/env python3
"""Time takes with a saved voice, with the voice prefix cache off, cold and warm.

    python benchmarks/bench_voice_cache.py --model MODEL.gguf --tokenizer tokenizer.json
    python benchmarks/bench_voice_cache.py --make tiny      # seconds; checks the script runs
    python benchmarks/bench_voice_cache.py --model M --tokenizer T --prefill-only   # a busy machine

A cloned voice's prompt starts with its reference (transcript + ~215 frames of codes for 10 s
of audio): the voice prefix, the same for every sentence (engine.model.prefix_cache). For a
1-, 3- and 10-sentence take it reports the time to the first audio chunk, the whole take and
the prefill (summed over the sentences), each with the cache off, cold (emptied before the
take: the first sentence computes the prefix, the others find it) and warm (the voice's prefix
already kept, as for every take after a voice's first). The runs are interleaved and repeated
(``--repeat``); the medians are printed, then the ratios that matter: the prefill of a
3-sentence take over a 1-sentence take, and cold/warm over off. Every take is seeded, and the
audio with the cache must be sample-identical to the audio without it: checked, and printed.

The voice is random codes of ``--voice-seconds`` (the model's weights are random too on a
generated file; what is timed does not depend on the values). ``--frames`` per sentence is
kept small so the prefill's share is visible; the frames cost the same with and without the
cache. Ratios within one run are what to compare, never absolute times (a shared machine).

``--prefill-only`` times just the prompt evaluation, piece by piece, where whole takes would
take too long (a loaded machine): the voice prefix computed once, each sentence's rest, and a
copy out of the cache, for a 3-sentence take; the takes' prefill ratios follow from them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import s2studio  # noqa: E402,F401  (before torch: its OpenMP pool sleeps, as in the app)
import numpy as np  # noqa: E402

from s2studio.engine.params import GenerationParams  # noqa: E402
from s2studio.engine.pipeline import EngineSettings, Pipeline, Segmentation, SynthesisRequest  # noqa: E402

SENTENCES = [
    "The morning light came slowly over the hills behind the old stone house.",
    "She opened the window and listened to the birds in the garden below.",
    "Somewhere in the distance a dog was barking at the passing cars.",
    "Her coffee had gone cold while she read the letter for the third time.",
    "It was from her brother, who had not written in more than ten years.",
    "He said that he was coming home at the end of the summer.",
    "She did not know whether to be happy or afraid of what that meant.",
    "The clock on the wall ticked loudly in the quiet kitchen.",
    "At last she folded the letter and put it back in its envelope.",
    "Then she picked up the phone and called her mother.",
]
TRANSCRIPT = ("Good afternoon, and thank you for listening to this short recording, which I made so that "
              "you can hear how my voice sounds when I read aloud at an ordinary pace.")


def make_tiny(cache_dir: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    cache_dir.mkdir(parents=True, exist_ok=True)
    out = cache_dir / "tiny.gguf"
    tok = ROOT / "tests" / "data" / "golden" / "tts_f32" / "tokenizer.json"
    if not out.exists():
        subprocess.run([sys.executable, str(ROOT / "tools" / "make_tiny_s2.py"), "--tokenizer", str(tok),
                        "--out", str(out), "--seed", "1"], check=True, stdout=subprocess.DEVNULL)
    return out, tok


def timed_take(pipeline: Pipeline, request: SynthesisRequest) -> dict:
    t0 = time.perf_counter()
    job = pipeline.synthesize(request)
    first = None
    for _ in job:
        if first is None:
            first = time.perf_counter() - t0
    r = job.result
    return {"first_s": first, "total_s": time.perf_counter() - t0, "prefill_s": r.timings.prefill_s,
            "frames": r.timings.frames, "audio": r.audio}


def prefill_pieces(pipeline: Pipeline, codes: np.ndarray, args) -> int:
    """The prompt of each of 3 sentences: its voice prefix (computed, once; then copied from
    the cache) and its rest, timed apart; a 1-, 3- and 10-sentence take's prefill follows."""
    import torch

    from s2studio.engine.model.prefix_cache import PrefixCache
    from s2studio.engine.pipeline import build_prompt_for

    model, tok = pipeline.model, pipeline.tokenizer
    prompts = [build_prompt_for(tok, model, s, codes, TRANSCRIPT) for s in SENTENCES[:3]]
    cache = PrefixCache(1 << 30)
    out = {"prefix_tokens": prompts[0][1], "rest_tokens": [p.shape[1] - n for p, n in prompts]}
    rest_s, copy_s = [], []
    for i, (prompt, n) in enumerate(prompts):
        tokens = torch.from_numpy(prompt.astype(np.int64))
        kv = model.make_cache(prompt.shape[1] + 8)
        key = cache.key(model, tokens[:, :n])
        t0 = time.perf_counter()
        if cache.restore(key, kv):
            copy_s.append(time.perf_counter() - t0)
        else:
            model.forward_slow(tokens[:, :n], cache=kv)
            out["prefix_s"] = time.perf_counter() - t0
            cache.store(key, kv)
        t0 = time.perf_counter()
        model.forward_slow(tokens[:, n:], cache=kv)
        rest_s.append(time.perf_counter() - t0)
        print(f"  sentence {i + 1}: prefix {n} tokens {'copied' if i else 'computed'} in "
              f"{(copy_s[-1] if i else out['prefix_s']):.3f} s, rest {prompt.shape[1] - n} tokens in "
              f"{rest_s[-1]:.2f} s", flush=True)
    p, r, c = out["prefix_s"], statistics.mean(rest_s), statistics.mean(copy_s)
    one_cold, one_warm = p + r, c + r
    three_cold, three_warm = p + 3 * r + 2 * c, 3 * (c + r)
    out.update(rest_s=rest_s, copy_s=copy_s, entry_bytes=cache.stats().bytes)
    print(f"\nvoice prefix {out['prefix_tokens']} tokens: {p:.2f} s to compute, {c * 1000:.1f} ms to copy "
          f"({cache.stats().bytes / 2**20:.1f} MB); a sentence's rest {r:.2f} s on average")
    print(f"prefill of a take, cache off: 1 sentence {p + r:.2f} s, 3 sentences {3 * (p + r):.2f} s (3.00x)")
    print(f"prefill of a take, cache cold (the voice's first take): 1 sentence {one_cold:.2f} s, 3 sentences "
          f"{three_cold:.2f} s ({three_cold / one_cold:.2f}x); 10 sentences {p + 10 * r + 9 * c:.2f} s against "
          f"{10 * (p + r):.2f} s off")
    print(f"prefill of a take, cache warm (later takes): 1 sentence {one_warm:.2f} s, 3 sentences "
          f"{three_warm:.2f} s; 3 sentences warm / 1 sentence off: {three_warm / (p + r):.2f}x")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model")
    ap.add_argument("--tokenizer")
    ap.add_argument("--make", choices=["tiny"], help="build a tiny model (seconds) and time it")
    ap.add_argument("--cache-dir", default=str(ROOT / "bench-models"))
    ap.add_argument("--frames", type=int, default=4, help="frames per sentence (default 4)")
    ap.add_argument("--voice-seconds", type=float, default=10.0)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps (the codec follows it)")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--sizes", default="1,3,10", help="sentences per take (default 1,3,10)")
    ap.add_argument("--json", help="write the medians here")
    ap.add_argument("--prefill-only", action="store_true", help="time the prompt's pieces only (see above)")
    args = ap.parse_args(argv)
    if args.make:
        model, tok = make_tiny(pathlib.Path(args.cache_dir))
    elif args.model:
        model, tok = pathlib.Path(args.model), args.tokenizer
    else:
        ap.error("give --model (and --tokenizer) or --make tiny")

    pipeline = Pipeline(EngineSettings(str(model), tokenizer_path=str(tok) if tok else None, device=args.device,
                                       codec_mode="cpu" if args.device == "cpu" else "follow",
                                       threads=args.threads))
    t0 = time.perf_counter()
    pipeline.load()
    print(f"loaded in {time.perf_counter() - t0:.1f} s; {pipeline.model_info().device}, threads {args.threads or 'all'}")
    cfg = pipeline.model.cfg
    ref_frames = max(1, round(args.voice_seconds * 44100 / 2048))
    codes = np.random.default_rng(0).integers(0, cfg.codebook_size, size=(cfg.num_codebooks, ref_frames),
                                              dtype=np.int32)
    settings = pipeline.settings

    if args.prefill_only:
        return prefill_pieces(pipeline, codes, args)

    def request(n: int) -> SynthesisRequest:
        gen = GenerationParams(max_new_tokens=args.frames, min_tokens_before_end=args.frames, seed=1234)
        return SynthesisRequest(" ".join(SENTENCES[:n]), generation=gen, reference_codes=codes,
                                reference_text=TRANSCRIPT, segmentation=Segmentation(enabled=True, pause_ms=0),
                                stream_stride=max(1, args.frames // 2))

    def run(mode: str, n: int) -> dict:
        if mode == "off":
            pipeline.configure(dataclasses.replace(settings, voice_cache_mb=0))
        else:
            pipeline.configure(settings)
            if mode == "cold":
                pipeline._prefix_cache.clear()  # the benchmark's own reach: a voice never seen
            else:  # warm: the voice's prefix is kept (by the take before, or this one-sentence take)
                if pipeline.prefix_cache_stats().entries == 0:
                    timed_take(pipeline, request(1))
        return timed_take(pipeline, request(n))

    timed_take(pipeline, request(1))  # warm-up: kernels, first allocations
    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict[tuple[str, int], list[dict]] = {}
    identical = True
    for rep in range(args.repeat):
        for n in sizes:
            audio_off = None
            for mode in ("off", "cold", "warm"):
                r = run(mode, n)
                results.setdefault((mode, n), []).append(r)
                if mode == "off":
                    audio_off = r["audio"]
                elif not np.array_equal(r["audio"], audio_off):
                    identical = False
                print(f"  rep {rep + 1} {n:2d} sentences, cache {mode:4s}: first audio {r['first_s']:6.2f} s, "
                      f"take {r['total_s']:6.2f} s, prefill {r['prefill_s']:6.2f} s", flush=True)

    def med(mode, n, key):
        return statistics.median(r[key] for r in results[(mode, n)])

    stats = pipeline.prefix_cache_stats()
    print(f"\nvoice: {ref_frames} frames ({args.voice_seconds:g} s); {args.frames} frames per sentence; "
          f"{stats.describe()}")
    print(f"{'sentences':>9} {'cache':>5} {'first audio s':>14} {'take s':>8} {'prefill s':>10}")
    table = {}
    for n in sizes:
        for mode in ("off", "cold", "warm"):
            row = {k: med(mode, n, k) for k in ("first_s", "total_s", "prefill_s")}
            table[f"{mode}/{n}"] = row
            print(f"{n:>9} {mode:>5} {row['first_s']:>14.2f} {row['total_s']:>8.2f} {row['prefill_s']:>10.2f}")
    if 1 in sizes and 3 in sizes:
        for mode in ("off", "cold", "warm"):
            print(f"prefill of 3 sentences / 1 sentence, cache {mode}: "
                  f"{med(mode, 3, 'prefill_s') / med(mode, 1, 'prefill_s'):.2f}x")
    for n in sizes:
        print(f"{n} sentences: take cold/off {med('cold', n, 'total_s') / med('off', n, 'total_s'):.2f}x, "
              f"warm/off {med('warm', n, 'total_s') / med('off', n, 'total_s'):.2f}x; first audio warm/off "
              f"{med('warm', n, 'first_s') / med('off', n, 'first_s'):.2f}x")
    print(f"audio with the cache identical to without: {'yes' if identical else 'NO'}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"medians": table, "identical": identical}, indent=1))
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
