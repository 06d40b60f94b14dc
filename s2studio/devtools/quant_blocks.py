"""Random GGUF quantized blocks with sane scales, for the kernel tests and ``--self-test``.

gguf-py cannot quantize the K-types, so random bytes stand in for the codes and only the
float16 (super-)block scales are set to plausible values; ``gguf.quants.dequantize`` then gives
the exact float weights to compare a kernel with.
"""

from __future__ import annotations

import gguf
import numpy as np

# Byte offsets of the float16 (super-)block scales (d, and dmin where present) in each block.
SCALE_OFFSETS = {"Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,), "Q4_0": (0,), "Q3_K": (108,),
                 "Q2_K": (80, 82), "Q8_0": (0,)}


def random_blocks(type_name: str, rows: int, cols: int, seed: int) -> np.ndarray:
    """uint8 (rows, row_bytes): random bytes, float16 scales drawn in +-[1e-3, 2e-2]."""
    qtype = gguf.GGMLQuantizationType[type_name]
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(rows, cols // block, size), dtype=np.uint8)
    for off in SCALE_OFFSETS[type_name]:
        d = rng.uniform(1e-3, 2e-2, size=(rows, cols // block)) * rng.choice([-1, 1], size=(rows, cols // block))
        raw[:, :, off:off + 2] = d.astype(np.float16).view(np.uint8).reshape(rows, -1, 2)
    return raw.reshape(rows, -1)


def dequantized(type_name: str, raw: np.ndarray, cols: int) -> np.ndarray:
    """The exact float weights of ``raw`` (rows, cols)."""
    return gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[type_name]).reshape(raw.shape[0], cols)
