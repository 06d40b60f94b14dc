"""CPU thread count, as s2.cpp's --threads: 0 means every core."""

from __future__ import annotations

import os

import torch


def set_threads(n: int) -> int:
    if n < 0:
        from s2studio.errors import InputError

        raise InputError(f"threads must be 0 (all cores) or positive, not {n}")
    count = n or os.cpu_count() or 4
    torch.set_num_threads(count)
    return count
