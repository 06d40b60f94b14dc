"""A weight matrix kept in its GGUF block format on the CPU, computed on by ``qkernels``.

Resident memory stays at the file's size: the blocks are the memory-mapped bytes of the file
itself (the OS shares them with its page cache), and nothing is dequantized at load.
- decode steps (a few activation rows): the quantized GEMV kernel, float32 activations;
- prefill (many rows): the matrix is dequantized to bfloat16, one matrix at a time, into a
  transient buffer and multiplied by oneDNN's bfloat16 GEMM (as the float16 path does);
- embedding lookups: only the requested rows are dequantized.
"""

from __future__ import annotations

import numpy as np
import torch

from s2studio.engine.kernels import common as qkernels
from s2studio.engine.kernels import quant_types  # noqa: F401  (registers the K-quant kernels)


def supported_types() -> set[str]:
    return set(qkernels.KERNELS)


_scratch_buf = torch.empty(0, dtype=torch.bfloat16)


def bf16_scratch(shape: tuple[int, ...]) -> torch.Tensor:
    """A reused bfloat16 buffer of ``shape`` for prefill weights (quantized blocks dequantized
    into it, float16 weights cast into it): one per process, grown to the largest matrix seen;
    the engine runs one forward pass at a time, under the pipeline's lock. A fresh 50 MB tensor
    per matmul would page-fault on every call."""
    global _scratch_buf
    n = 1
    for d in shape:
        n *= d
    if _scratch_buf.numel() < n:
        _scratch_buf = torch.empty(n, dtype=torch.bfloat16)
    return _scratch_buf[:n].view(shape)


def warm_up(type_names) -> None:
    """Run each kernel of these block types once on a tiny read-only matrix, so that numba's
    compilation (seconds per type on first use, then cached) happens while the model loads,
    not inside the first prefill."""
    for name in sorted(type_names):
        kern = qkernels.KERNELS[name]
        rows, cols = 9, kern.block_elems  # 9 rows: the 8-row kernel path and a remainder
        raw = np.zeros((rows, kern.block_bytes), np.uint8)
        raw.setflags(write=False)  # the memory map is read-only: numba specializes on that
        q = QuantMatrix(name, raw, (rows, cols))
        q.matmul_t(torch.zeros(1, cols))
        q.dequantize_bf16()
        q.rows(torch.tensor([0]))


class QuantMatrix:
    """(rows, cols) weight; ``raw`` is uint8 (rows, row_bytes) in GGUF block layout."""

    # Duck-typed to the parts of torch.Tensor the engine reads from a weight.
    device = torch.device("cpu")

    def __init__(self, type_name: str, raw: np.ndarray, shape: tuple[int, int]):
        kern = qkernels.KERNELS.get(type_name)
        if kern is None:
            raise ValueError(f"no CPU kernel for {type_name}")
        rows, cols = shape
        if cols % kern.block_elems or raw.shape != (rows, cols // kern.block_elems * kern.block_bytes):
            raise ValueError(f"{type_name} blocks {raw.shape} do not match shape {shape}")
        self.type_name = type_name
        self.kernels = kern
        self.raw = np.asarray(raw)  # a plain ndarray view of the map (numba rejects np.memmap)
        self.shape = torch.Size(shape)

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
        if m > qkernels.MAX_KERNEL_ROWS:
            w = self.dequantize_bf16(scratch=True)
            return torch.nn.functional.linear(x.to(torch.bfloat16), w).float()
        qkernels.sync_threads(torch.get_num_threads())
        xn = np.ascontiguousarray(x.detach().numpy())
        out = np.empty((m, self.shape[0]), np.float32)
        self.kernels.gemv(self.raw, xn, out, qkernels.F16_TABLE)
        return torch.from_numpy(out)

    def dequantize_bf16(self, scratch: bool = False) -> torch.Tensor:
        """bfloat16 copy of the matrix. ``scratch``: into a buffer shared by all matrices and
        overwritten by the next call (prefill: saves ~12k page faults per 50 MB matrix)."""
        qkernels.sync_threads(torch.get_num_threads())
        shape = tuple(self.shape)
        t = bf16_scratch(shape) if scratch else torch.empty(shape, dtype=torch.bfloat16)
        # The kernel writes bfloat16 bit patterns through a uint16 view of the same memory.
        self.kernels.dequant_bf16(self.raw, t.view(torch.int16).numpy().view(np.uint16), qkernels.F16_TABLE)
        return t

    def rows(self, ids: torch.Tensor | int) -> torch.Tensor:
        """float32 rows (embedding lookup); ``ids`` int or 1-D int tensor."""
        scalar = isinstance(ids, int) or (isinstance(ids, torch.Tensor) and ids.dim() == 0)
        idx = np.atleast_1d(np.asarray(ids.cpu() if isinstance(ids, torch.Tensor) else ids, dtype=np.int64))
        if idx.size and (idx.min() < 0 or idx.max() >= self.shape[0]):
            raise IndexError(f"row index out of range for a matrix of {self.shape[0]} rows")
        out = np.empty((idx.shape[0], self.shape[1]), np.float32)
        self.kernels.gather(self.raw, idx, out, qkernels.F16_TABLE)
        t = torch.from_numpy(out)
        return t[0] if scalar else t

    def __getitem__(self, ids) -> torch.Tensor:
        return self.rows(ids)

    def __repr__(self) -> str:
        return f"QuantMatrix({self.type_name}, {tuple(self.shape)})"
