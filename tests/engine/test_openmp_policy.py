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
