#!/usr/bin/env python3
"""Copy an S2 GGUF, re-typing its 2-D transformer tensors (tests and benchmarks).

    python tools/requantize_gguf.py IN.gguf OUT.gguf --type q4_k [--dequantized-out REF.gguf]

- f32 / f16 / bf16 / q8_0 / q4_0 / q4_1 / q5_0 / q5_1: the weights are converted with
  ``gguf.quants.quantize``.
- q2_k / q3_k / q4_k / q5_k / q6_k: gguf-py has no quantizer for K-quants, so the blocks are
  *random* (random bytes with sane super-block scales, rescaled so each tensor keeps the
  standard deviation of the original). The file then is a different random model of the same
  layout; pass ``--dequantized-out`` to also write the exact float32 dequantization of it, the
  reference that an engine's output on the quantized file is compared against.

Metadata, 1-D tensors and the codec (``c.*``) are copied unchanged.
"""

from __future__ import annotations

import argparse
import zlib

import gguf
import numpy as np

GT = gguf.GGMLQuantizationType
TYPES = {n.lower(): GT[n] for n in ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                                     "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")}
K_QUANTS = {GT.Q2_K, GT.Q3_K, GT.Q4_K, GT.Q5_K, GT.Q6_K}
# Byte offsets of the fp16 super-block scales (d, and dmin where present) in each K block.
_K_SCALE_OFFSETS = {GT.Q2_K: (80, 82), GT.Q3_K: (108,), GT.Q4_K: (0, 2), GT.Q5_K: (0, 2), GT.Q6_K: (208,)}


def _random_k_blocks(shape: tuple[int, ...], qtype: GT, target_std: float, seed: int) -> np.ndarray:
    rows, cols = int(np.prod(shape[:-1])), shape[-1]
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(rows, cols // block, size), dtype=np.uint8)

    def set_scales(value: float) -> None:
        f16 = np.frombuffer(np.float16(value).tobytes(), dtype=np.uint8)
        for off in _K_SCALE_OFFSETS[qtype]:
            raw[:, :, off:off + 2] = f16

    set_scales(1.0)
    std = float(gguf.quants.dequantize(raw.reshape(rows, -1), qtype).std())
    set_scales(target_std / max(std, 1e-12))
    return raw.reshape(*shape[:-1], cols // block * size)


def convert(src: str, dst: str, type_name: str, dequantized_out: str | None = None) -> None:
    qtype = TYPES[type_name]
    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writers = [gguf.GGUFWriter(dst, arch)]
    if dequantized_out:
        writers.append(gguf.GGUFWriter(dequantized_out, arch))
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
        for w in writers:
            w.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    for t in reader.tensors:
        shape = tuple(int(d) for d in reversed(t.shape))
        is_weight = len(shape) == 2 and not t.name.startswith("c.")
        if t.tensor_type in (GT.F32, GT.F16):
            values = np.array(t.data, dtype=np.float32).reshape(shape)
        else:
            values = gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape)
        if not is_weight:
            for w in writers:  # keep the original type
                data = np.array(t.data)
                if t.tensor_type in (GT.F32, GT.F16):
                    w.add_tensor(t.name, data)
                else:
                    w.add_tensor(t.name, data, raw_dtype=t.tensor_type)
            continue
        if qtype in K_QUANTS:
            raw = _random_k_blocks(shape, qtype, float(values.std()), zlib.crc32(t.name.encode()))
            exact = gguf.quants.dequantize(raw, qtype).reshape(shape)
        elif qtype == GT.F32:
            raw, exact = values, values
        elif qtype == GT.F16:
            raw = values.astype(np.float16)
            exact = raw.astype(np.float32)
        else:
            raw = gguf.quants.quantize(values, qtype)
            exact = gguf.quants.dequantize(raw, qtype).reshape(shape)
        if qtype in (GT.F32, GT.F16):
            writers[0].add_tensor(t.name, raw)
        else:
            writers[0].add_tensor(t.name, raw, raw_dtype=qtype)
        if dequantized_out:
            writers[1].add_tensor(t.name, exact.astype(np.float32))
    for w in writers:
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--type", required=True, choices=sorted(TYPES))
    ap.add_argument("--dequantized-out", help="also write the float32 dequantization of DST here")
    a = ap.parse_args()
    convert(a.src, a.dst, a.type, a.dequantized_out)


if __name__ == "__main__":
    main()
