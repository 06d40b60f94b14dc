"""The one place that chooses the quantized GEMV (engine/kernels/backend.py): the setting that
tests switch in-process, the stack each block type gets under it, the line that says so (load
log, self-test), and the old environment variables as a fallback read at first use."""

from __future__ import annotations

import logging
import subprocess
import sys

import numpy as np
import pytest
import torch

pytest.importorskip("numba")

from s2studio.devtools.quant_blocks import dequantized as reference, random_blocks  # noqa: E402
from s2studio.engine.kernels import backend, intdot  # noqa: E402
from s2studio.engine.kernels.backend import Kernel, KernelSettings  # noqa: E402
from s2studio.engine.kernels.qmatrix import QuantMatrix  # noqa: E402
from s2studio.engine.modes import GemvSchedule, IntDot  # noqa: E402
from tests.engine.test_intdot import INT8_REL, INT8X2_REL  # noqa: E402

needs_c = pytest.mark.skipif(not intdot.built(), reason=f"integer kernels not here: {intdot.describe()}")
PRECISE, ONE_PLANE, OFF = KernelSettings(), KernelSettings(int_dot="int8"), KernelSettings(int_dot="off")


def test_settings_from_the_old_environment_words(caplog):
    assert KernelSettings.from_environment({}) == KernelSettings(IntDot.PRECISE, GemvSchedule.POOL)
    env = {"S2_INT_DOT": "1", "S2_GEMV_SCHEDULE": "static"}
    assert KernelSettings.from_environment(env) == KernelSettings(IntDot.INT8, GemvSchedule.STATIC)
    assert KernelSettings.from_environment({"S2_INT_DOT": "0"}).int_dot is IntDot.OFF
    with caplog.at_level(logging.WARNING):
        assert KernelSettings.from_environment({"S2_INT_DOT": "7"}) == KernelSettings()  # as before: the default
    assert "S2_INT_DOT=7 ignored" in caplog.text
    assert KernelSettings(int_dot="1", schedule="Static").planes == 1  # words checked where made


def test_the_environment_is_read_at_first_use_not_at_import(monkeypatch):
    monkeypatch.setattr(backend, "_settings", None)  # as a fresh process, after every import
    monkeypatch.setenv("S2_INT_DOT", "1")
    monkeypatch.setenv("S2_GEMV_SCHEDULE", "static")
    assert backend.settings() == KernelSettings(IntDot.INT8, GemvSchedule.STATIC)
    monkeypatch.setenv("S2_INT_DOT", "0")
    assert backend.settings().int_dot is IntDot.INT8  # read once, then it is the setting
    assert backend.configure().int_dot is IntDot.OFF  # configure() reads it again
    assert backend.configure(PRECISE) is PRECISE and backend.settings() is PRECISE


def test_configured_restores_the_previous_settings():
    before = backend.settings()
    with backend.configured(OFF):
        assert backend.settings() is OFF and not intdot.available()
    assert backend.settings() is before


@needs_c
def test_each_block_type_s_stack_under_each_setting():
    with backend.configured(PRECISE):
        assert [backend.kernel_for(t) for t in ("Q8_0", "Q4_K", "Q6_K", "Q4_0")] == \
            [Kernel.C_INT16, Kernel.C_INT8_TWO_PLANES, Kernel.C_INT8_TWO_PLANES, Kernel.NUMBA_FLOAT32]
        assert backend.kernel_for("Q8_0", kept_quantized=False) is Kernel.FLOAT16
        assert backend.describe(["Q8_0", "Q4_K", "Q4_0"], kept=["Q8_0", "Q4_K"]) == (
            "GEMV: Q4_0 -> dequantized float16, Q4_K -> C int8 two-plane, Q8_0 -> C int16 dots; "
            f"C level {intdot.level()}, schedule {'pool' if intdot.pool_available() else 'dynamic'}")
    with backend.configured(KernelSettings(int_dot="int8", schedule="static")):
        assert backend.kernel_for("Q8_0") is backend.kernel_for("Q4_K") is Kernel.C_INT8
        assert backend.describe(["Q4_K"]) == \
            f"GEMV: Q4_K -> C int8 one-plane; C level {intdot.level()}, schedule static"
    with backend.configured(OFF):
        assert {backend.kernel_for(t) for t in ("Q8_0", "Q4_K", "Q4_0")} == {Kernel.NUMBA_FLOAT32}
        assert backend.describe(["Q8_0"]) == \
            "GEMV: Q8_0 -> numba float32; integer dots: numba float32 (integer dots off)"
        assert intdot.describe() == "numba float32 (integer dots off)"


@needs_c
@pytest.mark.parametrize("qtype", ["Q4_K", "Q8_0", "Q6_K"])
def test_a_matrix_follows_the_setting_at_its_next_gemv(qtype):
    """One matrix, built once with the engine's default: each setting sends its GEMV to the
    chosen stack (bit-identical to calling that stack directly), within that stack's bound."""
    rows, cols = 45, 768
    raw = random_blocks(qtype, rows, cols, 3)
    w = QuantMatrix(qtype, raw, (rows, cols))
    x = torch.randn(3, cols, generator=torch.Generator().manual_seed(1))
    xn = x.numpy()
    deq = reference(qtype, raw, cols).astype(np.float64)
    want = xn.astype(np.float64) @ deq.T
    scale = np.linalg.norm(xn.astype(np.float64), axis=1)[:, None] * np.linalg.norm(deq, axis=1)[None, :]

    def rel(got):
        return (np.abs(got - want) / scale).max()

    with backend.configured(OFF):
        assert not w.int_dot
        got = w.matmul_t(x).numpy()
        np.testing.assert_array_equal(got, QuantMatrix(qtype, raw, (rows, cols), int_dot=False).matmul_t(x).numpy())
        assert rel(got) <= 1e-5  # float32 activations: summation order only
    for settings, planes, bound in ((ONE_PLANE, 1, INT8_REL), (PRECISE, 2, INT8X2_REL)):
        with backend.configured(settings):
            assert w.int_dot
            got = w.matmul_t(x).numpy()
            direct = np.empty((3, rows), np.float32)
            intdot.gemv(qtype, raw, np.ascontiguousarray(xn), direct, planes)
            np.testing.assert_array_equal(got, direct)
            assert rel(got) <= bound, (settings, rel(got))


@needs_c
def test_an_explicit_choice_beats_the_setting():
    raw = random_blocks("Q4_K", 8, 256, 1)
    with backend.configured(OFF):
        assert QuantMatrix("Q4_K", raw, (8, 256), int_dot=True).int_dot
    with backend.configured(PRECISE):
        assert not QuantMatrix("Q4_K", raw, (8, 256), int_dot=False).int_dot


@needs_c
def test_the_load_log_and_the_self_test_say_which(make_tiny_model, tmp_path, caplog):
    from s2studio.engine.model.loader import load_dual_ar
    from s2studio.selftest import check_quantized_kernels
    from tests.engine.test_model_variants import WIDE

    path, _ = make_tiny_model("--seed", "5", *WIDE, quant="q8_0")
    for settings, expect in ((PRECISE, "GEMV: Q8_0 -> C int16 dots; C level"), (OFF, "GEMV: Q8_0 -> numba float32")):
        with backend.configured(settings), caplog.at_level(logging.INFO):
            caplog.clear()
            model, _ = load_dual_ar(path, dtype="quantized")
            lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("GEMV:")]
            assert lines == [backend.describe(["Q8_0"])] and lines[0].startswith(expect), lines
            assert model.w.slow.layers[0].wqkv.int_dot == (settings is PRECISE)
            assert check_quantized_kernels(tmp_path).endswith(backend.describe())


def test_env_set_before_the_process_starts_still_selects(tmp_path):
    """Benchmarks' A/B runs (S2_INT_DOT=0 python ...) keep working: read at first use."""
    import os

    code = ("from s2studio.engine.kernels import backend, intdot\n"
            "from s2studio.engine.kernels.qmatrix import QuantMatrix\n"
            "import numpy as np\n"
            "assert not QuantMatrix('Q4_K', np.zeros((8, 144), np.uint8), (8, 256)).int_dot\n"
            "print(backend.describe(['Q4_K']))\n")
    env = {**os.environ, "S2_INT_DOT": "0"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("GEMV: Q4_K -> numba float32")


@needs_c
def test_a_forced_level_is_used_and_given_back():
    from s2studio.engine.modes import KernelLevel
    from s2studio.errors import InputError

    offered = intdot.levels()
    best = intdot.best_level()
    assert intdot.level() == best
    weakest_simd = offered[1] if len(offered) > 1 else offered[0]
    with backend.configured(KernelSettings(level=weakest_simd)):
        assert intdot.level() == weakest_simd
        assert f"C level {weakest_simd}," in backend.describe(["Q4_K"])
    assert intdot.level() == best
    missing = next(lv for lv in KernelLevel.choices() if lv != "best" and lv not in offered)
    with pytest.raises(InputError, match=f"kernel level {missing} is not available on this CPU"):
        backend.configure(KernelSettings(level=missing))
    assert intdot.level() == best
    with pytest.raises(InputError, match="Unknown kernel level 'avx9000'"):
        KernelSettings(level="avx9000")
    assert KernelSettings(level=" AVX2 ").level is KernelLevel.AVX2 and KernelSettings(level="").level is KernelLevel.BEST


@needs_c
@pytest.mark.parametrize("word", ["avxvnni", "avx2", "neon9", "dotprod"])
def test_the_level_from_the_environment(word):
    """S2_KERNEL_LEVEL, read at first use in a fresh process: a level this CPU offers is used
    and logged in the GEMV line; an unknown word, or a level this CPU lacks, is warned about and
    the best level used."""
    import os

    code = ("import logging; logging.basicConfig(level=logging.WARNING)\n"
            "from s2studio.engine.kernels import backend, intdot\n"
            "print(backend.describe(['Q4_K']))\n"
            "print(intdot.level(), intdot.best_level())\n")
    env = {**os.environ, "S2_KERNEL_LEVEL": word}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr
    describe, levels = res.stdout.strip().splitlines()
    now, best = levels.split()
    if word in intdot.levels():
        assert now == word and f"C level {word}," in describe and not res.stderr
    else:
        assert now == best and f"S2_KERNEL_LEVEL={word} ignored" in res.stderr
