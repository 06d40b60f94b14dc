"""Memory that must stay linear in the prompt length (a long text once grew to 24 GB).

The prefill used to materialise every query × key attention score of the prompt at once
(H·T² floats, plus a T×T mask and its copies). These tests run the real tiny model; the memory
test runs in a subprocess so its peak resident size (VmHWM; ru_maxrss would start at the
parent's peak, inherited through fork and exec) is its own.
"""

from __future__ import annotations

import dataclasses
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import torch

from s2studio.engine.model import transformer
from s2studio.engine.model.loader import load_dual_ar
from s2studio.engine.model.transformer import KVCache, attend

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden"
ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_blocked_attention_computes_what_one_block_does():
    torch.manual_seed(0)
    h, hkv, hd, n_old, n = 4, 2, 16, 37, 50

    class Cfg:
        n_kv_head, head_dim = hkv, hd

    cache = KVCache(Cfg, n_old + n, [torch.device("cpu")])
    cache.store(0, 0, torch.randn(hkv, n_old, hd), torch.randn(hkv, n_old, hd))
    q, k, v = torch.randn(h, n, hd), torch.randn(hkv, n, hd), torch.randn(hkv, n, hd)
    for pos0, c in ((0, None), (n_old, cache)):
        whole = attend(q, k, v, c, 0, pos0, block=n)
        for block in (1, 7, 49):
            torch.testing.assert_close(attend(q, k, v, c, 0, pos0, block=block), whole, atol=1e-6, rtol=0)


@pytest.mark.parametrize("case", ["tts_f32", "clone_f32_qknorm"])
def test_blocked_prefill_keeps_golden_parity(case, monkeypatch):
    """s2.cpp prefills in one graph; with blocks of a few query rows we still match its dumps at
    the golden tolerance (the same one test_dual_ar_golden uses)."""
    monkeypatch.setattr(transformer, "ATTENTION_BLOCK_BYTES", 4 * 4 * 64 * 5)  # ~5 rows a block
    monkeypatch.setattr(transformer, "ATTENTION_MIN_BLOCK_ROWS", 1)
    monkeypatch.setattr(transformer, "FFN_BLOCK_ROWS", 7)
    m = load_dual_ar(GOLDEN / case / "model.gguf")[0]
    prompt = torch.from_numpy(np.load(GOLDEN / case / "dumps" / "prompt_tokens.npy").astype(np.int64))
    assert transformer.attention_query_block(m.cfg.slow.n_head, prompt.shape[1]) < prompt.shape[1] // 4
    m.new_cache(prompt.shape[1] + 1)
    layers: list[torch.Tensor] = []
    m.forward_slow(prompt, collect=layers)
    expected = np.load(GOLDEN / case / "dumps" / "slow_prefill_layer_out.npy")
    np.testing.assert_allclose(torch.stack(layers).numpy(), expected, atol=1e-4, rtol=0)


PREFILL_PEAK = r"""
import sys
import numpy as np, torch
from s2studio.engine.model.loader import load_dual_ar
m = load_dual_ar(sys.argv[1])[0]
n = int(sys.argv[2])
tokens = torch.zeros((m.cfg.num_codebooks + 1, n), dtype=torch.int64)
tokens[0] = torch.arange(n) % 500  # text ids of the tiny vocabulary
m.new_cache(n + 1)
m.forward_slow(tokens[:, :8])  # warm up: everything but the long prefill is allocated
m.cache.reset()
def peak_kib():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM:")).split()[1])
before = peak_kib()
m.forward_slow(tokens)
after = peak_kib()
print((after - before) // 1024)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads VmHWM from /proc")
def test_long_prefill_memory_is_linear_not_quadratic():
    """A 4000-position prefill on the tiny model (its whole context) needs a few MB of
    activations; the old T×T attention took ~4·4000²·4 bytes = 256 MB per copy (scores, masked
    scores, softmax: ~800 MB)."""
    r = subprocess.run([sys.executable, "-c", PREFILL_PEAK, str(GOLDEN / "tts_f32" / "model.gguf"), "4000"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    grew_mb = int(r.stdout.strip())
    assert grew_mb < 120, f"prefill of 4000 positions raised the peak RSS by {grew_mb} MB"


# -- the frame budget and the model's context ------------------------------------------------

from s2studio.engine.model.generate import generate_frames  # noqa: E402
from s2studio.engine.params import GenerationParams  # noqa: E402
from s2studio.engine.pipeline import EngineSettings, Pipeline, SynthesisRequest  # noqa: E402
from s2studio.errors import InputError  # noqa: E402

IM_END = 514  # tiny tokenizer's <|im_end|>


@pytest.fixture(scope="module")
def tiny():
    return load_dual_ar(GOLDEN / "tts_f32" / "model.gguf")[0]


def test_a_budget_past_the_context_is_refused_before_allocating(tiny):
    """max_new_tokens 2·10⁶ once reserved a 1.5 GB cache (10⁹: a C++ allocation error)."""
    prompt = np.load(GOLDEN / "tts_f32" / "dumps" / "prompt_tokens.npy")
    context = tiny.cfg.context_length
    tiny.release_cache()
    for n, message in ((context, rf"max_new_tokens {context} plus the prompt's {prompt.shape[1]} tokens exceed "
                                 rf"the model's context of {context} positions; use at most "
                                 rf"{context - prompt.shape[1]} frames"),
                       (2_000_000, r"max_new_tokens must be in 1\.\.32768"),
                       (10**9, r"max_new_tokens must be in 1\.\.32768")):
        with pytest.raises(InputError, match=message):
            next(generate_frames(tiny, prompt, GenerationParams(max_new_tokens=n, temperature=0), im_end_id=IM_END))
        assert tiny.cache is None
    frames = generate_frames(tiny, prompt, GenerationParams(max_new_tokens=context - prompt.shape[1],
                                                            temperature=0), im_end_id=IM_END)
    next(frames)
    frames.close()


def test_the_cache_grows_as_frames_come_not_up_front(tiny):
    prompt = np.load(GOLDEN / "tts_f32" / "dumps" / "prompt_tokens.npy")
    n_prompt = prompt.shape[1]
    params = GenerationParams(max_new_tokens=3000, temperature=0.8, min_tokens_before_end=3000, seed=1)
    frames = generate_frames(tiny, prompt, params, im_end_id=IM_END)
    next(frames)
    assert tiny.cache.capacity == n_prompt + 256 and tiny.cache.limit == n_prompt + 3001
    for _ in range(300):
        next(frames)
    assert n_prompt + 300 < tiny.cache.capacity < n_prompt + 3001  # grew once, by half at least
    frames.close()


def test_growing_the_cache_keeps_the_numbers(tiny):
    """A cache that grows mid-take computes what a preallocated one does."""
    prompt = torch.from_numpy(np.load(GOLDEN / "tts_f32" / "dumps" / "prompt_tokens.npy").astype(np.int64))
    column = prompt[:, -1:]
    outs = []
    for start in (None, prompt.shape[1] + 1):
        tiny.new_cache(prompt.shape[1] + 40, start=start)
        tiny.forward_slow(prompt)
        outs.append(torch.stack([tiny.forward_slow(column) for _ in range(30)]))
    assert tiny.cache.capacity > prompt.shape[1] + 1
    torch.testing.assert_close(outs[0], outs[1], atol=0, rtol=0)


def test_pipeline_releases_the_cache_after_a_take():
    p = Pipeline(EngineSettings(model_path=str(GOLDEN / "tts_f32" / "model.gguf"), codec_mode="cpu"))
    req = SynthesisRequest(text="Hello there.", generation=GenerationParams(max_new_tokens=2000, seed=3,
                                                                            min_tokens_before_end=3))
    job = p.synthesize(req)
    next(iter(job))
    assert p.model.cache is not None and p.model.cache.capacity < 2000  # sized to what is used so far
    job.cancel()
    for _ in job:
        pass
    assert p.model.cache is None
    p.synthesize(dataclasses.replace(req, generation=GenerationParams(max_new_tokens=3))).run_to_end()
    assert p.model.cache is None


def test_text_longer_than_the_context_is_split_into_segments_that_fit():
    """On a model with a 600-position context, a 3000-character text (about 1300 prompt tokens)
    is split into as few segments as fit, each prompt + budget within the context."""
    p = Pipeline(EngineSettings(model_path=str(GOLDEN / "tts_f32" / "model.gguf"), codec_mode="cpu"))
    p.load()
    p.model.cfg = dataclasses.replace(p.model.cfg, context_length=600)
    sentence = "The quick brown fox jumps over the lazy dog. "
    text = (sentence * 70)[:3000]
    req = SynthesisRequest(text=text, generation=GenerationParams(max_new_tokens=4, seed=5))
    lengths = []
    real_generate = generate_frames

    def spy(model, prompt, params, **kw):
        lengths.append(prompt.shape[1])
        return real_generate(model, prompt, params, **kw)

    import s2studio.engine.model.generate as generate_module

    generate_module.generate_frames, saved = spy, generate_module.generate_frames
    try:
        r = p.synthesize(req).run_to_end()
    finally:
        generate_module.generate_frames = saved
    assert 2 <= len(r.segments) <= 6 and len(lengths) == len(r.segments)
    assert all(n + 4 <= 600 for n in lengths) and max(lengths) > 300  # full, not one per sentence
    assert "".join(s.text for s in r.segments).replace(" ", "") == text.replace(" ", "")
    again = p.synthesize(dataclasses.replace(req, only_segments=(1,))).run_to_end()
    np.testing.assert_array_equal(again.segments[0].codes, r.segments[1].codes)
    with pytest.raises(InputError, match="max_new_tokens 590"):  # no room left for any text
        p.synthesize(dataclasses.replace(req, generation=GenerationParams(max_new_tokens=590))).run_to_end()
