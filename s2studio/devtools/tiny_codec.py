"""The RVQ audio codec half of the tiny model: ``c.encoder.*``, ``c.quantizer.*``,
``c.decoder.*`` tensors and the ``fish_speech.codec.*`` metadata (used by
``tiny_model`` and ``full_model``). Same encoder/decoder rates and 10 codebooks as the real codec, so
the real decoder path runs; scales keep the output a non-silent waveform inside (-1, 1)."""

from __future__ import annotations

from typing import TYPE_CHECKING
from dataclasses import dataclass, field

import numpy as np

from .random_init import Init

if TYPE_CHECKING:
    import gguf


@dataclass
class CodecConfig:
    sample_rate: int = 44100
    encoder_dim: int = 4
    encoder_rates: tuple = (2, 4, 8, 8)
    encoder_transformer_layers: tuple = (0, 0, 0, 1)
    decoder_dim: int = 64
    decoder_rates: tuple = (8, 8, 4, 2)
    latent_dim: int = 64
    codebook_dim: int = 8
    residual_codebooks: int = 9
    residual_codebook_size: int = 32
    semantic_codebook_size: int = 128
    downsample_factor: tuple = (2, 2)
    transformer_head_dim: int = 16
    transformer_block_size: int = 8192
    transformer_rope_base: float = 10_000.0
    transformer_norm_eps: float = 1e-5
    rvq_window: int = 8
    rvq_n_layer: int = 1
    rvq_head_dim: int = 16
    rvq_block_size: int = 2048
    rvq_rope_base: float = 10_000.0
    rvq_norm_eps: float = 1e-5
    out_gain: float = 0.08
    hop_length: int = field(init=False)
    frame_length: int = 512

    def __post_init__(self):
        self.hop_length = int(np.prod(self.encoder_rates))



def conv(init, stem, c_out, c_in, k, gain=1.0):
    """Conv1d weight [out, in, k] + bias, already weight-norm folded."""
    return {
        stem + ".weight": init.normal(stem + ".weight", (c_out, c_in, k), gain / np.sqrt(c_in * k)),
        stem + ".bias": init.normal(stem + ".bias", (c_out,), 0.02),
    }


def conv_transpose(init, stem, c_in, c_out, k, stride, gain=1.0):
    """ConvTranspose1d weight [in, out, k] + bias; each output sample sees ~k/stride taps."""
    taps = max(1, k // stride)
    return {
        stem + ".weight": init.normal(stem + ".weight", (c_in, c_out, k), gain / np.sqrt(c_in * taps)),
        stem + ".bias": init.normal(stem + ".bias", (c_out,), 0.02),
    }


def snake(init, name, ch):
    return {name: init.uniform(name, (1, ch, 1), 0.5, 1.5)}


def residual_unit(init, stem, ch):
    t = {}
    t.update(snake(init, stem + ".block.0.alpha", ch))
    t.update(conv(init, stem + ".block.1.conv", ch, ch, 7, gain=0.5))
    t.update(snake(init, stem + ".block.2.alpha", ch))
    t.update(conv(init, stem + ".block.3.conv", ch, ch, 1, gain=0.5))
    return t


def codec_transformer(init, stem, dim, n_layer, head_dim):
    """WindowLimitedTransformer with input_dim == dim (no in/out projections), MHA."""
    assert dim % head_dim == 0, "codec transformer dim must be a multiple of its head_dim"
    ffn = 3 * dim
    t = {}
    for i in range(n_layer):
        s = f"{stem}.layers.{i}."
        t[s + "attention.wqkv.weight"] = init.normal(s + "attention.wqkv.weight", (3 * dim, dim), dim ** -0.5)
        t[s + "attention.wo.weight"] = init.normal(s + "attention.wo.weight", (dim, dim), dim ** -0.5)
        t[s + "feed_forward.w1.weight"] = init.normal(s + "feed_forward.w1.weight", (ffn, dim), dim ** -0.5)
        t[s + "feed_forward.w3.weight"] = init.normal(s + "feed_forward.w3.weight", (ffn, dim), dim ** -0.5)
        t[s + "feed_forward.w2.weight"] = init.normal(s + "feed_forward.w2.weight", (dim, ffn), ffn ** -0.5)
        t[s + "attention_norm.weight"] = init.around_one(s + "attention_norm.weight", (dim,))
        t[s + "ffn_norm.weight"] = init.around_one(s + "ffn_norm.weight", (dim,))
        t[s + "attention_layer_scale.gamma"] = init.uniform(s + "attention_layer_scale.gamma", (dim,), 0.2, 0.6)
        t[s + "ffn_layer_scale.gamma"] = init.uniform(s + "ffn_layer_scale.gamma", (dim,), 0.2, 0.6)
    t[stem + ".norm.weight"] = init.around_one(stem + ".norm.weight", (dim,))
    return t


def convnext(init, stem, dim):
    return {
        stem + ".dwconv.conv.weight": init.normal(stem + ".dwconv.conv.weight", (dim, 1, 7), 7 ** -0.5),
        stem + ".dwconv.conv.bias": init.normal(stem + ".dwconv.conv.bias", (dim,), 0.02),
        stem + ".norm.weight": init.around_one(stem + ".norm.weight", (dim,)),
        stem + ".norm.bias": init.normal(stem + ".norm.bias", (dim,), 0.05),
        stem + ".pwconv1.weight": init.normal(stem + ".pwconv1.weight", (4 * dim, dim), dim ** -0.5),
        stem + ".pwconv1.bias": init.normal(stem + ".pwconv1.bias", (4 * dim,), 0.02),
        stem + ".pwconv2.weight": init.normal(stem + ".pwconv2.weight", (dim, 4 * dim), (4 * dim) ** -0.5),
        stem + ".pwconv2.bias": init.normal(stem + ".pwconv2.bias", (dim,), 0.02),
        stem + ".gamma": init.uniform(stem + ".gamma", (dim,), 0.2, 0.6),
    }


def vq(init, stem, in_dim, cb_dim, size):
    return {
        stem + ".in_proj.weight": init.normal(stem + ".in_proj.weight", (cb_dim, in_dim, 1), in_dim ** -0.5),
        stem + ".in_proj.bias": init.normal(stem + ".in_proj.bias", (cb_dim,), 0.02),
        stem + ".out_proj.weight": init.normal(stem + ".out_proj.weight", (in_dim, cb_dim, 1),
                                               0.5 / np.sqrt(cb_dim)),
        stem + ".out_proj.bias": init.normal(stem + ".out_proj.bias", (in_dim,), 0.02),
        stem + ".codebook.weight": init.normal(stem + ".codebook.weight", (size, cb_dim), 1.0),
    }


def codec_tensors(init: Init, c: CodecConfig) -> dict:
    t = {}
    p = "c.encoder.block."
    t.update(conv(init, p + "0.conv", c.encoder_dim, 1, 7))
    ch = c.encoder_dim
    for i, (stride, n_t) in enumerate(zip(c.encoder_rates, c.encoder_transformer_layers)):
        c_in, ch = ch, ch * 2
        s = f"{p}{i + 1}.block"
        for r in range(3):
            t.update(residual_unit(init, f"{s}.{r}", c_in))
        t.update(snake(init, f"{s}.3.alpha", c_in))
        t.update(conv(init, f"{s}.4.conv", ch, c_in, 2 * stride))
        if n_t:
            t.update(codec_transformer(init, f"{s}.5", ch, n_t, c.transformer_head_dim))
    last = len(c.encoder_rates) + 1
    t.update(snake(init, f"{p}{last}.alpha", ch))
    t.update(conv(init, f"{p}{last + 1}.conv", c.latent_dim, ch, 3))

    q = "c.quantizer."
    d = c.latent_dim
    for i, f in enumerate(c.downsample_factor):
        t.update(conv(init, f"{q}downsample.{i}.0.conv", d, d, f))
        t.update(convnext(init, f"{q}downsample.{i}.1", d))
    t.update(codec_transformer(init, q + "pre_module", d, c.rvq_n_layer, c.rvq_head_dim))
    t.update(codec_transformer(init, q + "post_module", d, c.rvq_n_layer, c.rvq_head_dim))
    # upsample.0 undoes the *last* downsample factor (s2.cpp walks the list backwards)
    for i, f in enumerate(reversed(c.downsample_factor)):
        t.update(conv_transpose(init, f"{q}upsample.{i}.0.conv", d, d, f, f))
        t.update(convnext(init, f"{q}upsample.{i}.1", d))
    t.update(vq(init, q + "semantic_quantizer.quantizers.0", d, c.codebook_dim, c.semantic_codebook_size))
    for i in range(c.residual_codebooks):
        t.update(vq(init, f"{q}quantizer.quantizers.{i}", d, c.codebook_dim, c.residual_codebook_size))

    m = "c.decoder.model."
    t.update(conv(init, m + "0.conv", c.decoder_dim, c.latent_dim, 7))
    ch = c.decoder_dim
    for i, stride in enumerate(c.decoder_rates):
        c_in, ch = ch, ch // 2
        s = f"{m}{i + 1}.block"
        t.update(snake(init, f"{s}.0.alpha", c_in))
        t.update(conv_transpose(init, f"{s}.1.conv", c_in, ch, 2 * stride, stride))
        for r in range(3):
            t.update(residual_unit(init, f"{s}.{r + 2}", ch))
    last = len(c.decoder_rates) + 1
    t.update(snake(init, f"{m}{last}.alpha", ch))
    t.update(conv(init, f"{m}{last + 1}.conv", 1, ch, 7, gain=c.out_gain))
    return dict(sorted(t.items()))


def codec_metadata(w: "gguf.GGUFWriter", c: CodecConfig):
    k = "fish_speech.codec."
    w.add_uint32(k + "sample_rate", c.sample_rate)
    w.add_uint32(k + "hop_length", c.hop_length)
    w.add_uint32(k + "frame_length", c.frame_length)
    w.add_uint32(k + "encoder_dim", c.encoder_dim)
    w.add_uint32(k + "decoder_dim", c.decoder_dim)
    w.add_uint32(k + "latent_dim", c.latent_dim)
    w.add_array(k + "encoder_rates", list(c.encoder_rates))
    w.add_array(k + "decoder_rates", list(c.decoder_rates))
    w.add_array(k + "encoder_transformer_layers", list(c.encoder_transformer_layers))
    w.add_array(k + "decoder_transformer_layers", [0] * len(c.decoder_rates))
    w.add_string(k + "quantizer_type", "downsample_residual_vector_quantize")
    w.add_uint32(k + "quantizer_input_dim", c.latent_dim)
    w.add_uint32(k + "quantizer_codebook_dim", c.codebook_dim)
    w.add_uint32(k + "quantizer_residual_codebooks", c.residual_codebooks)
    w.add_uint32(k + "quantizer_residual_codebook_size", c.residual_codebook_size)
    w.add_uint32(k + "quantizer_semantic_codebook_size", c.semantic_codebook_size)
    w.add_array(k + "quantizer_downsample_factor", list(c.downsample_factor))
    w.add_uint32(k + "transformer.block_size", c.transformer_block_size)
    w.add_int32(k + "transformer.n_local_heads", -1)
    w.add_uint32(k + "transformer.head_dim", c.transformer_head_dim)
    w.add_float32(k + "transformer.rope_freq_base", c.transformer_rope_base)
    w.add_float32(k + "transformer.layer_norm_rms_eps", c.transformer_norm_eps)
    w.add_uint32(k + "rvq_transformer.window_size", c.rvq_window)
    w.add_uint32(k + "rvq_transformer.block_size", c.rvq_block_size)
    w.add_uint32(k + "rvq_transformer.n_layer", c.rvq_n_layer)
    w.add_uint32(k + "rvq_transformer.n_head", c.latent_dim // c.rvq_head_dim)
    w.add_int32(k + "rvq_transformer.n_local_heads", -1)
    w.add_uint32(k + "rvq_transformer.head_dim", c.rvq_head_dim)
    w.add_uint32(k + "rvq_transformer.dim", c.latent_dim)
    w.add_uint32(k + "rvq_transformer.feed_forward_length", 3 * c.latent_dim)
    w.add_float32(k + "rvq_transformer.rope_freq_base", c.rvq_rope_base)
    w.add_float32(k + "rvq_transformer.layer_norm_rms_eps", c.rvq_norm_eps)

