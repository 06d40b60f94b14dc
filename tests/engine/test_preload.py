"""engine.kernels.preload: torch's and llvmlite's native libraries mapped by a dlopen that
releases the GIL, before the imports that would hold it (the app's worker calls it first, so
the window's event loop keeps running while the first model loads). Each check runs in a fresh
process: in this one torch is long imported."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="dlopen preloading is Linux-only")

CODE = r"""
import sys, threading, time
from s2studio.engine.kernels import preload, _qdot
assert "torch" not in sys.modules and "llvmlite" not in sys.modules
names = [p.name for p, _ in preload.libraries()]
assert names[0] == "libtorch_global_deps.so" and names[-1] == "libllvmlite.so", names

# While the preload runs on a worker thread, this thread keeps running Python: it holds the
# GIL for no more than the preload's Python-side steps between the dlopen calls.
ticks = []
worker = threading.Thread(target=lambda: ticks.append(preload.preload()))
worker.start()
beats = 0
while worker.is_alive():
    beats += 1
    time.sleep(0.001)
assert ticks == [len(names)], ticks
maps = open("/proc/self/maps").read()
assert "libtorch_cpu.so" in maps and "libllvmlite.so" in maps
assert "torch" not in sys.modules  # mapped, not imported
assert preload.preload() == 0  # once per process
import torch, numba  # the imports reuse the mapped libraries and work as usual
assert float(torch.ones(3).sum()) == 3.0
print("beats", beats)
"""


def test_preload_maps_the_libraries_before_their_import():
    res = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert int(res.stdout.split()[-1]) > 0  # the main thread ran while the libraries loaded


def test_a_missing_library_is_an_os_error_not_a_crash(tmp_path):
    from s2studio.engine.kernels import _qdot

    with pytest.raises(OSError, match="nothing.so"):
        _qdot.preload(str(tmp_path / "nothing.so"), 2)
