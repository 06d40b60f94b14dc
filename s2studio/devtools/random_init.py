"""Deterministic random tensors for the tiny model: values depend on (seed, tensor name) only,
so adding or reordering tensors never changes the others and output is byte-for-byte stable."""

from __future__ import annotations

import zlib

import numpy as np


class Init:
    """Deterministic per-tensor random source: values depend on (seed, name) only."""

    def __init__(self, seed: int):
        self.seed = seed

    def rng(self, name: str) -> np.random.Generator:
        return np.random.default_rng(np.random.SeedSequence([self.seed, zlib.crc32(name.encode())]))

    def normal(self, name, shape, std):
        return (self.rng(name).standard_normal(shape) * std).astype(np.float32)

    def around_one(self, name, shape, spread=0.1):
        return (1.0 + self.rng(name).standard_normal(shape) * spread).astype(np.float32)

    def uniform(self, name, shape, lo, hi):
        return self.rng(name).uniform(lo, hi, size=shape).astype(np.float32)

