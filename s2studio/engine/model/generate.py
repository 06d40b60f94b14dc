"""The Dual-AR generation loop (s2.cpp ``generate``), as a generator of frames.

Each yielded ``Frame`` holds the 10 codes of one audio frame (~46 ms of audio). The consumer
can stop at any frame boundary: by setting the ``cancel`` event, or simply by closing the
generator. Differences from s2.cpp, all deliberate and documented:
- ``seed``: draws come from one seeded ``torch.Generator`` (RAS included), so runs repeat.
- ``ras=False`` turns repetition-aware resampling off; with temperature ≤ 0 it is skipped too,
  so greedy decoding is deterministic (s2.cpp resamples even at T=0).
- If RAS turns a repeated token into ``<|im_end|>``, generation ends (as fish-speech does);
  s2.cpp would emit a frame with code 0 and continue (spec quirk Q1).
- After the last allowed frame, s2.cpp runs one more Slow-AR step whose result it discards;
  we skip it (quirk Q2, same output).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch

from s2studio.engine.model.dual_ar import DualAR
from s2studio.errors import InputError, ModelFileError
from s2studio.engine.params import GenerationParams
from s2studio.engine.model.sampler import RAS_TEMPERATURE, RAS_TOP_P, RepetitionWindow, sample_token

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Frame:
    index: int
    codes: np.ndarray  # int32 (num_codebooks,)


@dataclass
class GenerationStats:
    seed: int = 0
    prompt_tokens: int = 0
    frames: int = 0
    prefill_s: float = 0.0
    slow_s: float = 0.0  # Slow-AR steps after prefill, including the head
    fast_s: float = 0.0  # Fast-AR incl. its sampling
    stop_reason: str = ""  # "end" | "max_tokens" | "cancelled"

    @property
    def ms_per_frame(self) -> float:
        return 1000.0 * (self.slow_s + self.fast_s) / max(self.frames, 1)


# Frames the Slow-AR KV cache has room for before it first grows.
CACHE_START_FRAMES = 256


def check_fits_context(prompt_tokens: int, max_new_tokens: int, context_length: int) -> None:
    """The prompt plus the frame budget must fit the model's context (its positions)."""
    if prompt_tokens >= context_length:
        raise InputError(f"The prompt is {prompt_tokens} tokens, but the model's context holds only "
                         f"{context_length}; use shorter text (or turn on segmentation) or a shorter reference.")
    if prompt_tokens + max_new_tokens > context_length:
        raise InputError(f"max_new_tokens {max_new_tokens} plus the prompt's {prompt_tokens} tokens exceed the "
                         f"model's context of {context_length} positions; use at most "
                         f"{context_length - prompt_tokens} frames for this prompt.")


def check_finite(model: DualAR, logits: torch.Tensor, what: str, frame: int, *, when: str = "") -> None:
    """Stop with one message naming the model file when ``logits`` hold NaN or infinity (NaN or
    infinite weights, or metadata that makes the maths blow up). Checked on the rows about to
    be sampled only: one small reduction per sampled row, nothing per activation."""
    if not bool(torch.isfinite(logits).all()):
        where = when or f"at frame {frame}"
        raise ModelFileError(model.source, f"the model computed non-finite {what} (NaN or infinity) {where}: "
                                           "its weights or metadata are damaged. Download the model again.")


def generate_frames(model: DualAR, prompt: np.ndarray, params: GenerationParams, *, im_end_id: int,
                    cancel: threading.Event | None = None,
                    stats: GenerationStats | None = None) -> Iterator[Frame]:
    """Prefill ``prompt`` (int [C+1, L]) and yield frames until <|im_end|>, the token budget,
    or cancellation."""
    params = params.validated()
    cfg = model.cfg
    st = stats if stats is not None else GenerationStats()
    seed = params.seed if params.seed is not None else random.SystemRandom().randrange(2**63)
    st.seed = seed
    gen = torch.Generator().manual_seed(seed)
    K, B, C = cfg.codebook_size, cfg.semantic_begin_id, cfg.num_codebooks
    T, top_p, top_k = params.temperature, params.top_p, params.top_k
    n_max, min_end = params.max_new_tokens, params.min_tokens_before_end

    def cancelled() -> bool:
        return cancel is not None and cancel.is_set()

    def sample_main(hidden: torch.Tensor, step: int, temperature: float, p: float) -> int:
        logits = model.sampled_logits(hidden, im_end_id)  # [semantic 0..K-1, im_end]
        check_finite(model, logits, "Slow-AR logits", step)
        if step < min_end:
            logits[-1] = float("-inf")
        i = sample_token(logits, temperature, p, top_k, gen)
        return B + i if i < K else im_end_id

    if cancelled():
        st.stop_reason = "cancelled"
        return
    tokens = torch.from_numpy(np.ascontiguousarray(prompt, dtype=np.int64))
    if tokens.ndim != 2 or tokens.shape[0] != C + 1:
        raise InputError(f"prompt must have {C + 1} rows, got shape {tuple(tokens.shape)}")
    n_prompt = tokens.shape[1]
    check_fits_context(n_prompt, n_max, cfg.context_length)
    st.prompt_tokens = n_prompt
    t0 = time.perf_counter()
    # The cache starts at the prompt plus a few hundred frames and grows as frames come, so a
    # large budget costs memory only if the model really speaks that long.
    model.new_cache(n_prompt + n_max + 1, start=n_prompt + CACHE_START_FRAMES)
    hidden = model.forward_slow(tokens)
    step = 0
    main = sample_main(hidden, step, T, top_p)
    st.prefill_s = time.perf_counter() - t0
    window = RepetitionWindow()
    while True:
        if main == im_end_id:
            st.stop_reason = "end"
            break
        if params.ras and T > 0 and main in window:  # main is semantic here
            main = sample_main(hidden, step, RAS_TEMPERATURE, RAS_TOP_P)
            if main == im_end_id:
                st.stop_reason = "end"
                break
        window.push(main)
        codes = np.empty(C, dtype=np.int32)
        codes[0] = min(max(main - B, 0), K - 1)
        t_fast = time.perf_counter()
        cache, logits = model.fast_start(hidden, int(codes[0]))
        check_finite(model, logits, "Fast-AR logits", step)
        codes[1] = sample_token(logits, T, top_p, top_k, gen)
        for j in range(2, C):
            logits = model.fast_next(cache, int(codes[j - 1]), j)
            check_finite(model, logits, "Fast-AR logits", step)
            codes[j] = sample_token(logits, T, top_p, top_k, gen)
        t_done = time.perf_counter()
        st.fast_s += t_done - t_fast
        st.frames += 1
        yield Frame(step, codes)
        if cancelled():
            st.stop_reason = "cancelled"
            break
        step += 1
        if step >= n_max:
            st.stop_reason = "max_tokens"
            break
        t_slow = time.perf_counter()
        column = torch.from_numpy(np.concatenate(([main], codes)).astype(np.int64)[:, None])
        hidden = model.forward_slow(column)
        main = sample_main(hidden, step, T, top_p)
        st.slow_s += time.perf_counter() - t_slow
    log.debug("generation stopped (%s) after %d frames", st.stop_reason, st.frames)


def generate_codes(model: DualAR, prompt: np.ndarray, params: GenerationParams, *, im_end_id: int,
                   cancel: threading.Event | None = None,
                   stats: GenerationStats | None = None) -> np.ndarray:
    """All frames at once: int32 [num_codebooks, n_frames]."""
    frames = [f.codes for f in generate_frames(model, prompt, params, im_end_id=im_end_id,
                                               cancel=cancel, stats=stats)]
    if not frames:
        return np.zeros((model.cfg.num_codebooks, 0), dtype=np.int32)
    return np.stack(frames, axis=1)
