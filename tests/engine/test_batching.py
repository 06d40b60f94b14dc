"""Takes decoded together in one batch give exactly the frames they give alone."""

from __future__ import annotations

import pathlib
import threading

import numpy as np
import pytest
import torch

from s2studio.engine.batching import MAX_BATCH, FrameBatcher
from s2studio.engine.kernels import intdot
from s2studio.engine.kernels.qmatrix import QuantMatrix
from s2studio.engine.model.generate import GenerationParams, GenerationStats, generate_codes
from s2studio.engine.model.loader import load_dual_ar
from s2studio.engine.model.transformer import linear, linear_grouped
from s2studio.errors import InputError

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden"
IM_END = 514  # tiny tokenizer's <|im_end|>
TTS_PROMPT = np.load(GOLDEN / "tts_f32" / "dumps" / "prompt_tokens.npy")
CLONE_PROMPT = np.load(GOLDEN / "clone_f32_qknorm" / "dumps" / "prompt_tokens.npy")
WIDE = ("--dim", "256", "--heads", "8", "--kv-heads", "2", "--ffn", "512", "--qk-norm", "on",
        "--head-dim", "32", "--fast-dim", "256", "--fast-heads", "4", "--fast-kv-heads", "2",
        "--fast-head-dim", "64", "--fast-ffn", "512", "--layers", "2", "--fast-layers", "2")

_MODELS: dict = {}


def golden_model(case: str):
    if case not in _MODELS:
        _MODELS[case] = load_dual_ar(GOLDEN / case / "model.gguf")[0]
    return _MODELS[case]


def params(n: int, seed: int, temperature: float = 0.8, **kw) -> GenerationParams:
    return GenerationParams(max_new_tokens=n, min_tokens_before_end=n, temperature=temperature, seed=seed, **kw)


def takes_for(prompt: np.ndarray) -> list[tuple[np.ndarray, GenerationParams]]:
    """Four takes of different prompt lengths, budgets and settings (sampled, RAS on; greedy;
    a tight top-k; a take that may end by itself)."""
    short = prompt[:, : prompt.shape[1] - 7]
    return [
        (prompt, params(14, seed=1)),
        (short, params(9, seed=2, temperature=0.0, ras=False)),
        (prompt, params(11, seed=3, temperature=1.1, top_k=5, top_p=0.95)),
        (short, GenerationParams(max_new_tokens=12, temperature=0.9, seed=4)),
    ]


def alone(model, takes) -> list[np.ndarray]:
    return [generate_codes(model, p, gp, im_end_id=IM_END) for p, gp in takes]


def batched(model, takes, starts: list[int], cancel_at: dict[int, int] | None = None):
    """Run ``takes`` through one FrameBatcher, take i starting once take 0 has produced
    ``starts[i]`` frames (so they join a running batch at different steps). ``cancel_at``:
    {take: frames after which it is cancelled}. Returns (codes per take, stats, batcher)."""
    batcher = FrameBatcher(model, IM_END)
    cancel_at = cancel_at or {}
    out: list = [None] * len(takes)
    stats = [GenerationStats() for _ in takes]
    cancels = [threading.Event() for _ in takes]
    started = {i: threading.Event() for i in range(len(takes))}
    errors: list[BaseException] = []

    def consume(i: int) -> None:
        try:
            frames = []
            for frame in batcher.frames(takes[i][0], takes[i][1], cancel=cancels[i], stats=stats[i]):
                frames.append(frame.codes)
                if i == 0:
                    for k, s in enumerate(starts):
                        if s == len(frames):
                            start(k)
                if cancel_at.get(i) == len(frames):
                    cancels[i].set()
            out[i] = np.stack(frames, axis=1) if frames else np.zeros((10, 0), np.int32)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            errors.append(exc)
        finally:
            if i == 0:  # take 0 ended early: start whoever still waits for it
                for k in range(len(takes)):
                    start(k)

    threads: dict[int, threading.Thread] = {}
    lock = threading.Lock()

    def start(k: int) -> None:
        with lock:
            if started[k].is_set():
                return
            started[k].set()
            threads[k] = threading.Thread(target=consume, args=(k,), daemon=True)
            threads[k].start()

    for k, s in enumerate(starts):
        if s == 0:
            start(k)
    for _ in range(len(takes) + 1):  # threads start threads: join until all are known and done
        for t in list(threads.values()):
            t.join(300)
    assert not errors, errors
    return out, stats, batcher


@pytest.mark.parametrize("case, prompt", [("tts_f32", TTS_PROMPT), ("clone_f32_qknorm", CLONE_PROMPT)])
def test_batched_takes_equal_alone(case, prompt):
    model = golden_model(case)
    takes = takes_for(prompt)
    want = alone(model, takes)
    got, stats, batcher = batched(model, takes, starts=[0, 0, 3, 6])
    assert batcher.largest_batch >= 3  # they really shared steps
    for i in range(len(takes)):
        np.testing.assert_array_equal(got[i], want[i], err_msg=f"take {i}")
        assert stats[i].frames == want[i].shape[1]


@pytest.mark.parametrize("quant", ["q8_0", "q4_k"])
def test_batched_equals_alone_on_quantized_kernels(make_tiny_model, quant):
    """The GEMV kernels (Q8_0 and Q4_K on the C integer kernels where they are built, else
    numba) get all the batch's rows in one call (each weight read once)."""
    q_path, _ = make_tiny_model("--seed", "5", *WIDE, quant=quant)
    model = load_dual_ar(q_path)[0]
    w = model.w.slow.layers[0].wqkv
    assert isinstance(w, QuantMatrix) and w.int_dot == intdot.available()  # the C path, where built
    takes = takes_for(TTS_PROMPT)
    want = alone(model, takes)
    got, _, batcher = batched(model, takes, starts=[0, 2, 2, 5])
    assert batcher.largest_batch >= 3
    for i in range(len(takes)):
        np.testing.assert_array_equal(got[i], want[i], err_msg=f"take {i}")


@pytest.mark.parametrize("quant", ["q8_0", "q4_k", "q6_k"])
def test_quantized_gemv_rows_are_independent(make_tiny_model, quant):
    """linear_grouped's premise: a kernel row computed among B rows equals it computed alone."""
    q_path, _ = make_tiny_model("--seed", "5", *WIDE, quant=quant)
    w = load_dual_ar(q_path)[0].w.slow.layers[0].w1
    assert w.int_dot == intdot.available()
    x = torch.randn(16, w.shape[1], generator=torch.Generator().manual_seed(0))
    for b in (2, 3, 8, 16):
        rows = torch.cat([linear(x[i:i + 1], w) for i in range(b)])
        assert torch.equal(linear_grouped(x[:b], w, [1] * b), rows)


def test_float_weights_are_applied_per_request():
    """torch's float32 GEMM is not row-independent, so each request's rows get their own call."""
    w = golden_model("tts_f32").w.slow.layers[0].wqkv
    assert isinstance(w, torch.Tensor) and w.dtype == torch.float32
    x = torch.randn(5, w.shape[1], generator=torch.Generator().manual_seed(1))
    want = torch.cat([linear(x[0:2], w), linear(x[2:3], w), linear(x[3:5], w)])
    assert torch.equal(linear_grouped(x, w, [2, 1, 2]), want)


def test_cancelling_one_take_leaves_the_others_unchanged():
    model = golden_model("tts_f32")
    takes = takes_for(TTS_PROMPT)
    want = alone(model, takes)
    got, stats, _ = batched(model, takes, starts=[0, 0, 1, 1], cancel_at={2: 4})
    assert stats[2].stop_reason == "cancelled"
    np.testing.assert_array_equal(got[2], want[2][:, :4])  # what it got before the cancel
    for i in (0, 1, 3):
        np.testing.assert_array_equal(got[i], want[i], err_msg=f"take {i}")


def test_consumer_that_stops_reading_leaves_the_batch():
    model = golden_model("tts_f32")
    batcher = FrameBatcher(model, IM_END)
    it = batcher.frames(TTS_PROMPT, params(50, seed=1))
    next(it)
    it.close()  # the consumer is gone (a client hung up mid-stream)
    want = generate_codes(model, TTS_PROMPT, params(6, seed=9), im_end_id=IM_END)
    got = np.stack([f.codes for f in batcher.frames(TTS_PROMPT, params(6, seed=9))], axis=1)
    np.testing.assert_array_equal(got, want)
    assert batcher.active == 0


def test_bad_take_raises_in_its_caller_and_the_batch_goes_on():
    model = golden_model("tts_f32")
    batcher = FrameBatcher(model, IM_END)
    with pytest.raises(InputError, match="rows"):
        next(batcher.frames(TTS_PROMPT[:5], params(4, seed=1)))
    with pytest.raises(InputError, match="context"):
        next(batcher.frames(TTS_PROMPT, params(model.cfg.context_length, seed=1)))
    got = np.stack([f.codes for f in batcher.frames(TTS_PROMPT, params(3, seed=1))], axis=1)
    np.testing.assert_array_equal(got, generate_codes(model, TTS_PROMPT, params(3, seed=1), im_end_id=IM_END))


def test_max_batch_range():
    with pytest.raises(ValueError):
        FrameBatcher(golden_model("tts_f32"), IM_END, max_batch=MAX_BATCH + 1)


# ---- the Pipeline: batched jobs on their own threads, as the server runs them ---------------

@pytest.fixture(scope="module")
def clone_pipeline():
    from s2studio.engine.pipeline import EngineSettings, Pipeline

    p = Pipeline(EngineSettings(str(GOLDEN / "clone_f32_qknorm" / "model.gguf"), codec_mode="cpu", threads=1))
    p.load()
    return p


def pipeline_requests():
    from s2studio.engine.pipeline import Segmentation, SynthesisRequest

    return [
        SynthesisRequest("Hello there, this is the first one.", generation=params(13, seed=11), stream_stride=3),
        SynthesisRequest("Short.", generation=params(7, seed=12, temperature=0.0, ras=False)),
        SynthesisRequest("Two sentences here. And the second one!", generation=params(5, seed=13),
                         segmentation=Segmentation(enabled=True), stream_stride=2),
    ]


def test_pipeline_batched_jobs_equal_alone(clone_pipeline):
    alone_results = [clone_pipeline.synthesize(r).run_to_end() for r in pipeline_requests()]
    jobs = [clone_pipeline.synthesize(r, batched=True) for r in pipeline_requests()]
    results: list = [None] * len(jobs)
    chunks: list = [[] for _ in jobs]

    def run(i):
        for c in jobs[i]:
            chunks[i].append(c)
        results[i] = jobs[i].result

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert clone_pipeline._batcher.largest_batch >= 2  # they shared steps
    for i, (got, want) in enumerate(zip(results, alone_results)):
        np.testing.assert_array_equal(got.codes, want.codes, err_msg=f"request {i}")
        np.testing.assert_array_equal(got.audio, want.audio, err_msg=f"request {i}")
        np.testing.assert_array_equal(np.concatenate([c.samples for c in chunks[i]]), want.audio)
        assert got.timings.frames == want.timings.frames and got.stop_reason == want.stop_reason


def test_pipeline_batched_job_cancel(clone_pipeline):
    from s2studio.engine.pipeline import SynthesisRequest

    job = clone_pipeline.synthesize(SynthesisRequest("Long one.", generation=params(200, seed=1), stream_stride=1),
                                    batched=True)
    got = 0
    for _ in job:
        got += 1
        if got == 3:
            job.cancel()
    r = job.result
    assert r.cancelled and r.codes.shape[1] == 3 and r.timings.frames == 3


@pytest.mark.parametrize("quant", ["q8_0", "q4_k"])
def test_eight_takes_with_a_voice_prefix_equal_alone(make_tiny_model, quant):
    """A full batch (MAX_BATCH takes, 2 rows each in the Fast-AR's first call: the kernels' 16
    rows), every take's prompt starting with the same voice prefix, copied out of the batcher's
    prefix cache: each take's frames are those it makes alone without any cache."""
    from s2studio.engine.model.prefix_cache import PrefixCache

    q_path, _ = make_tiny_model("--seed", "5", *WIDE, quant=quant)
    model = load_dual_ar(q_path)[0]
    prefix_len = int(np.flatnonzero(CLONE_PROMPT[0] == IM_END)[0]) + 2  # the system turn's end
    prompts = [CLONE_PROMPT[:, :CLONE_PROMPT.shape[1] - (i % 3)] for i in range(MAX_BATCH)]
    gps = [params(6 + i % 3, seed=60 + i, temperature=0.0 if i == 3 else 0.9) for i in range(MAX_BATCH)]
    want = [generate_codes(model, p, gp, im_end_id=IM_END, prefix_len=prefix_len) for p, gp in zip(prompts, gps)]
    cache = PrefixCache(64 << 20)
    batcher = FrameBatcher(model, IM_END, prefix_cache=cache)
    got: list = [None] * MAX_BATCH
    gate = threading.Barrier(MAX_BATCH)

    def consume(i: int) -> None:
        gate.wait()
        got[i] = np.stack([f.codes for f in batcher.frames(prompts[i], gps[i], prefix_len=prefix_len)], axis=1)

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(MAX_BATCH)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert batcher.largest_batch >= MAX_BATCH - 2  # (a take's prefill runs between steps)
    for i in range(MAX_BATCH):
        np.testing.assert_array_equal(got[i], want[i], err_msg=f"take {i}")
    s = cache.stats()
    assert s.entries == 1 and s.misses == 1 and s.hits == MAX_BATCH - 1


def test_side_jobs_run_on_the_driver_between_steps():
    """A take's CPU work handed to ``between_steps`` (the pipeline's codec chunks) runs on the
    driver thread under the model lock, so never during a step; its result and its exception
    come back to the caller; with no driver running it runs in the caller, under the lock."""
    model = golden_model("tts_f32")
    lock = threading.RLock()
    batcher = FrameBatcher(model, IM_END, model_lock=lock)
    seen: list = []

    def where():
        seen.append((threading.current_thread().name, lock._is_owned()))
        return len(seen)

    assert batcher.between_steps(where) == 1 and seen[-1] == (threading.current_thread().name, True)
    errors: list = []

    def consume(i: int) -> None:
        try:
            for n, _ in enumerate(batcher.frames(TTS_PROMPT, params(8, seed=i))):
                if i == 0 and n in (2, 5):
                    batcher.between_steps(where)
                    with pytest.raises(ZeroDivisionError):
                        batcher.between_steps(lambda: 1 / 0)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            errors.append(exc)

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    assert seen[1:] == [("s2studio-batch", True)] * 2
    assert batcher.side_jobs == 4
    assert batcher.wait_idle(30)


def test_pipeline_decodes_batched_audio_between_steps(clone_pipeline):
    """On the CPU the batched takes' codec chunks go through the batcher (the codec and the
    model share the cores); the audio is the take's own (test above: equal to alone)."""
    assert clone_pipeline._codec_shares_cores()
    before = clone_pipeline._batcher.side_jobs if clone_pipeline._batcher is not None else 0
    jobs = [clone_pipeline.synthesize(r, batched=True) for r in pipeline_requests()[:2]]
    threads = [threading.Thread(target=job.run_to_end) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert all(job.result is not None and not job.result.cancelled for job in jobs)
    assert clone_pipeline._batcher.side_jobs > before  # chunks decoded by the driver, between steps
