"""Shared fixtures: golden data, and tiny S2-layout models generated on demand."""

from __future__ import annotations

import hashlib
import os
import tempfile
import pathlib
import subprocess
import sys

import pytest

# Qt must never need a display in tests.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# Per-machine verdict caches (codec placement, CPU kernel choice) go to a folder of this run,
# never into the user's cache.
os.environ.setdefault("S2STUDIO_CACHE_DIR", tempfile.mkdtemp(prefix="s2studio-test-cache-"))

ROOT = pathlib.Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "golden"
TOOLS = ROOT / "tools"
TINY_TOKENIZER = GOLDEN / "tts_f32" / "tokenizer.json"


@pytest.fixture(scope="session")
def golden() -> pathlib.Path:
    return GOLDEN


@pytest.fixture(scope="session")
def tiny_tokenizer() -> pathlib.Path:
    return TINY_TOKENIZER


@pytest.fixture(scope="session")
def make_tiny_model(tmp_path_factory):
    """make_tiny_model(*generator_args, quant=None) -> path of a GGUF built by
    tools/make_tiny_s2.py (and re-typed by tools/requantize_gguf.py when ``quant`` is given).
    Cached per argument list for the session. With ``quant``, returns (quantized, dequantized
    float32 reference)."""
    cache: dict[tuple, object] = {}
    folder = tmp_path_factory.mktemp("tiny-models")

    def build(*args: str, quant: str | None = None):
        key = (args, quant)
        if key in cache:
            return cache[key]
        tag = hashlib.sha1(repr(key).encode()).hexdigest()[:12]
        base = folder / f"base-{tag}.gguf"
        subprocess.run([sys.executable, str(TOOLS / "make_tiny_s2.py"), "--tokenizer", str(TINY_TOKENIZER),
                        "--out", str(base), *args], check=True, capture_output=True)
        result: object = base
        if quant is not None:
            q, ref = folder / f"{quant}-{tag}.gguf", folder / f"{quant}-{tag}-ref.gguf"
            subprocess.run([sys.executable, str(TOOLS / "requantize_gguf.py"), str(base), str(q),
                            "--type", quant, "--dequantized-out", str(ref)], check=True, capture_output=True)
            result = (q, ref)
        cache[key] = result
        return result

    return build
