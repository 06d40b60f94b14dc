"""Model hyper-parameters read from GGUF metadata, exactly as s2.cpp reads them.

s2.cpp falls back to the real S2 Pro values when a key is missing (docs/spec/engine.md §1.2). We do
the same so that files s2.cpp loads also load here, but every fallback is logged as a warning:
two of them (``attention_qk_norm`` and ``scale_codebook_embeddings`` default to *false*) would
silently run a different model.

Every number read is checked against the range below (``RANGES``) at load: a zero head count,
zero layers, a NaN RoPE base or a negative epsilon would otherwise surface later as a
ZeroDivisionError, silent empty output or NaN logits. Out of range is a ModelFileError naming
the file and the key. The ranges are wide (the real S2 Pro is far inside them); they only
reject values no model can have.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from s2studio.errors import ModelFileError
from s2studio.engine.model.gguf_file import GGUFFile

log = logging.getLogger(__name__)

ARCH_DUAL_AR = "fish-speech"
PROJECT_PREFIX = "fish_speech."  # project keys always use the underscore prefix

# GGUF value type ids (gguf.GGUFValueType) the s2.cpp getters insist on.
_U32, _F32, _BOOL = 4, 6, 7
_INT_TYPES = {0, 1, 2, 3, 4, 5, 10, 11}

# Allowed values per key suffix (after "fish-speech." / "fish_speech."): (lowest, highest),
# both inclusive, except that a float's lowest is exclusive ("> 0", "> 1").
_COUNT = (1, 1 << 16)
RANGES: dict[str, tuple[float, float]] = {
    "attention.head_count": (1, 4096), "attention.head_count_kv": (1, 4096),
    "fast_head_count": (1, 4096), "fast_head_count_kv": (1, 4096),
    "embedding_length": _COUNT, "fast_embedding_length": _COUNT,
    "block_count": (1, 4096), "fast_block_count": (1, 4096),
    "fast_head_dim": (0, 1 << 14),  # 0: derive from the width and the head count
    "vocab_size": (1, 1 << 24), "codebook_size": (1, 1 << 20), "num_codebooks": (1, 256),
    "semantic_begin_id": (0, 1 << 24), "semantic_end_id": (0, 1 << 24),
    "context_length": (1, 1 << 26),
    "rope.freq_base": (1.0, 1e15), "fast_rope_freq_base": (1.0, 1e15),  # floats: exclusive low
    "attention.layer_norm_rms_epsilon": (0.0, 0.1), "fast_layer_norm_rms_eps": (0.0, 0.1),
}


@dataclass(frozen=True)
class TransformerConfig:
    dim: int
    n_layer: int
    n_head: int
    n_kv_head: int
    head_dim: int  # from the tensors (q_norm length, or wo in-dim / heads), never dim / heads
    rope_base: float
    norm_eps: float
    qk_norm: bool


@dataclass(frozen=True)
class ModelConfig:
    architecture: str
    vocab_size: int
    codebook_size: int
    num_codebooks: int
    semantic_begin_id: int
    semantic_end_id: int
    scale_codebook_embeddings: bool
    slow: TransformerConfig
    fast: TransformerConfig | None  # None: single-AR file (architecture other than fish-speech)
    fast_project_in: bool
    context_length: int

    @property
    def has_fast_ar(self) -> bool:
        return self.fast is not None


class _MetaReader:
    def __init__(self, f: GGUFFile):
        self.f = f

    def get(self, key: str, default: Any, want: int) -> Any:
        if self.f.meta_type(key) is None:
            log.warning("%s: metadata key '%s' is missing; using s2.cpp's default %r", self.f.path, key, default)
            return default
        vtype, value = self.f.meta_type(key), self.f.meta(key)
        if vtype != want:
            # s2.cpp aborts on a type mismatch; we accept compatible types but say so.
            ok = (want == _U32 and vtype in _INT_TYPES) or (want == _F32 and vtype in (_F32, 12)) \
                or (want == _BOOL and vtype in _INT_TYPES | {_BOOL})
            if not ok:
                raise ModelFileError(self.f.path, f"metadata key '{key}' has the wrong type (value {value!r})")
            log.warning("%s: metadata key '%s' has GGUF type %d, s2.cpp expects %d", self.f.path, key, vtype, want)
        if want == _U32:
            return self._in_range(key, int(value))
        if want == _F32:
            return self._in_range(key, float(value))
        return bool(value)

    def _in_range(self, key: str, value: int | float) -> int | float:
        bounds = RANGES.get(key.split(".", 1)[1])
        if bounds is None:
            return value
        lo, hi = bounds
        # Written so that NaN fails: every comparison with NaN is false.
        ok = (lo < value <= hi) if isinstance(value, float) else (lo <= value <= hi)
        if not ok:
            low = f"above {lo:g}" if isinstance(value, float) else f"at least {lo}"
            raise ModelFileError(self.f.path, f"metadata key '{key}' is {value!r}; it must be {low} "
                                              f"and at most {hi:g}. The file is damaged or not an S2 Pro model.")
        return value


def _slow_head_dim(f: GGUFFile, n_head: int, qk_norm: bool, prefix: str) -> int:
    if qk_norm:
        return f.info(f"{prefix}0.attention.q_norm.weight").shape[0]
    in_dim = f.info(f"{prefix}0.attention.wo.weight").shape[1]
    if in_dim % n_head:
        raise ModelFileError(f.path, f"'{prefix}0.attention.wo.weight' input size {in_dim} is not a "
                                     f"multiple of the head count {n_head}")
    return in_dim // n_head


def read_model_config(f: GGUFFile, *, allow_single_ar: bool = False) -> ModelConfig:
    """Read the transformer hyper-parameters. Needs the tensor table for head_dim."""
    arch = f.architecture
    if arch is None:
        raise ModelFileError(f.path, "metadata 'general.architecture' is missing; this is not an S2 Pro model file")
    if arch != ARCH_DUAL_AR and not allow_single_ar:
        raise ModelFileError(f.path, f"architecture is '{arch}', expected '{ARCH_DUAL_AR}' (an S2 Pro "
                                     "Dual-AR model). This file belongs to another model family.")
    m = _MetaReader(f)
    a = arch + "."
    p = PROJECT_PREFIX
    n_head = m.get(a + "attention.head_count", 32, _U32)
    qk_norm = m.get(p + "attention_qk_norm", False, _BOOL)
    if not qk_norm and f.has("layers.0.attention.q_norm.weight"):
        log.warning("%s: q_norm/k_norm tensors exist but 'attention_qk_norm' is false; ignoring them (as s2.cpp)",
                    f.path)
    slow = TransformerConfig(
        dim=m.get(a + "embedding_length", 2560, _U32),
        n_layer=m.get(a + "block_count", 36, _U32),
        n_head=n_head,
        n_kv_head=m.get(a + "attention.head_count_kv", 8, _U32),
        head_dim=_slow_head_dim(f, n_head, qk_norm, "layers."),
        rope_base=m.get(a + "rope.freq_base", 1e6, _F32),
        norm_eps=m.get(a + "attention.layer_norm_rms_epsilon", 1e-6, _F32),
        qk_norm=qk_norm,
    )
    fast = None
    fast_project_in = False
    if arch == ARCH_DUAL_AR:
        fast_dim = m.get(p + "fast_embedding_length", 2560, _U32)
        fast_heads = m.get(p + "fast_head_count", 32, _U32)
        fast_hd = m.get(p + "fast_head_dim", 128, _U32) or fast_dim // fast_heads
        fast = TransformerConfig(
            dim=fast_dim,
            n_layer=m.get(p + "fast_block_count", 4, _U32),
            n_head=fast_heads,
            n_kv_head=m.get(p + "fast_head_count_kv", 8, _U32),
            head_dim=fast_hd,
            rope_base=m.get(p + "fast_rope_freq_base", 1e6, _F32),
            norm_eps=m.get(p + "fast_layer_norm_rms_eps", 1e-6, _F32),
            qk_norm=m.get(p + "fast_attention_qk_norm", False, _BOOL),
        )
        fast_project_in = m.get(p + "fast_project_in", False, _BOOL)
    cfg = ModelConfig(
        architecture=arch,
        vocab_size=m.get(a + "vocab_size", 155776, _U32),
        codebook_size=m.get(p + "codebook_size", 4096, _U32),
        num_codebooks=m.get(p + "num_codebooks", 10, _U32),
        semantic_begin_id=m.get(p + "semantic_begin_id", 151678, _U32),
        semantic_end_id=m.get(p + "semantic_end_id", 155773, _U32),
        scale_codebook_embeddings=m.get(p + "scale_codebook_embeddings", False, _BOOL),
        slow=slow,
        fast=fast,
        fast_project_in=fast_project_in,
        context_length=m.get(a + "context_length", 32768, _U32),
    )
    _sanity_check(f, cfg)
    log.info("%s: %s, %d layers x %d dim, %d/%d heads x %d, vocab %d, codebooks %d x %d, qk_norm=%s, "
             "scale_codebook_embeddings=%s%s", f.path, arch, slow.n_layer, slow.dim, slow.n_head,
             slow.n_kv_head, slow.head_dim, cfg.vocab_size, cfg.num_codebooks, cfg.codebook_size,
             slow.qk_norm, cfg.scale_codebook_embeddings,
             "" if fast is None else f", fast-AR {fast.n_layer} layers x {fast.dim}")
    return cfg


def _sanity_check(f: GGUFFile, c: ModelConfig) -> None:
    def bad(msg: str) -> None:
        raise ModelFileError(f.path, msg)

    if c.semantic_end_id - c.semantic_begin_id + 1 != c.codebook_size:
        bad(f"semantic id range {c.semantic_begin_id}..{c.semantic_end_id} does not hold "
            f"codebook_size={c.codebook_size} tokens")
    if c.semantic_end_id >= c.vocab_size:
        bad(f"semantic_end_id {c.semantic_end_id} is outside the vocabulary ({c.vocab_size})")
    for cfg, name in ((c.slow, "Slow-AR"), (c.fast, "Fast-AR")):
        if cfg is None:
            continue
        if cfg.n_kv_head == 0 or cfg.n_head % cfg.n_kv_head:
            bad(f"{name} head count {cfg.n_head} is not a multiple of its KV head count {cfg.n_kv_head}")
        if cfg.head_dim % 2:
            bad(f"{name} head_dim {cfg.head_dim} is odd; RoPE needs pairs")
        if cfg.head_dim < 2:
            bad(f"{name} head_dim is {cfg.head_dim}; it must be at least 2")
