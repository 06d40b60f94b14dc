"""The static-shape decode steps (CUDA-graph path), run eagerly on the CPU against the dynamic path.

The static steps attend over the whole preallocated cache with the future masked; the dynamic
path over exactly the positions so far. The masked keys add exact zeros, but the reductions
(softmax sum, probabilities × values) run over more terms, which may change the float32
summation order: a step's logits move by a few float32 ulps (measured ≤ 4.3e-6 at |logit| ≤ 15,
without F16 rounding of the cache). With the cache F16-rounded (the default, s2.cpp's), such an
ulp sometimes lands a cached key or value on the other side of an F16 rounding boundary, which
is one F16 ulp (~5e-4 relative) in that entry: teacher-forced over the golden takes the Slow-AR
logits then differ by up to 1.2e-4 (measured), still 17x below the golden tolerance against
s2.cpp itself (2e-3, test_dual_ar_golden.py). STEP_ATOL holds both bounds.
"""

from __future__ import annotations

import logging
import pathlib
import types

import numpy as np
import pytest
import torch

from s2studio.engine.model import generate as generate_mod
from s2studio.engine.model import static_step
from s2studio.engine.model.generate import DynamicSteps, GenerationParams, decode_steps, generate_codes
from s2studio.engine.model.loader import load_dual_ar
from s2studio.engine.model.static_step import (CACHE_BUCKET, StaticDecoder, cache_length, resolve_mode,
                                               single_cuda_device, static_decoder)
from s2studio.engine.model.step_cache import StepCache
from s2studio.errors import InputError

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden"
CASES = ["tts_f32", "clone_f32_qknorm"]
IM_END = 514  # tiny tokenizer's <|im_end|>
# Largest differences allowed between a static and a dynamic step, by whether the KV cache is
# F16-rounded (measured maxima over both golden takes in the comments, see the docstring).
STEP_ATOL = {
    True: {"hidden": 5e-5, "slow": 3e-4, "fast": 2e-5},  # measured 1.3e-5, 1.2e-4, 3.8e-6
    False: {"hidden": 1e-5, "slow": 1e-5, "fast": 1e-5},  # measured: a few ulps, no growth
}

_MODELS: dict = {}


def model(case: str, kv_round_f16: bool = True):
    key = (case, kv_round_f16)
    if key not in _MODELS:
        _MODELS[key] = load_dual_ar(GOLDEN / case / "model.gguf", kv_round_f16=kv_round_f16)[0]
    m = _MODELS[key]
    m.drop_caches()
    return m


def dump(case: str, name: str) -> np.ndarray:
    return np.load(GOLDEN / case / "dumps" / f"{name}.npy")


def prompt_of(case: str) -> torch.Tensor:
    return torch.from_numpy(dump(case, "prompt_tokens").astype(np.int64))


def columns(case: str) -> list[torch.Tensor]:
    """The golden take's Slow-AR inputs, frame by frame (teacher forcing)."""
    codes, main = dump(case, "codes"), dump(case, "main_tokens")
    both = np.concatenate((main[None], codes)).astype(np.int64)
    return [torch.from_numpy(both[:, f:f + 1].copy()) for f in range(both.shape[1])]


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float().cpu() - b.float().cpu()).abs().max())


# ---- the steps against the dynamic path ------------------------------------------------------

@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kv_round_f16", [True, False])
def test_teacher_forced_steps_match_dynamic_up_to_the_cache_boundary(case, kv_round_f16):
    """Every Slow-AR step (hidden and sampled logits) and every Fast-AR position of the golden
    take, static vs dynamic; the static cache is exactly as long as the take, so the last step
    writes its last position, and one more step is refused."""
    m = model(case, kv_round_f16)
    prompt, cols = prompt_of(case), columns(case)
    codes = dump(case, "codes")
    n_frames = len(cols) - 1  # the last column would be a step past the take
    length = prompt.shape[1] + n_frames
    static = StaticDecoder(m, length, "eager")
    dynamic = DynamicSteps(m, length, length)
    worst = {"hidden": 0.0, "slow": 0.0, "fast": 0.0}
    h_d, l_d = dynamic.prefill(prompt, IM_END)
    h_s, l_s = static.prefill(prompt, IM_END)
    assert torch.equal(h_d, h_s) and torch.equal(l_d, l_s)  # the same call: the dynamic prefill
    for f in range(n_frames + 1):
        if f > 0:
            h_d, l_d = dynamic.slow_step(cols[f - 1])
            h_s, l_s = static.slow_step(cols[f - 1])
            worst["hidden"] = max(worst["hidden"], max_diff(h_d, h_s))
            worst["slow"] = max(worst["slow"], max_diff(l_d, l_s))
        fd, fs = dynamic.fast_start(h_d, int(codes[0, f])), static.fast_start(h_d, int(codes[0, f]))
        worst["fast"] = max(worst["fast"], max_diff(fd, fs))
        for j in range(2, m.cfg.num_codebooks):
            fd = dynamic.fast_next(int(codes[j - 1, f]), j)
            fs = static.fast_next(int(codes[j - 1, f]), j)
            worst["fast"] = max(worst["fast"], max_diff(fd, fs))
    assert static.n_past == length == m.cache.n_past
    assert all(worst[k] <= STEP_ATOL[kv_round_f16][k] for k in worst), worst
    with pytest.raises(RuntimeError, match="KV cache full"):
        static.slow_step(cols[-1])


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("seed, temperature, ras", [(1, 0.8, True), (2, 0.0, False), (3, 1.1, True)])
def test_seeded_take_gives_the_same_codes(case, seed, temperature, ras):
    """A whole take (sampling, RAS, the frame loop) through the static steps: the same codes
    as the dynamic path (the logits differ by at most STEP_ATOL; no draw on these takes is
    that close to a tie, so a difference here means the steps compute something else)."""
    m = model(case)
    prompt = dump(case, "prompt_tokens")
    gp = GenerationParams(max_new_tokens=24, min_tokens_before_end=24, temperature=temperature, ras=ras, seed=seed)
    dynamic = generate_codes(m, prompt, gp, im_end_id=IM_END, cuda_graphs="off")
    static = generate_codes(m, prompt, gp, im_end_id=IM_END, cuda_graphs="eager")
    assert dynamic.shape == (10, 24)
    np.testing.assert_array_equal(static, dynamic)


# ---- cache indices ---------------------------------------------------------------------------

def test_positions_mask_and_rope_rows_follow_the_position_tensor():
    m = model("tts_f32")
    dec = StaticDecoder(m, 40, "eager")
    first = dec.fast_first.devices[torch.device("cpu")]
    first.pos.fill_(5)
    positions, hidden, cos, sin = first.compute()
    assert positions.tolist() == [5, 6]
    assert hidden.shape == (2, m.cfg.num_codebooks)
    assert hidden[0].tolist() == [j > 5 for j in range(10)] and hidden[1].tolist() == [j > 6 for j in range(10)]
    table_cos, table_sin = m.fast_rope.get(5, 2, torch.device("cpu"))
    assert torch.equal(cos, table_cos) and torch.equal(sin, table_sin)
    slow = dec.slow.devices[torch.device("cpu")]
    slow.pos.fill_(39)  # the last position of a 40-long cache
    positions, hidden, cos, _ = slow.compute()
    assert positions.tolist() == [39] and not hidden.any() and hidden.shape == (1, 40)
    assert torch.equal(cos, m.slow_rope.get(39, 1, torch.device("cpu"))[0])


def test_a_slow_step_writes_its_position_only_and_sees_nothing_after_it():
    m = model("clone_f32_qknorm")
    prompt, cols = prompt_of("clone_f32_qknorm"), columns("clone_f32_qknorm")
    n = prompt.shape[1]
    clean, dirty = StaticDecoder(m, n + 8, "eager"), StaticDecoder(m, n + 8, "eager")
    clean.prefill(prompt, IM_END)
    dirty.prefill(prompt, IM_END)
    for kv in (dirty.slow_cache.k, dirty.slow_cache.v):  # finite junk where no key is yet
        for t in kv:
            t[:, n:] = 1e3
    h_clean, l_clean = clean.slow_step(cols[0])
    h_dirty, l_dirty = dirty.slow_step(cols[0])
    assert torch.equal(h_clean, h_dirty) and torch.equal(l_clean, l_dirty)  # masked: weight exactly 0
    # The step wrote position n of every layer, F16-rounded like the dynamic cache, nothing after.
    dynamic = DynamicSteps(m, n + 8, n + 8)
    dynamic.prefill(prompt, IM_END)
    dynamic.slow_step(cols[0])
    for i in range(m.cfg.slow.n_layer):
        k, v = clean.slow_cache.k[i], clean.slow_cache.v[i]
        assert torch.equal(k[:, n], k[:, n].half().float()) and k[:, n].abs().sum() > 0
        assert not k[:, n + 1:].any() and not v[:, n + 1:].any()
        assert torch.equal(k[:, :n], m.cache.k[i][:, :n])  # the prefill's keys, untouched
        # Layer 0's key depends only on the column: bit for bit the dynamic one; later layers'
        # inputs went through attention (STEP_ATOL, then F16 rounding).
        tol = 0.0 if i == 0 else 1e-3  # keys are F16-rounded: one F16 ulp at |k| ~ 1
        assert max_diff(k[:, n], m.cache.k[i][:, n]) <= tol
        assert max_diff(v[:, n], m.cache.v[i][:, n]) <= tol


def test_the_fast_ar_cache_starts_each_frame_afresh():
    m = model("tts_f32")
    prompt = prompt_of("tts_f32")
    codes = dump("tts_f32", "codes")
    used, fresh = StaticDecoder(m, 64, "eager"), StaticDecoder(m, 64, "eager")
    hidden, _ = used.prefill(prompt, IM_END)
    used.fast_start(hidden, int(codes[0, 0]))
    for j in range(2, 10):
        used.fast_next(int(codes[j - 1, 0]), j)
    assert all(bool(t[:, 9].any()) for t in used.fast_cache.k)  # the frame filled all 10 positions
    second = used.fast_start(hidden, int(codes[0, 1]))
    for t in used.fast_cache.k + used.fast_cache.v:
        assert t[:, :2].abs().sum() > 0 and not t[:, 2:].any()
    fresh.prefill(prompt, IM_END)
    assert torch.equal(second, fresh.fast_start(hidden, int(codes[0, 1])))
    for j in range(2, 10):
        assert torch.equal(used.fast_next(int(codes[j - 1, 1]), j), fresh.fast_next(int(codes[j - 1, 1]), j))


def test_cache_length_rounds_up_to_the_bucket_within_the_context():
    assert cache_length(1, 4096) == CACHE_BUCKET
    assert cache_length(CACHE_BUCKET, 4096) == CACHE_BUCKET
    assert cache_length(CACHE_BUCKET + 1, 4096) == 2 * CACHE_BUCKET
    assert cache_length(4000, 4096) == 4096
    assert cache_length(4097, 4096) == 4097  # context_length + 1 (prompt + budget + 1) is allowed


def test_the_decoder_is_kept_across_takes_of_one_size_and_mode():
    m, steps = model("tts_f32"), StepCache()
    a = static_decoder(steps, m, 200, "eager")
    assert static_decoder(steps, m, 900, "eager") is a  # the same bucket: its graphs are reused
    b = static_decoder(steps, m, CACHE_BUCKET + 5, "eager")
    assert b is not a and b.length == 2 * CACHE_BUCKET and steps.decoder is b
    steps.clear()
    assert steps.decoder is None
    # The decoder is kept by its owner, not parked on the model; another model gets its own.
    assert not hasattr(m, "static_decoder")
    other = model("clone_f32_qknorm")
    c = static_decoder(steps, m, 200, "eager")
    assert static_decoder(steps, other, 200, "eager") is not c and steps.decoder.model is other


# ---- choosing and running the steps ----------------------------------------------------------

def fake_model(slow: list[str], head: str, fast: str, kv_dtype=torch.float32):
    layers = [types.SimpleNamespace(device=torch.device(d)) for d in slow]
    w = types.SimpleNamespace(slow=types.SimpleNamespace(layers=layers), fast=object(),
                              fast_embeddings=types.SimpleNamespace(device=torch.device(fast)))
    return types.SimpleNamespace(w=w, head_device=torch.device(head), kv_dtype=kv_dtype)


def test_graphs_need_the_whole_model_on_one_cuda_device():
    assert single_cuda_device(fake_model(["cuda:0"] * 3, "cuda:0", "cuda:0")) == torch.device("cuda:0")
    assert single_cuda_device(fake_model(["cuda:0", "cuda:0", "cpu"], "cuda:0", "cuda:0")) is None  # gpu_layers=2
    assert single_cuda_device(fake_model(["cuda:0"] * 3, "cuda:1", "cuda:1")) is None
    assert single_cuda_device(fake_model(["cpu"] * 3, "cpu", "cpu")) is None
    assert single_cuda_device(fake_model(["mps"] * 3, "mps", "mps")) is None


def test_mode_selection(monkeypatch):
    cpu = fake_model(["cpu"] * 3, "cpu", "cpu")
    gpu = fake_model(["cuda:0"] * 3, "cuda:0", "cuda:0")
    split = fake_model(["cuda:0", "cpu", "cpu"], "cuda:0", "cuda:0")
    assert [resolve_mode(s, cpu) for s in ("auto", "off", "on", "eager", "compile")] == \
        ["off", "off", "eager", "eager", "eager"]
    assert [resolve_mode(s, split) for s in ("auto", "on")] == ["off", "eager"]
    monkeypatch.setattr(static_step, "triton_available", lambda: False)
    assert [resolve_mode(s, gpu) for s in ("auto", "off", "on", "eager", "compile")] == \
        ["graph", "off", "graph", "eager", "graph"]
    monkeypatch.setattr(static_step, "triton_available", lambda: True)
    assert resolve_mode("compile", gpu) == "compile"
    assert resolve_mode("auto", fake_model(["cuda:0"] * 3, "cuda:0", "cuda:0", torch.float16)) == "off"
    with pytest.raises(InputError, match="cuda_graphs"):
        resolve_mode("always", cpu)


class FakeGraph:
    """Stands in for torch.cuda.CUDAGraph on the CPU: 'captures' by keeping the function and
    replays it (the buffers are the same objects, as a real graph's addresses are)."""

    def __init__(self):
        self.captured: list[str] = []
        self.replays = 0

    def __call__(self, fn, device):
        self.captured.append(fn.__name__)
        outer = self

        class Replay:
            def replay(self):
                outer.replays += 1
                fn()

        return Replay()


def run_take(dec: StaticDecoder, case: str, frames: int = 3) -> list[torch.Tensor]:
    prompt, cols, codes = prompt_of(case), columns(case), dump(case, "codes")
    out = []
    hidden, logits = dec.prefill(prompt, IM_END)
    for f in range(frames):
        if f:
            hidden, logits = dec.slow_step(cols[f - 1])
            out.append(logits)
        out.append(dec.fast_start(hidden, int(codes[0, f])))
        out += [dec.fast_next(int(codes[j - 1, f]), j) for j in range(2, 10)]
    return out


def test_each_step_is_captured_once_then_replayed():
    m = model("tts_f32")
    fake = FakeGraph()
    graphed = StaticDecoder(m, 64, "graph", capture=fake)
    eager = StaticDecoder(m, 64, "eager")
    a, b = run_take(graphed, "tts_f32"), run_take(eager, "tts_f32")
    assert sorted(fake.captured) == ["_fast_next_fn", "_fast_start_fn", "_slow_fn"]
    assert fake.replays == 2 + 3 + 3 * 8  # slow steps, frame starts, Fast-AR positions
    assert all(torch.equal(x, y) for x, y in zip(a, b)) and len(a) == len(b)
    run_take(graphed, "tts_f32")  # a second take replays the same captures
    assert len(fake.captured) == 3


def test_a_failed_capture_is_logged_once_and_the_steps_run_eagerly(caplog):
    m, steps = model("tts_f32"), StepCache()
    calls = []

    def broken(fn, device):
        calls.append(fn.__name__)
        raise RuntimeError("operation not permitted when stream is capturing")

    broken_dec = static_decoder(steps, m, 60, "graph", capture=broken)
    eager = StaticDecoder(m, broken_dec.length, "eager")
    with caplog.at_level(logging.WARNING, logger=static_step.__name__):
        a = run_take(broken_dec, "tts_f32")
    b = run_take(eager, "tts_f32")
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert calls == ["_fast_start_fn"]  # the first step tried; the others never try
    assert broken_dec.failed and all(r.mode == "eager" for r in broken_dec.runners.values())
    warnings = [r for r in caplog.records if "could not capture" in r.getMessage()]
    assert len(warnings) == 1 and "operation not permitted" in warnings[0].getMessage()
    # The failure sticks to the model's steps: the same take size keeps the decoder, another
    # size gets an eager one; neither tries to capture again nor warns again.
    assert static_decoder(steps, m, 60, "graph") is broken_dec
    bigger = static_decoder(steps, m, 2 * CACHE_BUCKET, "graph", capture=broken)
    assert bigger is not broken_dec and bigger.mode == "eager" and bigger.failed
    run_take(bigger, "tts_f32", frames=1)
    assert calls == ["_fast_start_fn"]
    assert len([r for r in caplog.records if "could not capture" in r.getMessage()]) == 1


def test_the_cpu_default_never_builds_static_steps(monkeypatch):
    m = model("tts_f32")
    assert isinstance(decode_steps(m, 100, 50), DynamicSteps)

    def refuse(*a, **k):
        raise AssertionError("the CPU default must not use the static steps")

    monkeypatch.setattr(generate_mod, "static_decoder", refuse)
    gp = GenerationParams(max_new_tokens=4, min_tokens_before_end=4, seed=1)
    steps = StepCache()
    assert generate_codes(m, dump("tts_f32", "prompt_tokens"), gp, im_end_id=IM_END, step_cache=steps).shape == (10, 4)
    assert steps.decoder is None and m.cache is not None  # the dynamic cache did the work


def test_pipeline_setting_reaches_the_frame_loop():
    from s2studio.engine.pipeline import EngineSettings, Pipeline, SynthesisRequest

    settings = EngineSettings(model_path=str(GOLDEN / "tts_f32" / "model.gguf"), tokenizer_mode="s2cpp",
                              codec_mode="cpu", cuda_graphs="eager")
    p = Pipeline(settings)
    request = SynthesisRequest(text="hello", generation=GenerationParams(max_new_tokens=3, seed=1))
    p.synthesize(request).run_to_end()
    assert p.step_cache.decoder is not None and p.step_cache.decoder.model is p.model
    import dataclasses

    p.configure(dataclasses.replace(settings, cuda_graphs="off"))
    assert p.model is not None and p.step_cache.decoder is None  # no reload, the steps dropped
    p.synthesize(request).run_to_end()
    assert p.step_cache.decoder is None
    with pytest.raises(InputError, match="cuda_graphs"):  # refused where the settings are made
        p.configure(dataclasses.replace(settings, cuda_graphs="sometimes"))


# ---- on a real CUDA GPU (skipped elsewhere; run by benchmarks/gpu_check.sh on a lent GPU) -----
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("case", CASES)
def test_cuda_graphs_capture_and_give_the_eager_codes(case):
    """The steps are really captured (no fallback to eager) and replaying the graphs gives the
    codes of the same static steps run eagerly, on the GPU."""
    m = load_dual_ar(GOLDEN / case / "model.gguf", device="cuda")[0]
    prompt = dump(case, "prompt_tokens")
    gp = GenerationParams(max_new_tokens=24, min_tokens_before_end=24, temperature=0.8, seed=4)
    eager = generate_codes(m, prompt, gp, im_end_id=IM_END, cuda_graphs="eager")
    m.drop_caches()
    steps = StepCache()
    graphed = generate_codes(m, prompt, gp, im_end_id=IM_END, cuda_graphs="on", step_cache=steps)
    assert steps.decoder is not None and not steps.decoder.failed and steps.decoder.mode == "graph"
    np.testing.assert_array_equal(graphed, eager)
