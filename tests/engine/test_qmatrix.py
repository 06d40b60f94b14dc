"""Quantized CPU weights: the Q8_0 kernels against plain dequantize-then-matmul, and the engine
on a Q8_0 file with its weights kept quantized against the same file dequantized to float16."""

from __future__ import annotations

import pathlib

import gguf
import numpy as np
import pytest
import torch

pytest.importorskip("numba")

from s2studio.engine.kernels import backend, intdot  # noqa: E402
from s2studio.engine.kernels import common as kcommon  # noqa: E402
from s2studio.engine.kernels.backend import KernelSettings  # noqa: E402
from s2studio.devtools.quant_blocks import dequantized, random_blocks  # noqa: E402
from s2studio.engine.model.generate import GenerationParams, generate_codes  # noqa: E402
from s2studio.engine.model.loader import load_dual_ar  # noqa: E402
from s2studio.engine.kernels.qmatrix import INT_PREFILL_MAX_ROWS, QuantMatrix, int_prefill_max_rows  # noqa: E402
from s2studio.engine.trace import teacher_forced_trace  # noqa: E402

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden"
PROMPT = np.load(GOLDEN / "tts_f32" / "dumps" / "prompt_tokens.npy")
IM_END = 514
Q8 = gguf.GGMLQuantizationType.Q8_0

# Bound for the numba GEMV against float64 dequantize-then-matmul: only float32 summation
# order differs (activations are not quantized), so the error is float32 rounding of the sum.
# (The C integer kernel, which quantizes the activations, has its bounds in test_intdot.py.)
GEMV_REL = 1e-5


def q8_matrix(rows: int, cols: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    w = np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)
    raw = gguf.quants.quantize(w, Q8)
    return raw, gguf.quants.dequantize(raw, Q8)


@pytest.mark.parametrize("rows,cols", [(64, 256), (37, 512), (9, 32), (1, 64)])
@pytest.mark.parametrize("m", [1, 2, 5, 16])
def test_q8_0_gemv_matches_dequantize_then_matmul(rows, cols, m):
    raw, deq = q8_matrix(rows, cols, rows * cols + m)
    x = np.random.default_rng(m).standard_normal((m, cols)).astype(np.float32)
    got = QuantMatrix("Q8_0", raw, (rows, cols), int_dot=False).matmul_t(torch.from_numpy(x)).numpy()
    want = x.astype(np.float64) @ deq.astype(np.float64).T
    assert got.shape == (m, rows)
    assert np.abs(got - want).max() <= GEMV_REL * np.abs(want).max()


def test_q8_0_many_rows_exact_prefill_is_a_float32_gemm():
    raw, deq = q8_matrix(40, 256, 3)
    x = torch.randn(kcommon.MAX_KERNEL_ROWS + 4, 256, generator=torch.Generator().manual_seed(0))
    with backend.configured(KernelSettings(prefill="exact")):
        got = QuantMatrix("Q8_0", raw, (40, 256)).matmul_t(x)
    want = x.double() @ torch.from_numpy(deq).double().T
    rel = ((got - want).abs().max() / want.abs().max()).item()
    assert rel < GEMV_REL  # exact weights, float32 activations: float32 summation only
    exact = torch.nn.functional.linear(x, torch.from_numpy(deq))
    torch.testing.assert_close(got, exact, rtol=1e-6, atol=1e-6)


@pytest.mark.skipif(not intdot.available(), reason="the C integer kernels are not built here")
@pytest.mark.parametrize("type_name", ["Q8_0", "Q4_K"])
def test_many_rows_int_prefill_rows_are_independent_and_precise(type_name):
    """The default prefill of a short prompt (up to INT_PREFILL_MAX_ROWS rows; any length for
    Q8_0 on AVX-512) on a quantized matrix: the integer kernels, 16 rows a call. Each row
    gets exactly what it gets alone (a prompt split in two calls, or several takes' prompts in
    one, gives every row the same numbers), within the precise activations' bound of the
    exact product (test_intdot.py's INT8X2_REL, relative to |x||w|)."""
    raw = random_blocks(type_name, 48, 512, 7)
    deq = torch.from_numpy(dequantized(type_name, raw, 512))
    q = QuantMatrix(type_name, raw, (48, 512))
    assert q.int_prefill()
    x = torch.randn(2 * kcommon.MAX_KERNEL_ROWS + 7, 512, generator=torch.Generator().manual_seed(1))
    got = q.matmul_t(x)
    alone = torch.cat([q.matmul_t(x[i:i + 1]) for i in range(x.shape[0])])
    assert torch.equal(got, alone)
    assert torch.equal(q.matmul_t(x[5:30]), got[5:30])  # another split, another row count
    want = x.double() @ deq.double().T
    scale = x.double().norm(dim=1)[:, None] * deq.double().norm(dim=1)[None, :]
    assert ((got.double() - want).abs() / scale).max().item() < 3e-5
    long_x = torch.randn(INT_PREFILL_MAX_ROWS + 1, 512, generator=torch.Generator().manual_seed(2))
    long_got = q.matmul_t(long_x)
    with backend.configured(KernelSettings(prefill="exact")):
        assert not q.int_prefill()
        exact = q.matmul_t(long_x)
    if int_prefill_max_rows(type_name) is None:  # Q8_0 on AVX-512: its tiles are faster at any length
        assert q.int_prefill_takes(10_000)
        assert torch.equal(long_got, q.int_rows(long_x)) and not torch.equal(long_got, exact)
    else:  # a long prompt: the exact path, faster there
        assert not q.int_prefill_takes(INT_PREFILL_MAX_ROWS + 1)
        assert torch.equal(long_got, exact)
    with backend.configured(KernelSettings(int_dot="int8")):  # one coarse plane: never for a prompt
        assert not q.int_prefill()


def test_q8_0_rows_and_float32_are_bit_exact():
    raw, deq = q8_matrix(37, 512, 7)
    q = QuantMatrix("Q8_0", raw, (37, 512))
    np.testing.assert_array_equal(q.rows(torch.tensor([36, 0, 5, 5])).numpy(), deq[[36, 0, 5, 5]])
    np.testing.assert_array_equal(q[3].numpy(), deq[3])
    assert torch.equal(q.dequantize_f32(), torch.from_numpy(deq))
    with pytest.raises(IndexError):
        q.rows(torch.tensor([37]))


def test_block_shape_is_checked():
    raw, _ = q8_matrix(4, 64, 1)
    with pytest.raises(ValueError, match="do not match"):
        QuantMatrix("Q8_0", raw, (4, 96))


@pytest.fixture(scope="module")
def q8_model(make_tiny_model):
    from tests.engine.test_model_variants import WIDE  # the K-quant friendly layout

    return make_tiny_model("--seed", "5", *WIDE, quant="q8_0")  # (file, exact float32 twin)


def test_engine_keeps_q8_0_quantized_and_matches_exact(q8_model):
    q_path, ref_path = q8_model
    mq, plan = load_dual_ar(q_path, dtype="quantized")  # auto may dequantize on a slow-kernel machine
    mf, plan_f = load_dual_ar(q_path, dtype="float16")
    mr, _ = load_dual_ar(ref_path)
    assert plan.quantized and not plan_f.quantized
    layer = mq.w.slow.layers[0]
    for w in (layer.wqkv, layer.wo, layer.w1, layer.w2, layer.w3, mq.w.embeddings,
              mq.w.codebook_embeddings, mq.w.fast_output, mq.w.fast.layers[1].w2):
        assert isinstance(w, QuantMatrix) and w.type_name == "Q8_0"
    assert isinstance(mf.w.slow.layers[0].wqkv, torch.Tensor)
    # Teacher-forced against the float32 engine on the exact dequantized weights. Measured:
    # quantized 4.1e-3 / 4.2e-3 / 5.1e-3 (slow logits / fast logits / hidden), the float16
    # engine 5.3e-3 / 3.9e-3 / 5.0e-3 - both dominated by the bfloat16 prefill GEMMs of the time
    # (the prefill is now an exact float32 GEMM: tests/engine/test_prefill_precision.py).
    params = GenerationParams(max_new_tokens=8, temperature=0, ras=False, min_tokens_before_end=8)
    codes = generate_codes(mr, PROMPT, params, im_end_id=IM_END)
    main = codes[0] + mr.cfg.semantic_begin_id
    tq = teacher_forced_trace(mq, PROMPT, codes, main)
    tr = teacher_forced_trace(mr, PROMPT, codes, main)
    for name in ("slow_logits", "fast_logits", "slow_hidden"):
        rel = np.abs(tq[name] - tr[name]).max() / np.abs(tr[name]).max()
        assert rel < 1e-2, (name, rel)
    # Free-running sampling runs end to end on the quantized weights.
    out = generate_codes(mq, PROMPT, GenerationParams(max_new_tokens=6, temperature=0.7, seed=1),
                         im_end_id=IM_END)
    assert out.shape[0] == 10 and out.dtype == np.int32


def test_without_kernels_the_weights_are_dequantized(q8_model, monkeypatch, caplog):
    monkeypatch.setattr(kcommon, "available", lambda: False)
    m, plan = load_dual_ar(q8_model[0])
    assert plan.quantized and isinstance(m.w.slow.layers[0].wqkv, torch.Tensor)
    assert m.w.slow.layers[0].wqkv.dtype == torch.float16
    assert "dequantizing" in caplog.text


def test_auto_follows_the_machine_verdict(q8_model, monkeypatch, tmp_path):
    from s2studio.engine.kernels import choice as qchoice

    monkeypatch.setenv("S2STUDIO_CACHE_DIR", str(tmp_path))
    calls = []

    def fake_measure(type_name):
        calls.append(type_name)
        return qchoice.decide(type_name, quantized_ms=3.0, float16_ms=1.0)  # 3x slower: dequantize

    monkeypatch.setattr(qchoice, "measure", fake_measure)
    m, _ = load_dual_ar(q8_model[0])
    assert isinstance(m.w.slow.layers[0].wqkv, torch.Tensor) and calls == ["Q8_0"]
    m, _ = load_dual_ar(q8_model[0])  # cached: not measured again
    assert calls == ["Q8_0"]
    m, _ = load_dual_ar(q8_model[0], dtype="quantized")  # forced: kept whatever the verdict
    assert isinstance(m.w.slow.layers[0].wqkv, QuantMatrix)


def test_verdict_rule_and_cache(tmp_path):
    from s2studio.engine.kernels import choice as qchoice

    assert qchoice.decide("Q8_0", 1.9, 1.0).keep_quantized  # slower but within 2x: memory wins
    assert not qchoice.decide("Q8_0", 2.1, 1.0).keep_quantized
    path = str(tmp_path / "c.json")
    v = qchoice.decide("Q4_K", 1.0, 2.0)
    qchoice.write_cache(path, "k", v)
    back = qchoice.read_cache(path, "k")
    assert back.from_cache and (back.keep_quantized, back.quantized_ms, back.float16_ms) == (True, 1.0, 2.0)
    assert qchoice.read_cache(path, "other") is None
    (tmp_path / "c.json").write_text("{not json")
    assert qchoice.read_cache(path, "k") is None  # damaged: measure again


def test_measure_times_both_paths():
    from s2studio.engine.kernels import choice as qchoice

    v = qchoice.measure("Q8_0")
    assert v.quantized_ms > 0 and v.float16_ms > 0 and "Q8_0 GEMV" in v.reason


@pytest.mark.skipif(not intdot.available(), reason="the C integer kernels are not built here")
def test_the_q8_0_prefill_limit_follows_the_kernel_level():
    """Q8_0's tiled AVX-512 rows take prompts of any length; on the other levels (their crossover
    with the exact path not measured) and for the K-quants the 64-row limit holds."""
    before = intdot.level()
    try:
        for lv in intdot.levels():
            intdot.set_level(lv)
            want = None if lv in ("avx512bw", "avx512vnni") else INT_PREFILL_MAX_ROWS
            assert int_prefill_max_rows("Q8_0") == want, lv
            assert int_prefill_max_rows("Q4_K") == INT_PREFILL_MAX_ROWS
    finally:
        intdot.set_level(before)
