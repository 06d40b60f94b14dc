"""The Dual-AR model: Slow-AR over the 11-row token matrix, Fast-AR over one frame's codebooks.

``DualAR`` owns the weights, the Slow-AR KV cache of the take run alone and the RoPE tables. It
computes logits and hidden states; it does not sample (see ``sampler``) and does not loop (see
``generate``). The pieces every decode path shares are written once here and used by all of
them (one request, ``batching``'s several, ``static_step``'s CUDA-graph steps): :meth:`embed`
(no host-side branch, so a graph can record it), :meth:`fast_start_rows` (a frame's first two
Fast-AR rows), :meth:`fast_logits`, :meth:`final_norm` and :meth:`head_rows`; the layers are
``transformer.run_stack`` over a context that says where the rows sit.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from s2studio.engine.model.config import ModelConfig
from s2studio.errors import InputError
from s2studio.engine.model.transformer import (FFN_BLOCK_ROWS, BatchedContext, DynamicContext, KVCache,
                                              LayerContext, RopeTable, Sequence, linear, linear_grouped, rms_norm, run_stack)
from s2studio.engine.kernels.qmatrix import QuantMatrix
from s2studio.engine.model.weights import DualARWeights


class DualAR:
    def __init__(self, cfg: ModelConfig, weights: DualARWeights, *, kv_round_f16: bool = True,
                 kv_dtype: torch.dtype = torch.float32, source: str = "(model built in memory)"):
        self.cfg = cfg
        self.source = source  # the model file: named in errors about what the weights compute
        self.w = weights
        self.kv_round_f16 = kv_round_f16
        self.kv_dtype = kv_dtype
        self.slow_rope = RopeTable(cfg.slow.head_dim, cfg.slow.rope_base)
        self.fast_rope = RopeTable(cfg.fast.head_dim, cfg.fast.rope_base) if cfg.fast else None
        self.cache: KVCache | None = None
        self.head_device = weights.embeddings.device
        self.fast_device = weights.fast_embeddings.device if weights.fast_embeddings is not None else None
        # Generation only ever samples the semantic ids and <|im_end|>; scoring just those rows
        # of the tied head is ~38x cheaper than the full vocabulary (docs/performance.md).
        self._head_ids: torch.Tensor | None = None
        self._head_rows: torch.Tensor | None = None
        # embed's constants, made once on the head device: a CUDA graph records their addresses.
        head = self.head_device
        self._codebook_offsets = (torch.arange(cfg.num_codebooks, dtype=torch.int64, device=head)
                                  * cfg.codebook_size)[:, None]
        self._embed_scale = torch.tensor(np.float32(1.0 / math.sqrt(cfg.num_codebooks + 1)), device=head)
        self._one = torch.tensor(1.0, dtype=torch.float32, device=head)

    def drop_caches(self) -> None:
        """Free the Slow-AR KV cache and the sampled head rows; both are rebuilt on demand."""
        self.release_cache()
        self._head_ids = self._head_rows = None

    # ---- Slow-AR ------------------------------------------------------------------------
    def new_cache(self, capacity: int, start: int | None = None) -> None:
        """A Slow-AR KV cache for up to ``capacity`` positions (prompt + max new frames + 1).

        Only ``start`` positions (default: all) are allocated now, the rest as they are used.
        The previous cache is dropped, never reused: a take that once asked for a huge budget
        must not keep its memory for every later take."""
        self.check_capacity(capacity)
        self.cache = None  # free the old one first: at full size it is hundreds of MB
        self.cache = self.make_cache(capacity, start)

    def make_cache(self, capacity: int, start: int | None = None) -> KVCache:
        """A Slow-AR KV cache owned by the caller (one per request of a batch); see :meth:`new_cache`."""
        self.check_capacity(capacity)
        start = capacity if start is None else max(1, min(start, capacity))
        devices = [lw.device for lw in self.w.slow.layers]
        return KVCache(self.cfg.slow, start, devices, self.kv_dtype, self.kv_round_f16, limit=capacity)

    def check_capacity(self, capacity: int) -> None:
        """``capacity`` Slow-AR positions (prompt + frame budget + 1) must fit the model's context."""
        if capacity > self.cfg.context_length + 1:
            raise InputError(f"The prompt and frame budget need {capacity - 1} positions; the model's context "
                             f"holds {self.cfg.context_length}.")

    def release_cache(self) -> None:
        """Drop the Slow-AR KV cache (a finished take's memory)."""
        self.cache = None

    @torch.no_grad()
    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens: int64 (C+1, n) → float32 (n, dim) input embeddings.

        Semantic columns add their codebooks' embeddings (and are scaled where the model asks);
        the others keep the token's embedding as it is. Written without a host-side branch on
        the token kinds (``torch.where``, not an ``if``), so a CUDA graph can record it; the
        numbers are those of adding the codebooks only where a column is semantic."""
        c = self.cfg
        tokens = tokens.to(self.head_device)
        ids = tokens[0]
        x = self.w.embeddings[ids].float()
        semantic = (ids >= c.semantic_begin_id) & (ids <= c.semantic_end_id)
        cb = self.w.codebook_embeddings
        rows = tokens[1:] + self._codebook_offsets  # codebook k's codes index its block of rows
        acc = cb[rows[0]].float()
        for k in range(1, c.num_codebooks):  # sequential f32 sum, as s2.cpp
            acc = acc + cb[rows[k]].float()
        x = torch.where(semantic[:, None], x + acc, x)
        if c.scale_codebook_embeddings:
            x = x * torch.where(semantic, self._embed_scale, self._one)[:, None]
        return x

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        """The Slow-AR's final RMSNorm of the rows ``x`` (last positions), on the head's device."""
        return rms_norm(x.to(self.head_device), self.w.slow.norm, self.cfg.slow.norm_eps)

    @torch.no_grad()
    def forward_slow(self, tokens: torch.Tensor, collect: list[torch.Tensor] | None = None,
                     cache: KVCache | None = None) -> torch.Tensor:
        """Evaluate columns at positions n_past.. (one call = one ggml graph) of ``cache``
        (default: the model's own, from :meth:`new_cache`). Returns the final-norm hidden state
        of the last position, float32 (dim,)."""
        cache = self.cache if cache is None else cache
        if cache is None:
            raise RuntimeError("call new_cache() before evaluating")
        n = tokens.shape[1]
        pos0 = cache.n_past
        if not cache.reserve(pos0 + n):
            raise RuntimeError(f"KV cache full ({cache.limit} positions)")
        x = run_stack(self.embed(tokens), self.w.slow, DynamicContext(self.slow_rope, pos0, n, cache), collect)
        return self.final_norm(x[-1:])[0]

    @torch.no_grad()
    def forward_slow_batch(self, columns: list[torch.Tensor], caches: list[KVCache]) -> torch.Tensor:
        """One decode step for several requests: column i (int64 (C+1, 1)) at the next position
        of cache i. One pass over the weights for all; each request's result is exactly what
        :meth:`forward_slow` gives it alone. Returns the final-norm hidden states (B, dim)."""
        for cache in caches:
            if not cache.reserve(cache.n_past + 1):
                raise RuntimeError(f"KV cache full ({cache.limit} positions)")
        ctx = BatchedContext(self.slow_rope, [Sequence(cache.n_past, 1, cache) for cache in caches])
        return self.final_norm(run_stack(self.embed(torch.cat(columns, dim=1)), self.w.slow, ctx))

    @torch.no_grad()
    def forward_slow_many(self, prompts: list[torch.Tensor], caches: list[KVCache]) -> torch.Tensor:
        """Several requests' prompts (int64 (C+1, n_i)), each at the next positions of its own
        cache, in one pass over the weights (several takes starting together). Each request's
        result is exactly what :meth:`forward_slow` gives it alone, provided no prompt is longer
        than ``FFN_BLOCK_ROWS`` (a longer one's FFN runs in blocks alone: run it alone).
        Returns the final-norm hidden states of each prompt's last position (B, dim)."""
        seqs = []
        for tokens, cache in zip(prompts, caches):
            n = tokens.shape[1]
            if n > FFN_BLOCK_ROWS:
                raise ValueError(f"a prompt of {n} positions is evaluated alone (more than {FFN_BLOCK_ROWS})")
            if not cache.reserve(cache.n_past + n):
                raise RuntimeError(f"KV cache full ({cache.limit} positions)")
            seqs.append(Sequence(cache.n_past, n, cache))
        ctx = BatchedContext(self.slow_rope, seqs)
        x = run_stack(self.embed(torch.cat(prompts, dim=1)), self.w.slow, ctx)
        last = np.cumsum([s.n for s in seqs]) - 1
        return self.final_norm(x[torch.from_numpy(last)])

    @torch.no_grad()
    def full_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """All vocab logits (tied head), float32 on CPU. For tracing and tests."""
        return linear(hidden[None], self.w.embeddings)[0].cpu()

    def head_ids(self, im_end_id: int) -> torch.Tensor:
        """The ids generation can pick: the semantic range, then ``im_end_id``."""
        self.head_rows(im_end_id)
        return self._head_ids

    def head_rows(self, im_end_id: int) -> torch.Tensor:
        """The tied head's rows of :meth:`head_ids` (float16 for a quantized head), made once."""
        if self._head_ids is None or int(self._head_ids[-1]) != im_end_id:
            c = self.cfg
            ids = torch.cat((torch.arange(c.semantic_begin_id, c.semantic_end_id + 1),
                             torch.tensor([im_end_id])))
            self._head_ids = ids
            rows = self.w.embeddings[ids.to(self.head_device)]
            if isinstance(self.w.embeddings, QuantMatrix):
                rows = rows.half()  # the same rounding as the float16 path; half the bytes
            self._head_rows = rows.contiguous()
        return self._head_rows

    @torch.no_grad()
    def sampled_logits(self, hidden: torch.Tensor, im_end_id: int) -> torch.Tensor:
        """Logits of the ids generation can pick (semantic range, then <|im_end|>), CPU f32."""
        return self.sampled_logits_batch(hidden[None], im_end_id)[0]

    @torch.no_grad()
    def sampled_logits_batch(self, hidden: torch.Tensor, im_end_id: int) -> torch.Tensor:
        """:meth:`sampled_logits` of each row of ``hidden`` (B, dim): (B, K+1), CPU f32."""
        return linear_grouped(hidden, self.head_rows(im_end_id), [1] * hidden.shape[0]).cpu()

    # ---- Fast-AR ------------------------------------------------------------------------
    # The Fast-AR keeps a float32 KV cache across a frame's 9 calls instead of recomputing the
    # 2..10-long sequence each time (s2.cpp): the maths is the same causal attention, and it
    # turns 9 small GEMMs into GEMVs.
    def new_fast_cache(self) -> KVCache:
        """One frame's Fast-AR KV cache: ``num_codebooks`` positions, float32, never rounded."""
        fc = self.cfg.fast
        return KVCache(fc, self.cfg.num_codebooks, [self.fast_device] * fc.n_layer, torch.float32, round_f16=False)

    def fast_start_rows(self, hidden: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
        """The rows that start B frames: for each request, position 0 its Slow-AR hidden
        (projected where the Fast-AR is narrower), position 1 its code 0's embedding.
        hidden: (B, dim); codes: int64 (B,) on the Fast-AR's device. Returns (2B, fast dim)."""
        fw = self.w
        z0 = hidden.to(self.fast_device)
        if fw.fast_project_in is not None:
            z0 = linear_grouped(z0, fw.fast_project_in, [1] * z0.shape[0])
        return torch.stack((z0, fw.fast_embeddings[codes].float()), dim=1).reshape(2 * z0.shape[0], -1)

    def fast_logits(self, x: torch.Tensor, ctx: LayerContext, n: int) -> torch.Tensor:
        """The Fast-AR over rows ``x`` (``n`` a request, in ``ctx``): the logits of each
        request's last row, (B, codebook_size) float32 on the Fast-AR's device."""
        fw = self.w
        y = run_stack(x, fw.fast, ctx)
        h = rms_norm(y[n - 1::n], fw.fast.norm, fw.fast.cfg.norm_eps)
        return linear_grouped(h, fw.fast_output, [1] * (y.shape[0] // n))

    @torch.no_grad()
    def fast_start(self, hidden: torch.Tensor, c0: int) -> tuple[KVCache, torch.Tensor]:
        """Start a frame: positions 0 (the Slow-AR hidden) and 1 (code 0) in one call.
        Returns (the frame's cache, logits for codebook 1 on the CPU)."""
        cache = self.new_fast_cache()
        x = self.fast_start_rows(hidden[None], torch.tensor([c0], device=self.fast_device))
        return cache, self.fast_logits(x, DynamicContext(self.fast_rope, 0, 2, cache), 2)[0].cpu()

    @torch.no_grad()
    def fast_next(self, cache: KVCache, code: int, pos: int) -> torch.Tensor:
        """Feed code c_{pos-1} at position pos; returns logits for codebook pos."""
        x = self.w.fast_embeddings[code].float()[None]
        return self.fast_logits(x, DynamicContext(self.fast_rope, pos, 1, cache), 1)[0].cpu()

    # ---- Fast-AR, batched: the B requests of a step are all at the same codebook ------------
    @torch.no_grad()
    def fast_start_batch(self, hidden: torch.Tensor, c0: list[int]) -> tuple[list[KVCache], torch.Tensor]:
        """:meth:`fast_start` for B requests (hidden (B, dim), their code 0): their caches and
        logits (B, codebook_size), each row as the request alone gets it."""
        caches = [self.new_fast_cache() for _ in c0]
        x = self.fast_start_rows(hidden, torch.tensor(c0, dtype=torch.int64, device=self.fast_device))
        ctx = BatchedContext(self.fast_rope, [Sequence(0, 2, c) for c in caches])
        return caches, self.fast_logits(x, ctx, 2).cpu()

    @torch.no_grad()
    def fast_next_batch(self, caches: list[KVCache], codes: list[int], pos: int) -> torch.Tensor:
        """:meth:`fast_next` for B requests: code i fed at position ``pos`` of cache i."""
        x = torch.stack([self.w.fast_embeddings[c].float() for c in codes])
        return self.fast_logits(x, BatchedContext(self.fast_rope, [Sequence(pos, 1, c) for c in caches]), 1).cpu()
