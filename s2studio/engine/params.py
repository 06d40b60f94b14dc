"""Sampling parameters of one take. No torch here: the app builds requests on its UI thread
before torch is imported (the window must appear first)."""

from __future__ import annotations

from dataclasses import dataclass

from s2studio.engine.limits import check
from s2studio.errors import InputError


@dataclass(frozen=True)
class GenerationParams:
    max_new_tokens: int = 1024
    temperature: float = 0.8
    top_p: float = 0.8
    top_k: int = 30
    min_tokens_before_end: int = 0
    ras: bool = True
    seed: int | None = None

    def validated(self) -> "GenerationParams":
        """Self, if every field lies in its documented range (:data:`s2studio.engine.limits.LIMITS`);
        otherwise an :class:`InputError` naming the field. The model in use bounds
        ``max_new_tokens`` further (prompt + frames ≤ its context), checked at generation."""
        for name in ("max_new_tokens", "temperature", "top_p", "top_k", "min_tokens_before_end"):
            check(name, getattr(self, name))
        if self.seed is not None:
            check("seed", self.seed)
        if not isinstance(self.ras, bool):
            raise InputError(f"ras must be true or false, not {self.ras!r}.")
        return self
