"""Decode attention in C (engine/kernels/attention.py + _attend.c) against the torch path of
``transformer.attend`` and a float64 reference, on every instruction-set level this CPU has.

Bound: every output of one query head is Σ_j p_j v_j. A score s_j = qs·k_j computed in float32
is off by a few ulps of the largest it could be, |qs||k_j| (scaled q); that moves p_j by
p_j·δs_j, and the output by at most max|v|·max_j δs_j; the value sum adds a few ulps of
max|v|. So each head's error is bounded by
    TOL_ULPS · 2^-23 · max|v| · (1 + max_j |qs||k_j|)
with TOL_ULPS = 2. Measured over these cases, in the same units (TOL_ULPS · ratio): the C
kernel 0.20 on every level, torch's own path 0.19, C against torch 0.26 (the ratio is in the
assertion message). The C kernel and torch are each held to it against float64, and to twice
it against each other.
"""

from __future__ import annotations

import math
import types

import numpy as np
import pytest
import torch

from s2studio.engine.kernels import attention, backend
from s2studio.engine.kernels import common as kcommon
from s2studio.engine.kernels.backend import KernelSettings
from s2studio.engine.model import transformer
from s2studio.engine.model.transformer import BatchedContext, KVCache, RopeTable, Sequence
from s2studio.engine.modes import AttentionKernel

pytestmark = pytest.mark.skipif(not attention.built(), reason="the C kernels are not built")

TORCH = KernelSettings(attention="torch")
TOL_ULPS = 2
# (H, Hkv, hd): the full model's Slow-AR and Fast-AR; the tiny models' (16); head sizes the
# AVX-512 path (16 lanes) or every vector path (8 lanes) does not divide: the portable path.
SHAPES = [(32, 8, 128), (4, 2, 16), (8, 2, 40), (6, 3, 12), (4, 4, 24), (2, 1, 5)]
POSITIONS = [1, 2, 5, 17, 70, 601]



def make_case(h, hkv, hd, pos0, dtype, seed=0, capacity=None, q_scale=1.0):
    """q as layer_forward passes it (the transpose of a contiguous (1, H, hd)), fresh k/v,
    and a cache layer of ``capacity`` positions with ``pos0`` filled (the rest garbage)."""
    g = torch.Generator().manual_seed(seed)
    capacity = capacity or pos0 + 3
    q = (torch.randn(1, h, hd, generator=g) * q_scale).transpose(0, 1)
    k_new, v_new = torch.randn(hkv, 1, hd, generator=g), torch.randn(hkv, 1, hd, generator=g)
    kc = torch.randn(hkv, capacity, hd, generator=g).to(dtype)
    vc = torch.randn(hkv, capacity, hd, generator=g).to(dtype)
    return q, k_new, v_new, kc, vc


def exact(q, k_new, v_new, kc, vc, pos0):
    """float64 attention of the one row, and the bound of the module docstring per output."""
    h, _, hd = q.shape
    hkv = k_new.shape[0]
    qs = q[:, 0].double() * float(np.float32(1.0 / math.sqrt(hd)))
    keys = torch.cat((kc[:, :pos0].double(), k_new.double()), dim=1).repeat_interleave(h // hkv, 0)
    vals = torch.cat((vc[:, :pos0].double(), v_new.double()), dim=1).repeat_interleave(h // hkv, 0)
    p = torch.softmax(torch.einsum("hd,hjd->hj", qs, keys), dim=-1)
    out = torch.einsum("hj,hjd->hd", p, vals)
    reach = qs.norm(dim=-1)[:, None] * keys.norm(dim=-1)  # |qs||k_j|
    tol = TOL_ULPS * 2.0 ** -23 * vals.abs().amax(dim=(1, 2))[:, None] * (1 + reach.amax(-1, keepdim=True))
    return out.reshape(1, h * hd), tol.expand(h, hd).reshape(1, h * hd)


def torch_attend(q, k_new, v_new, kc, vc, pos0):
    cache = types.SimpleNamespace(k=[kc], v=[vc])
    with backend.configured(TORCH):
        return transformer.attend(q, k_new, v_new, cache, 0, pos0)


def assert_within(got, want, tol, factor=1.0, what=""):
    err = (got.double() - want).abs()
    ratio = (err / tol).max().item()
    assert ratio <= factor, f"{what}: error {ratio:.3f} of the bound (x{factor})"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("h,hkv,hd", SHAPES)
def test_kernel_matches_torch_and_float64_on_every_level(level, h, hkv, hd, dtype):
    for pos0 in POSITIONS:
        case = make_case(h, hkv, hd, pos0, dtype, seed=pos0)
        got = attention.decode(*case, pos0)
        assert got is not None and got.shape == (1, h * hd) and got.dtype == torch.float32
        want, tol = exact(*case, pos0)
        ref = torch_attend(*case, pos0)
        assert_within(got, want, tol, 1.0, f"C {level} pos0={pos0}")
        assert_within(ref, want, tol, 1.0, f"torch pos0={pos0}")
        assert_within(got, ref.double(), tol, 2.0, f"C vs torch {level} pos0={pos0}")


def test_long_contexts_and_peaked_softmax(level):
    """Past the kernel's stack buffer (4096 positions: the scores are allocated), and scores so
    far apart that most exp terms underflow (q scaled up 20x: a near one-hot softmax)."""
    for pos0, q_scale in ((4100, 1.0), (300, 20.0)):
        case = make_case(32, 8, 128, pos0, torch.float32, seed=7, q_scale=q_scale)
        got = attention.decode(*case, pos0)
        want, tol = exact(*case, pos0)
        assert_within(got, want, tol, 1.0, f"pos0={pos0} scale={q_scale}")
        assert torch.isfinite(got).all()


def test_attend_uses_the_kernel_for_decode_rows_only():
    """transformer.attend: a CPU decode row (n = 1, a cache) gives the kernel's bits; with the
    switch off, torch's; a prefill block (n > 1) is torch's either way."""
    q, k_new, v_new, kc, vc = make_case(32, 8, 128, 70, torch.float32)
    cache = types.SimpleNamespace(k=[kc], v=[vc])
    with backend.configured(KernelSettings()):
        on = transformer.attend(q, k_new, v_new, cache, 0, 70)
        assert torch.equal(on, attention.decode(q, k_new, v_new, kc, vc, 70))
    off = torch_attend(q, k_new, v_new, kc, vc, 70)
    assert not torch.equal(on, off)  # another summation order: some bits differ
    with backend.configured(TORCH):
        assert attention.decode(q, k_new, v_new, kc, vc, 70) is None
    g = torch.Generator().manual_seed(3)
    q3, k3, v3 = (torch.randn(hh, 3, 128, generator=g) for hh in (32, 8, 8))
    with backend.configured(KernelSettings()):
        a = transformer.attend(q3, k3, v3, cache, 0, 70)
    assert torch.equal(a, torch_attend(q3, k3, v3, kc, vc, 70))


def test_shapes_and_dtypes_it_does_not_take_fall_back_to_torch():
    q, k_new, v_new, kc, vc = make_case(4, 2, 16, 9, torch.float32)
    assert attention.decode(q, k_new, v_new, kc.double(), vc.double(), 9) is None
    assert attention.decode(q, k_new, v_new, kc.bfloat16(), vc.bfloat16(), 9) is None
    assert attention.decode(q, k_new, v_new, kc, vc.half(), 9) is None
    only = attention.decode(q, k_new, v_new, kc, vc, 0)  # nothing cached: the one fresh key, p = 1
    assert torch.equal(only, v_new[:, 0].repeat_interleave(2, 0).reshape(1, 64))
    assert attention.decode(q, k_new, v_new, kc, vc, kc.shape[1] + 1) is None  # past the cache
    assert attention.decode(q.double(), k_new, v_new, kc, vc, 9) is None
    big = make_case(1, 1, attention.MAX_HEAD_DIM + 8, 3, torch.float32)
    assert attention.decode(*big, 3) is None
    wide = kc.transpose(1, 2).contiguous().transpose(1, 2)  # the right shape, not the layout
    assert attention.decode(q, k_new, v_new, wide, vc, 9) is None
    # and attend then computes it with torch, as before
    cache = types.SimpleNamespace(k=[kc.double()], v=[vc.double()])
    assert transformer.attend(q, k_new, v_new, cache, 0, 9).shape == (1, 64)


def test_a_request_batched_gives_its_bits_alone(level):
    """decode_batch (one call for a batched step) gives each request exactly decode's bits:
    different positions, caches of different capacities, both cache dtypes."""
    for dtype in (torch.float32, torch.float16):
        pos = [1, 70, 5, 600, 33]
        cases = [make_case(32, 8, 128, p, dtype, seed=i, capacity=p + 10 * i + 1) for i, p in enumerate(pos)]
        q = torch.cat([c[0].transpose(0, 1) for c in cases]).transpose(0, 1)  # (H, B, hd), as layer_forward's
        k = torch.cat([c[1] for c in cases], dim=1).contiguous()
        v = torch.cat([c[2] for c in cases], dim=1).contiguous()
        got = attention.decode_batch(q, k, v, [c[3] for c in cases], [c[4] for c in cases], pos)
        for i, (c, p) in enumerate(zip(cases, pos)):
            assert torch.equal(got[i:i + 1], attention.decode(*c, p)), (dtype, i)


def test_batched_context_keeps_each_request_s_cache_and_rows():
    """BatchedContext.attend with every request at one row: the C call's rows equal each
    request's DynamicContext step, and each cache gets its request's k/v (float16-rounded)."""
    cfg = types.SimpleNamespace(n_kv_head=2, head_dim=16)
    rope = RopeTable(16, 10000.0)
    g = torch.Generator().manual_seed(11)
    caches, pos = [], [3, 9, 1]
    for p in pos:
        c = KVCache(cfg, 12, [torch.device("cpu")])
        c.store(0, 0, torch.randn(2, p, 16, generator=g), torch.randn(2, p, 16, generator=g))
        caches.append(c)
    q = torch.randn(3, 4, 16, generator=g).transpose(0, 1)
    k = torch.randn(3, 2, 16, generator=g).transpose(0, 1).contiguous()
    v = torch.randn(3, 2, 16, generator=g).transpose(0, 1).contiguous()
    alone = [transformer.attend(q[:, i:i + 1].contiguous(), k[:, i:i + 1].contiguous(), v[:, i:i + 1].contiguous(),
                                c, 0, p) for i, (c, p) in enumerate(zip(caches, pos))]
    out = BatchedContext(rope, [Sequence(p, 1, c) for p, c in zip(pos, caches)]).attend(0, q, k, v)
    for i, (c, p) in enumerate(zip(caches, pos)):
        assert torch.equal(out[i:i + 1], alone[i])
        assert torch.equal(c.k[0][:, p], k[:, i].half().float()) and torch.equal(c.v[0][:, p], v[:, i].half().float())


@pytest.mark.skipif(kcommon.numba is None or kcommon.numba.config.NUMBA_NUM_THREADS < 2,
                    reason="needs numba with 2 threads")
def test_thread_counts_give_the_same_bits(monkeypatch):
    """Each (request, KV head) is computed whole by one thread: 1 and 2 threads, and the
    calling thread alone, give the same bits (the threshold lowered so that the shared path
    runs at these sizes)."""
    q, k_new, v_new, kc, vc = make_case(32, 8, 128, 600, torch.float16)
    alone = attention.decode(q, k_new, v_new, kc, vc, 600)
    monkeypatch.setattr(attention, "PARALLEL_MIN_WORK", 0)
    try:
        for n in (1, 2):
            kcommon.sync_threads(n)
            assert torch.equal(attention.decode(q, k_new, v_new, kc, vc, 600), alone), n
    finally:
        kcommon.sync_threads(torch.get_num_threads())


def test_the_switch_from_the_environment(monkeypatch):
    assert KernelSettings().attention is AttentionKernel.C
    assert KernelSettings.from_environment({"S2_ATTENTION": "torch"}).attention is AttentionKernel.TORCH
    assert KernelSettings.from_environment({"S2_ATTENTION": " C "}).attention is AttentionKernel.C
    assert KernelSettings.from_environment({"S2_ATTENTION": "fast"}) == KernelSettings()  # warned, default
    q, k_new, v_new, kc, vc = make_case(4, 2, 16, 4, torch.float32)
    before = backend.settings()
    monkeypatch.setenv("S2_ATTENTION", "torch")
    try:
        backend.configure()  # what a process started with S2_ATTENTION=torch reads at first use
        assert attention.decode(q, k_new, v_new, kc, vc, 4) is None
    finally:
        backend.configure(before)
    assert attention.decode(q, k_new, v_new, kc, vc, 4) is not None


def special_rows(hkv: int, hd: int) -> torch.Tensor:
    """Values whose float16 rounding is easy to get wrong: ties (to even), the subnormal range,
    the overflow edge (65504 stays, 65520 goes to inf), zeros of both signs, infinities, and
    ordinary numbers; (hkv, 1, hd) float32."""
    vals = [0.0, -0.0, 1.0, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 2.0 ** -14, 2.0 ** -24, 2.0 ** -25,
            3 * 2.0 ** -26, 2.0 ** -26, 1e-30, 65504.0, 65519.0, 65520.0, 1e6, float("inf"), -float("inf"),
            -1.0 - 2.0 ** -11, 3.14159, -2.0 ** -20]
    g = torch.Generator().manual_seed(5)
    x = torch.randn(hkv * hd, generator=g) * torch.exp2(torch.randint(-30, 20, (hkv * hd,), generator=g).float())
    x[:len(vals)] = torch.tensor(vals)
    return x.reshape(hkv, 1, hd)


@pytest.mark.parametrize("dtype,round_f16", [(torch.float32, True), (torch.float32, False), (torch.float16, True)])
def test_the_kernel_stores_what_kv_cache_store_writes(level, dtype, round_f16):
    """decode(store=...) writes k/v at pos0 bit for bit as KVCache.store (torch's .half():
    round to nearest even, subnormals, overflow to inf), leaves every other position alone,
    and attends as if it had not stored (the fresh k/v are attended unrounded)."""
    cfg = types.SimpleNamespace(n_kv_head=2, head_dim=40)  # 40: the vector store's tail too
    mine, theirs = (KVCache(cfg, 12, [torch.device("cpu")], dtype, round_f16) for _ in range(2))
    g = torch.Generator().manual_seed(2)
    hist = torch.randn(2, 7, 40, generator=g), torch.randn(2, 7, 40, generator=g)
    for c in (mine, theirs):
        c.store(0, 0, *hist)
    q = torch.randn(1, 4, 40, generator=g).transpose(0, 1)
    k, v = special_rows(2, 40), special_rows(2, 40).flip(-1).contiguous()
    want = attention.decode(q, k, v, mine.k[0], mine.v[0], 7)
    got = attention.decode(q, k, v, mine.k[0], mine.v[0], 7, attention.store_mode(round_f16))
    theirs.store(0, 7, k, v)
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)  # infinite keys: some NaN
    assert torch.equal(mine.k[0], theirs.k[0]) and torch.equal(mine.v[0], theirs.v[0])
    full = KVCache(cfg, 7, [torch.device("cpu")], dtype, round_f16)
    full.store(0, 0, *hist)
    before = full.k[0].clone()
    assert attention.decode(q, k, v, full.k[0], full.v[0], 7, attention.STORE) is None  # no room at pos0
    assert torch.equal(full.k[0], before)


def test_dynamic_context_attend_stores_as_before():
    """DynamicContext.attend on a CPU decode row: the kernel's output, and the cache as the
    torch path (attend, then KVCache.store) leaves it."""
    cfg = types.SimpleNamespace(n_kv_head=8, head_dim=128)
    caches = [KVCache(cfg, 80, [torch.device("cpu")] * 2) for _ in range(2)]
    g = torch.Generator().manual_seed(4)
    hist = [torch.randn(8, 70, 128, generator=g) for _ in range(2)]
    for c in caches:
        c.store(1, 0, *hist)
    q, k, v = make_case(32, 8, 128, 70, torch.float32, seed=9)[:3]
    rope = RopeTable(128, 1e6)
    got = transformer.DynamicContext(rope, 70, 1, caches[0]).attend(1, q, k, v)
    with backend.configured(TORCH):
        ref = transformer.DynamicContext(rope, 70, 1, caches[1]).attend(1, q, k, v)
    assert torch.equal(got, attention.decode(q, k, v, caches[1].k[1], caches[1].v[1], 70))
    assert_within(got, ref.double(), exact(q, k, v, caches[1].k[1], caches[1].v[1], 70)[1], 2.0)
    assert torch.equal(caches[0].k[1], caches[1].k[1]) and torch.equal(caches[0].v[1], caches[1].v[1])


def fast_like_caches(count: int, hd: int = 128, hkv: int = 8, round_f16: bool = False, dtype=torch.float32):
    cfg = types.SimpleNamespace(n_kv_head=hkv, head_dim=hd)
    return [KVCache(cfg, 10, [torch.device("cpu")] * 2, dtype, round_f16) for _ in range(count)]


def rows_of(n: int, seed: int, h: int = 32, hkv: int = 8, hd: int = 128):
    """q, k, v of one call's n rows, as layer_forward passes them."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n, h, hd, generator=g).transpose(0, 1)
    k = torch.randn(n, hkv, hd, generator=g).transpose(0, 1).contiguous()
    v = torch.randn(n, hkv, hd, generator=g).transpose(0, 1).contiguous()
    return q, k, v


@pytest.mark.parametrize("pos0,n", [(0, 2), (2, 3), (5, 4)])
def test_a_few_rows_over_an_exact_cache_run_row_by_row(pos0, n):
    """The Fast-AR's first call (positions 0 and 1; float32 cache, never rounded): row by row
    through the kernel, each stored before the next attends to it. Within the bound of torch's
    causal call, and the cache left exactly as torch's path leaves it."""
    rope = RopeTable(128, 1e6)
    mine, theirs = fast_like_caches(2)
    g = torch.Generator().manual_seed(pos0)
    for c in (mine, theirs):
        if pos0:
            c.store(1, 0, torch.randn(8, pos0, 128, generator=g), torch.randn(8, pos0, 128, generator=g))
            g = torch.Generator().manual_seed(pos0)
    q, k, v = rows_of(n, seed=n)
    got = transformer.DynamicContext(rope, pos0, n, mine).attend(1, q, k, v)
    with backend.configured(TORCH):
        ref = transformer.DynamicContext(rope, pos0, n, theirs).attend(1, q, k, v)
    assert got.shape == ref.shape == (n, 32 * 128)
    assert not torch.equal(got, ref)  # the kernel ran (another summation order)
    for i in range(n):  # row i: the exact attention over positions 0..pos0+i
        want, tol = exact(q[:, i:i + 1], k[:, i:i + 1], v[:, i:i + 1], theirs.k[1], theirs.v[1], pos0 + i)
        assert_within(got[i:i + 1], want, tol, 1.0, f"row {i}")
        assert_within(ref[i:i + 1], want, tol, 1.0, f"torch row {i}")
    assert torch.equal(mine.k[1], theirs.k[1]) and torch.equal(mine.v[1], theirs.v[1])


def test_rows_over_a_rounding_cache_stay_torch_s():
    """Several rows over a float16-rounding cache (a Slow-AR prefill) attend to each other's
    unrounded keys in one call (docs/spec/engine.md §2): that is torch's path, bit for bit."""
    rope = RopeTable(128, 1e6)
    mine, theirs = fast_like_caches(2, round_f16=True)
    q, k, v = rows_of(2, seed=1)
    got = transformer.DynamicContext(rope, 0, 2, mine).attend(1, q, k, v)
    with backend.configured(TORCH):
        ref = transformer.DynamicContext(rope, 0, 2, theirs).attend(1, q, k, v)
    assert torch.equal(got, ref) and torch.equal(mine.k[1], theirs.k[1])


def test_batched_first_fast_call_gives_each_take_its_bits_alone():
    """BatchedContext over 3 takes' first Fast-AR call (2 rows each at position 0): every take's
    rows and cache exactly as its own DynamicContext call makes them."""
    rope = RopeTable(128, 1e6)
    batched, alone = fast_like_caches(3), fast_like_caches(3)
    q, k, v = rows_of(6, seed=3)
    out = BatchedContext(rope, [Sequence(0, 2, c) for c in batched]).attend(0, q, k, v)
    for t in range(3):
        cols = slice(2 * t, 2 * t + 2)
        own = transformer.DynamicContext(rope, 0, 2, alone[t]).attend(
            0, q[:, cols], k[:, cols].contiguous(), v[:, cols].contiguous())
        assert torch.equal(out[cols], own), t
        assert torch.equal(batched[t].k[0], alone[t].k[0]) and torch.equal(batched[t].v[0], alone[t].v[0])
