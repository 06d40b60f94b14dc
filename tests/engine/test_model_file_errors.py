"""Every bad model file gives one clear ModelFileError naming the file and the problem."""

from __future__ import annotations

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
               reshape: str | None = None, drop_key: str | None = None) -> pathlib.Path:
    """Re-write the golden model with one thing changed."""
    reader = gguf.GGUFReader(GOLDEN_MODEL)
    w = gguf.GGUFWriter(dst, arch)
    for f in reader.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture" or f.name == drop_key:
            continue
        vtype = f.types[0]
        w.add_key_value(f.name, f.contents(), vtype, sub_type=f.types[1] if vtype == gguf.GGUFValueType.ARRAY else None)
    for t in reader.tensors:
        if t.name == drop:
            continue
        data = np.array(t.data)
        if t.name == reshape:
            data = data[:-1]
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
