"""The C integer-dot-product GEMV for K-quants and Q8_0 (engine/kernels/intdot.py + _qdot.c)
against float64 dequantize-then-matmul, on every instruction-set path this CPU has.

Error bounds: each output's error relative to |x_i| |w_r| (the largest the dot product could
be; relative to the output itself, cancellation can make any bound fail), and why:
- one int8 plane (ggml's "Q8_K": round(x * 127 / max|x|) per 256 values): each activation is
  off by at most 1/254 of its block's largest magnitude. For Gaussian activations the expected
  error is ~4e-4 of |x||w| (about 0.7 % of the outputs' RMS, the error ggml's own CPU kernels
  have on these types: they quantize activations the same way); the worst case possible is
  8/127 = 6e-2. Measured max over these tests: 1.1e-3; bounded at INT8_REL = 3e-3.
- two planes (the default: the int8 values, then what they missed, again as int8): the
  residual is quantized with 1/127 of its own range, so ~250x less. Measured max: 8.6e-6;
  bounded at INT8X2_REL = 3e-5.
- Q8_0's precise mode is int16 activations instead (round(x * 32767 / max|x|) per 256: each
  off by at most 1/65534 of the largest, like two int8 planes' 1/64516), under the same bound.
  Measured max: 9.6e-6, on the shortest rows (32 values: few terms to average the errors out).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

pytest.importorskip("numba")

from s2studio.engine.kernels import backend, intdot  # noqa: E402
from s2studio.engine.kernels.backend import KernelSettings  # noqa: E402
from s2studio.devtools.quant_blocks import dequantized as reference, extreme_q8_0_blocks, random_blocks  # noqa: E402
from s2studio.engine.kernels.qmatrix import QuantMatrix  # noqa: E402

pytestmark = pytest.mark.skipif(not intdot.available(), reason=f"integer kernels not here: {intdot.describe()}")

K_TYPES = ["Q4_K", "Q5_K", "Q6_K", "Q3_K", "Q2_K"]
TYPES = K_TYPES + ["Q8_0"]
INT8_REL = 3e-3
INT8X2_REL = 3e-5
SHAPES = [(37, 512), (64, 1024), (1, 256), (33, 768)]  # rows not multiples of the 32-row tasks



def check(qtype, raw, x, planes, bound):
    rows, cols = raw.shape[0], x.shape[1]
    got = np.full((x.shape[0], rows), np.nan, np.float32)  # every entry must be written
    intdot.gemv(qtype, raw, x, got, planes)
    w = reference(qtype, raw, cols).astype(np.float64)
    want = x.astype(np.float64) @ w.T
    # Each output's error relative to |x_i| |w_r| (Cauchy-Schwarz: the largest it could be),
    # not to |output|, which cancellation can make arbitrarily small.
    scale = np.linalg.norm(x.astype(np.float64), axis=1)[:, None] * np.linalg.norm(w, axis=1)[None, :]
    err = (np.abs(got - want) / np.maximum(scale, 1e-30)).max()
    assert err <= bound, (qtype, planes, err)
    return got


@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("rows,cols", SHAPES)
def test_gemv_on_every_instruction_set(level, qtype, rows, cols):
    raw = random_blocks(qtype, rows, cols, rows * 13 + cols)
    for m in (1, 2, 16):
        x = np.random.default_rng(m).standard_normal((m, cols)).astype(np.float32)
        check(qtype, raw, x, 1, INT8_REL)
        check(qtype, raw, x, 2, INT8X2_REL)


# Q8_0 rows of 32-value blocks that do not fill the 256-value activation chunks (tiny models):
# the activations are zero-padded; an odd block count leaves AVX-512's last pair half empty.
@pytest.mark.parametrize("rows,cols", [(33, 96), (9, 288), (5, 800), (3, 32)])
def test_q8_0_rows_not_a_multiple_of_256(level, rows, cols):
    raw = random_blocks("Q8_0", rows, cols, rows + cols)
    for m in (1, 3, 16):
        x = np.random.default_rng(m).standard_normal((m, cols)).astype(np.float32)
        # one plane on 32 values: 3.2e-3 measured (the bound's sqrt(cols) averaging is absent)
        check("Q8_0", raw, x, 1, INT8_REL if cols >= 96 else 1e-2)
        check("Q8_0", raw, x, 2, INT8X2_REL)


def test_q8_0_extreme_codes():
    """-128 (whose |.| is 128, the largest byte vpmaddubsw takes unsigned) and 127 in every
    position, against the largest activations: no int16 saturation, exact integer sums."""
    rows, cols = 4, 256
    raw = extreme_q8_0_blocks(rows, cols, 0)
    x = np.ones((2, cols), np.float32)
    x[1, 1::2] = -1.0
    for lv in intdot.levels():
        intdot.set_level(lv)
        for planes in (1, 2):
            check("Q8_0", raw, x, planes, 1e-6)  # every activation exact (+-max|x|)
    intdot.set_level(intdot.levels()[-1])


@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("planes", [1, 2])
def test_a_row_is_the_same_among_others_as_alone(level, qtype, planes):
    """Batching's premise (transformer.linear_grouped): each activation row's output is
    bit-identical whatever the other rows and their number are, on every path, including the
    copies specialised for 1, 2, 4 and 8 kernel rows."""
    rows, cols = 40, 768
    raw = random_blocks(qtype, rows, cols, 9)
    x = np.random.default_rng(4).standard_normal((16, cols)).astype(np.float32)
    alone = np.empty((16, rows), np.float32)
    for i in range(16):
        intdot.gemv(qtype, raw, x[i:i + 1], alone[i:i + 1], planes)
    for m in (2, 3, 4, 5, 8, 16):
        got = np.empty((m, rows), np.float32)
        intdot.gemv(qtype, raw, x[:m], got, planes)
        np.testing.assert_array_equal(got, alone[:m], err_msg=f"m={m}")


@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("planes", [1, 2])
def test_instruction_sets_agree(qtype, planes):
    """The SIMD paths compute what the portable C computes (up to float summation order)."""
    raw = random_blocks(qtype, 40, 1024, 2)
    x = np.random.default_rng(0).standard_normal((3, 1024)).astype(np.float32)
    before = intdot.level()
    outs = []
    try:
        for lv in intdot.levels():
            intdot.set_level(lv)
            out = np.empty((3, 40), np.float32)
            intdot.gemv(qtype, raw, x, out, planes)
            outs.append(out)
    finally:
        intdot.set_level(before)
    for out in outs[1:]:
        np.testing.assert_allclose(out, outs[0], rtol=0, atol=1e-5 * np.abs(outs[0]).max())


@pytest.mark.parametrize("qtype", TYPES)
def test_activations_with_a_mean_outliers_and_zeros(qtype):
    """Real activations are not centred and have outlier channels; an all-zero row (amax 0)
    must give exact zeros, not NaN."""
    rows, cols = 40, 1024
    raw = random_blocks(qtype, rows, cols, 11)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, cols)).astype(np.float32)
    x[0] += 4.0
    x[1, ::97] *= 50.0
    x[2] = 0.0
    got = check(qtype, raw, x[:2].copy(), 2, INT8X2_REL)
    assert np.isfinite(got).all()
    out = np.full((3, rows), np.nan, np.float32)
    intdot.gemv(qtype, raw, x, out, 2)
    assert (out[2] == 0).all()


def test_quant_matrix_uses_it_for_decode_rows_only():
    rows, cols = 45, 768
    raw = random_blocks("Q4_K", rows, cols, 5)
    deq = torch.from_numpy(reference("Q4_K", raw, cols)).double()
    w = QuantMatrix("Q4_K", raw, (rows, cols))
    assert w.int_dot
    x = torch.randn(16, cols, generator=torch.Generator().manual_seed(0))
    want = x.double() @ deq.T
    scale = x.double().norm(dim=1)[:, None] * deq.norm(dim=1)[None, :]
    assert ((w.matmul_t(x).double() - want).abs() / scale).max() <= INT8X2_REL
    with pytest.raises(ValueError, match="no integer kernel"):
        QuantMatrix("Q4_0", np.zeros((8, 18), np.uint8), (8, 32), int_dot=True)
    assert not QuantMatrix("Q4_0", np.zeros((8, 18), np.uint8), (8, 32)).int_dot
    assert QuantMatrix("Q8_0", np.zeros((8, 34), np.uint8), (8, 32)).int_dot


def test_engine_falls_back_to_numba_without_the_extension():
    """A machine that had no compiler at install time: no _qdot module. The K-quant GEMV then
    runs on the numba float32 kernel, and describe() says why (the self-test prints it)."""
    code = (
        "import sys; sys.modules['s2studio.engine.kernels._qdot'] = None\n"
        "import numpy as np, torch\n"
        "from s2studio.engine.kernels import intdot\n"
        "from s2studio.engine.kernels.qmatrix import QuantMatrix\n"
        "assert not intdot.available()\n"
        "w = QuantMatrix('Q4_K', np.zeros((8, 144), np.uint8), (8, 256))\n"
        "assert not w.int_dot and w.matmul_t(torch.ones(1, 256)).abs().max() == 0\n"
        "print(intdot.describe())\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("numba float32 (the C integer kernels are not built")


@pytest.mark.parametrize("planes", [1, 2])
@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("rows", [1, 31, 32, 33, 1000])
def test_every_schedule_gives_the_static_split_s_numbers(qtype, rows, planes):
    """Threads claiming rows from a shared counter (dynamic, on numba's threads; pool, the
    default, on the extension's own) write every row, each with the same arithmetic as the
    static split, whichever thread computed it."""
    raw = random_blocks(qtype, rows, 512, seed=rows)
    x = np.random.default_rng(rows).standard_normal((3, 512)).astype(np.float32)
    out = {}
    for schedule in ("static", "dynamic", "pool"):
        with backend.configured(KernelSettings(schedule=schedule)):
            got = np.full((3, rows), np.nan, np.float32)
            intdot.gemv(qtype, raw, x, got, planes)
        out[schedule] = got
    assert not np.isnan(out["pool"]).any() and not np.isnan(out["dynamic"]).any()
    np.testing.assert_array_equal(out["dynamic"], out["static"])
    np.testing.assert_array_equal(out["pool"], out["static"])


needs_avxvnni = pytest.mark.skipif("avxvnni" not in intdot.levels() or "avx2" not in intdot.levels(),
                                   reason="this CPU has neither AVX-VNNI nor AVX-512 VNNI")


@needs_avxvnni
@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("planes", [1, 2])
def test_the_avxvnni_level_gives_avx2_s_outputs_bit_for_bit(qtype, planes):
    """The avxvnni level is the avx2 rows with vpdpbusd / vpdpwssd in place of vpmaddubsw /
    vpmaddwd + vpaddd: the same integers, the same float order, so a CPU that gains the level
    (Intel client CPUs since 2021: AVX-VNNI, no AVX-512) gives the numbers it gave on avx2, for
    every type, activation mode, the copies for m = 1, 2, 4, 8 and the general one, and widths
    that leave Q8_0's last 256-value chunk part empty. Here it runs as this CPU encodes it
    (intdot.avxvnni_encoding(): "evex" on AVX-512 VNNI machines; tools/qdot_arm_check checks
    the same under qemu where an emulator has AVX-VNNI)."""
    shapes = [(37, 512), (33, 768), (8, 2560)] + ([(9, 288), (5, 800)] if qtype == "Q8_0" else [])
    before = intdot.level()
    try:
        for rows, cols in shapes:
            raw = random_blocks(qtype, rows, cols, rows + 7 * cols)
            for m in (1, 2, 3, 4, 8, 16):
                x = np.random.default_rng(m + cols).standard_normal((m, cols)).astype(np.float32)
                x[:, ::17] *= 30.0  # outlier channels: activations at their largest codes
                outs = {}
                for lv in ("avx2", "avxvnni"):
                    intdot.set_level(lv)
                    outs[lv] = np.full((m, rows), np.nan, np.float32)
                    intdot.gemv(qtype, raw, x, outs[lv], planes)
                assert not np.isnan(outs["avx2"]).any()
                np.testing.assert_array_equal(outs["avxvnni"], outs["avx2"], err_msg=f"{rows}x{cols} m={m}")
    finally:
        intdot.set_level(before)


def test_the_levels_offered_and_the_default():
    """levels() lists what this CPU offers, weakest first; the default is the best of them
    (avx512vnni over avxvnni where both exist), and avxvnni is offered exactly where the CPU
    has AVX-VNNI or AVX-512 VNNI."""
    offered = intdot.levels()
    assert offered[0] == "scalar" and intdot.best_level() == offered[-1]
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(next(line for line in f if line.startswith("flags")).split(":")[1].split())
    except (OSError, StopIteration):
        pytest.skip("no /proc/cpuinfo flags line here")
    if "avx2" not in flags:
        pytest.skip("not an x86 CPU with AVX2")
    has_vex, has_evex = "avx_vnni" in flags, {"avx512_vnni", "avx512vl", "avx512bw"} <= flags
    assert ("avxvnni" in offered) == (has_vex or has_evex)
    assert intdot.avxvnni_encoding() == ("vex" if has_vex else "evex" if has_evex else "")
    if has_evex:
        assert offered[-1] == "avx512vnni"
    elif has_vex:
        assert offered[-1] == "avxvnni"
