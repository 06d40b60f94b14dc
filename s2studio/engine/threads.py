"""CPU thread count, as s2.cpp's --threads: 0 means every core."""

from __future__ import annotations

import logging
import os

import torch

import s2studio

log = logging.getLogger(__name__)
_warned = False


def set_threads(n: int) -> int:
    global _warned
    if n < 0:
        from s2studio.errors import InputError

        raise InputError(f"threads must be 0 (all cores) or positive, not {n}")
    if s2studio.OPENMP_POLICY_TOO_LATE and not _warned:
        _warned = True
        log.warning("torch was imported before s2studio, so its idle threads spin: on a busy machine "
                    "generation can be many times slower. Import s2studio first, or set "
                    "OMP_WAIT_POLICY=PASSIVE before starting Python.")
    count = n or os.cpu_count() or 4
    torch.set_num_threads(count)
    return count
