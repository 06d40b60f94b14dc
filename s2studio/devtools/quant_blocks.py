"""Random GGUF quantized blocks with sane scales (kernel tests, ``--self-test``, ``requantize``).

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


def extreme_q8_0_blocks(rows: int, cols: int, seed: int) -> np.ndarray:
    """``random_blocks("Q8_0", ...)`` (rows >= 3) whose first rows hold the codes that stress an
    integer kernel's sums: row 0 all -128 (|.| = 128, the largest byte an unsigned multiply
    takes), row 1 all 127, row 2 alternating -128 and 127."""
    raw = random_blocks("Q8_0", rows, cols, seed).reshape(rows, -1, 34)
    raw[0, :, 2:] = np.uint8(128)  # int8 -128
    raw[1, :, 2:] = 127
    raw[2, :, 2::2] = np.uint8(128)
    raw[2, :, 3::2] = 127
    return raw.reshape(rows, -1)


def dequantized(type_name: str, raw: np.ndarray, cols: int) -> np.ndarray:
    """The exact float weights of ``raw`` (rows, cols)."""
    return gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[type_name]).reshape(raw.shape[0], cols)


def random_blocks_with_std(shape: tuple[int, ...], type_name: str, target_std: float, seed: int) -> np.ndarray:
    """uint8 blocks of a K-type tensor of float ``shape`` whose dequantized values have the
    standard deviation ``target_std``: random bytes, every (super-)block scale set to the one
    value that gives that std. ``requantize`` uses it where gguf-py has no quantizer."""
    rows, cols = int(np.prod(shape[:-1])), shape[-1]
    qtype = gguf.GGMLQuantizationType[type_name]
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(rows, cols // block, size), dtype=np.uint8)

    def set_scales(value: float) -> None:
        f16 = np.frombuffer(np.float16(value).tobytes(), dtype=np.uint8)
        for off in SCALE_OFFSETS[type_name]:
            raw[:, :, off:off + 2] = f16

    set_scales(1.0)
    std = float(gguf.quants.dequantize(raw.reshape(rows, -1), qtype).std())
    set_scales(target_std / max(std, 1e-12))
    return raw.reshape(*shape[:-1], cols // block * size)
