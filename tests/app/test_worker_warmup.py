"""The worker's first engine use (``query_devices`` at start-up, or the first load) does the
engine's one-time work with no full garbage collection, then freezes the heap it made: a full
collection of torch's and numba's ~250 000 objects held the GIL for 83-180 ms, the event loop's
worst stalls on the first load and take (docs/performance.md). The model loaded afterwards
stays collectable. In a fresh process: gc.freeze is per process, and in this one torch is long
imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.app.conftest import ROOT, TTS_MODEL

CODE = r"""
import gc, json, sys, tempfile
from PySide6.QtCore import QCoreApplication, QEventLoop, QObject, QTimer, Signal
app = QCoreApplication([])
from s2studio.app.requests import LoadRequest
from s2studio.app.worker import WorkerThread
from s2studio.engine.pipeline import EngineSettings

class Asker(QObject):
    devices = Signal()
    load = Signal(object)

def wait(signal):
    loop = QEventLoop()
    signal.connect(loop.quit)
    QTimer.singleShot(300_000, loop.quit)
    loop.exec()

host = WorkerThread(tempfile.mkdtemp())
asker = Asker()
asker.devices.connect(host.worker.query_devices)
asker.load.connect(host.worker.submit)
thresholds = gc.get_threshold()
assert "torch" not in sys.modules and gc.get_freeze_count() == 0
full_unfrozen = []  # full collections while the heap was not frozen yet
gc.callbacks.append(lambda phase, info: full_unfrozen.append(1)
                    if phase == "start" and info["generation"] == 2 and not gc.get_freeze_count() else None)
found, failed = [], []
host.worker.devices_found.connect(found.append)
host.worker.failed.connect(failed.append)
settings = EngineSettings(model_path=sys.argv[1], codec_mode="cpu")
if sys.argv[2] == "devices":  # as run_app does once the window is up
    asker.devices.emit()
    wait(host.worker.devices_found)
else:  # the load is the engine's first use
    asker.load.emit(LoadRequest(settings))
    wait(host.worker.loaded)
frozen = gc.get_freeze_count()

import torch, numba
tracked = {id(o) for o in gc.get_objects()}
modules_frozen = id(torch) not in tracked and id(numba) not in tracked and id(torch.Tensor) not in tracked

if sys.argv[2] == "devices":
    asker.load.emit(LoadRequest(settings))
    wait(host.worker.loaded)
pipeline = host.worker.engine_for(settings)  # loaded: returns it
model_collectable = any(o is pipeline.model for o in gc.get_objects())
print(json.dumps({"devices": [d for d, _ in found[0]] if found else None, "frozen": frozen, "frozen_after_load": gc.get_freeze_count(),
                  "full_unfrozen": len(full_unfrozen), "thresholds": gc.get_threshold() == thresholds,
                  "modules_frozen": modules_frozen, "model_collectable": model_collectable,
                  "failed": [f.message for f in failed]}))
host.shutdown()
"""


@pytest.mark.parametrize("first_use", ["devices", "load"])
def test_the_engine_warm_up_freezes_its_heap_without_a_full_collection(tmp_path, first_use):
    res = subprocess.run([sys.executable, "-c", CODE, str(TTS_MODEL), first_use], capture_output=True, text=True,
                         timeout=600, cwd=str(ROOT),
                         env={**os.environ, "QT_QPA_PLATFORM": "offscreen",
                              "S2STUDIO_CACHE_DIR": str(tmp_path / "cache"), "S2STUDIO_LOG_DIR": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["failed"] == []
    assert first_use == "load" or "cpu" in out["devices"]
    assert out["full_unfrozen"] == 0  # no full collection from the first engine use to the freeze
    assert out["frozen"] > 100_000 and out["modules_frozen"]  # torch's and numba's objects: skipped from now on
    # once per process: the load froze nothing more (frozen objects can still be freed by refcount)
    assert out["frozen_after_load"] <= out["frozen"]
    assert out["thresholds"]  # the collector's settings are back as they were
    assert out["model_collectable"]  # loaded after the freeze: unloading it frees it
