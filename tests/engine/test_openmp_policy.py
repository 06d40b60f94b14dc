"""Idle OpenMP workers sleep instead of spinning (s2studio/__init__.py): measured 10x faster
frames on a busy machine (docs/performance.md). libgomp reads the policy when torch/numba
load, so it has to be in the environment before they are imported: checked in a fresh
interpreter, as the CLI, the server and the app start."""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = (
    "import s2studio, torch, numba, os, sys\n"
    "from s2studio.engine.threads import set_threads\n"
    "set_threads(1)\n"
    "print(os.environ.get('OMP_WAIT_POLICY'), s2studio.OPENMP_POLICY_TOO_LATE)\n"
)


def _run(code: str, **env_overrides) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env.update(env_overrides)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_idle_threads_sleep_by_default():
    r = _run(PROBE)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["PASSIVE", "False"]
    assert "spin" not in r.stderr


def test_a_policy_the_user_set_wins():
    r = _run(PROBE, OMP_WAIT_POLICY="ACTIVE")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["ACTIVE", "False"]


def test_torch_imported_first_is_reported_once():
    r = _run("import logging; logging.basicConfig()\nimport torch\n" + PROBE)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["PASSIVE", "True"]
    assert r.stderr.count("idle threads spin") == 1


def test_threads_setting_survives_the_first_kernel_call():
    """numba's OpenMP layer sets the process's OpenMP thread count to all cores when its first
    use starts it, and torch shares that runtime: --threads 1 must still hold for torch's ops
    after a quantized GEMV (it did not: torch ran on every core from the first kernel call on)."""
    code = (
        "import s2studio, torch\n"
        "from s2studio.engine.threads import set_threads\n"
        "from s2studio.engine.kernels.qmatrix import QuantMatrix\n"
        "from s2studio.devtools.quant_blocks import random_blocks\n"
        "set_threads(1)\n"
        "m = QuantMatrix('Q8_0', random_blocks('Q8_0', 64, 256, seed=0), (64, 256))\n"
        "m.matmul_t(torch.randn(1, 256))\n"
        "print(torch.get_num_threads())\n"
    )
    r = _run(code, NUMBA_NUM_THREADS="2")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1"]
