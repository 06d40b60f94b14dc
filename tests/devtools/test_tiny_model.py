"""The in-package tiny model (``s2studio.devtools``) that ``--self-test`` synthesizes with:
reproducible, identical to what ``tools/make_tiny_s2.py`` writes, and loadable by the engine."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import gguf
import numpy as np
import pytest

from s2studio.devtools.tiny_model import make_tiny_model

TOOLS = pathlib.Path(__file__).resolve().parents[2] / "tools"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny"))


def _tensors(path) -> dict[str, tuple[str, np.ndarray]]:
    return {t.name: (t.tensor_type.name, np.array(t.data)) for t in gguf.GGUFReader(str(path)).tensors}


def test_same_seed_same_bytes_other_seed_other_weights(tiny, tmp_path):
    again = make_tiny_model(tmp_path / "again")
    assert again.model_path.read_bytes() == tiny.model_path.read_bytes()
    assert again.tokenizer_path.read_bytes() == tiny.tokenizer_path.read_bytes()
    other = make_tiny_model(tmp_path / "other", seed=1)
    a, b = _tensors(tiny.model_path), _tensors(other.model_path)
    assert not np.array_equal(a["norm.weight"][1], b["norm.weight"][1])


def test_matches_the_command_line_generator(tiny, tmp_path):
    """The package copy must not drift from tools/ (the tests' models come from there)."""
    tok, model = tmp_path / "tok.json", tmp_path / "ref.gguf"
    subprocess.run([sys.executable, str(TOOLS / "make_tiny_tokenizer.py"), "--out", str(tok)],
                   check=True, capture_output=True)
    subprocess.run([sys.executable, str(TOOLS / "make_tiny_s2.py"), "--tokenizer", str(tok), "--out", str(model)],
                   check=True, capture_output=True)
    assert tok.read_bytes() == tiny.tokenizer_path.read_bytes()
    ours, ref = _tensors(tiny.model_path), _tensors(model)
    assert ours.keys() == ref.keys()
    for name, (kind, data) in ref.items():
        assert ours[name][0] == kind, name
        np.testing.assert_array_equal(ours[name][1], data, err_msg=name)
    ours_fields = gguf.GGUFReader(str(tiny.model_path)).fields
    for key, field in gguf.GGUFReader(str(model)).fields.items():
        if key != "general.description":
            np.testing.assert_array_equal(ours_fields[key].parts[-1], field.parts[-1], err_msg=key)


@pytest.mark.parametrize("case", ["tts_f32", "clone_f32_qknorm"])
def test_layout_code_reproduces_the_golden_models_byte_for_byte(case, tmp_path):
    """The golden models (the ones s2.cpp ran) came from this layout code: it must not drift."""
    import hashlib
    import json
    import shlex

    golden = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden" / case
    model = json.loads((golden / "case.json").read_text())["model"]
    args = shlex.split(model["generator_command"])[2:]  # drop "python tools/make_tiny_s2.py"
    args[args.index("--tokenizer") + 1] = str(golden / "tokenizer.json")
    args[args.index("--out") + 1] = str(tmp_path / "model.gguf")
    subprocess.run([sys.executable, str(TOOLS / "make_tiny_s2.py"), *args], check=True, capture_output=True)
    assert hashlib.sha256((tmp_path / "model.gguf").read_bytes()).hexdigest() == model["sha256"]


def test_engine_loads_it_and_speaks_whole_frames(tiny):
    from s2studio.engine.params import GenerationParams
    from s2studio.engine.pipeline import EngineSettings, Pipeline, SynthesisRequest

    pipeline = Pipeline(EngineSettings(str(tiny.model_path), str(tiny.tokenizer_path), codec_mode="cpu"))
    pipeline.load()
    assert pipeline.sample_rate == tiny.sample_rate
    params = GenerationParams(max_new_tokens=2, min_tokens_before_end=2, seed=0)
    result = pipeline.synthesize(SynthesisRequest("Hello there.", generation=params)).run_to_end()
    assert result.codes.shape == (10, 2)
    assert result.audio.shape == (2 * tiny.samples_per_frame,)
    assert np.isfinite(result.audio).all() and np.abs(result.audio).max() > 0
