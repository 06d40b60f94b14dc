"""GGUFFile.drop_resident: releasing mapped pages of copied tensors keeps their data intact."""

from __future__ import annotations

import mmap
import pathlib

import numpy as np
import pytest

from s2studio.engine.model.gguf_file import GGUFFile

MODEL = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden" / "tts_f32" / "model.gguf"


@pytest.mark.skipif(not hasattr(mmap, "MADV_DONTNEED"), reason="no madvise on this platform")
def test_drop_resident_releases_whole_pages_and_data_reloads():
    with GGUFFile(MODEL) as f:
        name = max(f.tensors, key=lambda n: f.tensors[n].n_elements)  # the largest tensor
        before = f.array(name).copy()
        released = f.drop_resident([name, "no.such.tensor"])
        assert released > 0 and released % mmap.PAGESIZE == 0
        assert released <= f.raw(name).nbytes
        np.testing.assert_array_equal(f.array(name), before)  # pages fault back in from the file
        assert f.shares_map(f.raw(name)) and not f.shares_map(before)
