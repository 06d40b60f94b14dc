"""Min/max peak buckets for drawing waveforms (pure numpy, off the paint path)."""

from __future__ import annotations

import numpy as np


def peak_buckets(samples: np.ndarray, buckets: int) -> tuple[np.ndarray, np.ndarray]:
    """(mins, maxs), each of length ``min(buckets, len(samples))``: the extremes of each
    equal slice of ``samples``. Drawing min..max per pixel column shows every transient,
    which averaging would hide."""
    x = np.asarray(samples, dtype=np.float32)
    n = len(x)
    buckets = max(0, min(int(buckets), n))
    if buckets == 0:
        return np.zeros(0, np.float32), np.zeros(0, np.float32)
    edges = np.linspace(0, n, buckets + 1).astype(np.int64)
    starts = edges[:-1]
    # reduceat over slice starts: each slice is non-empty because buckets <= n
    return np.minimum.reduceat(x, starts), np.maximum.reduceat(x, starts)
