"""K-quant CPU kernels (engine/kernels/quant_types.py) against gguf-py's reference dequantization.

gguf-py cannot quantize K-types, so the blocks are random bytes with sane float16 super-block
scales (``s2studio.devtools.quant_blocks``, as ``requantize`` draws them). Every dequantized value must
be bit-exact with ``gguf.quants.dequantize``; the GEMV only differs from float64
dequantize-then-matmul by float32 summation order.
"""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch

pytest.importorskip("numba")

from s2studio.engine.kernels import backend  # noqa: E402
from s2studio.engine.kernels.backend import KernelSettings  # noqa: E402
from s2studio.engine.kernels import common as kcommon  # noqa: E402
from s2studio.engine.kernels import quant_types as quant_types  # noqa: E402
from s2studio.engine.kernels import qmatrix  # noqa: E402
from s2studio.devtools.quant_blocks import dequantized as reference, random_blocks  # noqa: E402
from s2studio.engine.kernels.qmatrix import QuantMatrix  # noqa: E402

GT = gguf.GGMLQuantizationType
# Each type's first run compiles its three kernels (~5 s, then cached on disk): the types
# beyond the main three are marked slow so that a quick run (-m "not slow") skips them.
TYPES = ["Q4_K", "Q5_K", "Q6_K"] + [pytest.param(t, marks=pytest.mark.slow) for t in ("Q4_0", "Q3_K", "Q2_K")]
SHAPES = [(37, 512), (64, 1024), (8, 256), (5, 256), (1, 768), (43, 256)]

# GEMV against float64 dequantize-then-matmul: float32 rounding of the sums only (the activations
# stay float32), bounded relative to the largest output. Measured: <= 4e-7.
GEMV_REL = 1e-5
# The prefill path (more than 16 rows): exact float32 weights and activations, a float32 GEMM.
PREFILL_REL = 1e-5


@pytest.fixture(scope="module", params=TYPES)
def qtype(request):
    return request.param


def test_registered_with_the_gguf_block_sizes(qtype):
    kern = kcommon.KERNELS[qtype]
    assert kern.gemv is getattr(quant_types, f"{qtype.lower()}_gemv")
    assert (kern.block_elems, kern.block_bytes) == gguf.GGML_QUANT_SIZES[GT[qtype]]


@pytest.mark.parametrize("rows,cols", SHAPES)
def test_gather_and_dequant_f32_are_bit_exact(qtype, rows, cols):
    raw = random_blocks(qtype, rows, cols, rows * 7919 + cols)
    want = reference(qtype, raw, cols)
    kern = kcommon.KERNELS[qtype]

    ids = np.concatenate([np.arange(rows), np.arange(rows)[::-1][: max(1, rows // 3)]]).astype(np.int64)
    got = np.empty((ids.size, cols), np.float32)
    kern.gather(raw, ids, got, kcommon.F16_TABLE)
    np.testing.assert_array_equal(got.view(np.uint32), want[ids].view(np.uint32))

    full = np.full((rows, cols), np.nan, np.float32)
    kern.dequant_f32(raw, full, kcommon.F16_TABLE)
    np.testing.assert_array_equal(full.view(np.uint32), want.view(np.uint32))


def assert_gemv_close(qtype, raw, x):
    """The kernel's GEMV (into a NaN-filled output: every entry must be written) against
    float64 dequantize-then-matmul, within GEMV_REL of the output scale."""
    rows, cols = raw.shape[0], x.shape[1]
    got = np.full((x.shape[0], rows), np.nan, np.float32)
    kcommon.KERNELS[qtype].gemv(raw, x, got, kcommon.F16_TABLE)
    want = x.astype(np.float64) @ reference(qtype, raw, cols).astype(np.float64).T
    assert np.abs(got - want).max() <= GEMV_REL * np.abs(want).max()


@pytest.mark.parametrize("rows,cols", SHAPES)
@pytest.mark.parametrize("m", [1, 2, 5, 16])
def test_gemv_matches_dequantize_then_matmul(qtype, rows, cols, m):
    raw = random_blocks(qtype, rows, cols, rows * 31 + cols + m)
    assert_gemv_close(qtype, raw, np.random.default_rng(m).standard_normal((m, cols)).astype(np.float32))


def test_gemv_with_a_mean_in_the_activations(qtype):
    """Real activations are not centred: the min/offset terms must not lose precision."""
    rows, cols = 40, 1024
    raw = random_blocks(qtype, rows, cols, 11)
    assert_gemv_close(qtype, raw, (np.random.default_rng(3).standard_normal((3, cols)) + 4.0).astype(np.float32))


def test_quant_matrix_round_trip(qtype):
    rows, cols = 45, 768
    raw = random_blocks(qtype, rows, cols, 5)
    deq = reference(qtype, raw, cols)
    w = QuantMatrix(qtype, raw, (rows, cols), int_dot=False)  # the float32 kernel (int8: test_intdot.py)
    assert w.dtype == qtype and w.nbytes == raw.nbytes and tuple(w.shape) == (rows, cols)

    gen = torch.Generator().manual_seed(0)
    for m in (1, 3, kcommon.MAX_KERNEL_ROWS):  # the quantized GEMV
        x = torch.randn(m, cols, generator=gen)
        want = x.double() @ torch.from_numpy(deq).double().T
        got = w.matmul_t(x)
        assert got.dtype == torch.float32 and got.shape == (m, rows)
        assert (got.double() - want).abs().max() <= GEMV_REL * want.abs().max()

    x = torch.randn(kcommon.MAX_KERNEL_ROWS + 4, cols, generator=gen)  # the float32 prefill GEMM
    want = x.double() @ torch.from_numpy(deq).double().T
    got = w.matmul_t(x)
    assert got.dtype == torch.float32 and got.shape == (x.shape[0], rows)
    assert (got.double() - want).abs().max() <= PREFILL_REL * want.abs().max()

    assert torch.equal(w.dequantize_f32(), torch.from_numpy(deq))
    assert torch.equal(w.rows(torch.tensor([4, 0, 44])), torch.from_numpy(deq[[4, 0, 44]]))
    assert torch.equal(w.rows(7), torch.from_numpy(deq[7]))
    assert torch.equal(w[torch.tensor(3)], torch.from_numpy(deq[3]))
    with pytest.raises(IndexError):
        w.rows(torch.tensor([rows]))


@pytest.mark.slow  # compiles the kernels once more, for read-only arrays
def test_read_only_blocks_as_from_a_memory_mapped_file():
    """The engine's blocks are a read-only memory map: numba compiles separate versions."""
    rows, cols = 21, 512
    raw = random_blocks("Q4_K", rows, cols, 8)
    raw.setflags(write=False)
    deq = reference("Q4_K", raw, cols)
    w = QuantMatrix("Q4_K", raw, (rows, cols), int_dot=False)
    x = torch.randn(2, cols, generator=torch.Generator().manual_seed(1))
    want = x.double() @ torch.from_numpy(deq).double().T
    assert (w.matmul_t(x).double() - want).abs().max() <= GEMV_REL * want.abs().max()
    assert torch.equal(w.rows(torch.tensor([20, 2])), torch.from_numpy(deq[[20, 2]]))
    assert torch.equal(w.dequantize_f32(), torch.from_numpy(deq))


def test_block_shape_is_checked(qtype):
    raw = random_blocks(qtype, 4, 512, 1)
    with pytest.raises(ValueError):
        QuantMatrix(qtype, raw, (4, 768))
    with pytest.raises(ValueError):
        QuantMatrix(qtype, raw[:, :-1], (4, 512))


@pytest.mark.parametrize("qtype", ["Q4_K", "Q5_K", "Q6_K", "Q4_0", "Q3_K", "Q2_K", "Q8_0"])
def test_prefill_multiplies_by_the_exact_values(qtype, monkeypatch):
    """The exact prefill GEMM (more than MAX_KERNEL_ROWS activation rows) uses the file's exact values.
    Multiplying by the identity returns the weights themselves. bfloat16 (used before) would
    move a value by up to |q|/256 of its quantization step: half a step for Q8_0, more than half
    for Q4_K/Q5_K blocks whose minimum is far from zero (docs/performance.md, "Exact prefill")."""
    rows, cols = 21, 256
    if qtype == "Q8_0":
        w = np.random.default_rng(4).standard_normal((rows, cols)).astype(np.float32)
        raw = gguf.quants.quantize(w, GT.Q8_0)
    else:
        raw = random_blocks(qtype, rows, cols, 4)
    monkeypatch.setattr(qmatrix, "PREFILL_CHUNK_ELEMS", 8 * cols)  # chunks of 8 rows + a remainder
    # The exact path (S2_PREFILL=exact; the default runs prompts on the integer kernels, whose
    # precision test_qmatrix.py and test_prefill_precision.py bound).
    with backend.configured(KernelSettings(prefill="exact")):
        got = QuantMatrix(qtype, raw, (rows, cols)).matmul_t(torch.eye(cols))
    assert torch.equal(got.T.contiguous(), torch.from_numpy(reference(qtype, raw, cols)))
