"""Dual-AR vs the real s2.cpp on the golden cases, at the golden README's tolerances."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import torch

from s2studio.engine.model.generate import GenerationParams, generate_codes
from s2studio.engine.model.loader import load_dual_ar
from s2studio.engine.trace import teacher_forced_trace

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden"
CASES = ["tts_f32", "clone_f32_qknorm"]
IM_END = 514  # tiny tokenizer's <|im_end|>


def dump(case: str, name: str) -> np.ndarray:
    return np.load(GOLDEN / case / "dumps" / f"{name}.npy")


_MODELS: dict = {}


def model(case: str, kv_round_f16: bool = True):
    key = (case, kv_round_f16)
    if key not in _MODELS:
        _MODELS[key] = load_dual_ar(GOLDEN / case / "model.gguf", kv_round_f16=kv_round_f16)[0]
    return _MODELS[key]


@pytest.mark.parametrize("case", CASES)
def test_prefill_embeddings_and_layers(case):
    m = model(case)
    prompt = torch.from_numpy(dump(case, "prompt_tokens").astype(np.int64))
    np.testing.assert_allclose(m.embed(prompt).numpy(), dump(case, "slow_prefill_embeds"), atol=1e-5, rtol=0)
    m.new_cache(prompt.shape[1] + 1)
    layers: list[torch.Tensor] = []
    m.forward_slow(prompt, collect=layers)
    np.testing.assert_allclose(torch.stack(layers).numpy(), dump(case, "slow_prefill_layer_out"),
                               atol=1e-4, rtol=0)


@pytest.mark.parametrize("case", CASES)
def test_step_embeddings(case):
    m = model(case)
    codes, main = dump(case, "codes"), dump(case, "main_tokens")
    columns = np.concatenate((main[None], codes)).astype(np.int64)
    np.testing.assert_allclose(m.embed(torch.from_numpy(columns)).numpy(), dump(case, "slow_step_embeds"),
                               atol=1e-5, rtol=0)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kv_round_f16, logit_atol, hidden_atol", [(True, 2e-3, 5e-3), (False, 2e-2, 5e-3)])
def test_teacher_forced_logits(case, kv_round_f16, logit_atol, hidden_atol):
    m = model(case, kv_round_f16)
    out = teacher_forced_trace(m, dump(case, "prompt_tokens"), dump(case, "codes"), dump(case, "main_tokens"))
    np.testing.assert_allclose(out["slow_logits"], dump(case, "slow_logits"), atol=logit_atol, rtol=0)
    np.testing.assert_allclose(out["slow_hidden"], dump(case, "slow_hidden"), atol=hidden_atol, rtol=0)
    np.testing.assert_allclose(out["fast_logits"], dump(case, "fast_logits"), atol=logit_atol, rtol=0)
    if kv_round_f16:  # emulating s2.cpp's F16 cache gets much closer than the bound
        assert np.abs(out["slow_logits"] - dump(case, "slow_logits")).max() < 5e-4


@pytest.mark.parametrize("case", CASES)
def test_free_running_greedy_codes_are_identical(case):
    params = json.loads((GOLDEN / case / "inputs.json").read_text())["params"]
    gp = GenerationParams(max_new_tokens=params["max_tokens"], temperature=params["temperature"],
                          top_p=params["top_p"], top_k=params["top_k"],
                          min_tokens_before_end=params["min_tokens_before_end"], ras=False)
    codes = generate_codes(model(case), dump(case, "prompt_tokens"), gp, im_end_id=IM_END)
    np.testing.assert_array_equal(codes, dump(case, "codes"))


def test_trace_cli_writes_golden_layout(tmp_path):
    d = GOLDEN / "clone_f32_qknorm"
    r = subprocess.run([sys.executable, "-m", "s2studio", "trace", "-m", str(d / "model.gguf"),
                        "--prompt", str(d / "dumps/prompt_tokens.npy"), "--codes", str(d / "dumps/codes.npy"),
                        "--main-tokens", str(d / "dumps/main_tokens.npy"), "--out", str(tmp_path / "tr"),
                        "--log-level", "error"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for name in ("slow_logits", "slow_hidden", "fast_logits"):
        got = np.load(tmp_path / "tr" / f"{name}.npy")
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, dump("clone_f32_qknorm", name), atol=2e-3, rtol=0)


def test_trace_cli_rejects_mismatched_inputs(tmp_path):
    d = GOLDEN / "tts_f32"
    np.save(tmp_path / "main.npy", np.zeros(3, dtype=np.int32))
    r = subprocess.run([sys.executable, "-m", "s2studio", "trace", "-m", str(d / "model.gguf"),
                        "--prompt", str(d / "dumps/prompt_tokens.npy"), "--codes", str(d / "dumps/codes.npy"),
                        "--main-tokens", str(tmp_path / "main.npy"), "--out", str(tmp_path / "tr"),
                        "--log-level", "error"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().startswith("error:") and "differ in count" in r.stderr
    assert "Traceback" not in r.stderr
