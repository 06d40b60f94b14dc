"""Every bad model file gives one clear ModelFileError naming the file and the problem."""

from __future__ import annotations

import os
import pathlib
import struct
import subprocess
import sys

import gguf
import numpy as np
import pytest

from s2studio.errors import ModelFileError
from s2studio.engine.model.gguf_file import GGUFFile
from s2studio.engine.model.loader import load_dual_ar

GOLDEN_MODEL = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden" / "tts_f32" / "model.gguf"


def expect_error(path, *fragments: str) -> ModelFileError:
    with pytest.raises(ModelFileError) as info:
        load_dual_ar(path)
    msg = str(info.value)
    assert str(path) in msg
    for frag in fragments:
        assert frag in msg, msg
    assert "\n" not in msg
    return info.value


def copy_model(dst: pathlib.Path, *, arch: str = "fish-speech", drop: str | None = None,
               reshape: str | None = None, drop_key: str | None = None,
               set_keys: dict | None = None, edit: dict | None = None) -> pathlib.Path:
    """Re-write the golden model with one thing changed. ``set_keys``: {key: new value} (same
    GGUF type); ``edit``: {tensor name: function(float32 array) -> new array (its dtype is the
    tensor's new type)}."""
    reader = gguf.GGUFReader(GOLDEN_MODEL)
    w = gguf.GGUFWriter(dst, arch)
    for f in reader.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture" or f.name == drop_key:
            continue
        vtype = f.types[0]
        value = (set_keys or {}).get(f.name, f.contents())
        w.add_key_value(f.name, value, vtype, sub_type=f.types[1] if vtype == gguf.GGUFValueType.ARRAY else None)
    for t in reader.tensors:
        if t.name == drop:
            continue
        data = np.array(t.data)
        if t.name == reshape:
            data = data[:-1]
        if t.name in (edit or {}):
            data = edit[t.name](data.copy())
        w.add_tensor(t.name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def test_missing_file(tmp_path):
    expect_error(tmp_path / "nope.gguf", "does not exist")


def test_folder_instead_of_file(tmp_path):
    expect_error(tmp_path, "folder")


def test_empty_file(tmp_path):
    p = tmp_path / "empty.gguf"
    p.write_bytes(b"")
    expect_error(p, "not a GGUF")


def test_not_a_gguf(tmp_path):
    p = tmp_path / "tokenizer.gguf"
    p.write_text('{"model": {"vocab": {}}}' * 10)
    expect_error(p, "not a GGUF file")


@pytest.mark.parametrize("keep", [10, 30, 2000, 60_000, -100])
def test_truncated_file(tmp_path, keep):
    data = GOLDEN_MODEL.read_bytes()
    p = tmp_path / "cut.gguf"
    p.write_bytes(data[:keep] if keep > 0 else data[:keep])
    expect_error(p, "truncated")


def test_unsupported_version(tmp_path):
    data = bytearray(GOLDEN_MODEL.read_bytes())
    data[4:8] = struct.pack("<I", 99)
    p = tmp_path / "v99.gguf"
    p.write_bytes(data)
    expect_error(p, "version 99")


def _tensor_info_offset(data: bytes) -> int:
    """Byte offset of the first tensor info (after the metadata), by walking the KV section."""
    reader = gguf.GGUFReader(GOLDEN_MODEL)
    first = reader.fields[list(reader.fields)[-1]]
    return first.offset + sum(p.nbytes for p in first.parts)


def test_hostile_dimension_count(tmp_path):
    data = bytearray(GOLDEN_MODEL.read_bytes())
    off = _tensor_info_offset(data)
    (name_len,) = struct.unpack_from("<Q", data, off)
    struct.pack_into("<I", data, off + 8 + name_len, 1_000_000)
    p = tmp_path / "dims.gguf"
    p.write_bytes(data)
    expect_error(p, "dimensions")


def test_hostile_element_count(tmp_path):
    data = bytearray(GOLDEN_MODEL.read_bytes())
    off = _tensor_info_offset(data)
    (name_len,) = struct.unpack_from("<Q", data, off)
    dims_at = off + 8 + name_len + 4
    struct.pack_into("<QQ", data, dims_at, 2**40, 2**40)
    p = tmp_path / "huge.gguf"
    p.write_bytes(data)
    expect_error(p, "impossible size")


def test_data_offset_past_end(tmp_path):
    data = bytearray(GOLDEN_MODEL.read_bytes())
    off = _tensor_info_offset(data)
    (name_len,) = struct.unpack_from("<Q", data, off)
    (n_dims,) = struct.unpack_from("<I", data, off + 8 + name_len)
    offset_at = off + 8 + name_len + 4 + 8 * n_dims + 4
    struct.pack_into("<Q", data, offset_at, len(data) * 4 // 32 * 32)
    p = tmp_path / "offset.gguf"
    p.write_bytes(data)
    expect_error(p, "truncated")


def test_hostile_counts(tmp_path):
    data = bytearray(GOLDEN_MODEL.read_bytes())
    struct.pack_into("<Q", data, 8, 2**60)  # tensor count
    p = tmp_path / "count.gguf"
    p.write_bytes(data)
    expect_error(p, "corrupt header")


def test_wrong_architecture(tmp_path):
    p = copy_model(tmp_path / "llama.gguf", arch="llama")
    expect_error(p, "architecture is 'llama'")


def test_missing_tensor(tmp_path):
    p = copy_model(tmp_path / "missing.gguf", drop="layers.1.feed_forward.w2.weight")
    expect_error(p, "layers.1.feed_forward.w2.weight", "missing")


def test_wrong_shape(tmp_path):
    p = copy_model(tmp_path / "shape.gguf", reshape="fast_output.weight")
    expect_error(p, "fast_output.weight", "shape (127, 64)", "expected (128, 64)")


def test_missing_metadata_key_falls_back_with_warning(tmp_path, caplog):
    # s2.cpp's default for a missing vocab_size (155776) contradicts the tiny tensors: the
    # fallback is logged, then the shape check names the tensor.
    p = copy_model(tmp_path / "nokey.gguf", drop_key="fish-speech.vocab_size")
    with caplog.at_level("WARNING"):
        expect_error(p, "embeddings.weight", "expected (155776, 64)")
    assert any("fish-speech.vocab_size" in r.message for r in caplog.records)


def test_cli_reports_bad_model_in_one_line(tmp_path):
    p = tmp_path / "bad.gguf"
    p.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\x00" * 8)
    r = subprocess.run([sys.executable, "-m", "s2studio", "trace", "-m", str(p), "--prompt", "x.npy",
                        "--codes", "y.npy", "--main-tokens", "z.npy", "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    assert str(p) in lines[0] and "truncated" in lines[0]


def test_reader_gives_numpy_layout_and_float32():
    f = GGUFFile(GOLDEN_MODEL)
    w = f.array("layers.0.attention.wqkv.weight")
    assert w.dtype == np.float32 and w.shape == (128, 64)
    assert f.info("layers.0.attention.wqkv.weight").type_name == "F32"
    assert f.meta("fish_speech.codebook_size") == 128
    f.close()


# ---- hostile metadata: one ModelFileError naming the file and the key -----------------------------

@pytest.mark.parametrize("key,value", [
    ("fish-speech.attention.head_count", 0),  # was a ZeroDivisionError
    ("fish-speech.attention.head_count_kv", 0),
    ("fish_speech.fast_head_count", 0),
    ("fish-speech.block_count", 0),  # was a model that synthesized silently
    ("fish_speech.fast_block_count", 0),
    ("fish-speech.rope.freq_base", float("nan")),  # were NaN logits, then a sampler traceback
    ("fish-speech.rope.freq_base", float("inf")),
    ("fish_speech.fast_rope_freq_base", 0.0),
    ("fish-speech.attention.layer_norm_rms_epsilon", -1e-6),
    ("fish_speech.fast_layer_norm_rms_eps", float("nan")),
    ("fish_speech.num_codebooks", 0),
])
def test_out_of_range_metadata_names_the_key(tmp_path, key, value):
    p = copy_model(tmp_path / "meta.gguf", set_keys={key: value})
    err = expect_error(p, f"'{key}'", "must be")
    assert "Traceback" not in str(err)


# ---- non-finite weights: caught at load (one step), or during generation --------------------------

def _poison(value: float, index: int = 0):
    def edit(a: np.ndarray) -> np.ndarray:
        a.reshape(-1)[index] = value
        return a
    return edit


def _as_f16_with(value: float):
    def edit(a: np.ndarray) -> np.ndarray:
        a = a.astype(np.float16)
        a.reshape(-1)[3] = value
        return a
    return edit


@pytest.mark.parametrize("tensor,edit", [
    ("layers.1.feed_forward.w2.weight", _poison(float("nan"))),
    ("layers.0.attention.wqkv.weight", _poison(float("inf"), 17)),
    ("fast_layers.1.attention.wo.weight", _poison(float("nan"), 5)),
    ("norm.weight", _poison(float("inf"))),
    ("layers.2.feed_forward.w1.weight", _as_f16_with(float("nan"))),  # an F16-typed tensor
    ("fast_output.weight", _as_f16_with(float("-inf"))),
])
def test_non_finite_weights_are_refused_at_load(tmp_path, tensor, edit):
    p = copy_model(tmp_path / "nan.gguf", edit={tensor: edit})
    err = expect_error(p, "non-finite", "NaN or infinity", "while checking it at load")
    assert "probability tensor" not in str(err)


def test_non_finite_logits_during_generation_name_the_model_file(tmp_path):
    """A NaN only in the embedding of one text token: the load check never reaches it; the
    first sampled row that does stops generation with one message, not a sampler traceback."""
    from s2studio.engine.model.generate import GenerationParams, generate_codes

    prompt = np.load(GOLDEN_MODEL.parent / "dumps" / "prompt_tokens.npy")
    token = int(prompt[0, 3])
    emb = gguf.GGUFReader(GOLDEN_MODEL)
    dim = next(t for t in emb.tensors if t.name == "embeddings.weight").data.shape[1]
    p = copy_model(tmp_path / "row.gguf", edit={"embeddings.weight": _poison(float("nan"), token * dim)})
    model, _ = load_dual_ar(p)  # the load check does not use this row
    with pytest.raises(ModelFileError) as info:
        generate_codes(model, prompt, GenerationParams(max_new_tokens=4, temperature=0.7, seed=0), im_end_id=514)
    msg = str(info.value)
    assert str(p) in msg and "non-finite Slow-AR logits" in msg and "at frame 0" in msg and "\n" not in msg


def test_serve_refuses_a_model_with_nan_weights(tmp_path):
    """The server loads before it listens: a NaN model is one error line and exit 2, never a
    server that reports itself healthy while every request fails."""
    p = copy_model(tmp_path / "nan.gguf", edit={"layers.0.feed_forward.w3.weight": _poison(float("nan"))})
    env = dict(os.environ, S2STUDIO_CONFIG_DIR=str(tmp_path / "config"), S2STUDIO_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-m", "s2studio", "serve", "-m", str(p), "-t",
                        str(GOLDEN_MODEL.parent / "tokenizer.json"), "--port", "0",
                        "--voice-dir", str(tmp_path / "voices")],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2, r.stderr
    errors = [line for line in r.stderr.strip().splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(p) in errors[0] and "non-finite" in errors[0], r.stderr
    assert "Traceback" not in r.stderr and "serving on" not in r.stderr


# ---- the codec's metadata --------------------------------------------------------------------------

@pytest.mark.parametrize("key,value,fragment", [
    ("fish_speech.codec.decoder_rates", [8, 8, 4, 1_000_000], "decoder_rates"),  # was a 1.5 TB allocation
    ("fish_speech.codec.encoder_rates", [64, 64, 64, 64], "multiplies to"),
    ("fish_speech.codec.quantizer_downsample_factor", [2, 0], "quantizer_downsample_factor"),
    ("fish_speech.codec.sample_rate", 4_000_000_000, "sample_rate"),
    ("fish_speech.codec.rvq_transformer.window_size", 1 << 30, "window_size"),
    ("fish_speech.codec.transformer.rope_freq_base", float("nan"), "rope_freq_base"),
    ("fish_speech.codec.rvq_transformer.layer_norm_rms_eps", -1.0, "layer_norm_rms_eps"),
])
def test_hostile_codec_metadata(tmp_path, key, value, fragment):
    from s2studio.engine.codec.config import CodecConfig

    p = copy_model(tmp_path / "codec.gguf", set_keys={key: value})
    with GGUFFile(p) as f, pytest.raises(ModelFileError) as info:
        CodecConfig.from_gguf(f)
    msg = str(info.value)
    assert str(p) in msg and fragment in msg and "\n" not in msg


# ---- paths ------------------------------------------------------------------------------------------

def test_symlink_loop_is_not_called_missing(tmp_path):
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    a.symlink_to(b)
    b.symlink_to(a)
    err = expect_error(a, "symbolic link", "loops")
    assert "does not exist" not in str(err)


def test_dangling_symlink_names_its_target(tmp_path):
    link = tmp_path / "model.gguf"
    link.symlink_to(tmp_path / "gone" / "model.gguf")
    expect_error(link, "symbolic link", str(tmp_path / "gone" / "model.gguf"), "does not exist")


def test_non_finite_codec_output_names_the_model_file(tmp_path):
    """NaN codec weights: the first decoded chunk stops the take with one message, never a NaN
    WAV (the transformer is fine, so the load check passes)."""
    from s2studio.engine.params import GenerationParams
    from s2studio.engine.pipeline import EngineSettings, Pipeline, SynthesisRequest

    p = copy_model(tmp_path / "codec-nan.gguf", edit={"c.decoder.model.6.conv.bias": _poison(float("nan"))})
    pipeline = Pipeline(EngineSettings(str(p), str(GOLDEN_MODEL.parent / "tokenizer.json"), tokenizer_mode="s2cpp",
                                       codec_mode="cpu"))
    params = GenerationParams(max_new_tokens=4, min_tokens_before_end=4, temperature=0, ras=False)
    with pytest.raises(ModelFileError) as info:
        pipeline.synthesize(SynthesisRequest("Hello.", generation=params)).run_to_end()
    msg = str(info.value)
    assert str(p) in msg and "audio codec produced non-finite samples" in msg and "\n" not in msg
