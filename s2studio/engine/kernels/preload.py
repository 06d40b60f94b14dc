"""Map the engine's big native libraries before Python imports them, without holding the GIL.

``import torch`` dlopens torch's libraries (libtorch_cpu's static initializers register
thousands of operators: hundreds of ms) and numba's llvmlite loads libllvmlite through ctypes,
both while holding the GIL, so every other Python thread stops for as long: in the app, the
event loop stalled 350-630 ms on the first model load (benchmarks/ui_latency.py). ``preload``
dlopens the same files with the same flags through ``_qdot.preload``, which releases the GIL;
the imports that follow find them loaded and only run their (short) Python-side setup.

Found by path, without importing the packages (``importlib.util.find_spec``). Best effort:
where a library is not found, or the C extension is not built, or on Windows (no dlopen),
nothing is preloaded and the imports do the work as before.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
import time
from pathlib import Path

log = logging.getLogger(__name__)

_done = False


def _package_dir(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def libraries() -> list[tuple[Path, int]]:
    """(file, dlopen flags) in load order, as the packages' own imports would open them:
    torch's global dependencies RTLD_GLOBAL (torch/__init__.py's _load_global_deps), torch._C
    with Python's extension flags, libllvmlite as ctypes opens it (RTLD_NOW, local)."""
    found = []
    now, glob_ = getattr(os, "RTLD_NOW", 2), getattr(os, "RTLD_GLOBAL", 0x100)
    torch_dir = _package_dir("torch")
    if torch_dir is not None:
        deps = torch_dir / "lib" / "libtorch_global_deps.so"
        if deps.is_file():
            found.append((deps, glob_ | now))
        found += [(p, sys.getdlopenflags()) for p in sorted(torch_dir.glob("_C.*.so"))[:1]]
    llvmlite_dir = _package_dir("llvmlite")
    if llvmlite_dir is not None:
        lib = llvmlite_dir / "binding" / "libllvmlite.so"
        if lib.is_file():
            found.append((lib, now))
    return found


def preload() -> int:
    """Preload ``libraries()`` once per process, skipping those already imported; returns how
    many were loaded here. Never raises: a failure only means the import does the loading."""
    global _done
    if _done or not sys.platform.startswith("linux"):
        return 0
    _done = True
    try:
        from s2studio.engine.kernels import _qdot
    except ImportError:
        return 0
    if "torch" in sys.modules and "llvmlite.binding" in sys.modules:
        return 0
    t0, count = time.perf_counter(), 0
    for path, flags in libraries():
        try:
            if _qdot.preload(str(path), flags):
                count += 1
        except OSError as exc:
            log.debug("preloading %s failed (the import will load it): %s", path, exc)
            break  # later files depend on earlier ones
    log.debug("preloaded %d native libraries in %.2f s", count, time.perf_counter() - t0)
    return count
