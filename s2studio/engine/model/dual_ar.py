"""The Dual-AR model: Slow-AR over the 11-row token matrix, Fast-AR over one frame's codebooks.

``DualAR`` owns the weights, the Slow-AR KV cache and the RoPE tables. It computes logits and
hidden states; it does not sample (see ``sampler``) and does not loop (see ``generate``).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from s2studio.engine.model.config import ModelConfig
from s2studio.errors import InputError
from s2studio.engine.model.transformer import (KVCache, RopeTable, Sequence, linear, linear_grouped, rms_norm,
                                              stack_forward, stack_forward_batch)
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
        # Generation only ever samples the semantic ids and <|im_end|>; scoring just those rows
        # of the tied head is ~38x cheaper than the full vocabulary (docs/performance.md).
        self._head_ids: torch.Tensor | None = None
        self._head_rows: torch.Tensor | None = None
        # The static decode steps (``static_step.StaticDecoder``) once a take has used them:
        # kept across takes so their CUDA graphs are reused; dropped with the other caches.
        self.static_decoder = None

    def drop_caches(self) -> None:
        """Free the Slow-AR KV cache and the sampled head rows; both are rebuilt on demand."""
        self.release_cache()
        self._head_ids = self._head_rows = None
        self.static_decoder = None

    # ---- Slow-AR ------------------------------------------------------------------------
    def new_cache(self, capacity: int, start: int | None = None) -> None:
        """A Slow-AR KV cache for up to ``capacity`` positions (prompt + max new frames + 1).

        Only ``start`` positions (default: all) are allocated now, the rest as they are used.
        The previous cache is dropped, never reused: a take that once asked for a huge budget
        must not keep its memory for every later take."""
        self._check_capacity(capacity)
        self.cache = None  # free the old one first: at full size it is hundreds of MB
        self.cache = self.make_cache(capacity, start)

    def make_cache(self, capacity: int, start: int | None = None) -> KVCache:
        """A Slow-AR KV cache owned by the caller (one per request of a batch); see :meth:`new_cache`."""
        self._check_capacity(capacity)
        start = capacity if start is None else max(1, min(start, capacity))
        devices = [lw.device for lw in self.w.slow.layers]
        return KVCache(self.cfg.slow, start, devices, self.kv_dtype, self.kv_round_f16, limit=capacity)

    def _check_capacity(self, capacity: int) -> None:
        if capacity > self.cfg.context_length + 1:
            raise InputError(f"The prompt and frame budget need {capacity - 1} positions; the model's context "
                             f"holds {self.cfg.context_length}.")

    def release_cache(self) -> None:
        """Drop the Slow-AR KV cache (a finished take's memory)."""
        self.cache = None

    @torch.no_grad()
    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens: int64 (C+1, n) on CPU → float32 (n, dim) input embeddings."""
        c = self.cfg
        dev = self.head_device
        tokens = tokens.to(dev)
        ids = tokens[0]
        x = self.w.embeddings[ids].float()
        semantic = (ids >= c.semantic_begin_id) & (ids <= c.semantic_end_id)
        if bool(semantic.any()):
            cb = self.w.codebook_embeddings
            acc = cb[tokens[1]].float()
            for k in range(1, c.num_codebooks):  # sequential f32 sum, as s2.cpp
                acc = acc + cb[tokens[k + 1] + k * c.codebook_size].float()
            x = x + acc * semantic[:, None].float()
            if c.scale_codebook_embeddings:
                scale = torch.where(semantic, torch.tensor(np.float32(1.0 / math.sqrt(c.num_codebooks + 1)),
                                                           device=dev), torch.tensor(1.0, device=dev))
                x = x * scale[:, None]
        return x

    def _final_hidden(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x[-1:].to(self.head_device), self.w.slow.norm, self.cfg.slow.norm_eps)[0]

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
        x = self.embed(tokens)
        x = stack_forward(x, self.w.slow, self.slow_rope, pos0, cache, collect)
        cache.n_past = pos0 + n
        return self._final_hidden(x)

    @torch.no_grad()
    def forward_slow_batch(self, columns: list[torch.Tensor], caches: list[KVCache]) -> torch.Tensor:
        """One decode step for several requests: column i (int64 (C+1, 1)) at the next position
        of cache i. One pass over the weights for all; each request's result is exactly what
        :meth:`forward_slow` gives it alone. Returns the final-norm hidden states (B, dim)."""
        seqs = []
        for cache in caches:
            if not cache.reserve(cache.n_past + 1):
                raise RuntimeError(f"KV cache full ({cache.limit} positions)")
            seqs.append(Sequence(cache.n_past, 1, cache))
        x = torch.cat([self.embed(c) for c in columns])
        x = stack_forward_batch(x, self.w.slow, self.slow_rope, seqs)
        for cache in caches:
            cache.n_past += 1
        return rms_norm(x.to(self.head_device), self.w.slow.norm, self.cfg.slow.norm_eps)

    @torch.no_grad()
    def full_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """All vocab logits (tied head), float32 on CPU. For tracing and tests."""
        return linear(hidden[None], self.w.embeddings)[0].cpu()

    def head_ids(self, im_end_id: int) -> torch.Tensor:
        if self._head_ids is None or int(self._head_ids[-1]) != im_end_id:
            c = self.cfg
            ids = torch.cat((torch.arange(c.semantic_begin_id, c.semantic_end_id + 1),
                             torch.tensor([im_end_id])))
            self._head_ids = ids
            rows = self.w.embeddings[ids.to(self.head_device)]
            if isinstance(self.w.embeddings, QuantMatrix):
                rows = rows.half()  # the same rounding as the float16 path; half the bytes
            self._head_rows = rows.contiguous()
        return self._head_ids

    @torch.no_grad()
    def sampled_logits(self, hidden: torch.Tensor, im_end_id: int) -> torch.Tensor:
        """Logits of the ids generation can pick (semantic range, then <|im_end|>), CPU f32."""
        self.head_ids(im_end_id)
        return linear(hidden[None], self._head_rows)[0].cpu()

    @torch.no_grad()
    def sampled_logits_batch(self, hidden: torch.Tensor, im_end_id: int) -> torch.Tensor:
        """:meth:`sampled_logits` of each row of ``hidden`` (B, dim): (B, K+1), CPU f32."""
        self.head_ids(im_end_id)
        return linear_grouped(hidden, self._head_rows, [1] * hidden.shape[0]).cpu()

    # ---- Fast-AR ------------------------------------------------------------------------
    @torch.no_grad()
    def fast_start(self, hidden: torch.Tensor, c0: int) -> tuple[KVCache, torch.Tensor]:
        """Start a frame: positions 0 (the Slow-AR hidden) and 1 (code 0) in one call.

        The Fast-AR keeps a float32 KV cache across a frame's 9 calls instead of recomputing
        the 2..10-long sequence each time (s2.cpp): the maths is the same causal attention,
        and it turns 9 small GEMMs into GEMVs. Returns (cache, logits for codebook 1)."""
        fw, fc = self.w, self.cfg.fast
        dev = fw.fast_embeddings.device
        z0 = hidden.to(dev)
        if fw.fast_project_in is not None:
            z0 = linear(z0[None], fw.fast_project_in)[0]
        x = torch.stack((z0, fw.fast_embeddings[c0].float()))
        cache = KVCache(fc, self.cfg.num_codebooks, [dev] * fc.n_layer, torch.float32, round_f16=False)
        return cache, self._fast_eval(x, cache, 0)

    @torch.no_grad()
    def fast_next(self, cache: KVCache, code: int, pos: int) -> torch.Tensor:
        """Feed code c_{pos-1} at position pos; returns logits for codebook pos."""
        x = self.w.fast_embeddings[code].float()[None]
        return self._fast_eval(x, cache, pos)

    def _fast_eval(self, x: torch.Tensor, cache: KVCache, pos0: int) -> torch.Tensor:
        fw = self.w
        y = stack_forward(x, fw.fast, self.fast_rope, pos0, cache)
        cache.n_past = pos0 + x.shape[0]
        h = rms_norm(y[-1:], fw.fast.norm, fw.fast.cfg.norm_eps)
        return linear(h, fw.fast_output)[0].cpu()

    # ---- Fast-AR, batched: the B requests of a step are all at the same codebook ------------
    @torch.no_grad()
    def fast_start_batch(self, hidden: torch.Tensor, c0: list[int]) -> tuple[list[KVCache], torch.Tensor]:
        """:meth:`fast_start` for B requests (hidden (B, dim), their code 0): their caches and
        logits (B, codebook_size), each row as the request alone gets it."""
        fw, fc = self.w, self.cfg.fast
        dev = fw.fast_embeddings.device
        b = hidden.shape[0]
        z0 = hidden.to(dev)
        if fw.fast_project_in is not None:
            z0 = linear_grouped(z0, fw.fast_project_in, [1] * b)
        rows = []
        for i in range(b):
            rows += [z0[i], fw.fast_embeddings[c0[i]].float()]
        x = torch.stack(rows)
        caches = [KVCache(fc, self.cfg.num_codebooks, [dev] * fc.n_layer, torch.float32, round_f16=False)
                  for _ in range(b)]
        return caches, self._fast_eval_batch(x, caches, 0, 2)

    @torch.no_grad()
    def fast_next_batch(self, caches: list[KVCache], codes: list[int], pos: int) -> torch.Tensor:
        """:meth:`fast_next` for B requests: code i fed at position ``pos`` of cache i."""
        x = torch.stack([self.w.fast_embeddings[c].float() for c in codes])
        return self._fast_eval_batch(x, caches, pos, 1)

    def _fast_eval_batch(self, x: torch.Tensor, caches: list[KVCache], pos0: int, n: int) -> torch.Tensor:
        fw = self.w
        y = stack_forward_batch(x, fw.fast, self.fast_rope, [Sequence(pos0, n, c) for c in caches])
        for c in caches:
            c.n_past = pos0 + n
        h = rms_norm(y[n - 1::n], fw.fast.norm, fw.fast.cfg.norm_eps)
        return linear_grouped(h, fw.fast_output, [1] * len(caches)).cpu()
