"""Shared fixtures: golden data, and tiny S2-layout models generated on demand."""

from __future__ import annotations

import hashlib
import os
import tempfile
import pathlib

import pytest

# Qt must never need a display in tests.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# Per-machine verdict caches (codec placement, CPU kernel choice) go to a folder of this run,
# never into the user's cache.
os.environ.setdefault("S2STUDIO_CACHE_DIR", tempfile.mkdtemp(prefix="s2studio-test-cache-"))

ROOT = pathlib.Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "golden"
TINY_TOKENIZER = GOLDEN / "tts_f32" / "tokenizer.json"


@pytest.fixture(scope="session")
def golden() -> pathlib.Path:
    return GOLDEN


@pytest.fixture(scope="session")
def tiny_tokenizer() -> pathlib.Path:
    return TINY_TOKENIZER


@pytest.fixture(scope="session")
def make_tiny_model(tmp_path_factory):
    """make_tiny_model(*generator_args, quant=None) -> path of a GGUF built in-process by the
    package's generator (``s2studio.devtools.tiny_model``; the arguments are its command-line
    flags, e.g. ``"--seed", "5", "--qk-norm", "on"``), re-typed by ``s2studio.devtools.requantize``
    when ``quant`` is given. Cached per argument list for the session. With ``quant``, returns
    (quantized, dequantized float32 reference)."""
    from s2studio.devtools.options import parse_options
    from s2studio.devtools.requantize import requantize_gguf
    from s2studio.devtools.tiny_model import TinyModelOptions, write_tiny_gguf

    cache: dict[tuple, object] = {}
    folder = tmp_path_factory.mktemp("tiny-models")

    def build(*args: str, quant: str | None = None):
        key = (args, quant)
        if key in cache:
            return cache[key]
        tag = hashlib.sha1(repr(key).encode()).hexdigest()[:12]
        base = folder / f"base-{tag}.gguf"
        write_tiny_gguf(base, TINY_TOKENIZER, parse_options(TinyModelOptions, args))
        result: object = base
        if quant is not None:
            q, ref = folder / f"{quant}-{tag}.gguf", folder / f"{quant}-{tag}-ref.gguf"
            requantize_gguf(base, q, quant, dequantized_out=ref)
            result = (q, ref)
        cache[key] = result
        return result

    return build


def _load_sound_server():
    """tests/sound_server.py by its path (the tests folder is no package), so the sound-server
    fixtures serve tests/audio and tests/app alike."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("s2test_sound_server", pathlib.Path(__file__).parent / "sound_server.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


sound_server_module = _load_sound_server()
sound_server = sound_server_module.sound_server
real_sounddevice = sound_server_module.real_sounddevice


class LongReferenceClip:
    """A 62 s clip made of real speech (the golden reference's spoken second, repeated): a noisy
    part, silence, a clipped part, silence, a clean part (0.3 s pauses), silence. ``parts`` gives
    each part's (start, end) in seconds."""

    RATE = 44100

    def __init__(self):
        import numpy as np
        import soundfile as sf

        speech, rate = sf.read(pathlib.Path(__file__).parent / "data/golden/clone_f32_qknorm/reference.wav",
                               dtype="float32")
        assert rate == self.RATE
        speech = speech[:rate]  # its spoken second

        def repeated(times: int, pause: float):
            gap = np.zeros(int(pause * rate), np.float32)
            return np.concatenate([np.concatenate([speech, gap]) for _ in range(times)])

        noisy = repeated(8, 0.4)
        noisy = noisy + np.random.default_rng(0).standard_normal(len(noisy)).astype(np.float32) * 0.05  # -26 dBFS
        clipped = np.clip(repeated(6, 0.4) * 4, -1, 1)
        clean = repeated(14, 0.3)
        silence = np.zeros(8 * rate, np.float32)
        pieces = {"noisy": noisy, "gap1": silence, "clipped": clipped, "gap2": silence, "clean": clean,
                  "gap3": silence}
        self.parts, at = {}, 0
        for name, piece in pieces.items():
            self.parts[name] = (at / rate, (at + len(piece)) / rate)
            at += len(piece)
        self.samples = np.concatenate(list(pieces.values())).astype(np.float32)


@pytest.fixture(scope="session")
def long_reference_clip() -> LongReferenceClip:
    return LongReferenceClip()
