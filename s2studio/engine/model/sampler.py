"""s2.cpp's sampler: top-k, then top-p on temperature-1 probabilities, then temperature.

Order matters and is easy to get wrong (docs/spec/engine.md §6.2): the top-p cut uses the softmax
of the *raw* logits; the item whose inclusive cumulative probability first exceeds top_p is
dropped (item 0 is always kept); temperature only shapes the draw among the survivors.
T ≤ 0 is an exact argmax. Draws come from a seedable ``torch.Generator`` (s2.cpp has none).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Repetition-aware resampling constants (s2.cpp and fish-speech agree).
RAS_WINDOW = 10
RAS_TEMPERATURE = 1.0
RAS_TOP_P = 0.9


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.8
    top_p: float = 0.8
    top_k: int = 30


def sample_token(logits: torch.Tensor, temperature: float, top_p: float, top_k: int,
                 generator: torch.Generator | None = None) -> int:
    """Index into ``logits`` (1-D float32, CPU). -inf entries are never chosen.

    One deliberate difference: top_p >= 1 means "no top-p cut". In s2.cpp the float running
    sum can creep above 1.0 and drop the last candidates even then (docs/spec/engine.md §6.2).
    """
    if temperature <= 0:
        return int(torch.argmax(logits))  # item 0 always survives, and it is the argmax
    n = logits.shape[0]
    k = top_k if 0 < top_k <= n else n
    top_p = min(max(top_p, 0.0), 1.0)
    # Only the top-k prefix can survive, so a partial sort is enough; the top-p cut needs
    # the probabilities at T=1 over *all* logits, hence the full logsumexp.
    vals, idx = torch.topk(logits, k, sorted=True) if k < n else torch.sort(logits, descending=True, stable=True)
    keep = vals > float("-inf")
    if top_p < 1.0:
        cum = torch.cumsum(torch.exp(vals - torch.logsumexp(logits, 0)), 0)
        keep &= cum <= top_p
    keep[0] = True
    # keep is a prefix (cum is monotonic, -inf sorts last), so the survivors are vals[:m].
    m = int(keep.sum())
    probs = torch.softmax(vals[:m] / temperature, 0)
    choice = torch.multinomial(probs, 1, generator=generator)
    return int(idx[int(choice)])


class RepetitionWindow:
    """The last RAS_WINDOW final main tokens (frame 0's token included, as s2.cpp)."""

    def __init__(self) -> None:
        self.tokens: list[int] = []

    def __contains__(self, token: int) -> bool:
        return token in self.tokens

    def push(self, token: int) -> None:
        self.tokens.append(token)
        if len(self.tokens) > RAS_WINDOW:
            self.tokens.pop(0)
