"""Copy an S2 GGUF, re-typing its 2-D transformer tensors (tests and benchmarks).

- f32 / f16 / bf16 / q8_0 / q4_0 / q4_1 / q5_0 / q5_1: the weights are converted with
  ``gguf.quants.quantize``.
- q2_k / q3_k / q4_k / q5_k / q6_k: gguf-py has no quantizer for K-quants, so the blocks are
  *random* (random bytes with sane super-block scales, rescaled so each tensor keeps the
  standard deviation of the original). The file then is a different random model of the same
  layout; pass ``dequantized_out`` to also write the exact float32 dequantization of it, the
  reference that an engine's output on the quantized file is compared against.

Metadata, 1-D tensors and the codec (``c.*``) are copied unchanged. Command line:
``tools/requantize_gguf.py`` (``main``).
"""

from __future__ import annotations

import argparse
import os
import zlib

import gguf
import numpy as np

from .quant_blocks import random_blocks_with_std

GT = gguf.GGMLQuantizationType
TYPES = {n.lower(): GT[n] for n in ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                                     "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")}
K_QUANTS = {GT.Q2_K, GT.Q3_K, GT.Q4_K, GT.Q5_K, GT.Q6_K}


def requantize_gguf(src: str | os.PathLike, dst: str | os.PathLike, type_name: str,
                    dequantized_out: str | os.PathLike | None = None) -> None:
    """Write ``src`` to ``dst`` with its 2-D transformer weights in ``type_name`` (a key of
    TYPES); with ``dequantized_out``, also the float32 file of the exact values ``dst`` holds."""
    qtype = TYPES[type_name]
    reader = gguf.GGUFReader(str(src))
    arch = reader.fields["general.architecture"].contents()
    writers = [gguf.GGUFWriter(str(dst), arch)]
    if dequantized_out:
        writers.append(gguf.GGUFWriter(str(dequantized_out), arch))
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
            raw = random_blocks_with_std(shape, qtype.name, float(values.std()), zlib.crc32(t.name.encode()))
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


def main(argv=None) -> int:
    """Command line (``tools/requantize_gguf.py``)."""
    ap = argparse.ArgumentParser(prog="requantize_gguf.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--type", required=True, choices=sorted(TYPES))
    ap.add_argument("--dequantized-out", help="also write the float32 dequantization of DST here")
    a = ap.parse_args(argv)
    requantize_gguf(a.src, a.dst, a.type, a.dequantized_out)
    return 0
