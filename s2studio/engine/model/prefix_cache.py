"""The voice prefix cache: the Slow-AR KV of a prompt's voice prefix, computed once per voice.

A cloned voice's prompt starts with a system turn holding the reference transcript and its
codes (``text.prompt.build_prompt_and_prefix``): ~270 columns for 10 s of audio, the same for
every sentence and every take spoken with that voice. Prefilling it is most of the wait before
the first sound, so its keys and values are kept here and copied into the next take's cache.

Sample-identical with or without the cache. A prompt with a voice prefix is *always* prefilled
in two calls, the prefix then the rest (:func:`prefill_prompt`), whether the prefix is computed
now or copied from an entry. So the rest's rows see the same numbers either way: the prefix's
keys and values as the KV cache stores them (float16-rounded, as a decode step sees them), and
the same row count in every GEMM. Splitting the prompt is what makes the cache exact: the
prefill's rows are not independent of how many are computed together (in one call the rows
attend to each other's unrounded keys; and on the exact prefill path torch's float32 GEMM picks
its kernel by the row count), so a cached prefix followed by the rest could never equal one
call over the whole prompt. What a split costs, measured on the golden
models, is in docs/performance.md ("Voice prefix cache").

An entry is keyed by everything that changes its numbers: the prefix's tokens (voice codes,
transcript, tokenizer), the model object (its device, dtype and GPU layers), the KV cache's
dtype and rounding, the CPU thread count (the GEMM's blocking) and the kernel settings. The
memory is bounded: least recently used entries go first, and an entry larger than the whole
budget is never kept. One position of the full-size model is 36 layers × 2 × 8 heads × 128 ×
2 bytes = 144 KiB (kept as float16 when the cache rounds to it: the values are exactly float16).
"""

from __future__ import annotations

import collections
import hashlib
import threading
import weakref

import torch

from s2studio.engine.api import PrefixCacheStats
from s2studio.engine.model.transformer import KVCache

MIB = 1 << 20


class _Entry:
    __slots__ = ("k", "v", "length", "nbytes")

    def __init__(self, k: list[torch.Tensor], v: list[torch.Tensor], length: int):
        self.k, self.v, self.length = k, v, length
        self.nbytes = sum(t.numel() * t.element_size() for t in (*k, *v))


class PrefixCache:
    """LRU of voice prefixes' KV, at most ``budget_bytes`` in all (0: off). Thread-safe: the
    batcher's driver and a take run alone may use it (one at a time, under the pipeline's lock,
    but the stats are read from other threads)."""

    def __init__(self, budget_bytes: int):
        if budget_bytes < 0:
            raise ValueError("budget_bytes must be >= 0")
        self.budget_bytes = budget_bytes
        self._entries: collections.OrderedDict[bytes, _Entry] = collections.OrderedDict()
        self._bytes = 0
        self._hits = self._misses = 0
        self._model: weakref.ref | None = None
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.budget_bytes > 0

    def stats(self) -> PrefixCacheStats:
        with self._lock:
            return PrefixCacheStats(self._hits, self._misses, len(self._entries), self._bytes, self.budget_bytes)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def set_budget(self, budget_bytes: int) -> None:
        """A new budget; entries past it are dropped now (oldest first)."""
        with self._lock:
            self.budget_bytes = budget_bytes
            self._evict(0)

    def key(self, model, prefix: torch.Tensor) -> bytes:
        """The entry key of ``prefix`` (int64 (C+1, n)) on ``model``, in this process's settings.
        A different model object empties the cache (its entries cannot be used again)."""
        from s2studio.engine.kernels import backend

        with self._lock:
            if self._model is None or self._model() is not model:
                self._entries.clear()
                self._bytes = 0
                self._model = weakref.ref(model)
        h = hashlib.sha256()
        h.update(repr((tuple(prefix.shape), str(model.kv_dtype), model.kv_round_f16, torch.get_num_threads(),
                       backend.settings())).encode())
        h.update(prefix.detach().cpu().contiguous().numpy().tobytes())
        return h.digest()

    def restore(self, key: bytes, cache: KVCache) -> bool:
        """Copy the entry ``key`` into positions 0.. of ``cache`` (an empty one); False if absent."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self._misses += 1
                return False
            self._entries.move_to_end(key)
            self._hits += 1
        n = entry.length
        if not cache.reserve(n):
            raise RuntimeError(f"KV cache full ({cache.limit} positions)")
        for layer in range(len(cache.k)):
            cache.k[layer][:, :n] = entry.k[layer]
            cache.v[layer][:, :n] = entry.v[layer]
        cache.n_past = n
        return True

    def store(self, key: bytes, cache: KVCache) -> None:
        """Keep positions 0..n_past-1 of ``cache`` as the entry ``key`` (if it fits the budget)."""
        n = cache.n_past
        per_position = sum(2 * t.shape[0] * t.shape[2] for t in cache.k)
        # Values the cache rounded to float16 are exactly float16: keep them so, at half the size.
        dtype = torch.float16 if cache.round_f16 else cache.k[0].dtype
        if per_position * n * torch.empty(0, dtype=dtype).element_size() > self.budget_bytes:
            return
        entry = _Entry([t[:, :n].to(dtype, copy=True) for t in cache.k],
                       [t[:, :n].to(dtype, copy=True) for t in cache.v], n)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._evict(entry.nbytes)
            self._entries[key] = entry
            self._bytes += entry.nbytes

    def _evict(self, room: int) -> None:
        """(under the lock) Drop the least recently used entries until ``room`` more bytes fit."""
        while self._entries and self._bytes + room > self.budget_bytes:
            _, old = self._entries.popitem(last=False)
            self._bytes -= old.nbytes


def prefill_prompt(model, tokens: torch.Tensor, prefix_len: int, cache: KVCache,
                   prefix_cache: PrefixCache | None) -> torch.Tensor:
    """Prefill ``tokens`` (int64 (C+1, L)) into ``cache`` (empty), returning the final-norm
    hidden state of the last position. With a voice prefix (0 < ``prefix_len`` < L) the prompt
    runs in two calls, the prefix (or its copy from ``prefix_cache``) then the rest: the same
    numbers with the cache on or off (module docstring)."""
    n = tokens.shape[1]
    if not 0 < prefix_len < n:
        return model.forward_slow(tokens, cache=cache)
    prefix = tokens[:, :prefix_len]
    use_cache = prefix_cache is not None and prefix_cache.enabled
    key = prefix_cache.key(model, prefix) if use_cache else b""
    if not (use_cache and prefix_cache.restore(key, cache)):
        model.forward_slow(prefix, cache=cache)
        if use_cache:
            prefix_cache.store(key, cache)
    return model.forward_slow(tokens[:, prefix_len:], cache=cache)
