"""``s2studio encode`` / ``s2studio decode`` end to end, in a subprocess like a user runs them."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

ROOT = pathlib.Path(__file__).resolve().parents[1]
CASE = ROOT / "tests" / "data" / "golden" / "codec_roundtrip"
MODEL = CASE / "model.gguf"


def run(*args, cwd):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "s2studio", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_encode_then_decode(tmp_path):
    codes_path = tmp_path / "codes.npy"
    r = run("encode", CASE / "reference.wav", "-m", MODEL, "-o", codes_path, "--codec-cpu", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    codes = np.load(codes_path)
    ref = np.load(CASE / "dumps" / "ref_codes.npy")
    assert codes.dtype == np.int32 and codes.shape == ref.shape == (10, 44)
    assert (codes == ref).mean() >= 0.95 and (codes[0] == ref[0]).mean() >= 0.95

    wav = tmp_path / "out.wav"
    r = run("decode", codes_path, "-m", MODEL, "-o", wav, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    audio, sr = sf.read(wav, dtype="float32")
    info = sf.info(wav)
    assert sr == 44100 and info.channels == 1 and info.subtype == "FLOAT"
    assert audio.shape == (2048 * codes.shape[1],)
    gold = np.load(CASE / "dumps" / "audio.npy")
    if (codes == ref).all():
        assert np.abs(audio - gold).max() <= 1e-2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["codes.npy", "out.wav"]  # no temp files


def _assert_clean_failure(r, tmp_path, out_name, words):
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "Traceback" not in r.stderr
    assert any(w in lines[0] for w in words), lines[0]
    assert not any(p.name.startswith((out_name, "." + out_name)) for p in tmp_path.iterdir())


def test_bad_audio_fails_cleanly(tmp_path):
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunkjunk")
    r = run("encode", bad, "-m", MODEL, "-o", tmp_path / "codes.npy", cwd=tmp_path)
    _assert_clean_failure(r, tmp_path, "codes.npy", ["bad.wav"])


@pytest.mark.parametrize("content", ["wrong_shape", "floats", "not_npy"])
def test_bad_codes_fail_cleanly(tmp_path, content):
    codes = tmp_path / "codes.npy"
    if content == "wrong_shape":
        np.save(codes, np.zeros((9, 5), dtype=np.int32))
    elif content == "floats":
        np.save(codes, np.zeros((10, 5), dtype=np.float32))
    else:
        codes.write_bytes(b"hello")
    r = run("decode", codes, "-m", MODEL, "-o", tmp_path / "out.wav", cwd=tmp_path)
    _assert_clean_failure(r, tmp_path, "out.wav", ["codes.npy"])


def test_bad_model_fails_cleanly(tmp_path):
    np.save(tmp_path / "codes.npy", np.zeros((10, 3), dtype=np.int32))
    r = run("decode", tmp_path / "codes.npy", "-m", CASE / "reference.wav", "-o", tmp_path / "out.wav", cwd=tmp_path)
    _assert_clean_failure(r, tmp_path, "out.wav", ["GGUF"])
