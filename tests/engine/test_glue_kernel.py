"""A layer's glue in C (engine/kernels/glue.py + _glue.c) against the torch ops it replaces:
RMSNorm (``transformer.rms_norm``), the QKV split with QK-norm and RoPE (``split_qkv`` +
``apply_rope`` + the transposes of ``layer_forward``), the residual add with the FFN's norm.

RoPE, the split, the add and the layouts: bit for bit. RMSNorm: bit for bit against its formula
with an IEEE square root (numpy's), and within ULPS of torch's function, whose float32 sqrt is
MKL's (1 ulp off in 14 % of cases here): the largest difference measured over these cases is
2.9 ulps of the value. Bits are compared as int32 (so -0.0 against 0.0 would show); NaN where
the other has NaN. Then whole tiny models: the kernels run in a take, and its outputs stay
within float32 rounding of torch's glue (the golden tests hold them to s2.cpp's)."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import torch

from s2studio.engine.kernels import backend, glue
from s2studio.engine.kernels.backend import KernelSettings
from s2studio.engine.model import transformer
from s2studio.engine.model.config import TransformerConfig
from s2studio.engine.model.generate import GenerationParams, generate_codes
from s2studio.engine.model.loader import load_dual_ar
from s2studio.engine.model.transformer import RopeTable
from s2studio.engine.model.weights import LayerWeights
from s2studio.engine.modes import GlueKernel

pytestmark = pytest.mark.skipif(not glue.built(), reason="the C kernels are not built")

TORCH = KernelSettings(glue="torch")
GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden"
IM_END = 514  # tiny tokenizer's <|im_end|>
EPS = 1e-6
ULPS = 4


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bits, NaN where the other has NaN (a NaN's sign and payload are the CPU's)."""
    if a.shape != b.shape or not torch.equal(a.isnan(), b.isnan()):
        return False
    keep = ~a.isnan()
    return torch.equal(a[keep].view(torch.int32), b[keep].view(torch.int32))


def within_ulps(a: torch.Tensor, b: torch.Tensor, ulps: int = ULPS) -> float:
    """Assert a is within ``ulps`` ulps of each value of b (infinities and NaN alike); returns
    the largest difference in ulps, for the message."""
    assert a.shape == b.shape and torch.equal(a.isnan(), b.isnan()) and torch.equal(a.isinf(), b.isinf())
    fin = torch.isfinite(b)
    err = ((a[fin].double() - b[fin].double()).abs() / b[fin].double().abs().clamp_min(1e-38)) * 2.0 ** 23
    worst = float(err.max()) if err.numel() else 0.0
    assert worst <= ulps, worst
    return worst


def formula(x: torch.Tensor, w: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """docs/spec/engine.md §2's RMSNorm with an IEEE (correctly rounded) float32 square root."""
    mean = x.double().square().mean(-1, keepdim=True).float().numpy()
    with np.errstate(divide="ignore", invalid="ignore"):  # eps 0 with a zero row; inf * 0
        r = np.float32(1) / np.sqrt(mean + np.float32(eps))
        return torch.from_numpy((x.numpy() * r) * w.numpy())


def wide_values(shape, gen: torch.Generator, spread: int = 30) -> torch.Tensor:
    """Normal values times powers of two from 2^-spread to 2^spread: tiny, ordinary and huge rows
    (squares from the float32 subnormal range to past float32's largest)."""
    x = torch.randn(shape, generator=gen)
    scale = torch.exp2(torch.randint(-spread, spread + 1, shape[:-1] + (1,), generator=gen).float())
    wiggle = torch.exp2(torch.randint(-6, 7, shape, generator=gen).float())
    return x * scale * wiggle


def torch_rms(x, w, eps=EPS):
    with backend.configured(TORCH):
        return transformer.rms_norm(x, w, eps)


@pytest.mark.parametrize("d", [2560, 128, 16, 13, 1])
def test_rms_norm_is_its_formula_and_torch_s_within_ulps(d):
    """Many rows of every size class: the formula's bits, within ULPS of torch's function."""
    g = torch.Generator().manual_seed(d)
    rows = max(200, 400_000 // d)
    x = wide_values((rows, d), g)
    x[0] = 0.0  # mean 0: r = 1/sqrt(eps)
    x[1, : (d + 1) // 2] = -0.0
    w = 1 + 0.2 * torch.randn(d, generator=g)
    got = glue.rms_norm(x, w, EPS)
    assert got is not None
    assert same_bits(got, formula(x, w))
    within_ulps(got, torch_rms(x, w))
    assert same_bits(transformer.rms_norm(x, w, EPS), got)  # the engine's function takes the kernel
    assert same_bits(glue.rms_norm(x[7:8], w, EPS), got[7:8])  # a row alone: its bits among others


def test_rms_norm_at_the_edges_of_float32():
    """Huge rows (the mean overflows float32: r = 0), infinities and NaN (NaN out, as torch),
    subnormal inputs, and other eps: the formula's bits, torch's within ULPS."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(8, 64, generator=g)
    x[0] *= 1e30
    x[1, 5] = float("inf")
    x[2, 7] = float("nan")
    x[3] *= 1e-41  # subnormal
    x[4] = torch.finfo(torch.float32).max
    x[5] *= 2.0 ** -75  # squares below float32's range, exact in double
    w = torch.randn(64, generator=g)
    for eps in (EPS, 1e-5, 0.0):
        got = glue.rms_norm(x, w, eps)
        assert same_bits(got, formula(x, w, eps)), eps
        within_ulps(got, torch_rms(x, w, eps))


def test_rms_norm_layouts():
    """Rows at a stride (the Fast-AR's last rows, y[n-1::n]), a contiguous 3-D tensor (per head),
    a 1-D row, and a layout it does not read in place (heads of a wider row, copied first): the
    same bits as those rows made contiguous."""
    g = torch.Generator().manual_seed(4)
    y = torch.randn(12, 40, generator=g)
    w = torch.randn(40, generator=g)
    strided = y[2::3]
    assert strided.stride() == (120, 1)
    assert same_bits(glue.rms_norm(strided, w, EPS), formula(strided.contiguous(), w))
    heads = torch.randn(3, 4, 16, generator=g)
    wh = torch.randn(16, generator=g)
    assert same_bits(glue.rms_norm(heads, wh, EPS), formula(heads, wh))
    assert same_bits(glue.rms_norm(y[0], w, EPS), formula(y[0], w))
    assert glue.rms_norm(torch.empty(0, 40), w, EPS).shape == (0, 40)
    view = torch.randn(3, 80, generator=g)[:, :64].reshape(3, 4, 16)  # (n, heads, hd) of a wider row
    assert not view.is_contiguous()
    assert same_bits(transformer.rms_norm(view, wh, EPS), formula(view.contiguous(), wh))


def test_what_the_kernels_do_not_take_goes_to_torch():
    g = torch.Generator().manual_seed(5)
    x, w = torch.randn(2, 32, generator=g), torch.randn(32, generator=g)
    assert glue.rms_norm(x.double(), w, EPS) is None
    assert glue.rms_norm(x, w.half(), EPS) is None
    assert glue.rms_norm(x, w[:16], EPS) is None
    assert glue.add_rms_norm(x, x.t().contiguous().t(), w, EPS) is None
    cos, sin = RopeTable(16, 1e6).get(0, 2, torch.device("cpu"))
    qkv = torch.randn(2, 8 * 16, generator=g)
    assert glue.qkv_heads(qkv, 4, 2, 16, None, None, EPS, cos, sin) is not None
    assert glue.qkv_heads(qkv.double(), 4, 2, 16, None, None, EPS, cos, sin) is None
    assert glue.qkv_heads(qkv, 4, 2, 16, None, None, EPS, cos[:1], sin[:1]) is None  # a table row short
    assert glue.qkv_heads(qkv[:, :-16], 4, 2, 16, None, None, EPS, cos, sin) is None  # width
    assert glue.qkv_heads(qkv, 4, 2, 16, torch.ones(16), None, EPS, cos, sin) is None  # half the QK-norm
    with backend.configured(TORCH):
        assert glue.rms_norm(x, w, EPS) is None and glue.qkv_heads(qkv, 4, 2, 16, None, None, EPS, cos, sin) is None


def make_layer(h: int, hkv: int, hd: int, qk_norm: bool, gen: torch.Generator):
    cfg = TransformerConfig(dim=h * hd, n_layer=1, n_head=h, n_kv_head=hkv, head_dim=hd, rope_base=1e6,
                            norm_eps=EPS, qk_norm=qk_norm)
    norms = (1 + 0.2 * torch.randn(hd, generator=gen), 1 + 0.2 * torch.randn(hd, generator=gen)) if qk_norm \
        else (None, None)
    lw = LayerWeights(attention_norm=None, wqkv=None, wo=None, ffn_norm=None, w1=None, w3=None, w2=None,
                      q_norm=norms[0], k_norm=norms[1])
    return cfg, lw


def torch_heads(qkv, lw, cfg, cos, sin, settings=None):
    """What layer_forward did before the C glue: split_qkv, apply_rope, the transposes; the
    QK-norm by ``transformer.rms_norm`` under ``settings`` (None: the kernel's)."""
    with backend.configured(settings or backend.settings()):
        q, k, v = transformer.split_qkv(qkv, lw, cfg)
        q, k = transformer.apply_rope(q, cos, sin), transformer.apply_rope(k, cos, sin)
        return q.transpose(0, 1), k.transpose(0, 1).contiguous(), v.transpose(0, 1).contiguous()


@pytest.mark.parametrize("h,hkv,hd", [(32, 8, 128), (4, 2, 16), (6, 3, 12), (2, 2, 2)])
@pytest.mark.parametrize("qk_norm", [True, False])
@pytest.mark.parametrize("n,pos0", [(1, 70), (2, 0), (4, 9), (37, 3000)])
def test_qkv_heads_are_torch_s_ops_bit_for_bit(h, hkv, hd, qk_norm, n, pos0):
    """The split, RoPE (adjacent pairs, two rounded products then the sum) and the layouts
    attention reads: torch's ops' bits over the kernel's QK-norm (torch's own norm: within
    ULPS), for rows of a wider buffer (rows at a stride), at a decode position, the Fast-AR's
    first call and a prefill far into a long take."""
    g = torch.Generator().manual_seed(n * 1000 + hd)
    cfg, lw = make_layer(h, hkv, hd, qk_norm, g)
    width = (h + 2 * hkv) * hd
    qkv = wide_values((n, width + 8), g, spread=8)[:, :width]
    cos, sin = RopeTable(hd, 1e6).get(pos0, n, torch.device("cpu"))
    got = transformer.qkv_heads(qkv, lw, cfg, cos, sin)
    direct = glue.qkv_heads(qkv, h, hkv, hd, lw.q_norm, lw.k_norm, EPS, cos, sin)
    want = torch_heads(qkv, lw, cfg, cos, sin)
    all_torch = torch_heads(qkv, lw, cfg, cos, sin, TORCH)
    for name, a, b, c, t in zip("qkv", got, want, direct, all_torch):
        assert same_bits(a, b), name
        assert same_bits(c, b), name
        # The layouts attention's kernel reads: q the transpose of a contiguous (n, H, hd).
        assert (a.transpose(0, 1) if name == "q" else a).is_contiguous(), name
        if qk_norm and name != "v":
            # RoPE mixes a pair: each output within ULPS of the pair's larger normed value.
            scale = t.abs().view(*t.shape[:-1], -1, 2).amax(-1, keepdim=True).expand(*t.shape[:-1], -1, 2)
            assert ((a - t).abs() <= ULPS * 2.0 ** -23 * 2 * scale.reshape(t.shape)).all(), name
        else:
            assert same_bits(a, t), name


def test_qkv_heads_with_batched_rope_rows():
    """A batched step's rows: each request at its own position (cos/sin rows concatenated, as
    BatchedContext gives them); every row as its own call makes it."""
    g = torch.Generator().manual_seed(8)
    cfg, lw = make_layer(32, 8, 128, True, g)
    rope = RopeTable(128, 1e6)
    positions = [5, 70, 300]
    qkv = torch.randn(3, 48 * 128, generator=g)
    cos = torch.cat([rope.get(p, 1, torch.device("cpu"))[0] for p in positions])
    sin = torch.cat([rope.get(p, 1, torch.device("cpu"))[1] for p in positions])
    together = transformer.qkv_heads(qkv, lw, cfg, cos, sin)
    for i, p in enumerate(positions):
        alone = transformer.qkv_heads(qkv[i:i + 1], lw, cfg, *rope.get(p, 1, torch.device("cpu")))
        for a, b in zip(together, alone):
            assert same_bits(a[:, i:i + 1], b)


def test_add_rms_norm_is_the_add_then_torch_s_norm():
    g = torch.Generator().manual_seed(9)
    for n, d in ((1, 2560), (4, 2560), (5, 13)):
        x, y = wide_values((n, d), g, 10), wide_values((n, d), g, 10)
        w = torch.randn(d, generator=g)
        hsum, f = glue.add_rms_norm(x, y, w, EPS)
        assert same_bits(hsum, x + y)
        assert same_bits(f, torch_rms(x + y, w))
        th, tf = transformer.add_rms_norm(x, y, w, EPS)
        assert same_bits(th, hsum) and same_bits(tf, f)


def test_the_switch_from_the_environment(monkeypatch):
    assert KernelSettings().glue is GlueKernel.C
    assert KernelSettings.from_environment({"S2_GLUE": "torch"}).glue is GlueKernel.TORCH
    assert KernelSettings.from_environment({"S2_GLUE": " C "}).glue is GlueKernel.C
    assert KernelSettings.from_environment({"S2_GLUE": "fast"}) == KernelSettings()  # warned, default
    x, w = torch.randn(2, 8), torch.randn(8)
    before = backend.settings()
    monkeypatch.setenv("S2_GLUE", "torch")
    try:
        backend.configure()  # what a process started with S2_GLUE=torch reads at first use
        assert not glue.enabled() and glue.rms_norm(x, w, EPS) is None
    finally:
        backend.configure(before)
    assert glue.enabled() and glue.rms_norm(x, w, EPS) is not None


@pytest.mark.parametrize("golden", ["tts_f32", "clone_f32_qknorm"])
def test_a_take_runs_the_kernels_and_stays_at_torch_s_numbers(golden, monkeypatch):
    """A seeded take on a golden tiny model (prefill, Slow-AR steps, Fast-AR calls): every
    layer's QKV goes through the C glue; and the prompt's hidden states (every Slow-AR layer)
    stay within float32 rounding of torch's glue (the golden tests hold the takes to s2.cpp)."""
    m = load_dual_ar(GOLDEN / golden / "model.gguf")[0]
    prompt = np.load(GOLDEN / golden / "dumps" / "prompt_tokens.npy")
    ran = []
    real = glue.qkv_heads

    def counted(*a, **kw):  # the kernel itself runs; this only counts that it was taken
        out = real(*a, **kw)
        ran.append(out is not None)
        return out

    monkeypatch.setattr(glue, "qkv_heads", counted)
    gp = GenerationParams(max_new_tokens=4, min_tokens_before_end=4, seed=3, temperature=0.9, top_p=0.9)
    codes = generate_codes(m, prompt, gp, im_end_id=IM_END)
    assert codes.shape[1] == 4
    layers = m.cfg.slow.n_layer
    assert len(ran) >= layers * 4 and all(ran)  # the prefill and three steps at least
    x = m.embed(torch.from_numpy(prompt.astype(np.int64)))
    mine, theirs = [], []
    transformer.stack_forward(x, m.w.slow, RopeTable(m.cfg.slow.head_dim, m.cfg.slow.rope_base), 0, None, mine)
    with backend.configured(TORCH):
        transformer.stack_forward(x, m.w.slow, RopeTable(m.cfg.slow.head_dim, m.cfg.slow.rope_base), 0, None,
                                  theirs)
    for i, (a, b) in enumerate(zip(mine, theirs)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5 * float(b.abs().max()), msg=f"layer {i}")
