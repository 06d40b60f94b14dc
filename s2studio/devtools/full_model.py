"""A FULL-SIZE random-weight S2 Pro GGUF (real dims, real layout) for performance work.

Same tensor names, shapes, metadata keys and scales as ``tiny_model`` (whose layout and metadata
functions it runs), but with the real S2 Pro dimensions by default and a streaming writer, so a
4.5 B-parameter file is produced without holding it in memory:

* big 2-D transformer matrices are written straight in their target encoding, never as float
  arrays:
    - ``q8_0``: random int8 codes drawn from a normal distribution (a 65536-entry quantile table
      indexed with random uint16) and one f16 scale per block, so the weights are ~ N(0, std^2)
      with the std the tiny model uses (1/fan_in variance for linears, logit-scaled embeddings);
    - ``q4_k``: random 4-bit codes (uniform 0..15) with all 6-bit sub-block scales/mins = 1,
      d = s, dmin = 7.5 s: zero-mean uniform weights with the same std. (gguf-py can dequantize
      Q4_K but cannot quantize it; the blocks are written directly and checked with
      ``gguf.quants.dequantize``.)
    - ``f16``: the same normal quantile table scaled and cast to f16;
* 1-D tensors (norm weights) and all codec ``c.*`` tensors are exactly what the tiny generator
  would write for the same seed and config (its ``Init``), so the codec part is a real-size
  version of the tiny codec.

Values of the big matrices depend only on (seed, tensor name) but differ from what the tiny
generator would draw. Command line: ``tools/make_full_s2.py`` (``main``); the ids come from
``full_tokenizer``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Callable

import numpy as np

from .options import add_arguments, from_namespace, knob
from .random_init import Init
from .tiny_codec import CodecConfig, codec_tensors
from .tiny_model import read_vocab_layout, start_gguf
from .tiny_text import TextConfig, text_tensors

TYPES = ("f32", "f16", "q8_0", "q4_k")
FILE_TYPES = {"f32": "ALL_F32", "f16": "MOSTLY_F16", "q8_0": "MOSTLY_Q8_0", "q4_k": "MOSTLY_Q4_K_S"}
DIMS = "dims (defaults = S2 Pro)"


@dataclass(frozen=True)
class FullModelOptions:
    seed: int = knob(0)
    dtype: str = knob("q8_0", "2-D transformer tensors", choices=TYPES)
    small_dtype: str = knob("f16", "1-D transformer tensors", choices=("f16", "f32"))
    codec_dtype: str = knob("f16", "all c.* tensors", choices=("f16", "f32"))
    chunk_mvalues: float = knob(16.0, "rows per write chunk, in M values")
    dim: int = knob(2560, group=DIMS)
    layers: int = knob(36, group=DIMS)
    heads: int = knob(32, group=DIMS)
    kv_heads: int = knob(8, group=DIMS)
    head_dim: int = knob(128, group=DIMS)
    ffn: int = knob(9728, group=DIMS)
    fast_layers: int = knob(4, group=DIMS)
    fast_ffn: int = knob(9728, group=DIMS)
    codec: str = knob("full", "full: S2 Pro codec dims (391 M params); tiny: the tiny model's codec",
                      group=DIMS, choices=("full", "tiny"))
    codec_out_gain: float = knob(0.08, group=DIMS)


# -- lazy tensor specs: run the tiny layout functions without allocating ---------------------------

class Spec:
    __slots__ = ("name", "shape", "kind", "args")

    def __init__(self, name, shape, kind, args):
        self.name, self.shape, self.kind, self.args = name, tuple(shape), kind, args

    @property
    def size(self):
        return int(np.prod(self.shape))


class SpecInit:
    """Stands in for ``Init``: records what would be drawn instead of drawing it."""

    def normal(self, name, shape, std):
        return Spec(name, shape, "normal", (float(std),))

    def around_one(self, name, shape, spread=0.1):
        return Spec(name, shape, "around_one", (spread,))

    def uniform(self, name, shape, lo, hi):
        return Spec(name, shape, "uniform", (lo, hi))


def materialize_exact(init: Init, s: Spec) -> np.ndarray:
    """The float32 array the tiny generator would produce for this spec."""
    return getattr(init, s.kind)(s.name, s.shape, *s.args)


# -- fast encoders for big matrices ---------------------------------------------------------------

_Z = np.array([NormalDist().inv_cdf((i + 0.5) / 65536) for i in range(65536)])  # N(0,1) quantiles
_Q8_GAIN = 32.0
_Q8_TABLE = np.clip(np.rint(_Z * _Q8_GAIN), -127, 127).astype(np.int8)  # never -128 (ggml sign trick)
_Q8_STD = float(_Q8_TABLE.astype(np.float64).std())
_Q4K_SCALES = np.array([1, 1, 1, 1, 1, 1, 1, 1, 0x11, 0x11, 0x11, 0x11], np.uint8)  # all sc = m = 1
_Q4K_STD = float(np.sqrt((16 ** 2 - 1) / 12))  # std of uniform 0..15


def _qtype(dtype: str):
    import gguf

    return gguf.GGMLQuantizationType[dtype.upper()]


def nbytes_of(shape, dtype: str) -> int:
    import gguf

    n = int(np.prod(shape))
    bs, ts = gguf.GGML_QUANT_SIZES[_qtype(dtype)]
    if n % bs:
        raise ValueError(f"{dtype} needs rows that are multiples of {bs}, got {shape}")
    return n // bs * ts


def fast_rows(rng: np.random.Generator, rows: int, cols: int, std: float, dtype: str) -> np.ndarray:
    """rows x cols random weights with the given std, encoded as `dtype` (uint8 bytes for quants)."""
    if dtype == "q8_0":
        nb = cols // 32
        out = np.empty((rows, nb, 34), np.uint8)
        out[:, :, 0:2] = np.frombuffer(np.float16(std / _Q8_STD).tobytes(), np.uint8)
        idx = rng.integers(0, 65536, size=(rows, cols), dtype=np.uint16)
        out[:, :, 2:] = _Q8_TABLE[idx].view(np.uint8).reshape(rows, nb, 32)
        return out.reshape(rows, nb * 34)
    if dtype == "q4_k":
        nb = cols // 256
        s = std / _Q4K_STD
        out = np.empty((rows, nb, 144), np.uint8)
        out[:, :, 0:2] = np.frombuffer(np.float16(s).tobytes(), np.uint8)
        out[:, :, 2:4] = np.frombuffer(np.float16(7.5 * s).tobytes(), np.uint8)
        out[:, :, 4:16] = _Q4K_SCALES
        out[:, :, 16:] = rng.integers(0, 256, size=(rows, nb, 128), dtype=np.uint8)
        return out.reshape(rows, nb * 144)
    if dtype in ("f16", "f32"):
        table = (_Z * std).astype(np.float16 if dtype == "f16" else np.float32)
        return table[rng.integers(0, 65536, size=(rows, cols), dtype=np.uint16)]
    raise ValueError(dtype)


def write_big(w, rng: np.random.Generator, s: Spec, dtype: str, chunk_values: int):
    """Stream one 2-D tensor into the writer's (single) output file, chunk by chunk of rows."""
    import gguf

    rows, cols = s.shape
    fout = w.fout[0]
    w.write_padding(fout, fout.tell())
    start = fout.tell()
    step = max(1, chunk_values // cols)
    for r0 in range(0, rows, step):
        fast_rows(rng, min(step, rows - r0), cols, s.args[0], dtype).tofile(fout)
    written = fout.tell() - start
    assert written == nbytes_of(s.shape, dtype), (s.name, written)
    w.write_padding(fout, written)
    # keep GGUFWriter's bookkeeping in sync (it pops tensor infos in order)
    w.tensors[0].pop(next(iter(w.tensors[0])))
    w.state = gguf.gguf_writer.WriterState.WEIGHTS


def encode_small(arr: np.ndarray, dtype: str) -> np.ndarray:
    return arr.astype(np.float16 if dtype == "f16" else np.float32)


def self_check():
    """The block encoders against gguf-py's dequantizer: mean ~0, the asked std."""
    import gguf

    rng = np.random.default_rng(1)
    for dtype in ("q8_0", "q4_k"):
        raw = fast_rows(rng, 64, 2560, 0.02, dtype)
        deq = gguf.quants.dequantize(raw, _qtype(dtype))
        assert deq.shape == (64, 2560), deq.shape
        m, sd = float(deq.mean()), float(deq.std())
        if abs(sd / 0.02 - 1) > 0.03 or abs(m) > 0.002:
            raise RuntimeError(f"{dtype} encoder check failed: mean {m}, std {sd}")
    return True


# -- writing --------------------------------------------------------------------------------------

def configs(o: FullModelOptions, voc: dict) -> tuple[TextConfig, CodecConfig]:
    tc = TextConfig(dim=o.dim, n_layer=o.layers, n_head=o.heads, n_kv_head=o.kv_heads,
                    head_dim=o.head_dim, ffn=o.ffn, rope_base=1e6, norm_eps=1e-6,
                    context_length=32768, qk_norm=True, scale_codebook_embeddings=True,
                    fast_dim=o.dim, fast_n_layer=o.fast_layers, fast_n_head=o.heads,
                    fast_n_kv_head=o.kv_heads, fast_head_dim=o.head_dim, fast_ffn=o.fast_ffn,
                    fast_rope_base=1e6, fast_norm_eps=1e-6, fast_qk_norm=False, **voc)
    if o.codec == "full":
        cc = CodecConfig(encoder_dim=64, encoder_transformer_layers=(0, 0, 0, 4), decoder_dim=1536,
                         latent_dim=1024, codebook_dim=8, residual_codebooks=tc.num_codebooks - 1,
                         residual_codebook_size=1024, semantic_codebook_size=voc["codebook_size"],
                         transformer_head_dim=64, rvq_window=128, rvq_n_layer=8, rvq_head_dim=64,
                         out_gain=o.codec_out_gain)
    else:
        cc = CodecConfig(residual_codebooks=tc.num_codebooks - 1,
                         semantic_codebook_size=voc["codebook_size"], out_gain=o.codec_out_gain)
    return tc, cc


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def write_full_gguf(out: str | os.PathLike, tokenizer: str | os.PathLike, options: FullModelOptions | None = None,
                    log: Callable[[str], None] = _to_stderr, **knobs) -> dict:
    """Write the full-size model to ``out`` (several GB with the defaults), with the ids of
    ``tokenizer`` (``full_tokenizer`` for the real ones). Returns a summary."""
    if options is not None and knobs:
        raise TypeError("give either options or keyword knobs, not both")
    o = options if options is not None else FullModelOptions(**knobs)
    t0 = time.time()
    self_check()
    tc, cc = configs(o, read_vocab_layout(tokenizer, 8))
    text = text_tensors(SpecInit(), tc)
    codec = codec_tensors(SpecInit(), cc)

    w = start_gguf(out, "full-s2-random",
                   f"random-weight full-size S2 Pro layout perf model, seed {o.seed} (make_full_s2.py)",
                   FILE_TYPES[o.dtype], tc, cc)

    plan = []  # (spec, dtype, is_big)
    for s in text.values():
        big = len(s.shape) >= 2
        plan.append((s, o.dtype if big else o.small_dtype, big))
    for s in codec.values():
        plan.append((s, o.codec_dtype, False))
    for s, dtype, big in plan:
        if dtype in ("q8_0", "q4_k"):
            rows_bytes = nbytes_of(s.shape, dtype) // s.shape[0]
            w.add_tensor_info(s.name, (s.shape[0], rows_bytes), np.dtype(np.uint8),
                              nbytes_of(s.shape, dtype), raw_dtype=_qtype(dtype))
        else:
            npdt = np.dtype(np.float16 if dtype == "f16" else np.float32)
            w.add_tensor_info(s.name, s.shape, npdt, s.size * npdt.itemsize)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()

    init = Init(o.seed)
    chunk = int(o.chunk_mvalues * 1e6)
    stats: dict[str, int] = {}
    for k, (s, dtype, big) in enumerate(plan):
        if big:
            write_big(w, init.rng(s.name), s, dtype, chunk)
        else:
            w.write_tensor_data(encode_small(materialize_exact(init, s), dtype))
        key = ("codec_" if s.name.startswith("c.") else "") + dtype
        stats[key] = stats.get(key, 0) + s.size
        if big and s.size > 50e6:
            log(f"[{time.time() - t0:7.1f}s] {k + 1}/{len(plan)} {s.name} {s.shape} {dtype}")
    w.close()

    return {"seed": o.seed, "out": str(out), "bytes": os.path.getsize(out), "seconds": round(time.time() - t0, 1),
            "vocab_size": tc.vocab_size, "semantic_begin": tc.semantic_begin,
            "semantic_end": tc.semantic_end, "codebook_size": tc.codebook_size,
            "n_tensors": len(plan), "n_codec_tensors": len(codec),
            "params_by_type": stats,
            "tensor_types": {"transformer_2d": o.dtype, "transformer_1d": o.small_dtype, "codec": o.codec_dtype},
            "text_config": asdict(tc), "codec_config": asdict(cc)}


def main(argv=None) -> int:
    """Command line (``tools/make_full_s2.py``): write one model, print its summary as JSON."""
    ap = argparse.ArgumentParser(prog="make_full_s2.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", required=True, help="tokenizer.json (make_full_tokenizer.py for real ids)")
    add_arguments(ap, FullModelOptions)
    a = ap.parse_args(argv)
    try:
        summary = write_full_gguf(a.out, a.tokenizer, from_namespace(FullModelOptions, a))
    except (ValueError, RuntimeError) as err:
        raise SystemExit(str(err))
    json.dump(summary, sys.stdout, indent=1)
    print()
    return 0
