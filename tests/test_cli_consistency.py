"""The commands agree with each other and with the app (issue 25, item 6), in subprocesses."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import soundfile as sf

from s2studio.server.config import ServerConfig
from s2studio.server.openapi import openapi_document

GOLDEN = pathlib.Path(__file__).resolve().parent / "data" / "golden"
CLONE = GOLDEN / "clone_f32_qknorm"
MODEL = str(CLONE / "model.gguf")
TEXT = "This is the reference voice."


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "s2studio", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def test_voices_add_names_the_voice_after_the_file_and_trims_a_long_clip_like_the_app(tmp_path):
    vdir = tmp_path / "v"
    clip = tmp_path / "Long Interview.wav"
    rng = np.random.default_rng(3)
    sf.write(clip, (0.1 * rng.standard_normal(44100 * 62)).astype(np.float32), 44100)  # 62 s
    add = cli("voices", "--voice-dir", vdir, "add", clip, "--text", TEXT, "-m", MODEL, "--codec-cpu")
    assert add.returncode == 0, add.stderr
    note = add.stderr.strip().splitlines()
    assert len(note) == 1 and "is 62.0 s long; using its first 60 s" in note[0], add.stderr
    assert "'long-interview'" in add.stdout  # id and name from the file, not "voice"
    show = cli("voices", "--voice-dir", vdir, "show", "long-interview").stdout
    assert "name:        Long Interview" in show
    assert "(60.0" in show or "(59.9" in show, show  # the first 60 s


def test_decode_of_a_file_that_is_not_npy_says_so(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("not codes\n")
    r = cli("decode", notes, "-m", MODEL, "-o", tmp_path / "out.wav")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"error: Codes file {notes}: is not a .npy file (s2studio encode and synth --codes-out write them)."]
    assert "pickle" not in r.stderr and not (tmp_path / "out.wav").exists()


def test_openapi_describes_batching_as_configured(tmp_path):
    doc = openapi_document(ServerConfig(voice_dir=tmp_path, max_batch=4, queue_depth=8))
    text = doc["info"]["description"]
    assert "Up to 4 requests are generated together" in text and "next 8 wait" in text
    assert "one at a time" not in text
