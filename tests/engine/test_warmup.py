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

import pytest

GOLDEN_MODEL = Path(__file__).resolve().parents[1] / "data" / "golden" / "tts_f32" / "model.gguf"
# wide enough for the quantized kernels' block sizes (as tests/engine/test_prefix_cache.py)
WIDE = ("--dim", "256", "--heads", "8", "--kv-heads", "2", "--ffn", "512", "--qk-norm", "on",
        "--head-dim", "32", "--fast-dim", "256", "--fast-heads", "4", "--fast-kv-heads", "2",
        "--fast-head-dim", "64", "--fast-ffn", "512", "--layers", "2", "--fast-layers", "2")

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
pipeline = Pipeline(EngineSettings(model_path=sys.argv[1], tokenizer_path=sys.argv[2], codec_mode="cpu"),
                    voices=VoiceLibrary(tempfile.mkdtemp()))
pipeline.load()
loaded = set(sys.modules)
from s2studio.engine.params import GenerationParams
request = api.SynthesisRequest(text="Hello there, this is a test.", generation=GenerationParams(max_new_tokens=6, seed=3))
result = pipeline.synthesize(request).run_to_end()
print(json.dumps({"first": first, "again": again, "compiled": bool(compiled), "audio": len(result.audio),
                  "by_load": heavy(loaded - before), "by_take": heavy(set(sys.modules) - loaded)}))
"""


@pytest.mark.parametrize("weights", ["f32", "q4_k"])
def test_after_the_warm_up_a_load_and_a_take_import_nothing_heavy(tmp_path, weights, make_tiny_model, tiny_tokenizer):
    # q4_k: the quantized matrices' kernels (C integer dots, numba) in the load and the take
    model = GOLDEN_MODEL if weights == "f32" else make_tiny_model("--seed", "5", *WIDE, quant="q4_k")[0]
    env = dict(os.environ, S2STUDIO_CACHE_DIR=str(tmp_path / "cache"))
    res = subprocess.run([sys.executable, "-c", CODE, str(model), str(tiny_tokenizer)], capture_output=True,
                         text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["first"] is True and out["again"] is False  # the work is done once per process
    assert out["compiled"]  # numba's first call made (the Snake kernel compiled or loaded from its cache)
    assert out["audio"] > 0
    assert (out["by_load"], out["by_take"]) == ([], []), (out["by_load"], out["by_take"])
