"""The Dual-AR transformer half of the tiny model: Slow-AR + Fast-AR tensors and the
``fish-speech.*`` / ``fish_speech.*`` metadata, in the exact S2 Pro / s2.cpp layout
(every dimension a parameter; ``tiny_model`` shrinks them, ``full_model`` uses the real ones)."""

from __future__ import annotations

from typing import TYPE_CHECKING
from dataclasses import dataclass

import numpy as np

from .random_init import Init

if TYPE_CHECKING:
    import gguf

ARCH = "fish-speech"


@dataclass
class TextConfig:
    vocab_size: int
    semantic_begin: int
    semantic_end: int
    audio_pad_id: int
    codebook_size: int
    num_codebooks: int = 10
    dim: int = 64
    n_layer: int = 3
    n_head: int = 4
    n_kv_head: int = 2
    head_dim: int = 16
    ffn: int = 160
    rope_base: float = 1_000_000.0
    norm_eps: float = 1e-6
    context_length: int = 4096
    qk_norm: bool = False
    scale_codebook_embeddings: bool = True
    fast_dim: int = 64
    fast_n_layer: int = 2
    fast_n_head: int = 4
    fast_n_kv_head: int = 2
    fast_head_dim: int = 16
    fast_ffn: int = 128
    fast_rope_base: float = 10_000.0
    fast_norm_eps: float = 1e-5
    fast_qk_norm: bool = False
    logit_std: float = 4.0



def attention_block(init: Init, stem: str, dim: int, n_head: int, n_kv: int, head_dim: int,
                    ffn: int, qk_norm: bool) -> dict:
    q_size, kv_size = n_head * head_dim, n_kv * head_dim
    t = {
        stem + "attention_norm.weight": init.around_one(stem + "attention_norm.weight", (dim,)),
        stem + "ffn_norm.weight": init.around_one(stem + "ffn_norm.weight", (dim,)),
        # numpy shape is [out, in]; GGUF stores it reversed (ne0 = in) as ggml_mul_mat expects
        stem + "attention.wqkv.weight": init.normal(stem + "attention.wqkv.weight",
                                                    (q_size + 2 * kv_size, dim), dim ** -0.5),
        stem + "attention.wo.weight": init.normal(stem + "attention.wo.weight", (dim, q_size), q_size ** -0.5),
        stem + "feed_forward.w1.weight": init.normal(stem + "feed_forward.w1.weight", (ffn, dim), dim ** -0.5),
        stem + "feed_forward.w3.weight": init.normal(stem + "feed_forward.w3.weight", (ffn, dim), dim ** -0.5),
        stem + "feed_forward.w2.weight": init.normal(stem + "feed_forward.w2.weight", (dim, ffn), ffn ** -0.5),
    }
    if qk_norm:
        t[stem + "attention.q_norm.weight"] = init.around_one(stem + "attention.q_norm.weight", (head_dim,))
        t[stem + "attention.k_norm.weight"] = init.around_one(stem + "attention.k_norm.weight", (head_dim,))
    return t


def text_tensors(init: Init, c: TextConfig) -> dict:
    emb_std = c.logit_std / np.sqrt(c.dim)
    t = {
        "embeddings.weight": init.normal("embeddings.weight", (c.vocab_size, c.dim), emb_std),
        "codebook_embeddings.weight": init.normal("codebook_embeddings.weight",
                                                  (c.num_codebooks * c.codebook_size, c.dim), emb_std),
        "norm.weight": init.around_one("norm.weight", (c.dim,)),
    }
    for i in range(c.n_layer):
        t.update(attention_block(init, f"layers.{i}.", c.dim, c.n_head, c.n_kv_head, c.head_dim,
                                 c.ffn, c.qk_norm))
    if c.fast_dim != c.dim:
        t["fast_project_in.weight"] = init.normal("fast_project_in.weight", (c.fast_dim, c.dim), c.dim ** -0.5)
    t["fast_embeddings.weight"] = init.normal("fast_embeddings.weight", (c.codebook_size, c.fast_dim), 1.0)
    t["fast_norm.weight"] = init.around_one("fast_norm.weight", (c.fast_dim,))
    t["fast_output.weight"] = init.normal("fast_output.weight", (c.codebook_size, c.fast_dim),
                                          c.logit_std / np.sqrt(c.fast_dim))
    for i in range(c.fast_n_layer):
        t.update(attention_block(init, f"fast_layers.{i}.", c.fast_dim, c.fast_n_head, c.fast_n_kv_head,
                                 c.fast_head_dim, c.fast_ffn, c.fast_qk_norm))
    return dict(sorted(t.items()))


def text_metadata(w: "gguf.GGUFWriter", c: TextConfig):
    a = ARCH + "."
    w.add_uint32(a + "context_length", c.context_length)
    w.add_uint32(a + "embedding_length", c.dim)
    w.add_uint32(a + "feed_forward_length", c.ffn)
    w.add_uint32(a + "block_count", c.n_layer)
    w.add_uint32(a + "attention.head_count", c.n_head)
    w.add_uint32(a + "attention.head_count_kv", c.n_kv_head)
    w.add_float32(a + "rope.freq_base", c.rope_base)
    w.add_float32(a + "attention.layer_norm_rms_epsilon", c.norm_eps)
    w.add_uint32(a + "vocab_size", c.vocab_size)

    f = "fish_speech."
    w.add_string(f + "model_type", "dual_ar")
    w.add_uint32(f + "codebook_size", c.codebook_size)
    w.add_uint32(f + "num_codebooks", c.num_codebooks)
    w.add_uint32(f + "semantic_begin_id", c.semantic_begin)
    w.add_uint32(f + "semantic_end_id", c.semantic_end)
    w.add_uint32(f + "audio_pad_token_id", c.audio_pad_id)
    w.add_bool(f + "scale_codebook_embeddings", c.scale_codebook_embeddings)
    w.add_bool(f + "norm_fastlayer_input", True)
    w.add_bool(f + "tie_word_embeddings", True)
    w.add_bool(f + "attention_qk_norm", c.qk_norm)
    w.add_uint32(f + "fast_context_length", c.num_codebooks + 1)
    w.add_uint32(f + "fast_embedding_length", c.fast_dim)
    w.add_uint32(f + "fast_feed_forward_length", c.fast_ffn)
    w.add_uint32(f + "fast_block_count", c.fast_n_layer)
    w.add_uint32(f + "fast_head_count", c.fast_n_head)
    w.add_uint32(f + "fast_head_count_kv", c.fast_n_kv_head)
    w.add_uint32(f + "fast_head_dim", c.fast_head_dim)
    w.add_float32(f + "fast_rope_freq_base", c.fast_rope_base)
    w.add_float32(f + "fast_layer_norm_rms_eps", c.fast_norm_eps)
    w.add_bool(f + "fast_tie_word_embeddings", False)
    w.add_bool(f + "fast_attention_qk_norm", c.fast_qk_norm)
    w.add_bool(f + "fast_attention_qkv_bias", False)
    w.add_bool(f + "fast_attention_o_bias", False)
    w.add_bool(f + "fast_project_in", c.fast_dim != c.dim)

