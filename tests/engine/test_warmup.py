"""engine.warmup: after ``api.warm_up()`` the first model load and the first take import no
module of the engine or of its heavy dependencies (the app's worker does the warm-up while the
event loop has nothing to wait for; whatever a load or take imported itself would hold the GIL
in the middle of it). In a fresh process: in this one everything is long imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

GOLDEN_MODEL = Path(__file__).resolve().parents[1] / "data" / "golden" / "tts_f32" / "model.gguf"

CODE = r"""
import json, sys, tempfile
from s2studio.engine import api
assert "torch" not in sys.modules and "numba" not in sys.modules
first, again = api.warm_up(), api.warm_up()
from s2studio.engine.codec import snake_kernel
compiled = snake_kernel._kernel.signatures if snake_kernel._kernel is not None else None

from s2studio.engine.pipeline import EngineSettings, Pipeline
from s2studio.engine.voices import VoiceLibrary

HEAVY = ("torch", "numba", "llvmlite", "scipy", "numpy", "cffi", "tokenizers", "gguf", "s2studio.engine")
def heavy(names):
    return sorted(n for n in names if n.split(".")[0] in HEAVY or n.startswith(HEAVY))

before = set(sys.modules)
pipeline = Pipeline(EngineSettings(model_path=sys.argv[1], codec_mode="cpu"), voices=VoiceLibrary(tempfile.mkdtemp()))
pipeline.load()
loaded = set(sys.modules)
from s2studio.engine.params import GenerationParams
request = api.SynthesisRequest(text="Hello there, this is a test.", generation=GenerationParams(max_new_tokens=6, seed=3))
result = pipeline.synthesize(request).run_to_end()
print(json.dumps({"first": first, "again": again, "compiled": bool(compiled), "audio": len(result.audio),
                  "by_load": heavy(loaded - before), "by_take": heavy(set(sys.modules) - loaded)}))
"""


def test_after_the_warm_up_a_load_and_a_take_import_nothing_heavy(tmp_path):
    env = dict(os.environ, S2STUDIO_CACHE_DIR=str(tmp_path / "cache"))
    res = subprocess.run([sys.executable, "-c", CODE, str(GOLDEN_MODEL)], capture_output=True, text=True,
                         timeout=600, env=env)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["first"] is True and out["again"] is False  # the work is done once per process
    assert out["compiled"]  # numba's first call made (the Snake kernel compiled or loaded from its cache)
    assert out["audio"] > 0
    assert (out["by_load"], out["by_take"]) == ([], []), (out["by_load"], out["by_take"])
