"""The transformer maths shared by the Slow-AR and the Fast-AR, as s2.cpp computes it.

Numerical choices that matter for parity with s2.cpp (docs/spec/engine.md §2, §9):
- RoPE is ggml's "normal" mode: adjacent pairs (x[2i], x[2i+1]) rotate, not NeoX halves; the
  angle table is built the way ggml's CPU kernel does (θ multiplied iteratively in float32).
- RMSNorm sums squares in float64 on the CPU, like ggml (MPS has no float64: float32 there).
- s2.cpp's KV cache is F16, but the positions evaluated in the current call attend to their own
  fresh float32 K/V. ``KVCache(round_f16=True)`` stores fp16-rounded values; ``attend`` then
  scores the current block against the fresh values. This cuts the logit error ~25×.
- The residual stream, norms and softmax stay float32; a matmul runs in the weights' dtype.
- A CPU decode step's attention runs in C (``kernels.attention``: the same maths, another
  summation order), which also stores the step's k/v; prefill and GPUs use :func:`attend`'s torch.
- On the CPU, RMSNorm, the QKV split with QK-norm and RoPE, and the residual add before the
  FFN's norm run in C (``kernels.glue``: the same float32 operations, bit-identical but for
  RMSNorm's square root, IEEE's where torch's is MKL's, ≤ ~3 ulps apart) on every CPU path,
  prefill included, so a row gets the same bits on each; GPUs use torch's ops.

The block is written once (:func:`layer_forward`, run by :func:`run_stack`); the decode paths
differ only in the context it runs in (:class:`LayerContext`): :class:`DynamicContext` (one
request, a growing cache), :class:`BatchedContext` (several requests, shared matmuls) and
``static_step.StaticContext`` (fixed shapes for CUDA graphs).
"""

from __future__ import annotations

import math
from typing import Callable, Protocol

import numpy as np
import torch
import torch.nn.functional as F

from s2studio.engine.model.config import TransformerConfig
from s2studio.engine.kernels import attention as attention_kernel
from s2studio.engine.kernels import common as kcommon
from s2studio.engine.kernels import glue as glue_kernel
from s2studio.engine.kernels.qmatrix import QuantMatrix, prefill_linear
from s2studio.engine.model.weights import LayerWeights, StackWeights, Weight


# From this many rows on (prefill), a CPU matmul with float16 weights runs as a float32 GEMM on
# the weights upcast a chunk at a time (``prefill_linear``): torch's CPU float16 GEMM has no
# fast kernel and costs time in proportion to the rows (~5x slower at 48 rows). The float32
# GEMM is exact on float16 weights; the bfloat16 GEMM used before rounded weights, activations
# and outputs to 8 bits and put the F16 model's logits up to 0.13 away from s2.cpp's (which
# rounds only the activations, to float16). Decode steps (1 row) stay float16: a GEMV,
# bandwidth-bound, fastest in float16, with float16 activations as in s2.cpp.
CPU_PREFILL_MIN_ROWS = 16


def _upcast_rows(w: torch.Tensor) -> Callable[[int, int, torch.Tensor], None]:
    def fill(r0: int, r1: int, out: torch.Tensor) -> None:
        out.copy_(w[r0:r1])

    return fill


def linear(x: torch.Tensor, w: Weight) -> torch.Tensor:
    """y = x·wᵀ in the weight's dtype on the weight's device, returned as float32."""
    x = x.to(w.device)
    if isinstance(w, QuantMatrix):
        return w.matmul_t(x)
    if w.dtype == torch.float16 and w.device.type == "cpu" and x.shape[0] >= CPU_PREFILL_MIN_ROWS:
        return prefill_linear(x, tuple(w.shape), _upcast_rows(w))
    return F.linear(x.to(w.dtype), w).float()


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    if x.is_cpu:
        # One C call (kernels.glue: torch's formula with an IEEE sqrt, so every CPU path takes it
        # while it is on); None: switched off, or not float32.
        out = glue_kernel.rms_norm(x, w, eps)
        if out is not None:
            return out
        mean = x.double().square().mean(-1, keepdim=True).float()
    else:
        mean = x.square().mean(-1, keepdim=True)
    return x * (1.0 / torch.sqrt(mean + eps)) * w


class RopeTable:
    """cos/sin of the rotation angles for positions 0..n-1, grown on demand."""

    def __init__(self, head_dim: int, base: float):
        self.head_dim = head_dim
        self.base = base
        self._cos = self._sin = None
        self._n = 0

    def _build(self, n: int) -> None:
        half = self.head_dim // 2
        # ggml: theta_0 = p, theta_{i+1} = theta_i * powf(base, -2/n_dims), all float32.
        scale = np.float32(np.power(np.float32(self.base), np.float32(-2.0 / self.head_dim), dtype=np.float32))
        theta = np.empty((n, half), dtype=np.float32)
        theta[:, 0] = np.arange(n, dtype=np.float32)
        for i in range(1, half):
            theta[:, i] = theta[:, i - 1] * scale
        self._cos = torch.from_numpy(np.cos(theta))
        self._sin = torch.from_numpy(np.sin(theta))
        self._n = n

    def get(self, pos0: int, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if pos0 + n > self._n:
            self._build(max(pos0 + n, 2 * self._n, 64))
        cos, sin = self._cos[pos0:pos0 + n], self._sin[pos0:pos0 + n]
        return cos.to(device), sin.to(device)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (n, heads, head_dim) float32; cos/sin: (n, head_dim/2)."""
    n, h, d = x.shape
    pairs = x.view(n, h, d // 2, 2)
    x0, x1 = pairs[..., 0], pairs[..., 1]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).view(n, h, d)


class KVCache:
    """Keys/values for one stack: per layer (n_kv_head, capacity, head_dim).

    One tensor pair per layer so each can live on its layer's device (GPU-layer split).
    ``capacity`` positions are allocated now; :meth:`reserve` grows it up to ``limit`` as a
    take gets longer, so a large frame budget that the model never uses costs no memory.
    """

    def __init__(self, cfg: TransformerConfig, capacity: int, devices: list[torch.device],
                 dtype: torch.dtype = torch.float32, round_f16: bool = True, limit: int | None = None):
        self.capacity = capacity
        self.limit = max(capacity, limit or capacity)
        self.round_f16 = round_f16
        shape = (cfg.n_kv_head, capacity, cfg.head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=d) for d in devices]
        self.v = [torch.zeros(shape, dtype=dtype, device=d) for d in devices]
        self.n_past = 0

    def reset(self) -> None:
        self.n_past = 0

    def reserve(self, positions: int) -> bool:
        """Make room for ``positions`` in all; False if that is past ``limit``. Grows by half
        the current size at least (few copies over a long take, at most 1.5× what is used)."""
        if positions <= self.capacity:
            return True
        if positions > self.limit:
            return False
        new_cap = min(self.limit, max(positions, self.capacity + max(256, self.capacity // 2)))
        for kv in (self.k, self.v):
            for i, old in enumerate(kv):
                grown = torch.zeros((old.shape[0], new_cap, old.shape[2]), dtype=old.dtype, device=old.device)
                grown[:, :self.n_past] = old[:, :self.n_past]
                kv[i] = grown
        self.capacity = new_cap
        return True

    def store(self, layer: int, pos0: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """k, v: (n_kv, n, hd) float32, written at positions pos0..pos0+n-1."""
        if self.round_f16:
            k, v = k.half(), v.half()
        n = k.shape[1]
        # copy_ converts as it copies (float16 -> the cache's dtype is exact): one op, no temporary.
        self.k[layer][:, pos0:pos0 + n].copy_(k)
        self.v[layer][:, pos0:pos0 + n].copy_(v)


# Most bytes one block of attention scores (query rows × keys, float32) may take. A prefill of
# T positions would otherwise materialise H·T² scores at once (4 GB for T = 16k on the real
# model); cutting the queries into blocks keeps memory linear in T. Rows of a softmax are
# independent, so blocking changes only which rows one GEMM computes, not the maths.
ATTENTION_BLOCK_BYTES = 16 << 20
# ...but never fewer rows than this: each block re-reads all the keys, and tiny blocks would make
# a long prefill bandwidth-bound (at 32k positions on the real model, 64 rows = 256 MB of scores).
ATTENTION_MIN_BLOCK_ROWS = 64


def attention_query_block(n_head: int, n_keys: int, budget: int | None = None) -> int:
    """Query rows per block so that n_head × rows × n_keys float32 scores fit ``budget``
    (default :data:`ATTENTION_BLOCK_BYTES`, read at call time)."""
    budget = ATTENTION_BLOCK_BYTES if budget is None else budget
    return max(ATTENTION_MIN_BLOCK_ROWS, budget // (4 * n_head * max(n_keys, 1)))


def attend(q: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor, cache: KVCache | None,
           layer: int, pos0: int, block: int | None = None) -> torch.Tensor:
    """Causal GQA attention of n new queries over cached history plus the new keys.

    q: (H, n, hd); k_new/v_new: (Hkv, n, hd), all float32. Returns (n, H*hd).
    Written as grouped matmul-softmax-matmul: much faster than SDPA for one query on the CPU.
    Queries are taken ``block`` rows at a time (default: :func:`attention_query_block`), so a
    long prefill never holds all n × (pos0 + n) scores; a block's queries only see the new
    keys up to their own position, as one causal call would.
    """
    h, n, hd = q.shape
    if n == 1 and pos0 > 0 and cache is not None and q.device.type == "cpu":
        # A decode step on the CPU: the C kernel (kernels.attention), one call for all heads;
        # None where it does not apply (switched off, not built, a layout it does not take).
        out = attention_kernel.decode(q, k_new, v_new, cache.k[layer], cache.v[layer], pos0)
        if out is not None:
            return out
    hkv = k_new.shape[0]
    g = h // hkv
    if block is None:
        block = attention_query_block(h, pos0 + n)
    # Query head i uses KV head i // g: group consecutive query heads per KV head.
    qg = q.reshape(hkv, g, n, hd) * (1.0 / math.sqrt(hd))
    if cache is not None and pos0 > 0:
        k_old = cache.k[layer][:, :pos0].to(torch.float32)
        v_old = cache.v[layer][:, :pos0].to(torch.float32)
    else:
        k_old = v_old = None
    # One block (every decode step, short prompts): its result is the output, no copy into ``out``.
    out = torch.empty(hkv, g, n, hd, dtype=torch.float32, device=q.device) if n > block else None
    for a in range(0, n, block):
        b = min(a + block, n)
        qb = qg[:, :, a:b].reshape(hkv, g * (b - a), hd)
        # Keys past b are in the future of every query in this block: leave them out.
        scores_new = qb @ k_new[:, :b].transpose(1, 2)
        if b - a > 1:  # one query row (a decode step) sees every key up to its own: nothing to mask
            causal = torch.arange(b, device=q.device)[None, :] <= torch.arange(a, b, device=q.device)[:, None]
            scores_new = scores_new.view(hkv, g, b - a, b).masked_fill_(~causal, float("-inf"))
            scores_new = scores_new.view(hkv, g * (b - a), b)
        if k_old is not None:
            scores = torch.cat((qb @ k_old.transpose(1, 2), scores_new), dim=-1)
            p = torch.softmax(scores, dim=-1)
            ob = p[..., :pos0] @ v_old + p[..., pos0:] @ v_new[:, :b]
        else:
            ob = torch.softmax(scores_new, dim=-1) @ v_new[:, :b]
        if out is None:
            out = ob.view(hkv, g, n, hd)
        else:
            out[:, :, a:b] = ob.view(hkv, g, b - a, hd)
    # (hkv, g, n, hd) -> (h, n, hd) -> (n, h*hd), head-major features as ggml concatenates them.
    return out.reshape(h, n, hd).transpose(0, 1).reshape(n, h * hd)


def split_qkv(qkv: torch.Tensor, lw: LayerWeights, cfg: TransformerConfig
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fused projection's output (n, (H + 2·Hkv)·hd) → q (n, H, hd), k, v (n, Hkv, hd), with
    the QK-norm where the layer has one (before RoPE, with the layer eps)."""
    n = qkv.shape[0]
    hd, nh, nkv = cfg.head_dim, cfg.n_head, cfg.n_kv_head
    q = qkv[:, : nh * hd].reshape(n, nh, hd)
    k = qkv[:, nh * hd: (nh + nkv) * hd].reshape(n, nkv, hd)
    v = qkv[:, (nh + nkv) * hd:].reshape(n, nkv, hd)
    if lw.q_norm is not None:
        q = rms_norm(q, lw.q_norm, cfg.norm_eps)
        k = rms_norm(k, lw.k_norm, cfg.norm_eps)
    return q, k, v


def qkv_heads(qkv: torch.Tensor, lw: LayerWeights, cfg: TransformerConfig, cos: torch.Tensor, sin: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fused projection's output (n, (H + 2·Hkv)·hd) → what attention takes: q (H, n, hd)
    (the transpose of a contiguous (n, H, hd)), k, v (Hkv, n, hd) contiguous, after the QK-norm
    (:func:`split_qkv`) and RoPE of row r at cos/sin row r (:func:`apply_rope`). On the CPU one C
    call (kernels.glue: the same ops, the QK-norm's sqrt IEEE's) instead of ~20 small torch ops."""
    if qkv.is_cpu:
        heads = glue_kernel.qkv_heads(qkv, cfg.n_head, cfg.n_kv_head, cfg.head_dim, lw.q_norm, lw.k_norm,
                                      cfg.norm_eps, cos, sin)
        if heads is not None:
            return heads
    q, k, v = split_qkv(qkv, lw, cfg)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    return q.transpose(0, 1), k.transpose(0, 1).contiguous(), v.transpose(0, 1).contiguous()


def add_rms_norm(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, eps: float
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """(x + y, ``rms_norm(x + y, w, eps)``): a residual add and the next norm; one C call on the CPU."""
    if x.is_cpu:
        out = glue_kernel.add_rms_norm(x, y, w, eps)
        if out is not None:
            return out
    h = x + y
    return h, rms_norm(h, w, eps)


# ---- batched decode: several requests' rows through one pass over the weights ---------------
#
# A batched step must give every request exactly the numbers it gets alone (a seeded request
# sounds the same whether or not others share its steps). Each row of x belongs to one request;
# ``sizes`` says how many consecutive rows each has, as its own single-request call would pass.
# Elementwise ops, RMSNorm and RoPE are per row. The matmuls are where batching pays and where
# it could change the numbers:
# - the quantized GEMV kernels compute every activation row with the same per-row arithmetic
#   for any m ≤ MAX_KERNEL_ROWS (tests/engine/test_batching.py checks m=1 against m=B), so all
#   rows go through one call and each weight is read once for the whole batch; where short
#   prefills run on the same kernels (``QuantMatrix.int_prefill_takes``: up to its type's limit of
#   rows) so do several prompts evaluated together, 16 rows per weight read;
# - torch's float32 GEMM is not row-independent (MKL takes a GEMV path for one row and a GEMM
#   path, another summation order, for more), and float16/bfloat16/GPU kernels give no promise
#   either, so a torch weight is applied per request, with that request's own row count.

def linear_grouped(x: torch.Tensor, w: Weight, sizes: list[int]) -> torch.Tensor:
    """``linear`` of consecutive row groups of ``x`` (``sizes``), each group's result exactly
    what ``linear`` of that group alone gives; quantized weights are read once for all."""
    if len(sizes) == 1:
        return linear(x, w)
    if isinstance(w, QuantMatrix):
        if x.shape[0] <= kcommon.MAX_KERNEL_ROWS and max(sizes) <= kcommon.MAX_KERNEL_ROWS:
            return linear(x, w)
        if w.int_prefill_takes(max(sizes)):
            # Alone, every group would run on the integer kernels, whose rows never mix.
            return w.int_rows(x.to(w.device).float())
    return torch.cat([linear(part, w) for part in x.split(sizes)])


# ---- one layer over a context: where the rows sit and which cache they attend to -------------
#
# ``layer_forward`` is the only place the block's maths is written. What differs between the
# decode paths is where a call's rows sit and how they reach their KV cache, and that is the
# context's (:class:`LayerContext`):
# - :class:`DynamicContext`: one request's rows at positions pos0.. of a ``KVCache`` that grows,
#   positions as Python numbers (the prefill, the CPU decode step, the Fast-AR's frame);
# - :class:`BatchedContext`: several requests' rows, each at its own positions of its own cache;
#   the matmuls are shared (``linear_grouped``), attention is per request;
# - ``static_step.StaticContext``: a preallocated cache and a device-tensor position, attention
#   masked over the whole cache, so the step can be recorded as a CUDA graph.


class LayerContext(Protocol):
    """Where one stack call's rows sit. ``begin`` runs before the first layer, ``commit`` after
    the last (it advances the caches' ``n_past``); per layer, ``rope_rows`` gives the rows'
    RoPE tables on a device and ``attend`` runs attention of the rows' q over the cache plus their
    fresh k/v, then keeps k/v in the cache. ``splittable``: the rows may be cut into blocks
    (one request's rows: the long prefill's FFN runs in blocks)."""

    splittable: bool

    def linear(self, x: torch.Tensor, w: Weight) -> torch.Tensor: ...

    def begin(self) -> None: ...

    def rope_rows(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]: ...

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor: ...

    def commit(self) -> None: ...


class _HostPositions:
    """Positions known on the host (Python numbers): the RoPE rows are sliced from the table
    once per device a call reaches (not once per layer), and nothing is prepared in ``begin``."""

    _rows: dict[torch.device, tuple[torch.Tensor, torch.Tensor]]

    def begin(self) -> None:
        pass

    def rope_rows(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        rows = self._rows.get(device)
        if rows is None:
            rows = self._rows[device] = self._rope_rows_on(device)
        return rows

    def _rope_rows_on(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError


class DynamicContext(_HostPositions):
    """One request's ``n`` rows at positions ``pos0``.. of ``cache`` (None: attend to the rows only)."""

    splittable = True
    linear = staticmethod(linear)

    def __init__(self, rope: RopeTable, pos0: int, n: int, cache: KVCache | None):
        self.rope, self.pos0, self.n, self.cache = rope, pos0, n, cache
        self._rows = {}

    def _rope_rows_on(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        return self.rope.get(self.pos0, self.n, device)

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        c = self.cache
        if c is not None and q.device.type == "cpu":
            o = self._attend_kernel(layer, q, k, v, c)
            if o is not None:
                return o
        o = attend(q, k, v, self.cache, layer, self.pos0)
        if self.cache is not None:
            self.cache.store(layer, self.pos0, k, v)
        return o

    def _attend_kernel(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       c: KVCache) -> torch.Tensor | None:
        """The C kernel (kernels.attention), which also stores k/v as ``c.store`` would: a
        decode row; or a few rows over a cache that keeps exact float32 values (the Fast-AR's
        first call: positions 0 and 1), one row at a time, each stored before the next attends
        to it, the same keys and values as one causal call. None: torch's ``attend``."""
        if self.n == 1:
            if self.pos0 < 1:
                return None
            return attention_kernel.decode(q, k, v, c.k[layer], c.v[layer], self.pos0,
                                           attention_kernel.store_mode(c.round_f16))
        if not exact_rows(c, layer, self.n):
            return None
        outs = []
        for i in range(self.n):
            o = attention_kernel.decode(q[:, i:i + 1], k[:, i:i + 1], v[:, i:i + 1], c.k[layer], c.v[layer],
                                        self.pos0 + i, attention_kernel.STORE)
            if o is None:  # (then the rows stored so far are overwritten by torch's path)
                return None
            outs.append(o)
        return torch.cat(outs)

    def commit(self) -> None:
        if self.cache is not None:
            self.cache.n_past = self.pos0 + self.n


# A call of up to this many rows over a cache that stores values exactly (float32, never
# rounded: the Fast-AR's) runs as single-row kernel calls (``DynamicContext._attend_kernel``).
KERNEL_ROWS = 4


def exact_rows(cache: KVCache, layer: int, n: int) -> bool:
    """``n`` rows may attend one at a time through the cache: it keeps exactly the fresh
    float32 values (no float16 rounding), so a row reads its predecessors' keys as one causal
    call would have them; a few rows only (more is a prefill: torch's GEMMs)."""
    return 1 < n <= KERNEL_ROWS and not cache.round_f16 and cache.k[layer].dtype == torch.float32


class Sequence:
    """One request's place in a batched call: its rows start at position ``pos0`` of ``cache``."""

    __slots__ = ("pos0", "n", "cache")

    def __init__(self, pos0: int, n: int, cache: KVCache):
        self.pos0, self.n, self.cache = pos0, n, cache


class BatchedContext(_HostPositions):
    """Several requests' rows in one call: x holds each request's rows in turn (``seqs`` in
    order). Each request attends to its own cache at its own positions; only the matmuls are
    shared, each request's rows getting exactly what its own call would (``linear_grouped``)."""

    splittable = False  # a block boundary could cut a request's rows

    def __init__(self, rope: RopeTable, seqs: list[Sequence]):
        self.rope, self.seqs = rope, seqs
        self.sizes = [s.n for s in seqs]
        self._rows = {}

    def linear(self, x: torch.Tensor, w: Weight) -> torch.Tensor:
        return linear_grouped(x, w, self.sizes)

    def _rope_rows_on(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        tables = [self.rope.get(s.pos0, s.n, device) for s in self.seqs]
        return torch.cat([c for c, _ in tables]), torch.cat([s for _, s in tables])

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out = self._attend_decode(layer, q, k, v)
        if out is not None:
            return out
        outs = []
        a = 0
        for s in self.seqs:
            b = a + s.n
            # Contiguous, as a request's own call has them (the same layout, so the same GEMMs).
            ki, vi = k[:, a:b].contiguous(), v[:, a:b].contiguous()
            outs.append(attend(q[:, a:b], ki, vi, s.cache, layer, s.pos0))
            s.cache.store(layer, s.pos0, ki, vi)
            a = b
        return torch.cat(outs)

    def _attend_decode(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor | None:
        """Every request one row past its cached positions, on the CPU: all of them in one C
        call (kernels.attention.decode_batch) that also stores each request's k/v, each row
        bit-identical to what the request's own step gives (the kernel computes each request
        apart, in the same order); or every request's few rows over exact caches (the Fast-AR's
        first call), row by row as ``DynamicContext`` runs them. None: the per-request path."""
        seqs = self.seqs
        if q.device.type != "cpu":
            return None
        kc, vc = [s.cache.k[layer] for s in seqs], [s.cache.v[layer] for s in seqs]
        if all(s.n == 1 and s.pos0 > 0 for s in seqs):
            return attention_kernel.decode_batch(q, k, v, kc, vc, [s.pos0 for s in seqs],
                                                 [attention_kernel.store_mode(s.cache.round_f16) for s in seqs])
        n = seqs[0].n
        if not all(s.n == n and exact_rows(s.cache, layer, n) for s in seqs):
            return None
        # Every request's row i in one call, as each request's own call runs its rows (row i
        # of request r is column r * n + i).
        outs = []
        for i in range(n):
            o = attention_kernel.decode_batch(q[:, i::n], k[:, i::n], v[:, i::n], kc, vc, [s.pos0 + i for s in seqs],
                                              [attention_kernel.STORE] * len(seqs))
            if o is None:
                return None
            outs.append(o)
        return torch.stack(outs, dim=1).reshape(len(seqs) * n, -1)

    def commit(self) -> None:
        for s in self.seqs:
            s.cache.n_past = s.pos0 + s.n


def layer_forward(x: torch.Tensor, lw: LayerWeights, cfg: TransformerConfig, ctx: LayerContext,
                  layer: int) -> torch.Tensor:
    """One pre-norm block over the rows of ``ctx``. x: (n, dim) float32 on the layer's device."""
    cos, sin = ctx.rope_rows(x.device)
    q, k, v = qkv_heads(ctx.linear(rms_norm(x, lw.attention_norm, cfg.norm_eps), lw.wqkv), lw, cfg, cos, sin)
    o = ctx.linear(ctx.attend(layer, q, k, v), lw.wo)
    n = x.shape[0]
    if n <= FFN_BLOCK_ROWS or not ctx.splittable:
        h, f = add_rms_norm(x, o, lw.ffn_norm, cfg.norm_eps)
        return h + mlp(f, lw, ctx.linear)
    h = x + o
    # A long prefill: the FFN's three (n, 9728) intermediates would be ~0.12 MB per prompt
    # row on the real model; rows are independent, so run them in (equal) blocks.
    out = torch.empty_like(h)
    n_blocks = -(-n // FFN_BLOCK_ROWS)
    for a in range(n_blocks):
        lo, hi = a * n // n_blocks, (a + 1) * n // n_blocks
        out[lo:hi] = h[lo:hi] + feed_forward(h[lo:hi], lw, cfg, ctx.linear)
    return out


# Prompt rows whose FFN runs at once. Blocks are equal in size (so never below
# CPU_PREFILL_MIN_ROWS, which picks the GEMM's rounding) and big enough to keep GEMMs efficient.
FFN_BLOCK_ROWS = 2048


def feed_forward(h: torch.Tensor, lw: LayerWeights, cfg: TransformerConfig,
                 mm: Callable[[torch.Tensor, Weight], torch.Tensor] = linear) -> torch.Tensor:
    return mlp(rms_norm(h, lw.ffn_norm, cfg.norm_eps), lw, mm)


def mlp(f: torch.Tensor, lw: LayerWeights, mm: Callable[[torch.Tensor, Weight], torch.Tensor] = linear
        ) -> torch.Tensor:
    """The FFN after its norm: w2 · (SiLU(w1 · f) ⊙ (w3 · f))."""
    return mm(F.silu(mm(f, lw.w1)) * mm(f, lw.w3), lw.w2)


def run_stack(x: torch.Tensor, stack: StackWeights, ctx: LayerContext,
              collect: list[torch.Tensor] | None = None) -> torch.Tensor:
    """Every layer of ``stack`` over the rows of ``ctx`` (moving x between devices at a GPU/CPU
    split), then ``ctx.commit()``. Returns the pre-norm output."""
    ctx.begin()
    for i, lw in enumerate(stack.layers):
        x = layer_forward(x.to(lw.device), lw, stack.cfg, ctx, i)
        if collect is not None:
            collect.append(x.detach().to("cpu"))
    ctx.commit()
    return x


def stack_forward(x: torch.Tensor, stack: StackWeights, rope: RopeTable, pos0: int,
                  cache: KVCache | None, collect: list[torch.Tensor] | None = None) -> torch.Tensor:
    """One request's rows at positions pos0.. of ``cache``: :func:`run_stack` in a
    :class:`DynamicContext` (the cache's ``n_past`` moves past them)."""
    return run_stack(x, stack, DynamicContext(rope, pos0, x.shape[0], cache), collect)
