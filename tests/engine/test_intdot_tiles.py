"""The register-tiled Q8_0 rows of the integer kernels (_qdot.c, DEFINE_Q8_TILED) against the
per-row loops they replace for several activation rows: bit-identical outputs on every
instruction-set level this CPU offers, for int8 and int16 (the prefill's) activations, every
row count of a prefill call and the remainders of its 16-row split, and matrices whose row
count is not a multiple of a tile's rows or whose width leaves the last block pair half empty.

Bit-identical, not close: a tile does each (weight row, activation row)'s integer dots and
float operations in the per-row loops' order, and the batching of requests, the seeded takes
and the prefill's agreement with decode rely on a row's result never depending on the path.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("numba")

from s2studio.devtools.quant_blocks import extreme_q8_0_blocks, random_blocks  # noqa: E402
from s2studio.engine.kernels import intdot  # noqa: E402
from s2studio.engine.kernels.qmatrix import QuantMatrix  # noqa: E402

pytestmark = pytest.mark.skipif(not intdot.available(), reason=f"integer kernels not here: {intdot.describe()}")

# (rows, cols): odd row counts (a tile takes 2 weight rows on AVX-512: the last row goes to the
# per-row loops), a single row, the full model's width, and widths of 25 and 9 blocks of 32
# (tiny models: zero-padded activations, AVX-512's last block pair half empty).
SHAPES = [(37, 2560), (1, 512), (6, 800), (9, 288), (33, 96)]



@pytest.fixture
def tiled():
    yield intdot.set_tiled
    intdot.set_tiled(True)


def activations(m: int, cols: int, seed: int) -> torch.Tensor:
    x = np.random.default_rng(seed).standard_normal((m, cols)).astype(np.float32)
    x[:, ::17] *= 30.0  # outlier channels: activations at their largest codes
    x[m // 2, : cols // 3] = 0.0  # and a run of zeros
    return torch.from_numpy(x)


@pytest.mark.parametrize("rows,cols", SHAPES)
@pytest.mark.parametrize("planes", [2, 1], ids=["int16", "int8"])
def test_tiles_give_the_per_row_loops_outputs_bit_for_bit(level, tiled, rows, cols, planes):
    """m = 1..32 activation rows through QuantMatrix.int_rows (the prefill's path: 16 rows per
    kernel call, then the remainder), tiled (the default) and with the tiles switched off."""
    raw = random_blocks("Q8_0", rows, cols, rows * 7 + cols)
    w = QuantMatrix("Q8_0", raw, (rows, cols), int_dot=True)
    x = activations(32, cols, rows + cols)
    for m in range(1, 33):
        out = {}
        for on in (True, False):
            tiled(on)
            if planes == 2:
                out[on] = w.int_rows(x[:m]).numpy()
            else:  # one int8 plane: the kernel directly (int_rows takes the settings' mode)
                out[on] = np.full((m, rows), np.nan, np.float32)
                xm = x[:m].numpy()
                for a in range(0, m, 16):
                    intdot.gemv("Q8_0", raw, xm[a:a + 16], out[on][a:a + 16], planes=1)
        assert np.isfinite(out[True]).all(), f"m={m}"
        np.testing.assert_array_equal(out[True], out[False], err_msg=f"{level} {rows}x{cols} m={m}")


@pytest.mark.parametrize("planes", [2, 1], ids=["int16", "int8"])
def test_extreme_codes_in_a_tile(level, tiled, planes):
    """Weights at -128 and 127 in every position against activations at their largest codes,
    in tiles of every height: the tiles' integer sums are exact (no saturation) like the
    per-row loops'."""
    rows, cols = 5, 512
    raw = extreme_q8_0_blocks(rows, cols, 1)
    x = np.ones((16, cols), np.float32)
    x[1::2, 1::2] = -1.0
    for m in (3, 5, 7, 16):
        out = {}
        for on in (True, False):
            tiled(on)
            out[on] = np.full((m, rows), np.nan, np.float32)
            intdot.gemv("Q8_0", raw, x[:m], out[on], planes=planes)
        np.testing.assert_array_equal(out[True], out[False], err_msg=f"m={m}")
    # and the exact value where every product is +-128 or 127 (the first two rows)
    d = raw.reshape(rows, -1, 34)[:, :, :2].copy().view(np.float16)[:, :, 0].astype(np.float64)
    assert out[True][0, 0] == pytest.approx(-128 * 32 * d[0].sum(), rel=1e-6)
    assert out[True][0, 1] == pytest.approx(127 * 32 * d[1].sum(), rel=1e-6)
