"""The voice prefix cache: takes with it are sample-identical to takes without it (alone,
batched, quantized kernels), its memory stays under its budget, and voices or settings that
change the numbers never share an entry."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import threading

import numpy as np
import pytest
import torch

from s2studio.engine.model.loader import load_dual_ar
from s2studio.engine.model.prefix_cache import PrefixCache, prefill_prompt
from s2studio.engine.params import GenerationParams
from s2studio.engine.pipeline import EngineSettings, Pipeline, Segmentation, SynthesisRequest
from s2studio.engine.text.prompt import build_prompt, build_prompt_and_prefix
from s2studio.engine.text.tokenizer import load_tokenizer
from s2studio.errors import InputError

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden"
CLONE = GOLDEN / "clone_f32_qknorm"
TOKENIZER = GOLDEN / "tts_f32" / "tokenizer.json"
REF_CODES = np.load(CLONE / "dumps" / "ref_codes.npy")
REF_TEXT = json.loads((CLONE / "inputs.json").read_text())["prompt_text"]
WIDE = ("--dim", "256", "--heads", "8", "--kv-heads", "2", "--ffn", "512", "--qk-norm", "on",
        "--head-dim", "32", "--fast-dim", "256", "--fast-heads", "4", "--fast-kv-heads", "2",
        "--fast-head-dim", "64", "--fast-ffn", "512", "--layers", "2", "--fast-layers", "2")
SEMANTIC_BEGIN = 1000  # any id: the prefix's layout does not depend on it
TEXT = "Good evening. And welcome to the studio! One more sentence, then we stop."


def pipeline(model_path, voice_cache_mb: int, **kw) -> Pipeline:
    return Pipeline(EngineSettings(str(model_path), tokenizer_path=str(TOKENIZER), codec_mode="cpu", threads=1,
                                   voice_cache_mb=voice_cache_mb, **kw))


def request(seed: int, codes=REF_CODES, text: str = TEXT, **kw) -> SynthesisRequest:
    gen = GenerationParams(max_new_tokens=8, min_tokens_before_end=8, temperature=0.9, seed=seed)
    return SynthesisRequest(text, generation=gen, reference_codes=codes, reference_text=REF_TEXT,
                            segmentation=Segmentation(enabled=True), stream_stride=3, **kw)


def assert_same_take(got, want, what: str) -> None:
    np.testing.assert_array_equal(got.codes, want.codes, err_msg=what)
    np.testing.assert_array_equal(got.audio, want.audio, err_msg=what)
    assert [s.seed for s in got.segments] == [s.seed for s in want.segments]


@pytest.fixture(scope="module")
def q8_model(make_tiny_model):
    return make_tiny_model("--seed", "5", *WIDE, quant="q8_0")[0]


@pytest.fixture(scope="module", params=["f32", "q8_0"])
def model_path(request, q8_model):
    """The golden float32 model (float32 GEMMs) and a Q8_0 one (a short suffix goes to the
    integer GEMV kernels, a long prefix to dequantize + GEMM)."""
    return CLONE / "model.gguf" if request.param == "f32" else q8_model


# ---- the prompt's voice prefix --------------------------------------------------------------

def test_the_voice_prefix_is_the_system_turn_and_the_same_for_every_text():
    tok = load_tokenizer(TOKENIZER, mode="s2cpp")
    a, pa = build_prompt_and_prefix(tok, "One.", semantic_begin_id=SEMANTIC_BEGIN, ref_codes=REF_CODES,
                                    ref_text=REF_TEXT)
    b, pb = build_prompt_and_prefix(tok, "A longer second text.", semantic_begin_id=SEMANTIC_BEGIN,
                                    ref_codes=REF_CODES, ref_text=REF_TEXT)
    assert pa == pb and pa > REF_CODES.shape[1]
    np.testing.assert_array_equal(a[:, :pa], b[:, :pb])
    assert a[0, pa - 2] == tok.im_end_id  # the system turn's end...
    assert a[0, pa:pa + 3].tolist() == tok.encode("<|im_start|>user")[:3]  # ...then the user turn
    np.testing.assert_array_equal(a, build_prompt(tok, "One.", semantic_begin_id=SEMANTIC_BEGIN,
                                                  ref_codes=REF_CODES, ref_text=REF_TEXT))
    _, none = build_prompt_and_prefix(tok, "One.", semantic_begin_id=SEMANTIC_BEGIN)
    assert none == 0  # no voice, no prefix to keep


# ---- sample-identical with and without the cache ----------------------------------------------

def test_takes_with_the_cache_equal_takes_without_it(model_path):
    on, off = pipeline(model_path, 64), pipeline(model_path, 0)
    first = on.synthesize(request(seed=7)).run_to_end()
    stats = on.prefix_cache_stats()
    # Three sentences: the first computes the voice's prefix, the next two find it.
    assert len(first.segments) == 3 and stats.entries == 1 and stats.misses == 1 and stats.hits == 2
    assert 0 < stats.bytes <= stats.budget_bytes == 64 << 20
    again = on.synthesize(request(seed=8)).run_to_end()  # a later take: warm from its first sentence
    assert on.prefix_cache_stats().hits == 5
    assert_same_take(first, off.synthesize(request(seed=7)).run_to_end(), "first take")
    assert_same_take(again, off.synthesize(request(seed=8)).run_to_end(), "warm take")
    assert off.prefix_cache_stats().entries == 0 and off.prefix_cache_stats().hits == 0
    assert on.model_info().prefix_cache == on.prefix_cache_stats()


def test_batched_takes_with_the_cache_equal_takes_alone_without_it(model_path):
    """The server's path: concurrent jobs through the FrameBatcher share the cache."""
    on, off = pipeline(model_path, 64), pipeline(model_path, 0)
    requests = [request(seed=21), request(seed=22, text="Short one."), request(seed=23)]
    want = [off.synthesize(r).run_to_end() for r in requests]
    jobs = [on.synthesize(r, batched=True) for r in requests]
    results: list = [None] * len(jobs)

    def run(i):
        results[i] = jobs[i].run_to_end()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert on._batcher.largest_batch >= 2
    for i in range(len(jobs)):
        assert_same_take(results[i], want[i], f"request {i}")
    stats = on.prefix_cache_stats()
    assert stats.entries == 1 and stats.misses == 1 and stats.hits == 6  # 7 sentences, one voice


def test_the_static_steps_use_the_cache_too():
    """cuda_graphs=eager runs the static decoder (on the CPU, without graphs): its prefill goes
    through the same two calls."""
    on, off = pipeline(CLONE / "model.gguf", 64, cuda_graphs="eager"), pipeline(CLONE / "model.gguf", 0)
    assert_same_take(on.synthesize(request(seed=3)).run_to_end(), off.synthesize(request(seed=3)).run_to_end(),
                     "static steps")
    assert on.prefix_cache_stats().hits == 2


# ---- voices and settings never share an entry ------------------------------------------------

def test_different_voices_do_not_collide():
    on, off = pipeline(CLONE / "model.gguf", 64), pipeline(CLONE / "model.gguf", 0)
    other = (REF_CODES + 1) % 64  # another voice: same transcript and length, other codes
    a = on.synthesize(request(seed=5)).run_to_end()
    b = on.synthesize(request(seed=5, codes=other)).run_to_end()
    assert on.prefix_cache_stats().entries == 2
    assert not np.array_equal(a.codes, b.codes)
    assert_same_take(b, off.synthesize(request(seed=5, codes=other)).run_to_end(), "voice B after voice A")


def test_settings_that_change_the_numbers_change_the_key():
    model = load_dual_ar(CLONE / "model.gguf")[0]
    tokens = torch.from_numpy(np.load(CLONE / "dumps" / "prompt_tokens.npy").astype(np.int64))
    cache = PrefixCache(64 << 20)
    key = cache.key(model, tokens[:, :40])
    assert key == cache.key(model, tokens[:, :40].clone())
    assert key != cache.key(model, tokens[:, :41])  # another prefix
    changed = tokens[:, :40].clone()
    changed[3, 20] += 1  # one code of the reference
    assert key != cache.key(model, changed)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1 if threads != 1 else 2)  # the GEMM's blocking
        assert key != cache.key(model, tokens[:, :40])
    finally:
        torch.set_num_threads(threads)
    model.kv_round_f16 = False
    assert key != cache.key(model, tokens[:, :40])
    model.kv_round_f16 = True
    # Another model object: the old entries are dropped (never matched against the new model).
    kv = model.make_cache(100)
    prefill_prompt(model, tokens[:, :60], 40, kv, cache)
    assert cache.stats().entries == 1
    cache.key(load_dual_ar(CLONE / "model.gguf")[0], tokens[:, :40])
    assert cache.stats().entries == 0 and cache.stats().bytes == 0


# ---- bounded memory ----------------------------------------------------------------------------

def test_eviction_keeps_the_cache_under_its_budget():
    model = load_dual_ar(CLONE / "model.gguf")[0]
    tokens = torch.from_numpy(np.load(CLONE / "dumps" / "prompt_tokens.npy").astype(np.int64))
    n = 30
    probe = PrefixCache(1 << 30)
    prefill_prompt(model, tokens[:, :n + 5], n, model.make_cache(64), probe)
    one = probe.stats().bytes  # one entry of n positions
    assert one == n * sum(2 * t.shape[0] * t.shape[2] * 2 for t in model.make_cache(1).k)  # float16

    cache = PrefixCache(2 * one + one // 2)  # room for two entries

    def voice(i: int) -> torch.Tensor:
        t = tokens[:, :n + 5].clone()
        t[1:, 10] = i  # another voice's codes
        return t

    hidden = {}
    for i in (1, 2, 3):
        hidden[i] = prefill_prompt(model, voice(i), n, model.make_cache(64), cache)
        assert cache.stats().bytes <= cache.budget_bytes
    s = cache.stats()
    assert s.entries == 2 and s.misses == 3 and s.bytes == 2 * one
    # Voice 1 was the least recently used: gone. 3 is kept, and a hit gives what it gave.
    assert torch.equal(prefill_prompt(model, voice(3), n, model.make_cache(64), cache), hidden[3])
    assert cache.stats().hits == 1
    prefill_prompt(model, voice(1), n, model.make_cache(64), cache)
    assert cache.stats().misses == 4  # recomputed...
    assert cache.stats().entries == 2  # ...and 2, now the oldest, made room for it
    prefill_prompt(model, voice(3), n, model.make_cache(64), cache)
    assert cache.stats().hits == 2

    cache.set_budget(one)  # a smaller budget drops what no longer fits, oldest first
    assert cache.stats().entries == 1 and cache.stats().bytes == one
    tiny = PrefixCache(one - 1)  # an entry larger than the whole budget is never kept
    prefill_prompt(model, voice(1), n, model.make_cache(64), tiny)
    assert tiny.stats().entries == 0 and tiny.stats().bytes == 0


def test_the_budget_is_a_setting_with_a_range():
    with pytest.raises(InputError, match="voice_cache_mb must be in 0..65536"):
        pipeline(CLONE / "model.gguf", 65_537).load()
    p = pipeline(CLONE / "model.gguf", 16)
    p.synthesize(request(seed=1)).run_to_end()
    assert p.prefix_cache_stats().entries == 1
    p.configure(dataclasses.replace(p.settings, voice_cache_mb=0))  # off: emptied, no reload
    assert p.prefix_cache_stats().entries == 0 and p.prefix_cache_stats().budget_bytes == 0
    assert p.is_loaded


# ---- on a real CUDA GPU (skipped elsewhere; run by benchmarks/gpu_check.sh on a lent GPU) -----
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("cuda_graphs", ["off", "on"])
def test_the_cache_is_sample_identical_on_cuda(cuda_graphs):
    """The entries live on the GPU beside the layers' caches; alone (dynamic steps or CUDA
    graphs) and batched, a take is the same with the cache on and off."""
    on = pipeline(CLONE / "model.gguf", 64, device="cuda", cuda_graphs=cuda_graphs)
    off = pipeline(CLONE / "model.gguf", 0, device="cuda", cuda_graphs=cuda_graphs)
    for seed in (31, 32):
        assert_same_take(on.synthesize(request(seed=seed)).run_to_end(),
                         off.synthesize(request(seed=seed)).run_to_end(), f"alone, seed {seed}")
    assert on.prefix_cache_stats().hits == 5
    batched = [on.synthesize(request(seed=s), batched=True) for s in (41, 42)]
    results: list = [None, None]
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, batched[i].run_to_end())) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    for i, s in enumerate((41, 42)):
        assert_same_take(results[i], off.synthesize(request(seed=s)).run_to_end(), f"batched, seed {s}")
