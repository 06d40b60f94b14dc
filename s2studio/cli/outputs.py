"""Writing a command's output files: atomically, and with one line for the user when the disk
says no. Shared by every command that writes."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import numpy as np


def save_npy_atomic(path: str, arr: np.ndarray) -> None:
    from s2studio.audio.atomic_file import atomic_output

    with atomic_output(path) as fh:  # a file object: np.save must not append ".npy"
        np.save(fh, arr)


@contextmanager
def writing(path: str) -> Iterator[None]:
    """Turn an OS error while writing ``path`` (disk full, permissions changed since the
    check) into one line for the user; the atomic writers have already removed their temp file."""
    from s2studio.audio.atomic_file import OutputPathError

    try:
        yield
    except OSError as err:
        raise OutputPathError(path, f"could not be written ({err.strerror or err}).") from None
