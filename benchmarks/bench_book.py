#!/usr/bin/env python3
"""A book chapter's throughput at several ``--parallel`` values, and a big book's memory.

    python benchmarks/bench_book.py --model MODEL.gguf [--parallel 1,2,4,8] [--sentences 24]
        [--frames 64] [--rounds 1]
    python benchmarks/bench_book.py --memory-chars 500000

Throughput: one chapter of ``--sentences`` distinct sentences is rendered by ``BookRenderer``
(the code ``s2studio render`` runs: one take per sentence, N in flight through the engine's
batched decoding) into a fresh book project for each N; every sentence makes exactly
``--frames`` frames (the model may not end early), so each N renders the same audio. Reported
per N: audio seconds per wall second, and its ratio to N=1 ("x 1"). The model is loaded once,
before the first timing; rounds interleave the Ns (1,2,4,8,1,2,...) so a shared machine slows
them alike. Compare ratios within one run, never absolute numbers across machines.

Memory (``--memory-chars``): a text book of that many characters is imported, planned
(every sentence's key) and written as a book project with a render state naming every
sentence, without audio; reported: the process's peak RSS growth and Python's own peak
allocation (tracemalloc). Audio is never all in memory: one sentence per render thread, one
chapter while mastering.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# s2studio first: it sets OMP_WAIT_POLICY=PASSIVE before torch loads (tests/test_benchmarks.py).
from s2studio.book import BookProject, BookRenderer, ImportedBook, ImportedChapter, Manuscript  # noqa: E402
from s2studio.engine.params import GenerationParams  # noqa: E402

WORDS = ("river stone window lantern morning garden silver harbour quiet letter orchard candle meadow "
         "thunder velvet compass journey winter").split()


def sentence(i: int) -> str:
    w = [WORDS[(i * 7 + k * 5) % len(WORDS)] for k in range(6)]
    return f"The {w[0]} and the {w[1]} met a {w[2]} by the {w[3]}, {i} times."


def chapter_project(folder: pathlib.Path, sentences: int, frames: int) -> BookProject:
    paragraphs = [" ".join(sentence(i) for i in range(p, min(p + 4, sentences))) for p in range(0, sentences, 4)]
    m = Manuscript.from_import(ImportedBook("Bench", chapters=[ImportedChapter("One", paragraphs)]), seed=1)
    m.generation = GenerationParams(max_new_tokens=frames, min_tokens_before_end=frames, seed=1)
    return BookProject.create(folder, m)


def peak_rss_mb() -> float:
    try:
        for line in pathlib.Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mb() -> float:
    try:
        for line in pathlib.Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def throughput(args) -> dict:
    from s2studio.engine.pipeline import EngineSettings, Pipeline

    pipeline = Pipeline(EngineSettings(args.model, codec_mode="cpu" if args.codec_cpu else "auto", device=args.device))
    t = time.perf_counter()
    pipeline.load()
    load_s = time.perf_counter() - t
    ns = [int(n) for n in args.parallel.split(",")]
    results: dict[int, list[float]] = {n: [] for n in ns}
    audio_s: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for n in ns:
                project = chapter_project(pathlib.Path(tmp) / f"r{r}-n{n}", args.sentences, args.frames)
                summary = BookRenderer(pipeline, project, parallel=n).run()
                if summary.failed:
                    raise SystemExit(f"{summary.failed} sentence(s) failed: {summary.failures[0][1]}")
                results[n].append(summary.audio_s / summary.elapsed_s)
                audio_s[n] = summary.audio_s
                print(f"round {r + 1} parallel {n}: {summary.audio_s:.1f} s of audio in {summary.elapsed_s:.1f} s",
                      file=sys.stderr, flush=True)
    base = statistics.median(results[ns[0]])
    print(f"model {pathlib.Path(args.model).name}, {args.sentences} sentences x {args.frames} frames, loaded in "
          f"{load_s:.1f} s, {args.rounds} round(s)")
    print(f"{'parallel':>8} {'audio s / wall s':>17} {'x ' + str(ns[0]):>6}")
    out = {"model": pathlib.Path(args.model).name, "sentences": args.sentences, "frames": args.frames, "rows": []}
    for n in ns:
        med = statistics.median(results[n])
        print(f"{n:>8} {med:>17.3f} {med / base:>6.2f}")
        out["rows"].append({"parallel": n, "audio_per_wall": med, "ratio": med / base, "audio_s": audio_s[n]})
    return out


def memory(args) -> dict:
    import tracemalloc

    from s2studio.book import import_book

    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "big.txt"
        parts, size, chapter, i = [], 0, 0, 0
        while size < args.memory_chars:
            if i % 400 == 0:
                chapter += 1
                parts.append(f"\n\nChapter {chapter}\n\n")
            text = " ".join(sentence(i + k) for k in range(4)) + "\n\n"
            parts.append(text)
            size += len(text)
            i += 4
        path.write_text("".join(parts), encoding="utf-8")
        rss_before, peak_before = current_rss_mb(), peak_rss_mb()
        tracemalloc.start()
        t = time.perf_counter()
        imported = import_book(path)
        manuscript = Manuscript.from_import(imported, seed=1)
        project = BookProject.create(pathlib.Path(tmp) / "project", manuscript)
        jobs = manuscript.jobs(None, "bench")
        for job in jobs:  # a state naming every sentence, as after a full render (no audio)
            project._state[job.key] = {"samples": 1, "rate": 44100, "stop": "end"}
        project._write_state()
        reopened = BookProject.open(project.folder)
        elapsed = time.perf_counter() - t
        _, py_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        out = {"chars": size, "chapters": len(reopened.manuscript.chapters), "sentences": len(jobs),
               "seconds": elapsed, "python_peak_mb": py_peak / 2**20,
               "rss_peak_growth_mb": max(0.0, peak_rss_mb() - max(peak_before, rss_before)),
               "book_json_mb": (pathlib.Path(project.folder) / "book.json").stat().st_size / 2**20,
               "state_mb": (pathlib.Path(project.folder) / "render-state.json").stat().st_size / 2**20}
    print(f"{out['chars']} characters, {out['chapters']} chapters, {out['sentences']} sentences: imported, planned and "
          f"saved in {elapsed:.1f} s; Python peak {out['python_peak_mb']:.0f} MB, RSS peak growth "
          f"{out['rss_peak_growth_mb']:.0f} MB; book.json {out['book_json_mb']:.1f} MB, render state "
          f"{out['state_mb']:.1f} MB")
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="S2 Pro GGUF (a tokenizer.json beside it)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--codec-cpu", action="store_true", help="decode audio on the CPU (no codec benchmark)")
    p.add_argument("--parallel", default="1,2,4,8", help="comma-separated N (default 1,2,4,8)")
    p.add_argument("--sentences", type=int, default=24)
    p.add_argument("--frames", type=int, default=64, help="frames per sentence (~3 s at 21.5 frames/s)")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--memory-chars", type=int, default=0, help="measure a book of this many characters instead")
    p.add_argument("--json", action="store_true", help="also print the results as one JSON line")
    args = p.parse_args()
    if args.memory_chars:
        out = memory(args)
    elif args.model:
        out = throughput(args)
    else:
        p.error("give --model (throughput) or --memory-chars (memory)")
    if args.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
