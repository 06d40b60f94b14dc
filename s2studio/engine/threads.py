"""CPU thread count, as s2.cpp's --threads: 0 means every core.

More threads than logical cores never helps: the threads then take turns on the cores, and
every parallel kernel waits for its slowest, descheduled thread (``--threads 999`` ran 12×
slower than ``--threads 0``). Such a count is clamped to the core count with a warning.
"""

from __future__ import annotations

import logging
import os

import torch

import s2studio
from s2studio.engine.kernels import common as kcommon
from s2studio.engine.limits import check

log = logging.getLogger(__name__)
_warned = False


def logical_cores() -> int:
    """Cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # macOS, Windows
        return os.cpu_count() or 4


def effective_threads(n: int) -> int:
    """The thread count ``n`` means here: 0 → every core; more than the cores → the cores."""
    check("threads", n)
    cores = logical_cores()
    if n > cores:
        log.warning("threads %d is more than the %d logical cores of this machine: using %d", n, cores, cores)
        return cores
    return n or cores


def set_threads(n: int) -> int:
    global _warned
    count = effective_threads(n)
    if s2studio.OPENMP_POLICY_TOO_LATE and not _warned:
        _warned = True
        log.warning("torch was imported before s2studio, so its idle threads spin: on a busy machine "
                    "generation can be many times slower. Import s2studio first, or set "
                    "OMP_WAIT_POLICY=PASSIVE before starting Python.")
    # numba's OpenMP layer, when its first use starts it, sets the OpenMP thread count of the
    # whole process to NUMBA_NUM_THREADS (all cores), and torch shares that runtime (both load
    # libgomp.so.1, and the process keeps one): set torch's count after numba's layer is up,
    # or the first kernel call quietly turns --threads 1 into every core for torch's ops.
    kcommon.sync_threads(count)
    torch.set_num_threads(count)
    return count
