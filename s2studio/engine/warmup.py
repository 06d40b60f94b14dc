"""The engine's one-time Python work, done before the first load asks for it.

The first model load imports torch, numba and most of the engine (about 1 200 modules), and the
first take then initializes numba's CPU target (its first compiled call imports another ~200
modules, scipy's BLAS bindings and cffi among them). All of it is Python holding the GIL. A
front end that must stay responsive (the app's worker thread) calls ``warm_up()`` first, on its
own thread and at a moment of its choosing, so the load and the take do none of it.

Best effort: a module that fails to import here is skipped (logged at debug level); the load
imports it again and reports the failure with its usual message.
"""

from __future__ import annotations

import importlib
import logging
import threading

log = logging.getLogger(__name__)

# What Pipeline.load and the first take import lazily (measured: sys.modules before and after,
# tests/engine/test_warmup.py checks the list still covers them).
MODULES = (
    "torch",
    "gguf",  # the GGUF reader (engine.model.gguf_file imports it where it reads a file)
    "s2studio.engine.model.gguf_file",
    "s2studio.engine.model.loader",
    "s2studio.engine.model.prefix_cache",
    "s2studio.engine.model.generate",
    "s2studio.engine.model.sampler",
    "s2studio.engine.model.static_step",
    "s2studio.engine.threads",
    "tokenizers",
    "s2studio.engine.text.tokenizer",
    "s2studio.engine.text.prompt",
    "s2studio.engine.codec.placement",
    "s2studio.engine.codec.model",
    "s2studio.engine.codec.streaming",
    "s2studio.engine.kernels.qmatrix",
    "s2studio.engine.kernels.intdot",
    "s2studio.engine.kernels.choice",
)

_lock = threading.Lock()
_done = False


def warm_up() -> bool:
    """Preload the native libraries (GIL released), import ``MODULES`` and make numba's first
    compiled call (the codec's Snake kernel: its check compiles it or loads it from numba's
    cache, and initializes numba's CPU target and threading layer). Once per process; returns
    whether this call did the work."""
    global _done
    with _lock:
        if _done:
            return False
        from s2studio.engine.kernels.preload import preload

        preload()
        for name in MODULES:
            try:
                importlib.import_module(name)
            except Exception as exc:  # noqa: BLE001 - the load reports it properly
                log.debug("warm-up: importing %s failed (the load will say why): %s", name, exc)
        try:
            from s2studio.engine.codec import snake_kernel

            snake_kernel.usable()
        except Exception as exc:  # noqa: BLE001 - usable() logs its own failures
            log.debug("warm-up: the Snake kernel check failed: %s", exc)
        _done = True
        return True
