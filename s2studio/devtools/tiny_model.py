"""The tiny random-weight S2 Pro model generator: one GGUF (+ its tokenizer.json) in the exact
S2 Pro / s2.cpp layout, every dimension shrunk (a few hundred KB to a few MB), block structure kept.

One file holds both parts, as the real ``s2-pro-*.gguf`` does: the Dual-AR transformer
(``tiny_text``) and the RVQ codec (``tiny_codec``). Every tensor is drawn from a generator
seeded by (seed, tensor name), so the output is byte-for-byte reproducible; scales keep the
activations O(1) (logits spread over a few units, a non-silent waveform inside (-1, 1)).

This is the only generator of tiny models: ``--self-test`` (``make_tiny_model``), the tests
(``write_tiny_gguf`` through ``tests/conftest.py``) and ``tools/make_tiny_s2.py`` (``main``)
all call it. The golden models under ``tests/data/golden`` were written by it; each
``case.json`` records the command line, and ``tests/devtools`` checks that it still writes
those files byte for byte.

The vocabulary layout (semantic id range, vocab size, ``<|audio_pad|>``) is read back from the
tokenizer, so both files always agree.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .options import add_arguments, from_namespace, knob
from .random_init import Init
from .tiny_codec import CodecConfig, codec_metadata, codec_tensors
from .tiny_text import ARCH, TextConfig, text_metadata, text_tensors
from .tiny_tokenizer import make_tiny_tokenizer

# The GGUF file type recorded for each type of the 2-D transformer weights (names in gguf.LlamaFileType).
FILE_TYPES = {"f32": "ALL_F32", "f16": "MOSTLY_F16", "q8_0": "MOSTLY_Q8_0"}
SLOW, FAST, CODEC = "Slow-AR", "Fast-AR", "codec"


@dataclass(frozen=True)
class TinyModelOptions:
    """Every knob of the tiny model; the defaults are the ``tts_f32`` golden layout (seed aside)."""

    seed: int = knob(0)
    dtype: str = knob("f32", "type of 2-D transformer weights", choices=tuple(FILE_TYPES))
    small_dtype: str = knob("f32", "type of 1-D transformer tensors (RMSNorm weights)", choices=("f32", "f16"))
    codec_dtype: str = knob("f16", "type of all c.* tensors; s2.cpp's CPU codec needs F16 conv kernels "
                            "(ggml im2col)", choices=("f16", "f32"))
    vocab_pad: int = knob(8, "round vocab_size up to a multiple of this")
    dim: int = knob(64, group=SLOW)
    layers: int = knob(3, group=SLOW)
    heads: int = knob(4, group=SLOW)
    kv_heads: int = knob(2, group=SLOW)
    head_dim: int | None = knob(None, "default dim/heads; may differ from it only with --qk-norm on "
                                "(s2.cpp constraint)", group=SLOW, parse=int)
    ffn: int = knob(160, group=SLOW)
    qk_norm: bool = knob(False, group=SLOW)
    scale_codebook_embeddings: bool = knob(True, group=SLOW)
    num_codebooks: int = knob(10, group=SLOW)
    logit_std: float = knob(4.0, "approximate std of Slow/Fast-AR logits", group=SLOW)
    fast_dim: int | None = knob(None, "default = --dim (no fast_project_in)", group=FAST, parse=int)
    fast_layers: int = knob(2, group=FAST)
    fast_heads: int = knob(4, group=FAST)
    fast_kv_heads: int = knob(2, group=FAST)
    fast_head_dim: int = knob(16, group=FAST)
    fast_ffn: int = knob(128, group=FAST)
    fast_qk_norm: bool = knob(False, group=FAST)
    codec_encoder_dim: int = knob(4, group=CODEC)
    codec_decoder_dim: int = knob(64, group=CODEC)
    codec_latent_dim: int = knob(64, group=CODEC)
    codec_codebook_dim: int = knob(8, group=CODEC)
    codec_residual_size: int = knob(32, "residual codebook size (real model: 1024 < 4096); generated codes "
                                    "above it are clamped", group=CODEC)
    codec_window: int = knob(8, "RVQ transformer attention window", group=CODEC)
    codec_rvq_layers: int = knob(1, group=CODEC)
    codec_out_gain: float = knob(0.08, "gain of the final decoder conv (keeps tanh out of saturation)",
                                 group=CODEC)


@dataclass(frozen=True)
class TinyModel:
    model_path: Path
    tokenizer_path: Path
    sample_rate: int
    samples_per_frame: int  # audio samples per generated frame (hop x downsampling)


def vocab_layout(tokenizer_json: dict, pad_to: int = 8) -> dict:
    """The TextConfig fields that must agree with the tokenizer."""
    ids = dict(tokenizer_json["model"]["vocab"])
    for tok in tokenizer_json.get("added_tokens", []):
        ids[tok["content"]] = tok["id"]
    sem = sorted(i for name, i in ids.items() if name.startswith("<|semantic:"))
    if not sem or sem != list(range(sem[0], sem[0] + len(sem))):
        raise ValueError("the tokenizer's <|semantic:N|> ids are missing or not contiguous")
    n_tokens = max(ids.values()) + 1
    return dict(vocab_size=-(-n_tokens // pad_to) * pad_to, semantic_begin=sem[0], semantic_end=sem[-1],
                codebook_size=len(sem), audio_pad_id=ids.get("<|audio_pad|>", 0))


def read_vocab_layout(tokenizer_path: str | Path, pad_to: int = 8) -> dict:
    try:
        return vocab_layout(json.loads(Path(tokenizer_path).read_text(encoding="utf-8")), pad_to)
    except ValueError as err:
        raise ValueError(f"{tokenizer_path}: {err}") from None


def configs(o: TinyModelOptions, layout: dict) -> tuple[TextConfig, CodecConfig]:
    """The transformer and codec configs the options describe; ValueError for a layout s2.cpp cannot load."""
    head_dim = o.head_dim if o.head_dim is not None else o.dim // o.heads
    if not o.qk_norm and head_dim * o.heads != o.dim:
        raise ValueError("without --qk-norm s2.cpp sizes the KV cache with dim/heads: need heads*head_dim == dim")
    if o.heads % o.kv_heads or o.fast_heads % o.fast_kv_heads:
        raise ValueError("head counts must be multiples of the KV head counts")
    text = TextConfig(num_codebooks=o.num_codebooks, dim=o.dim, n_layer=o.layers, n_head=o.heads,
                      n_kv_head=o.kv_heads, head_dim=head_dim, ffn=o.ffn, qk_norm=o.qk_norm,
                      scale_codebook_embeddings=o.scale_codebook_embeddings,
                      fast_dim=o.fast_dim or o.dim, fast_n_layer=o.fast_layers, fast_n_head=o.fast_heads,
                      fast_n_kv_head=o.fast_kv_heads, fast_head_dim=o.fast_head_dim, fast_ffn=o.fast_ffn,
                      fast_qk_norm=o.fast_qk_norm, logit_std=o.logit_std, **layout)
    codec = CodecConfig(encoder_dim=o.codec_encoder_dim, decoder_dim=o.codec_decoder_dim,
                        latent_dim=o.codec_latent_dim, codebook_dim=o.codec_codebook_dim,
                        residual_codebooks=o.num_codebooks - 1, residual_codebook_size=o.codec_residual_size,
                        semantic_codebook_size=layout["codebook_size"], rvq_window=o.codec_window,
                        rvq_n_layer=o.codec_rvq_layers, out_gain=o.codec_out_gain)
    enc_out = codec.encoder_dim * 2 ** len(codec.encoder_rates)
    if any(codec.encoder_transformer_layers) and enc_out % codec.transformer_head_dim:
        raise ValueError("encoder transformer dim must be a multiple of its head_dim")
    if codec.latent_dim % codec.rvq_head_dim:
        raise ValueError("codec latent dim must be a multiple of the RVQ head_dim")
    if codec.decoder_dim % 2 ** len(codec.decoder_rates):
        raise ValueError("decoder dim must be divisible by 2**len(decoder_rates)")
    return text, codec


def encode_tensor(arr: np.ndarray, dtype: str):
    """(data, raw_dtype) for ``GGUFWriter.add_tensor``: float arrays as they are, Q8_0 as blocks."""
    if dtype == "f32":
        return arr.astype(np.float32), None
    if dtype == "f16":
        return arr.astype(np.float16), None
    if dtype == "q8_0":
        import gguf

        if arr.shape[-1] % 32:
            raise ValueError(f"q8_0 needs the row length to be a multiple of 32, got shape {arr.shape}")
        qt = gguf.GGMLQuantizationType.Q8_0
        return gguf.quants.quantize(arr.astype(np.float32), qt), qt
    raise ValueError(dtype)


def start_gguf(out: str | Path, name: str, description: str, file_type: str, text: TextConfig,
               codec: CodecConfig):
    """A GGUFWriter for ``out`` holding the S2 metadata of both halves; the caller adds the tensors.
    ``file_type`` names a ``gguf.LlamaFileType`` (the type of the big weights)."""
    import gguf  # imported here, not at the top: it is the slowest import and only writing needs it

    w = gguf.GGUFWriter(str(out), ARCH)
    w.add_name(name)
    w.add_description(description)
    w.add_file_type(gguf.LlamaFileType[file_type])
    text_metadata(w, text)
    codec_metadata(w, codec)
    return w


def write_tiny_gguf(out: str | Path, tokenizer: str | Path, options: TinyModelOptions | None = None,
                    **knobs) -> dict:
    """Write the tiny model described by ``options`` (or by keyword knobs, e.g. ``seed=5,
    qk_norm=True``) to ``out``, with the vocabulary of ``tokenizer``. Returns a summary (seed,
    vocab layout, samples per frame, parameter counts by type, both configs)."""
    o = options if options is not None else TinyModelOptions(**knobs)
    if options is not None and knobs:
        raise TypeError("give either options or keyword knobs, not both")
    text, codec = configs(o, read_vocab_layout(tokenizer, o.vocab_pad))
    init = Init(o.seed)
    # The description names the script the golden models were written with: their sha256 covers it.
    w = start_gguf(out, "tiny-s2-random",
                   f"random-weight S2 Pro layout test model, seed {o.seed} (make_tiny_s2.py)",
                   FILE_TYPES[o.dtype], text, codec)

    stats: dict[str, int] = {}
    for name, arr in text_tensors(init, text).items():
        dtype = o.dtype if arr.ndim >= 2 else o.small_dtype
        data, raw = encode_tensor(arr, dtype)
        w.add_tensor(name, data, raw_dtype=raw)
        stats[dtype] = stats.get(dtype, 0) + arr.size
    for name, arr in codec_tensors(init, codec).items():
        data, raw = encode_tensor(arr, o.codec_dtype)
        w.add_tensor(name, data, raw_dtype=raw)
        stats["codec_" + o.codec_dtype] = stats.get("codec_" + o.codec_dtype, 0) + arr.size
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {"seed": o.seed, "vocab_size": text.vocab_size,
            "semantic_begin": text.semantic_begin, "semantic_end": text.semantic_end,
            "codebook_size": text.codebook_size, "head_dim": text.head_dim,
            "samples_per_frame": samples_per_frame(codec),
            "params_by_type": stats,
            "tensor_types": {"transformer_2d": o.dtype, "transformer_1d": o.small_dtype, "codec": o.codec_dtype},
            "text_config": asdict(text), "codec_config": asdict(codec)}


def samples_per_frame(codec: CodecConfig) -> int:
    return codec.hop_length * int(np.prod(codec.downsample_factor))


def make_tiny_model(folder: str | Path, seed: int = 0, **knobs) -> TinyModel:
    """Write ``tiny.gguf`` and its ``tokenizer.json`` into ``folder`` (created if needed).

    Same arguments, same bytes: the tokenizer trainer and every tensor are deterministic.
    ``knobs`` are ``TinyModelOptions`` fields (default: the float32 layout of the goldens).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer_path = folder / "tokenizer.json"
    make_tiny_tokenizer(tokenizer_path)
    model_path = folder / "tiny.gguf"
    summary = write_tiny_gguf(model_path, tokenizer_path, TinyModelOptions(seed=seed, **knobs))
    return TinyModel(model_path=model_path, tokenizer_path=tokenizer_path,
                     sample_rate=summary["codec_config"]["sample_rate"],
                     samples_per_frame=summary["samples_per_frame"])


def main(argv=None) -> int:
    """Command line (``tools/make_tiny_s2.py``): write one model, print its summary as JSON."""
    ap = argparse.ArgumentParser(prog="make_tiny_s2.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output .gguf path")
    ap.add_argument("--tokenizer", required=True, help="tokenizer.json from make_tiny_tokenizer.py")
    add_arguments(ap, TinyModelOptions)
    a = ap.parse_args(argv)
    try:
        summary = write_tiny_gguf(a.out, a.tokenizer, from_namespace(TinyModelOptions, a))
    except ValueError as err:
        raise SystemExit(str(err))
    json.dump(summary, sys.stdout, indent=1)
    print()
    return 0

