"""Bind the Dual-AR transformer tensors of a GGUF file by name, with shape checks.

Matrices on the CPU whose block type has a kernel (``engine.kernels``: Q8_0, K-quants) stay in the
file's blocks as ``QuantMatrix`` views of the memory map, when the placement asks for it. The
rest is dequantized once at load and held as torch tensors in the working dtype on the device
the placement plan gives each part. The input embedding and the
output head are one tensor (S2 ties them; s2.cpp ignores ``output.weight``), held once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

import torch

from s2studio.engine.model.config import ModelConfig, TransformerConfig
from s2studio.errors import ModelFileError
from s2studio.engine.model.gguf_file import GGUFFile
from s2studio.engine.kernels.qmatrix import QuantMatrix

Weight = torch.Tensor | QuantMatrix

log = logging.getLogger(__name__)


@dataclass
class LayerWeights:
    attention_norm: torch.Tensor
    wqkv: Weight
    wo: Weight
    ffn_norm: torch.Tensor
    w1: Weight  # gate (through SiLU)
    w3: Weight  # up
    w2: Weight  # down
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None

    @property
    def device(self) -> torch.device:
        return self.wqkv.device


@dataclass
class StackWeights:
    cfg: TransformerConfig
    layers: list[LayerWeights]
    norm: torch.Tensor


@dataclass
class DualARWeights:
    embeddings: Weight  # (vocab, dim); also the tied output head
    codebook_embeddings: Weight  # (num_codebooks * codebook_size, dim)
    slow: StackWeights
    fast: StackWeights | None
    fast_embeddings: Weight | None  # (codebook_size, fast_dim)
    fast_output: Weight | None  # (codebook_size, fast_dim)
    fast_project_in: Weight | None  # (fast_dim, dim), no bias (as s2.cpp)


class _Binder:
    """Loads tensors by name, checking shapes, converting to (dtype, device)."""

    def __init__(self, f: GGUFFile, dtype: torch.dtype, progress: Callable[[float], None] | None,
                 total: int, quantized_types: frozenset[str] = frozenset()):
        self.f = f
        self.quantized_types = quantized_types
        self.dtype = dtype
        self.progress = progress
        self.total = max(total, 1)
        self.done = 0

    def __call__(self, name: str, shape: tuple[int, ...], device: str | torch.device,
                 dtype: torch.dtype | None = None) -> Weight:
        info = self.f.info(name)
        if tuple(info.shape) != tuple(shape):
            raise ModelFileError(self.f.path, f"tensor '{name}' has shape {tuple(info.shape)}, expected "
                                              f"{tuple(shape)} for this model's metadata")
        if (len(shape) == 2 and dtype is None and info.type_name in self.quantized_types
                and torch.device(device).type == "cpu"):
            t = QuantMatrix(info.type_name, self.f.raw(name), shape)
        else:
            t = self.f.tensor(name, dtype or self.dtype, device, share=True)  # weights: read-only
        self.done += info.n_elements
        if self.progress is not None:
            self.progress(min(self.done / self.total, 1.0))
        return t


def _bind_stack(bind: _Binder, prefix: str, cfg: TransformerConfig,
                layer_devices: list[torch.device], norm_device: torch.device) -> StackWeights:
    d, hd = cfg.dim, cfg.head_dim
    qkv_rows = (cfg.n_head + 2 * cfg.n_kv_head) * hd
    layers = []
    f = bind.f
    ffn = f.info(f"{prefix}0.feed_forward.w1.weight").shape[0]
    for i in range(cfg.n_layer):
        p = f"{prefix}{i}."
        dev = layer_devices[i]
        layers.append(LayerWeights(
            attention_norm=bind(p + "attention_norm.weight", (d,), dev, torch.float32),
            wqkv=bind(p + "attention.wqkv.weight", (qkv_rows, d), dev),
            wo=bind(p + "attention.wo.weight", (d, cfg.n_head * hd), dev),
            ffn_norm=bind(p + "ffn_norm.weight", (d,), dev, torch.float32),
            w1=bind(p + "feed_forward.w1.weight", (ffn, d), dev),
            w3=bind(p + "feed_forward.w3.weight", (ffn, d), dev),
            w2=bind(p + "feed_forward.w2.weight", (d, ffn), dev),
            q_norm=bind(p + "attention.q_norm.weight", (hd,), dev, torch.float32) if cfg.qk_norm else None,
            k_norm=bind(p + "attention.k_norm.weight", (hd,), dev, torch.float32) if cfg.qk_norm else None,
        ))
    norm_name = "norm.weight" if prefix == "layers." else "fast_norm.weight"
    return StackWeights(cfg, layers, bind(norm_name, (d,), norm_device, torch.float32))


def load_weights(f: GGUFFile, cfg: ModelConfig, *, dtype: torch.dtype,
                 slow_layer_devices: list[torch.device], head_device: torch.device,
                 fast_device: torch.device,
                 progress: Callable[[float], None] | None = None,
                 quantized_types: frozenset[str] = frozenset()) -> DualARWeights:
    """Bind every tensor the engine uses. ``progress`` gets the fraction of weights loaded.
    CPU matrices stored in one of ``quantized_types`` stay quantized."""
    if len(slow_layer_devices) != cfg.slow.n_layer:
        raise ValueError("one device per Slow-AR layer is required")
    total = sum(i.n_elements for n, i in f.tensors.items() if not n.startswith("c."))
    bind = _Binder(f, dtype, progress, total, quantized_types)
    s = cfg.slow
    emb = bind("embeddings.weight", (cfg.vocab_size, s.dim), head_device)
    cb = bind("codebook_embeddings.weight", (cfg.num_codebooks * cfg.codebook_size, s.dim), head_device)
    slow = _bind_stack(bind, "layers.", s, slow_layer_devices, head_device)
    fast = fast_emb = fast_out = proj = None
    if cfg.fast is not None:
        fc = cfg.fast
        fast = _bind_stack(bind, "fast_layers.", fc, [fast_device] * fc.n_layer, fast_device)
        fast_emb = bind("fast_embeddings.weight", (cfg.codebook_size, fc.dim), fast_device)
        fast_out = bind("fast_output.weight", (cfg.codebook_size, fc.dim), fast_device)
        if cfg.fast_project_in:
            proj = bind("fast_project_in.weight", (fc.dim, s.dim), fast_device)
        elif fc.dim != s.dim:
            raise ModelFileError(f.path, f"Fast-AR width {fc.dim} differs from the Slow-AR width {s.dim} "
                                         "but the file has no fast_project_in")
    return DualARWeights(emb, cb, slow, fast, fast_emb, fast_out, proj)
