"""The one tiny-model generator (``s2studio.devtools.tiny_model``), which ``--self-test``, the tests
and ``tools/make_tiny_s2.py`` all use: reproducible, the same through its command line, still
writing the golden models byte for byte, and loadable by the engine."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import gguf
import numpy as np
import pytest

from s2studio.devtools import tiny_model
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
    """tools/ holds only the command lines of the package's generators: they write the same files."""
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
    assert model.read_bytes() == tiny.model_path.read_bytes()  # one generator: even the description


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
    assert tiny_model.main(args) == 0  # what that command runs, in-process
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


def test_the_golden_tokenizer_is_what_its_recorded_command_writes(tmp_path):
    import json
    import shlex

    from s2studio.devtools import tiny_tokenizer

    golden = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden" / "tts_f32"
    tok = json.loads((golden / "case.json").read_text())["tokenizer"]
    args = shlex.split(tok["generator_command"])[2:]  # drop "python tools/make_tiny_tokenizer.py"
    args[args.index("--out") + 1] = str(tmp_path / "tokenizer.json")
    assert tiny_tokenizer.main(args) == 0
    assert (tmp_path / "tokenizer.json").read_bytes() == (golden / tok["file"]).read_bytes()


def test_knobs_as_keywords_equal_the_same_flags(tmp_path, tiny_tokenizer):
    from s2studio.devtools.options import parse_options
    from s2studio.devtools.tiny_model import TinyModelOptions, write_tiny_gguf

    flags = ("--seed", "11", "--qk-norm", "on", "--head-dim", "32", "--fast-dim", "96", "--fast-head-dim", "24",
             "--dtype", "q8_0", "--small-dtype", "f16", "--scale-codebook-embeddings", "off")
    options = parse_options(TinyModelOptions, flags)
    assert options == TinyModelOptions(seed=11, qk_norm=True, head_dim=32, fast_dim=96, fast_head_dim=24,
                                       dtype="q8_0", small_dtype="f16", scale_codebook_embeddings=False)
    by_flags = write_tiny_gguf(tmp_path / "a.gguf", tiny_tokenizer, options)
    by_keywords = write_tiny_gguf(tmp_path / "b.gguf", tiny_tokenizer, seed=11, qk_norm=True, head_dim=32,
                                  fast_dim=96, fast_head_dim=24, dtype="q8_0", small_dtype="f16",
                                  scale_codebook_embeddings=False)
    assert by_flags == by_keywords
    assert (tmp_path / "a.gguf").read_bytes() == (tmp_path / "b.gguf").read_bytes()
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(tmp_path / "a.gguf")).tensors}
    assert types["layers.0.attention.wqkv.weight"] == "Q8_0" and types["norm.weight"] == "F16"
    assert "fast_project_in.weight" in types and "layers.0.attention.q_norm.weight" in types
    assert by_flags["head_dim"] == 32 and by_flags["text_config"]["fast_dim"] == 96


def test_a_layout_s2cpp_cannot_load_is_refused(tmp_path, tiny_tokenizer):
    from s2studio.devtools.tiny_model import write_tiny_gguf

    with pytest.raises(ValueError, match="heads\\*head_dim == dim"):
        write_tiny_gguf(tmp_path / "x.gguf", tiny_tokenizer, heads=3)
    with pytest.raises(ValueError, match="multiples of the KV head counts"):
        write_tiny_gguf(tmp_path / "x.gguf", tiny_tokenizer, heads=4, kv_heads=3)
    with pytest.raises(TypeError):
        write_tiny_gguf(tmp_path / "x.gguf", tiny_tokenizer, tiny_model.TinyModelOptions(), seed=1)


def test_full_size_generator_writes_the_tiny_layout_at_any_size(tmp_path):
    """full_model runs the tiny layout functions with a streaming writer: a small-dims run loads
    back with every tensor the tiny layout declares, in the asked types, and the norms and codec
    tensors are exactly what the tiny generator draws for the same seed."""
    from s2studio.devtools.full_model import FullModelOptions, configs, write_full_gguf
    from s2studio.devtools.full_tokenizer import make_full_tokenizer
    from s2studio.devtools.random_init import Init
    from s2studio.devtools.tiny_codec import codec_tensors
    from s2studio.devtools.tiny_model import read_vocab_layout

    tok = tmp_path / "tok.json"
    info = make_full_tokenizer(tok)
    assert (info["im_start"], info["semantic_begin"], info["total_tokens"]) == (151644, 151678, 155774)
    assert read_vocab_layout(tok)["vocab_size"] == 155776
    out = tmp_path / "full.gguf"
    summary = write_full_gguf(out, tok, dtype="q4_k", dim=256, layers=1, heads=4, kv_heads=2, head_dim=64,
                              ffn=512, fast_layers=1, fast_ffn=256, codec="tiny", seed=3, log=lambda line: None)
    tensors = {t.name: t for t in gguf.GGUFReader(str(out)).tensors}
    assert len(tensors) == summary["n_tensors"]
    assert tensors["layers.0.attention.wqkv.weight"].tensor_type.name == "Q4_K"
    assert tensors["norm.weight"].tensor_type.name == "F16"
    w = gguf.quants.dequantize(tensors["layers.0.feed_forward.w1.weight"].data, gguf.GGMLQuantizationType.Q4_K)
    assert abs(float(w.std()) * 16 - 1) < 0.05  # 1/sqrt(fan_in = 256), as the tiny generator draws
    _, cc = configs(FullModelOptions(codec="tiny"), read_vocab_layout(tok))
    name, want = next(iter(codec_tensors(Init(3), cc).items()))
    np.testing.assert_array_equal(np.array(tensors[name].data), want.astype(np.float16))


def test_requantize_keeps_the_layout_and_writes_the_exact_reference(tmp_path, golden):
    from s2studio.devtools.requantize import requantize_gguf

    src = golden / "tts_f32" / "model.gguf"
    q, ref = tmp_path / "q.gguf", tmp_path / "ref.gguf"
    requantize_gguf(src, q, "q8_0", dequantized_out=ref)
    original, quant, exact = (_tensors(p) for p in (src, q, ref))
    assert original.keys() == quant.keys() == exact.keys()
    for name, (kind, data) in original.items():
        is_weight = data.ndim == 2 and not name.startswith("c.") and kind != "Q8_0"
        assert quant[name][0] == ("Q8_0" if is_weight else kind), name
        if is_weight:
            deq = gguf.quants.dequantize(quant[name][1], gguf.GGMLQuantizationType.Q8_0)
            np.testing.assert_array_equal(deq.reshape(exact[name][1].shape), exact[name][1], err_msg=name)


def test_the_tools_are_thin_command_lines_over_the_package():
    """tools/ holds no second copy of a generator: each generator script only runs the package's main."""
    import ast

    wrappers = {"make_tiny_s2.py": "tiny_model", "make_tiny_tokenizer.py": "tiny_tokenizer",
                "make_full_s2.py": "full_model", "make_full_tokenizer.py": "full_tokenizer",
                "requantize_gguf.py": "requantize"}
    for script, module in wrappers.items():
        tree = ast.parse((TOOLS / script).read_text())
        defs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        assert not defs, f"{script} defines {[d.name for d in defs]}: the code belongs in s2studio.devtools"
        imports = [n for n in tree.body if isinstance(n, ast.ImportFrom)]
        assert [(n.module, [a.name for a in n.names]) for n in imports] == [(f"s2studio.devtools.{module}",
                                                                              ["main"])], script
