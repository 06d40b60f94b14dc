"""Static-shape decode steps, ready to be captured as CUDA graphs.

A decode step of the dynamic path (``DualAR.forward_slow`` with one column, ``fast_next``) does
~15 small kernels per layer, and on a GPU the launch overhead of ~600 kernels per Slow-AR step
and ~70 per Fast-AR position, each followed by a host sync for sampling, costs more than the
maths. A CUDA graph replays all of a step's kernels with one launch, but it records fixed
addresses and shapes. So the steps here never allocate, grow or slice by a Python number:

- the KV caches are allocated once at their full size ``L`` (the Slow-AR's: the take's
  prompt + frame budget, rounded up to :data:`CACHE_BUCKET`; the Fast-AR's: one frame's
  ``num_codebooks`` positions) and are never reallocated while the steps live;
- the position is an int64 tensor on the device; K/V are written with ``index_copy_`` there,
  RoPE's cos/sin are gathered by it, and attention runs over all ``L`` cached keys with the
  keys past the position masked to -inf (they get probability exactly 0);
- inputs (the token column, a code, the Slow-AR hidden) are copied into input buffers and
  results are copied into output buffers, which keep their addresses across replays.

The maths is the dynamic path's, not a copy of it: the layers are ``transformer.layer_forward``
run in a :class:`StaticContext` (the static kind of ``transformer.LayerContext``), and the
embedding, the Fast-AR's frame start and the heads are ``DualAR``'s own. Only attention differs,
as in ``transformer.attend``/``KVCache.store``: the position being evaluated attends to its own
fresh float32 K/V, and the cache keeps them F16-rounded when ``kv_round_f16`` is on. Here that is done by writing the fresh values, attending, then writing
the rounded ones over them. The only difference is the length of the reductions (softmax sum
and probabilities × values run over ``L`` keys, the masked ones adding exact zeros, instead of
over ``pos + 1``), which can move the float32 summation order: tests/engine/test_static_step.py
bounds the effect (logits within 1e-5 of the dynamic path's on the golden models).

Sampling stays outside the steps: the logits are copied to the CPU and the take's seeded
sampler draws from them as before. The prefill (one call of variable length) runs the dynamic
path, writing straight into the static Slow-AR cache.

The decoder's state (caches, buffers, graphs) is its own; the owner of the model keeps it
between takes in a ``step_cache.StepCache`` (the ``Pipeline`` has one), never on the model.

Where a step runs (:class:`StepRunner`): replayed as a CUDA graph on a CUDA device, through
``torch.compile(mode="reduce-overhead")`` when asked and Triton is importable, and eagerly
otherwise. A capture or compile that fails is logged once and the steps run eagerly from then
on; a take never fails because of it.
"""

from __future__ import annotations

import logging
import math
from typing import Callable

import numpy as np
import torch

from s2studio.engine.kernels.qmatrix import QuantMatrix
from s2studio.engine.model.dual_ar import DualAR
from s2studio.engine.model.prefix_cache import PrefixCache, prefill_prompt
from s2studio.engine.model.step_cache import StepCache
from s2studio.engine.model.transformer import KVCache, linear, run_stack
from s2studio.engine.model.weights import StackWeights
from s2studio.engine.modes import CudaGraphs
from s2studio.errors import InputError

log = logging.getLogger(__name__)

# The ``cuda_graphs`` setting (EngineSettings, generate_frames, bench_engine):
# off     - the dynamic path, as before (what "auto" means unless the whole model is on one CUDA GPU);
# on      - static steps, each captured once as a CUDA graph on CUDA (eager elsewhere);
# eager   - static steps, never captured (to compare on a GPU; what "on" does on the CPU);
# compile - static steps through torch.compile(mode="reduce-overhead") where Triton is
#           importable, otherwise as "on".
MODES = tuple(CudaGraphs.choices())  # the words; EngineSettings turns them into engine.modes.CudaGraphs

# The static Slow-AR cache is sized in these steps of positions: takes whose prompt + budget
# round to the same size reuse the cache and the captured graphs (a new size re-captures).
CACHE_BUCKET = 1024

# Warm-up calls before a capture (on a side stream, as torch.cuda.graphs recommends): the first
# call of a kernel may allocate workspaces (cuBLAS) that must not happen during the capture.
WARMUP_CALLS = 2


def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means "no Triton"
        return False
    return True


def single_cuda_device(model: DualAR) -> torch.device | None:
    """The CUDA device holding every Slow-AR layer, the head and the Fast-AR, or None: a graph
    replays on one device, and a CPU layer (a ``gpu_layers`` split) cannot be captured."""
    devices = {torch.device(lw.device) for lw in model.w.slow.layers}
    devices.add(torch.device(model.head_device))
    if model.w.fast is not None:
        devices.add(torch.device(model.w.fast_embeddings.device))
    if len(devices) != 1:
        return None
    (dev,) = devices
    return dev if dev.type == "cuda" else None


def resolve_mode(setting: str, model: DualAR) -> str:
    """The ``cuda_graphs`` setting → "off" (dynamic steps), "eager", "graph" or "compile".

    auto is "graph" only where the whole model is on one CUDA device: with a CPU/GPU layer
    split most of the time is the CPU layers', and a graph cannot span them."""
    if setting not in MODES:
        raise InputError(f"Unknown cuda_graphs mode '{setting}'. Use {', '.join(MODES)}.")
    if setting == "off":
        return "off"
    if model.kv_dtype != torch.float32:
        # The static step writes the fresh float32 K/V into the cache before attending; a
        # narrower cache would round them (see the module docstring). No caller sets this.
        if setting != "auto":
            log.warning("static decode steps need a float32 KV cache; using the dynamic path")
        return "off"
    cuda = single_cuda_device(model)
    if setting == "auto":
        return "graph" if cuda is not None else "off"
    if setting == "eager" or cuda is None:
        return "eager"
    if setting == "compile" and triton_available():
        return "compile"
    return "graph"


# ---- attention at fixed shapes --------------------------------------------------------------

def static_attend(q: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    """GQA attention of n queries over all L cached keys; ``hidden`` (n, L) bool marks the keys
    a query must not see (positions after its own). q: (H, n, hd); kc/vc: (Hkv, L, hd) float32
    holding the queries' own fresh K/V at their positions. Returns (n, H*hd), as ``attend``."""
    h, n, hd = q.shape
    hkv = kc.shape[0]
    g = h // hkv
    qg = q.reshape(hkv, g * n, hd) * (1.0 / math.sqrt(hd))  # rows: (group member, query)
    scores = (qg @ kc.transpose(1, 2)).view(hkv, g, n, -1)
    scores = scores.masked_fill(hidden, float("-inf")).view(hkv, g * n, -1)
    out = torch.softmax(scores, dim=-1) @ vc
    return out.view(hkv, g, n, hd).reshape(h, n, hd).transpose(0, 1).reshape(n, h * hd)


class _DevicePositions:
    """A step's positions, mask and RoPE rows on one device, from its int64 position tensor.

    ``pos`` is the step's first position ((1,) int64, an input buffer); rows are at pos..pos+n-1.
    """

    def __init__(self, n: int, length: int, cos: torch.Tensor, sin: torch.Tensor, device: torch.device):
        self.pos = torch.zeros(1, dtype=torch.int64, device=device)
        self.offsets = torch.arange(n, dtype=torch.int64, device=device)
        self.keys = torch.arange(length, dtype=torch.int64, device=device)
        self.cos_table, self.sin_table = cos.to(device), sin.to(device)  # (L, hd/2)

    def compute(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(positions (n,), hidden-key mask (n, L), cos (n, hd/2), sin (n, hd/2)), all by tensor ops."""
        positions = self.pos + self.offsets
        hidden = self.keys[None, :] > positions[:, None]
        return (positions, hidden, self.cos_table.index_select(0, positions),
                self.sin_table.index_select(0, positions))


class StaticContext:
    """The ``transformer.LayerContext`` of an n-row static step over one stack: the position a
    device tensor (set by :meth:`set_position`, an input buffer), the cache preallocated, every
    cached key attended with the later ones masked. The rows attend to their own fresh float32
    K/V (as ``transformer.attend`` does), then the cache keeps them as ``KVCache.store`` would:
    F16-rounded when the model asks for it."""

    splittable = True
    linear = staticmethod(linear)

    def __init__(self, stack: StackWeights, cache: KVCache, cos: torch.Tensor, sin: torch.Tensor, n: int):
        self.stack = stack
        self.cache = cache
        length = cache.capacity
        self.devices: dict[torch.device, _DevicePositions] = {}
        for lw in stack.layers:
            dev = torch.device(lw.device)
            if dev not in self.devices:
                self.devices[dev] = _DevicePositions(n, length, cos, sin, dev)
        # Per device (as its tensors name it, e.g. cuda:0): this call's positions, mask, cos, sin.
        self._now: dict[torch.device, tuple[torch.Tensor, ...]] = {}

    def set_position(self, pos: int) -> None:
        for d in self.devices.values():
            d.pos.fill_(pos)

    def begin(self) -> None:
        self._now = {d.pos.device: d.compute() for d in self.devices.values()}

    def rope_rows(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        _, _, cos, sin = self._now[device]
        return cos, sin

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        positions, hidden, _, _ = self._now[q.device]
        kc, vc = self.cache.k[layer], self.cache.v[layer]
        kc.index_copy_(1, positions, k)
        vc.index_copy_(1, positions, v)
        o = static_attend(q, kc, vc, hidden)
        if self.cache.round_f16:
            kc.index_copy_(1, positions, k.half().to(kc.dtype))
            vc.index_copy_(1, positions, v.half().to(vc.dtype))
        return o

    def commit(self) -> None:
        pass  # the decoder counts the positions (``StaticDecoder.n_past``)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return run_stack(x, self.stack, self)


# ---- running a step: eager, CUDA graph or torch.compile -------------------------------------

def capture_cuda_graph(fn: Callable[[], None], device: torch.device):
    """Warm ``fn`` up on a side stream, then record it as a ``torch.cuda.CUDAGraph``.

    ``fn`` reads only its input buffers and writes only its output buffers and caches; running
    it again at the same inputs writes the same values, so the warm-up calls change nothing."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(WARMUP_CALLS):
            fn()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    # thread_local: CUDA calls of other threads (a codec on the GPU, another model) during the
    # capture are not this capture's error; only this thread's are checked.
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        fn()
    return graph


def compile_step(fn: Callable[[], None], device: torch.device):
    """``fn`` through torch.compile's CUDA-graph mode; replayed by calling it. Compiles at the
    first call, so that is where a failure shows (the runner calls it once right away)."""
    compiled = torch.compile(fn, mode="reduce-overhead", fullgraph=False)
    compiled()

    class _Replay:
        def replay(self) -> None:
            compiled()

    return _Replay()


class StepRunner:
    """Runs one static step (a no-argument function over static buffers) in ``mode``:
    "eager" calls it; "graph"/"compile" build the replayable form on the first call (``capture``,
    default :func:`capture_cuda_graph` / :func:`compile_step`) and replay it after. If building
    fails, ``on_failure(exc)`` is told and the step runs eagerly from then on."""

    def __init__(self, name: str, fn: Callable[[], None], device: torch.device, mode: str,
                 on_failure: Callable[[str, BaseException], None], capture: Callable | None = None):
        self.name, self.fn, self.device, self.mode = name, fn, device, mode
        self.on_failure = on_failure
        self.capture = capture or (compile_step if mode == "compile" else capture_cuda_graph)
        self.replayable = None

    def __call__(self) -> None:
        if self.mode != "eager" and self.replayable is None:
            try:
                self.replayable = self.capture(self.fn, self.device)
            except Exception as exc:  # noqa: BLE001 - any failure to capture means "run eagerly"
                self.on_failure(self.name, exc)
                self.mode = "eager"
        if self.mode == "eager":
            self.fn()
        else:
            self.replayable.replay()


# ---- the decoder: the three steps of a frame ------------------------------------------------

def cache_length(capacity: int, context_length: int) -> int:
    """Positions of the static Slow-AR cache for a take needing ``capacity``: rounded up to
    :data:`CACHE_BUCKET`, never past the model's context (+1, as ``DualAR.check_capacity``)."""
    return min(-(-capacity // CACHE_BUCKET) * CACHE_BUCKET, context_length + 1)


class StaticDecoder:
    """The static Slow-AR step, Fast-AR frame start and Fast-AR next step of one model, with
    their caches and buffers (the decoder's state is its own; the model only computes). Kept
    across takes in the owner's ``StepCache`` so a captured graph is reused;
    :func:`static_decoder` makes a new one when a take needs a different cache size or mode."""

    def __init__(self, model: DualAR, length: int, mode: str,
                 capture: Callable | None = None):
        if mode not in ("eager", "graph", "compile"):
            raise ValueError(f"static decoder mode must be eager, graph or compile, not {mode!r}")
        self.model = model
        self.length = length
        self.mode = mode
        self.failed = False
        cfg, w = model.cfg, model.w
        head = torch.device(model.head_device)
        self.head_device = head
        # Slow-AR: a full-size cache (no growth: fixed addresses) that the prefill fills too.
        self.slow_cache = model.make_cache(length)
        cos, sin = model.slow_rope.get(0, length, torch.device("cpu"))
        self.slow = StaticContext(w.slow, self.slow_cache, cos, sin, 1)
        self.tokens = torch.zeros((cfg.num_codebooks + 1, 1), dtype=torch.int64, device=head)
        self.hidden = torch.zeros(cfg.slow.dim, dtype=torch.float32, device=head)
        n_sampled = cfg.codebook_size + 1
        # The dtype ``DualAR.head_rows`` gives its rows: it picks the head matmul's rounding.
        head_dtype = torch.float16 if isinstance(w.embeddings, QuantMatrix) else w.embeddings.dtype
        self.head_rows = torch.zeros((n_sampled, cfg.slow.dim), dtype=head_dtype, device=head)
        self.slow_logits = torch.zeros(n_sampled, dtype=torch.float32, device=head)
        self.im_end_id: int | None = None
        # Fast-AR: one frame's cache, reset by the frame's start step (never reallocated).
        fdev = torch.device(model.fast_device)
        self.fast_device = fdev
        self.fast_cache = model.new_fast_cache()
        fcos, fsin = model.fast_rope.get(0, cfg.num_codebooks, torch.device("cpu"))
        self.fast_first = StaticContext(w.fast, self.fast_cache, fcos, fsin, 2)
        self.fast_step = StaticContext(w.fast, self.fast_cache, fcos, fsin, 1)
        self.fast_hidden = torch.zeros(cfg.slow.dim, dtype=torch.float32, device=fdev)
        self.code = torch.zeros(1, dtype=torch.int64, device=fdev)
        self.fast_logits = torch.zeros(cfg.codebook_size, dtype=torch.float32, device=fdev)
        self.n_past = 0
        steps = (("slow", self._slow_fn, head), ("fast_start", self._fast_start_fn, fdev),
                 ("fast_next", self._fast_next_fn, fdev))
        self.runners = {name: StepRunner(name, fn, dev, mode, self._capture_failed, capture)
                        for name, fn, dev in steps}

    def _capture_failed(self, name: str, exc: BaseException) -> None:
        if not self.failed:
            log.warning("could not capture the %s decode step (%s: %s); running the static steps eagerly",
                        name, type(exc).__name__, exc)
        self.failed = True
        self.mode = "eager"
        for runner in self.runners.values():
            runner.mode = "eager"

    # -- the step bodies: static buffers in, static buffers out (the model's maths) -------------
    def _slow_fn(self) -> None:
        m = self.model
        hidden = m.final_norm(self.slow.forward(m.embed(self.tokens))[-1:])
        self.hidden.copy_(hidden[0])
        self.slow_logits.copy_(linear(hidden, self.head_rows)[0])

    def _fast_start_fn(self) -> None:
        for kv in (self.fast_cache.k, self.fast_cache.v):  # a new frame: forget the last one's
            for t in kv:
                t.zero_()
        x = self.model.fast_start_rows(self.fast_hidden[None], self.code)
        self.fast_logits.copy_(self.model.fast_logits(x, self.fast_first, 2)[0])

    def _fast_next_fn(self) -> None:
        x = self.model.w.fast_embeddings[self.code].float()
        self.fast_logits.copy_(self.model.fast_logits(x, self.fast_step, 1)[0])

    # -- the frame loop's interface ------------------------------------------------------------
    def set_head(self, im_end_id: int) -> None:
        """The sampled head rows (semantic ids, then ``im_end_id``) into their static buffer."""
        if self.im_end_id != im_end_id:
            self.head_rows.copy_(self.model.head_rows(im_end_id))
            self.im_end_id = im_end_id

    def prefill(self, tokens: torch.Tensor, im_end_id: int, prefix_len: int = 0,
                prefix_cache: PrefixCache | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """A new take: clear the Slow-AR cache and run the prompt (dynamic path) into it, its
        voice prefix first (``prefix_cache.prefill_prompt``)."""

        self.set_head(im_end_id)
        for kv in (self.slow_cache.k, self.slow_cache.v):  # masked keys must be finite (0·NaN)
            for t in kv:
                t.zero_()
        self.slow_cache.n_past = 0
        hidden = prefill_prompt(self.model, tokens, prefix_len, self.slow_cache, prefix_cache)
        self.n_past = self.slow_cache.n_past
        return hidden, self.model.sampled_logits(hidden, im_end_id)

    def slow_step(self, column: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Evaluate ``column`` (int64 (C+1, 1)) at the next position: (hidden, logits on CPU).
        The hidden is the output buffer: valid until the next slow step."""
        if self.n_past + 1 > self.length:
            raise RuntimeError(f"KV cache full ({self.length} positions)")
        self.tokens.copy_(column)
        self.slow.set_position(self.n_past)
        self.runners["slow"]()
        self.n_past += 1
        self.slow_cache.n_past = self.n_past
        return self.hidden, self.slow_logits.cpu()

    def fast_start(self, hidden: torch.Tensor, c0: int) -> torch.Tensor:
        """Positions 0 (the Slow-AR hidden) and 1 (code 0) of a frame: logits of codebook 1 (CPU)."""
        self.fast_hidden.copy_(hidden)
        self.code.fill_(c0)
        self.fast_first.set_position(0)
        self.runners["fast_start"]()
        return self.fast_logits.cpu()

    def fast_next(self, code: int, pos: int) -> torch.Tensor:
        """Code c_{pos-1} at position ``pos``: logits of codebook ``pos`` (CPU)."""
        self.code.fill_(code)
        self.fast_step.set_position(pos)
        self.runners["fast_next"]()
        return self.fast_logits.cpu()


def static_decoder(steps: StepCache, model: DualAR, capacity: int, mode: str,
                   capture: Callable | None = None) -> StaticDecoder:
    """The static decoder for a take of ``model`` needing ``capacity`` Slow-AR positions: the
    one ``steps`` keeps when it is this model's and the cache size and mode match (its graphs
    are reused), else a new one, kept there (the old one is dropped first: its cache can be
    large). Once a capture failed for this model, its steps stay eager (no retry, and no new
    warning, at every take)."""
    model.check_capacity(capacity)
    length = cache_length(capacity, model.cfg.context_length)
    old = steps.decoder if steps.decoder is not None and steps.decoder.model is model else None
    failed = old is not None and old.failed
    if failed:
        mode = "eager"
    if old is not None and old.length == length and old.mode == mode:
        return old
    steps.clear()
    steps.decoder = decoder = StaticDecoder(model, length, mode, capture)
    decoder.failed = failed
    return decoder
