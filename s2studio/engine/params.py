"""Sampling parameters of one take. No torch here: the app builds requests on its UI thread
before torch is imported (the window must appear first)."""

from __future__ import annotations

from dataclasses import dataclass

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
        if self.max_new_tokens < 1:
            raise InputError(f"max_new_tokens must be at least 1, not {self.max_new_tokens}")
        if self.temperature < 0 or self.top_p < 0 or self.top_k < 0 or self.min_tokens_before_end < 0:
            raise InputError("temperature, top_p, top_k and min_tokens_before_end must not be negative")
        return self
