"""``s2studio synth --server``: the CLI on this side, the model on the server; same WAV as local."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import soundfile as sf

from s2studio.engine.params import GenerationParams
from s2studio.engine.pipeline import SynthesisRequest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLONE = ROOT / "tests" / "data" / "golden" / "clone_f32_qknorm"
TEXT = "The model runs on another machine."
MODEL = CLONE / "model.gguf"  # what the served fixture loads
AUDIO_ATOL = 2e-6  # float32 rounding of the codec's convolutions (see test_save_voice_through_a_server)


def synth(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "s2studio", "synth", "--no-progress", *args],
                          capture_output=True, text=True, timeout=180, env=env)


def test_synth_on_a_server_writes_the_local_take(served, tmp_path):
    out = tmp_path / "remote.wav"
    # -m names no file: with --server no model is needed here (and torch is never imported).
    r = synth("--server", served.url, "-m", str(tmp_path / "no-model-here.gguf"), "-text", TEXT, "--seed", "5",
              "-temp", "0", "-max-tokens", "30", "-o", str(out), "--voice-dir", str(tmp_path / "voices"))
    assert r.returncode == 0, r.stderr
    assert f"from {served.url}" in r.stderr and "seed 5" in r.stderr
    remote, rate = sf.read(out, dtype="float32")
    assert sf.info(out).subtype == "FLOAT"
    # The local take from a fresh process too, as a user makes it: inside this test process
    # other tests have already started numba's OpenMP pool before the engine set its thread
    # count, and oneDNN's transposed convolutions then split their sums differently (1e-7).
    here = tmp_path / "local.wav"
    r = synth("-m", str(MODEL), "--codec-cpu", "-threads", "1", "-text", TEXT, "--seed", "5", "-temp", "0",
              "-max-tokens", "30", "-o", str(here), "--voice-dir", str(tmp_path / "voices"))
    assert r.returncode == 0, r.stderr
    local, local_rate = sf.read(here, dtype="float32")
    assert rate == local_rate
    np.testing.assert_array_equal(remote, local)


def test_synth_server_errors_are_one_line(tmp_path, keyed):
    r = synth("--server", keyed.url, "-text", "Hi.", "-o", str(tmp_path / "x.wav"), "--voice-dir", str(tmp_path),
              env_extra={"S2STUDIO_API_KEY": ""})
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == (f"error: The server at {keyed.url} needs an API key (401): set the "
                                                 "key it was started with (--api-key, or the app's server "
                                                 "settings).")
    assert not (tmp_path / "x.wav").exists()
    r = synth("--server", "ftp://nowhere", "-o", str(tmp_path / "x.wav"))
    assert r.returncode == 2 and "must start with http:// or https://" in r.stderr
    r = synth("--server", keyed.url, "--codes-out", str(tmp_path / "c.npy"), "-o", str(tmp_path / "x.wav"))
    assert r.returncode == 2 and "--codes-out is not available with --server" in r.stderr
    r = synth("--server", keyed.url, "--api-key", "secret", "--list-voices")
    assert r.returncode == 0 and r.stdout.splitlines()[0] == f"{keyed.url}: 0 voice(s)"


def test_save_voice_through_a_server(served, local_pipeline, tmp_path):
    """--save-voice --server: the server's codec encodes the clip, the voice is saved here, and
    the take uses it (uploaded), exactly as a local --save-voice take."""
    from s2studio.audio import read_audio
    from s2studio.engine.voices import VoiceLibrary

    out = tmp_path / "voiced.wav"
    transcript = "A short sample of the reference speaker."
    r = synth("--server", served.url, "--save-voice", "--voice", "mine", "-pa", str(CLONE / "reference.wav"),
              "-pt", transcript, "-text", TEXT, "--seed", "2", "-temp", "0", "-max-tokens", "20", "-o", str(out),
              "--voice-dir", str(tmp_path / "voices"))
    assert r.returncode == 0, r.stderr
    voice = VoiceLibrary(tmp_path / "voices").get("mine")
    codes = local_pipeline.encode_reference(read_audio(CLONE / "reference.wav"))
    np.testing.assert_array_equal(voice.codes, codes)
    local = local_pipeline.synthesize(SynthesisRequest(
        text=TEXT, reference_codes=codes, reference_text=transcript,
        generation=GenerationParams(max_new_tokens=20, temperature=0.0, seed=2), stream_stride=16)).run_to_end()
    # Same codes (greedy) decoded by the same code, but not bit for bit: the codec's oneDNN
    # convolutions round differently (measured 3.5e-7 on a 2-core Sapphire Rapids VM, 0 on Zen 4)
    # depending on what the process did before (a server that encoded the clip first, here a
    # pipeline that already decoded; probably its buffers' alignment). A wrong take or a
    # different reference differs by whole sample values, ~1e-2.
    np.testing.assert_allclose(sf.read(out, dtype="float32")[0], local.audio, rtol=0, atol=AUDIO_ATOL)
