"""The GEMV's own worker threads (engine/kernels/_pool.c, ``GemvSchedule.POOL``, the default on
POSIX): the same numbers as the other schedules under everything a process does to a pool -
other Python threads calling at the same time, the thread count changing, a fork - and its
workers really take part."""

from __future__ import annotations

import logging
import multiprocessing
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import s2studio  # noqa: F401  (before torch, as the app)
from s2studio.devtools.quant_blocks import random_blocks
from s2studio.engine.kernels import backend, intdot
from s2studio.engine.kernels import common as kcommon
from s2studio.engine.kernels.backend import KernelSettings
from s2studio.engine.modes import GemvSchedule

pytestmark = pytest.mark.skipif(not intdot.pool_available(),
                                reason="no GEMV pool here (Windows, or the C kernels are not built)")

POOL, STATIC = KernelSettings(schedule="pool"), KernelSettings(schedule="static")


def _case(qtype="Q8_0", rows=1000, cols=512, m=2, seed=0):
    raw = random_blocks(qtype, rows, cols, seed=seed)
    x = np.random.default_rng(seed).standard_normal((m, cols)).astype(np.float32)
    return raw, x


def _gemv(qtype, raw, x, settings, planes=None):
    out = np.full((x.shape[0], raw.shape[0]), np.nan, np.float32)
    with backend.configured(settings):
        intdot.gemv(qtype, raw, x, out, planes)
    return out


@pytest.fixture
def two_threads():
    before = kcommon.numba.get_num_threads()
    kcommon.sync_threads(2)
    yield
    kcommon.sync_threads(before)


def test_the_pool_is_the_default_schedule_and_its_workers_take_part(two_threads):
    assert KernelSettings().schedule is GemvSchedule.POOL
    assert intdot.effective_schedule(GemvSchedule.POOL) is GemvSchedule.POOL
    raw, x = _case(rows=4000, cols=1024, m=1)
    want = _gemv("Q8_0", raw, x, STATIC)
    before = intdot.pool_stats()
    for _ in range(200):  # back to back: the worker is spinning when the next GEMV comes
        np.testing.assert_array_equal(_gemv("Q8_0", raw, x, POOL), want)
    after = intdot.pool_stats()
    assert after["workers"] == 1 and after["jobs"] - before["jobs"] == 200
    assert after["joined"] > before["joined"]  # the worker computed rows, not the caller alone


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_K", "Q6_K"])
@pytest.mark.parametrize("planes", [1, 2])
def test_python_threads_calling_at_once_each_get_their_own_numbers(two_threads, qtype, planes):
    """One job at a time is the pool's; a second caller meanwhile computes alone (no waiting,
    no shared counter): every thread's outputs are those of the static split."""
    cases = [_case(qtype, rows=300 + 97 * i, cols=512, m=1 + i % 3, seed=i) for i in range(4)]
    wants = [_gemv(qtype, raw, x, STATIC, planes) for raw, x in cases]
    failures = []

    def hammer(i):
        raw, x = cases[i]
        for _ in range(60):
            got = _gemv(qtype, raw, x, POOL, planes)
            if not np.array_equal(got, wants[i]):
                failures.append(i)
                return

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a GEMV thread hung"
    assert failures == []


def test_the_thread_count_can_change_between_calls():
    raw, x = _case(rows=700)
    want = _gemv("Q8_0", raw, x, STATIC)
    before = kcommon.numba.get_num_threads()
    intdot.set_pool_spin(37)
    try:
        for n in (1, 2, 1, 2):
            kcommon.sync_threads(n)
            np.testing.assert_array_equal(_gemv("Q8_0", raw, x, POOL), want)
            assert intdot.pool_stats()["workers"] == n - 1
            assert intdot.pool_stats()["spin_us"] == 37  # a spin set earlier survives the new count
    finally:
        kcommon.sync_threads(before)
        intdot.set_pool_spin(None)


def _child_gemv(conn):
    raw, x = _case(rows=900, seed=3)
    conn.send(_gemv("Q8_0", raw, x, POOL))
    conn.close()


@pytest.mark.skipif(sys.platform == "win32" or "fork" not in multiprocessing.get_all_start_methods(),
                    reason="no fork here")
def test_a_forked_child_computes_with_a_fresh_pool(two_threads):
    """A fork copies the pool's state but none of its threads; the child starts its own."""
    raw, x = _case(rows=900, seed=3)
    want = _gemv("Q8_0", raw, x, POOL)  # the parent's workers are up
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_child_gemv, args=(child,))
    proc.start()
    assert parent.poll(120), "the forked child's GEMV hung"
    got = parent.recv()
    proc.join(30)
    np.testing.assert_array_equal(got, want)


def test_the_spin_setting_has_a_range(monkeypatch, caplog):
    monkeypatch.setenv(intdot.POOL_SPIN_ENV, "250")
    assert intdot.pool_spin_us() == 250
    for bad in ("-1", "100001", "lots"):
        monkeypatch.setenv(intdot.POOL_SPIN_ENV, bad)
        with caplog.at_level(logging.WARNING):
            assert intdot.pool_spin_us() == intdot.POOL_SPIN_US
        assert f"{intdot.POOL_SPIN_ENV}={bad} ignored" in caplog.text
    from s2studio.engine.kernels import _qdot
    with pytest.raises(ValueError, match="spin_us 0-100000"):
        _qdot.pool_configure(2, 100_001)
    with pytest.raises(ValueError, match="threads 1-256"):
        _qdot.pool_configure(0, 10)


# A child process that starts the pool with one GEMV on two threads, then runs ``after``.
_CHILD_WITH_POOL = ("import glob, s2studio, numpy as np\n"
                    "from s2studio.devtools.quant_blocks import random_blocks\n"
                    "from s2studio.engine.kernels import intdot, common\n"
                    "common.sync_threads(2)\n"
                    "raw = random_blocks('Q8_0', 500, 512, seed=1)\n"
                    "intdot.gemv('Q8_0', raw, np.ones((1, 512), np.float32), np.empty((1, 500), np.float32))\n")


def _child_with_pool(after: str) -> subprocess.CompletedProcess:
    res = subprocess.run([sys.executable, "-c", _CHILD_WITH_POOL + after], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "NUMBA_NUM_THREADS": "2"})
    assert res.returncode == 0, res.stderr
    return res


def test_a_process_with_the_pool_running_exits_at_once():
    """Its workers are asleep or spinning at exit; nothing waits for them (a hang here would
    stop every CLI run at its end)."""
    res = _child_with_pool("assert intdot.pool_stats()['workers'] == 1\nprint('ok')\n")
    assert res.stdout.strip() == "ok" and "terminate called" not in res.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_workers_are_named_and_leave_every_signal_to_python():
    """The worker thread shows as s2studio-gemv (top -H, a debugger) and blocks every signal,
    so Ctrl+C and SIGTERM reach Python's handlers whichever thread the kernel picks."""
    res = _child_with_pool("for task in glob.glob('/proc/self/task/*'):\n"
                           "    if open(task + '/comm').read().strip() == 's2studio-gemv':\n"
                           "        status = dict(l.split(':', 1) for l in open(task + '/status') if ':' in l)\n"
                           "        print(int(status['SigBlk'].strip(), 16))\n")
    masks = [int(line) for line in res.stdout.split()]
    assert len(masks) == 1, res.stdout  # one worker for two threads
    for signum in (2, 15):  # SIGINT, SIGTERM: bit signum - 1
        assert masks[0] >> (signum - 1) & 1
