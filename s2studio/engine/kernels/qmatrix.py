"""A weight matrix kept in its GGUF block format on the CPU, computed on by ``engine.kernels``.

Resident memory stays at the file's size: the blocks are the memory-mapped bytes of the file
itself (the OS shares them with its page cache), and nothing is dequantized at load.
- decode steps (a few activation rows): the quantized GEMV kernel that ``backend`` chooses: for
  K-quants and Q8_0 the C integer kernel (``intdot``: activations as int8 planes, int16 for
  Q8_0) where it is built and not switched off, else the numba kernel with float32 activations;
- prefill (many rows): where the decode runs on the C integer kernels with precise
  activations, the same kernels, 16 rows per call (``backend.int_prefill``; rows independent of
  each other), for calls of up to ``int_prefill_max_rows`` rows (64 for the K-quants, whose
  kernels are slower than the exact path on long prompts; any length for Q8_0 on AVX-512, whose
  tiled kernels are faster at every length measured); otherwise ``prefill_linear``: the
  matrix is dequantized to its exact float32 values a chunk of rows at a time and multiplied by
  torch's float32 GEMM (as the float16 path does);
- embedding lookups: only the requested rows are dequantized.

Why float32 and not bfloat16 for the exact prefill: s2.cpp multiplies by the exact values the file
holds, and bfloat16 (8 significant bits) holds none of them exactly. A value q*d (q an integer,
d the block's float16 scale) rounds by up to |q|/256 of a quantization step d: half a step for
Q8_0 (|q| <= 128), as coarse as the file itself; 1/8 step for Q6_K; and for the K-quants with a
per-block minimum (Q2_K, Q4_K, Q5_K) a block of values far from zero loses more than a step.
The activations and the GEMM's output were rounded to bfloat16 as well. Measured cost and
error: docs/performance.md, "Exact prefill".
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from s2studio.engine.kernels import backend
from s2studio.engine.kernels import common as kcommon
from s2studio.engine.kernels import intdot
from s2studio.engine.kernels import quant_types  # noqa: F401  (registers the K-quant kernels)


def supported_types() -> set[str]:
    return set(kcommon.KERNELS)


# Weight elements dequantized per GEMM call in the prefill (16 MB of float32): large enough that
# the GEMM runs at full speed, small enough to stay in cache-friendly reach and to never need a
# float32 copy of a whole 100 MB matrix (measured: 1M and 4M elements run at the same speed).
PREFILL_CHUNK_ELEMS = 1 << 22

# Up to this many rows, a prefill call runs on the integer kernels (where ``int_prefill``); more
# go to the exact path. Measured on the full-size Q8_0 file (2 threads, Zen 4 with VNNI, quiet):
# a 48-token prompt 3.55 s on the integer kernels against 4.21 s exact, a 300-token one 23.4 s
# against 19.1 s: the integer kernels cost ~0.08 s per row, the exact path ~1.4 s (dequantizing
# every matrix) plus ~0.06 s per row, so they cross near 68 rows. Sentences (a book's, the rest
# of a cloned voice's prompt after its cached prefix) are below; a voice prefix is above.
# The K-quants keep this limit (their kernels' crossover was measured no further).
INT_PREFILL_MAX_ROWS = 64

# Since the Q8_0 rows run in register tiles (_qdot.c, DEFINE_Q8_TILED) the integer kernels are
# the faster Q8_0 path at every length measured on the AVX-512 levels: per matrix 1.24-1.85x up
# to 512 rows, a whole 300-token prefill 11.3-11.5 s against 19.7-28.6 s exact, 600 tokens 43.8
# against 60.5 s (docs/performance.md, "Q8_0 integer kernels in register tiles"). There a Q8_0
# prefill of any length (a voice prefix too) runs on them; elsewhere (AVX2's 1x4 tiles, ARM, the
# scalar level: not measured) the K-quants' limit holds.
Q8_0_ANY_LENGTH_LEVELS = frozenset({"avx512bw", "avx512vnni"})


def int_prefill_max_rows(type_name: str) -> int | None:
    """The most rows a prefill call on ``type_name`` blocks runs on the integer kernels with
    (where ``backend.int_prefill`` allows them at all); None: any number."""
    if type_name == "Q8_0" and intdot.level() in Q8_0_ANY_LENGTH_LEVELS:
        return None
    return INT_PREFILL_MAX_ROWS

_scratch_buf = torch.empty(0, dtype=torch.float32)


def _f32_scratch(n: int) -> torch.Tensor:
    """A reused float32 buffer of ``n`` elements for prefill weight chunks: one per process (the
    engine runs one forward pass at a time, under the pipeline's lock). A fresh buffer per
    chunk would page-fault on every call."""
    global _scratch_buf
    if _scratch_buf.numel() < n:
        _scratch_buf = torch.empty(n, dtype=torch.float32)
    return _scratch_buf[:n]


def prefill_linear(x: torch.Tensor, shape: tuple[int, int],
                   fill_rows: Callable[[int, int, torch.Tensor], None]) -> torch.Tensor:
    """x (m, cols) float32 → x·Wᵀ (m, rows) float32, W given as ``fill_rows(r0, r1, out)``,
    which writes rows r0..r1-1 of W as float32 into ``out`` ((r1 - r0, cols)). Float32 GEMM on
    chunks of W, so no full float32 copy of W is ever held."""
    rows, cols = shape
    x = x.float().contiguous()
    step = max(1, min(rows, PREFILL_CHUNK_ELEMS // cols))
    buf = _f32_scratch(step * cols)
    out = torch.empty((x.shape[0], rows), dtype=torch.float32)
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        w = buf[: (r1 - r0) * cols].view(r1 - r0, cols)
        fill_rows(r0, r1, w)
        out[:, r0:r1] = torch.nn.functional.linear(x, w)
    return out


def warm_up(type_names) -> None:
    """Run each kernel of these block types once on a tiny read-only matrix, so that numba's
    compilation (seconds per type on first use, then cached) happens while the model loads,
    not inside the first prefill."""
    for name in sorted(type_names):
        kern = kcommon.KERNELS[name]
        rows, cols = 9, kern.block_elems  # 9 rows: the 8-row kernel path and a remainder
        raw = np.zeros((rows, kern.block_bytes), np.uint8)
        raw.setflags(write=False)  # the memory map is read-only: numba specializes on that
        q = QuantMatrix(name, raw, (rows, cols))
        q.matmul_t(torch.zeros(1, cols))
        q.dequantize_f32()
        q.rows(torch.tensor([0]))


class QuantMatrix:
    """(rows, cols) weight; ``raw`` is uint8 (rows, row_bytes) in GGUF block layout."""

    # Duck-typed to the parts of torch.Tensor the engine reads from a weight.
    device = torch.device("cpu")

    def __init__(self, type_name: str, raw: np.ndarray, shape: tuple[int, int], int_dot: bool | None = None):
        """``int_dot``: GEMV by the C integer kernel (activations as int8 planes: intdot.py);
        None (the engine): as the kernel settings choose for this type at each GEMV
        (backend.kernel_for); False: the float32 kernel."""
        kern = kcommon.KERNELS.get(type_name)
        if kern is None:
            raise ValueError(f"no CPU kernel for {type_name}")
        rows, cols = shape
        if cols % kern.block_elems or raw.shape != (rows, cols // kern.block_elems * kern.block_bytes):
            raise ValueError(f"{type_name} blocks {raw.shape} do not match shape {shape}")
        self.type_name = type_name
        self.kernels = kern
        self.raw = np.asarray(raw)  # a plain ndarray view of the map (numba rejects np.memmap)
        self.shape = torch.Size(shape)
        if int_dot and not (intdot.built() and type_name in intdot.TYPE_IDS):
            raise ValueError(f"no integer kernel for {type_name} here: {intdot.describe()}")
        self._forced_int_dot = int_dot

    @property
    def int_dot(self) -> bool:
        """Whether the next decode GEMV goes to the C integer kernel."""
        forced = self._forced_int_dot
        return backend.int_dot_ready(self.type_name) if forced is None else forced

    @property
    def dtype(self) -> str:
        return self.type_name

    @property
    def nbytes(self) -> int:
        return self.raw.nbytes

    def matmul_t(self, x: torch.Tensor) -> torch.Tensor:
        """x (m, cols) → x·Wᵀ (m, rows), float32."""
        x = x.float()
        m = x.shape[0]
        if m > kcommon.MAX_KERNEL_ROWS:
            if self.int_prefill_takes(m):
                return self.int_rows(x)
            return prefill_linear(x, tuple(self.shape), self._fill_rows)
        if self.int_dot and self.shape[0] >= 1:
            return self.int_rows(x)  # one call: m <= MAX_KERNEL_ROWS
        kcommon.sync_threads(torch.get_num_threads())
        xn = np.ascontiguousarray(x.detach().numpy())
        out = np.empty((m, self.shape[0]), np.float32)
        self.kernels.gemv(self.raw, xn, out, kcommon.F16_TABLE)
        return torch.from_numpy(out)

    def int_prefill(self) -> bool:
        """Whether calls of more than ``MAX_KERNEL_ROWS`` and at most ``INT_PREFILL_MAX_ROWS``
        rows run on the integer kernels (``backend.int_prefill``). Their rows never mix: a row's
        result is the same in any such call, and in a decode call of up to ``MAX_KERNEL_ROWS``."""
        return self.int_dot and backend.int_prefill(self.type_name)

    def int_prefill_takes(self, rows: int) -> bool:
        """Whether a prefill call of ``rows`` rows runs on the integer kernels (``int_prefill``,
        within this type's ``int_prefill_max_rows`` here)."""
        if not self.int_prefill():
            return False
        limit = int_prefill_max_rows(self.type_name)
        return limit is None or rows <= limit

    def int_rows(self, x: torch.Tensor) -> torch.Tensor:
        """Any number of rows on the integer kernels, ``MAX_KERNEL_ROWS`` per call: each call
        reads the matrix once for its rows. Row results are those of any other split."""
        kcommon.sync_threads(torch.get_num_threads())
        xn = np.ascontiguousarray(x.detach().numpy())
        out = np.empty((xn.shape[0], self.shape[0]), np.float32)
        step = kcommon.MAX_KERNEL_ROWS
        for a in range(0, xn.shape[0], step):
            intdot.gemv(self.type_name, self.raw, xn[a:a + step], out[a:a + step])
        return torch.from_numpy(out)

    def _fill_rows(self, r0: int, r1: int, out: torch.Tensor) -> None:
        self.kernels.dequant_f32(self.raw[r0:r1], out.numpy(), kcommon.F16_TABLE)

    def dequantize_f32(self) -> torch.Tensor:
        """The whole matrix as float32: exactly ``gguf.quants.dequantize``'s values."""
        kcommon.sync_threads(torch.get_num_threads())
        t = torch.empty(tuple(self.shape), dtype=torch.float32)
        self._fill_rows(0, self.shape[0], t)
        return t

    def rows(self, ids: torch.Tensor | int) -> torch.Tensor:
        """float32 rows (embedding lookup); ``ids`` int or 1-D int tensor."""
        scalar = isinstance(ids, int) or (isinstance(ids, torch.Tensor) and ids.dim() == 0)
        idx = np.atleast_1d(np.asarray(ids.cpu() if isinstance(ids, torch.Tensor) else ids, dtype=np.int64))
        if idx.size and (idx.min() < 0 or idx.max() >= self.shape[0]):
            raise IndexError(f"row index out of range for a matrix of {self.shape[0]} rows")
        out = np.empty((idx.shape[0], self.shape[1]), np.float32)
        self.kernels.gather(self.raw, idx, out, kcommon.F16_TABLE)
        t = torch.from_numpy(out)
        return t[0] if scalar else t

    def __getitem__(self, ids) -> torch.Tensor:
        return self.rows(ids)

    def __repr__(self) -> str:
        return f"QuantMatrix({self.type_name}, {tuple(self.shape)})"
