"""The Dual-AR generation loop (s2.cpp ``generate``), as a generator of frames.

Each yielded ``Frame`` holds the 10 codes of one audio frame (~46 ms of audio). The consumer
can stop at any frame boundary: by setting the ``cancel`` event, or simply by closing the
generator. Differences from s2.cpp, all deliberate and documented:
- ``seed``: draws come from one seeded ``torch.Generator`` (RAS included), so runs repeat.
- ``ras=False`` turns repetition-aware resampling off; with temperature ≤ 0 it is skipped too,
  so greedy decoding is deterministic (s2.cpp resamples even at T=0).
- If RAS turns a repeated token into ``<|im_end|>``, generation ends (as fish-speech does);
  s2.cpp would emit a frame with code 0 and continue (docs/spec/engine.md §7.2, Q1).
- After the last allowed frame, s2.cpp runs one more Slow-AR step whose result it discards;
  we skip it (docs/spec/engine.md §7.2, Q2; same output).
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
from s2studio.engine.model.prefix_cache import PrefixCache, prefill_prompt
from s2studio.engine.model.sampler import RAS_TEMPERATURE, RAS_TOP_P, RepetitionWindow, sample_token
from s2studio.engine.model.static_step import resolve_mode, static_decoder
from s2studio.engine.model.step_cache import StepCache

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


class FrameSampler:
    """One take's sampling state between model calls: its seeded generator, the RAS window, the
    step count and the stop rules of s2.cpp's loop. The model calls themselves are the caller's:
    :func:`generate_frames` runs them for one take, ``engine.batching`` for several takes at
    once, and both drive this class in the same order, so a seeded take draws the same numbers
    either way.

    The per-frame protocol: :meth:`take_hidden` (after the prefill or a Slow-AR step), then
    :meth:`begin_frame` (code 0, or None: the take ended), :meth:`take_codes` for codebooks
    1..C-1, :meth:`end_frame`, then :meth:`continues` (False: stop) and :meth:`column` for the
    next Slow-AR step."""

    def __init__(self, model: DualAR, prompt: np.ndarray, params: GenerationParams, *, im_end_id: int,
                 cancel: threading.Event | None = None, stats: GenerationStats | None = None):
        self.params = params = params.validated()
        self.model = model
        cfg = model.cfg
        self.stats = st = stats if stats is not None else GenerationStats()
        seed = params.seed if params.seed is not None else random.SystemRandom().randrange(2**63)
        st.seed = seed
        self.gen = torch.Generator().manual_seed(seed)
        self.K, self.B, self.C = cfg.codebook_size, cfg.semantic_begin_id, cfg.num_codebooks
        self.im_end_id = im_end_id
        self.cancel = cancel
        self.prompt = prompt
        self.context_length = cfg.context_length
        self.window = RepetitionWindow()
        self.step = 0
        self.main = -1
        self.hidden: torch.Tensor | None = None
        self.codes = np.empty(self.C, dtype=np.int32)
        self._main_logits: torch.Tensor | None = None

    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def prompt_tokens(self) -> torch.Tensor:
        """The prompt as int64 (C+1, L), checked against the model and its context."""
        tokens = torch.from_numpy(np.ascontiguousarray(self.prompt, dtype=np.int64))
        if tokens.ndim != 2 or tokens.shape[0] != self.C + 1:
            raise InputError(f"prompt must have {self.C + 1} rows, got shape {tuple(tokens.shape)}")
        check_fits_context(tokens.shape[1], self.params.max_new_tokens, self.context_length)
        self.stats.prompt_tokens = tokens.shape[1]
        return tokens

    def cache_size(self, n_prompt: int) -> tuple[int, int]:
        """(capacity, start) of this take's Slow-AR KV cache. It starts at the prompt plus a
        few hundred frames and grows as frames come, so a large budget costs memory only if
        the model really speaks that long."""
        return n_prompt + self.params.max_new_tokens + 1, n_prompt + CACHE_START_FRAMES

    def _sample_main(self, temperature: float, p: float) -> int:
        logits = self._main_logits.clone()  # [semantic 0..K-1, im_end]; RAS may draw again
        check_finite(self.model, logits, "Slow-AR logits", self.step)
        if self.step < self.params.min_tokens_before_end:
            logits[-1] = float("-inf")
        i = sample_token(logits, temperature, p, self.params.top_k, self.gen)
        return self.B + i if i < self.K else self.im_end_id

    def take_hidden(self, hidden: torch.Tensor, main_logits: torch.Tensor) -> None:
        """The Slow-AR's hidden state and head logits for this step: draws the main token."""
        self.hidden, self._main_logits = hidden, main_logits
        self.main = self._sample_main(self.params.temperature, self.params.top_p)

    def begin_frame(self) -> int | None:
        """Code 0 of the next frame, or None when the take ends here (``stop_reason`` "end")."""
        p = self.params
        main = self.main
        if main == self.im_end_id:
            self.stats.stop_reason = "end"
            return None
        if p.ras and p.temperature > 0 and main in self.window:  # main is semantic here
            main = self.main = self._sample_main(RAS_TEMPERATURE, RAS_TOP_P)
            if main == self.im_end_id:
                self.stats.stop_reason = "end"
                return None
        self.window.push(main)
        self.codes = np.empty(self.C, dtype=np.int32)
        self.codes[0] = min(max(main - self.B, 0), self.K - 1)
        return int(self.codes[0])

    def take_codes(self, j: int, logits: torch.Tensor) -> int:
        """Draw codebook ``j`` from the Fast-AR's logits."""
        p = self.params
        check_finite(self.model, logits, "Fast-AR logits", self.step)
        self.codes[j] = sample_token(logits, p.temperature, p.top_p, p.top_k, self.gen)
        return int(self.codes[j])

    def end_frame(self) -> Frame:
        self.stats.frames += 1
        return Frame(self.step, self.codes)

    def continues(self) -> bool:
        """After a frame went out: whether another Slow-AR step is wanted (else the reason is
        in ``stats.stop_reason``)."""
        if self.cancelled():
            self.stats.stop_reason = "cancelled"
            return False
        self.step += 1
        if self.step >= self.params.max_new_tokens:
            self.stats.stop_reason = "max_tokens"
            return False
        return True

    def column(self) -> torch.Tensor:
        """The next Slow-AR input: this frame's main token and codes, int64 (C+1, 1)."""
        return torch.from_numpy(np.concatenate(([self.main], self.codes)).astype(np.int64)[:, None])


class DynamicSteps:
    """The model calls of one take on the dynamic path: a KV cache that grows as the take gets
    longer, positions as Python numbers (the CPU default). :class:`static_step.StaticDecoder`
    has the same four methods over static shapes (for CUDA graphs); the frame loop uses either.
    The frame's Fast-AR cache is this object's; the Slow-AR's is the model's own (``new_cache``,
    dropped by ``release_cache`` when the take ends)."""

    def __init__(self, model: DualAR, capacity: int, start: int):
        self.model, self.capacity, self.start = model, capacity, start
        self.im_end_id = -1
        self._fast = None

    def prefill(self, tokens: torch.Tensor, im_end_id: int, prefix_len: int = 0,
                prefix_cache: PrefixCache | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        self.im_end_id = im_end_id
        self.model.new_cache(self.capacity, self.start)
        hidden = prefill_prompt(self.model, tokens, prefix_len, self.model.cache, prefix_cache)
        return hidden, self.model.sampled_logits(hidden, im_end_id)

    def slow_step(self, column: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.model.forward_slow(column)
        return hidden, self.model.sampled_logits(hidden, self.im_end_id)

    def fast_start(self, hidden: torch.Tensor, c0: int) -> torch.Tensor:
        self._fast, logits = self.model.fast_start(hidden, c0)
        return logits

    def fast_next(self, code: int, pos: int) -> torch.Tensor:
        return self.model.fast_next(self._fast, code, pos)


def decode_steps(model: DualAR, capacity: int, start: int, cuda_graphs: str = "auto",
                 step_cache: StepCache | None = None):
    """The step functions of a take needing ``capacity`` Slow-AR positions (``start`` allocated
    first on the dynamic path): dynamic, or static (CUDA graphs) by ``cuda_graphs``
    (:data:`static_step.MODES`; auto = static only with the whole model on one CUDA GPU).
    ``step_cache``: where the caller keeps the static decoder between takes (its graphs are
    reused); without one, a static take builds its own."""
    mode = resolve_mode(cuda_graphs, model)
    # Says which steps a take ran (at --log-level debug): "auto" and a failed capture decide it quietly.
    log.debug("decode steps: %s (cuda_graphs=%s)",
              "dynamic" if mode == "off" else f"static, {mode}", cuda_graphs)
    if mode == "off":
        return DynamicSteps(model, capacity, start)
    return static_decoder(step_cache if step_cache is not None else StepCache(), model, capacity, mode)


def generate_frames(model: DualAR, prompt: np.ndarray, params: GenerationParams, *, im_end_id: int,
                    cancel: threading.Event | None = None,
                    stats: GenerationStats | None = None, cuda_graphs: str = "auto",
                    step_cache: StepCache | None = None, prefix_len: int = 0,
                    prefix_cache: PrefixCache | None = None) -> Iterator[Frame]:
    """Prefill ``prompt`` (int [C+1, L]) and yield frames until <|im_end|>, the token budget,
    or cancellation. ``cuda_graphs``, ``step_cache``: which step functions run the frames, and
    where static ones are kept between takes (:func:`decode_steps`). ``prefix_len``: the
    prompt's voice prefix (``text.prompt.build_prompt_and_prefix``), prefilled on its own or
    copied from ``prefix_cache`` (``prefix_cache.prefill_prompt``)."""
    take = FrameSampler(model, prompt, params, im_end_id=im_end_id, cancel=cancel, stats=stats)
    st = take.stats
    if take.cancelled():
        st.stop_reason = "cancelled"
        return
    tokens = take.prompt_tokens()
    t0 = time.perf_counter()
    steps = decode_steps(model, *take.cache_size(tokens.shape[1]), cuda_graphs, step_cache)
    take.take_hidden(*steps.prefill(tokens, im_end_id, prefix_len, prefix_cache))
    st.prefill_s = time.perf_counter() - t0
    while (c0 := take.begin_frame()) is not None:
        t_fast = time.perf_counter()
        code = take.take_codes(1, steps.fast_start(take.hidden, c0))
        for j in range(2, take.C):
            code = take.take_codes(j, steps.fast_next(code, j))
        st.fast_s += time.perf_counter() - t_fast
        yield take.end_frame()
        if not take.continues():
            break
        t_slow = time.perf_counter()
        take.take_hidden(*steps.slow_step(take.column()))
        st.slow_s += time.perf_counter() - t_slow
    log.debug("generation stopped (%s) after %d frames", st.stop_reason, st.frames)


def generate_codes(model: DualAR, prompt: np.ndarray, params: GenerationParams, *, im_end_id: int,
                   cancel: threading.Event | None = None,
                   stats: GenerationStats | None = None, cuda_graphs: str = "auto",
                   step_cache: StepCache | None = None, prefix_len: int = 0,
                   prefix_cache: PrefixCache | None = None) -> np.ndarray:
    """All frames at once: int32 [num_codebooks, n_frames]."""
    frames = [f.codes for f in generate_frames(model, prompt, params, im_end_id=im_end_id, cancel=cancel,
                                               stats=stats, cuda_graphs=cuda_graphs, step_cache=step_cache,
                                               prefix_len=prefix_len, prefix_cache=prefix_cache)]
    if not frames:
        return np.zeros((model.cfg.num_codebooks, 0), dtype=np.int32)
    return np.stack(frames, axis=1)
