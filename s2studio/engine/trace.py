"""Teacher-forced tracing: run a model on a given prompt and given frames, keep every logit.

This is how parity with s2.cpp is checked (tests/data/golden/README.md, "How to compare" 3): free-running
outputs diverge at the first differing sample, teacher-forced logits do not. The arrays use
the golden dump layout, so any new model file can be compared against s2.cpp the same way.
"""

from __future__ import annotations

import numpy as np
import torch

from s2studio.engine.model.dual_ar import DualAR
from s2studio.errors import InputError


def teacher_forced_trace(model: DualAR, prompt: np.ndarray, codes: np.ndarray,
                         main_tokens: np.ndarray) -> dict[str, np.ndarray]:
    """prompt int [C+1, T], codes int [C, F], main_tokens int [F] →
    slow_logits [F+1, V], slow_hidden [F+1, D], fast_logits [F, C-1, K] (float32)."""
    cfg = model.cfg
    C = cfg.num_codebooks
    prompt, codes, main_tokens = np.asarray(prompt), np.asarray(codes), np.asarray(main_tokens).reshape(-1)
    if prompt.ndim != 2 or prompt.shape[0] != C + 1:
        raise InputError(f"prompt must be [{C + 1}, T], got {list(prompt.shape)}")
    if codes.ndim != 2 or codes.shape[0] != C:
        raise InputError(f"codes must be [{C}, F], got {list(codes.shape)}")
    n = codes.shape[1]
    if main_tokens.shape[0] != n:
        raise InputError(f"main tokens ({main_tokens.shape[0]}) and code frames ({n}) differ in count")
    slow_logits, slow_hidden = [], []
    fast_logits = np.zeros((n, C - 1, cfg.codebook_size), dtype=np.float32)
    model.new_cache(prompt.shape[1] + n + 1)
    hidden = model.forward_slow(torch.from_numpy(prompt.astype(np.int64)))
    for f in range(n + 1):
        slow_logits.append(model.full_logits(hidden).numpy())
        slow_hidden.append(hidden.cpu().numpy())
        if f == n:
            break
        cache, logits = model.fast_start(hidden, int(codes[0, f]))
        fast_logits[f, 0] = logits.numpy()
        for j in range(2, C):
            fast_logits[f, j - 1] = model.fast_next(cache, int(codes[j - 1, f]), j).numpy()
        column = np.concatenate(([main_tokens[f]], codes[:, f])).astype(np.int64)[:, None]
        hidden = model.forward_slow(torch.from_numpy(column))
    return {
        "slow_logits": np.stack(slow_logits).astype(np.float32),
        "slow_hidden": np.stack(slow_hidden).astype(np.float32),
        "fast_logits": fast_logits,
    }
