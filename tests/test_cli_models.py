"""``s2studio models`` and the model lookup of every command, in subprocesses, against a fake
Hugging Face on loopback (``HF_ENDPOINT``): the real ``huggingface_hub`` metadata request, the
real HTTP download with Range, the real checksum. The "published" model is the tiny golden
GGUF, so a pulled model really synthesizes."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

GOLDEN = pathlib.Path(__file__).resolve().parent / "data" / "golden"
TTS = GOLDEN / "tts_f32"


def load_fake_hub():
    spec = importlib.util.spec_from_file_location("fake_hub", pathlib.Path(__file__).parent / "fake_hub.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fake_hub = load_fake_hub()
FakeHub, MODEL_BYTES, TOKENIZER_BYTES, CUT_AFTER = (fake_hub.FakeHub, fake_hub.MODEL_BYTES, fake_hub.TOKENIZER_BYTES,
                                                     fake_hub.CUT_AFTER)


@pytest.fixture
def hub():
    h = FakeHub()
    yield h
    h.close()


@pytest.fixture
def home(tmp_path, hub):
    """The user's folders and the Hub, all in tmp_path and on loopback."""
    env = fake_hub.isolated_env(os.environ, hub, tmp_path)
    return env


def s2(env, *args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "s2studio", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env, cwd=cwd)


def one_line_error(r: subprocess.CompletedProcess, *fragments: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for f in fragments:
        assert f in lines[0], lines[0]
    return lines[0]


def test_pull_resumes_an_interrupted_download_and_becomes_the_default(hub, home, tmp_path):
    models = tmp_path / "models"
    hub.cut_next_get["s2-pro-q8_0.gguf"] = CUT_AFTER
    first = s2(home, "models", "pull", "q8_0")
    one_line_error(first)
    part = models / "s2-pro-q8_0.gguf.part"
    assert part.is_file() and not (models / "s2-pro-q8_0.gguf").exists()
    kept = part.stat().st_size
    assert 0 < kept <= CUT_AFTER and MODEL_BYTES.startswith(part.read_bytes())
    listing = s2(home, "models", "list")
    assert "incomplete download: s2-pro-q8_0.gguf.part" in listing.stdout and "no model installed" in listing.stdout

    second = s2(home, "models", "pull", "q8_0")
    assert second.returncode == 0, second.stderr
    assert ("s2-pro-q8_0.gguf", f"bytes={kept}-") in hub.gets  # continued from the part, not from 0
    assert (models / "s2-pro-q8_0.gguf").read_bytes() == MODEL_BYTES and not part.exists()
    assert (models / "tokenizer.json").read_bytes() == TOKENIZER_BYTES
    summary = second.stderr.strip().splitlines()
    assert len(summary) == 1 and "checksum verified" in summary[0] and "now the default" in summary[0], second.stderr

    settings = json.loads((tmp_path / "config" / "settings.json").read_text())
    assert settings["model_path"] == str((models / "s2-pro-q8_0.gguf").resolve())  # the app's default too
    listing = s2(home, "models", "list").stdout
    assert "* q8_0" in listing and "2.5 MB" in listing, listing
    assert s2(home, "models", "path", "q8_0").stdout.strip() == str(models / "s2-pro-q8_0.gguf")
    assert s2(home, "models", "path").stdout.strip() == str(models)


def test_a_checksum_mismatch_deletes_the_download(hub, home, tmp_path):
    hub.wrong_checksum.add("s2-pro-q8_0.gguf")
    one_line_error(s2(home, "models", "pull", "q8_0"), "checksum does not match", "deleted")
    assert list((tmp_path / "models").iterdir()) == []
    assert not (tmp_path / "config" / "settings.json").exists()


def test_pull_of_an_unknown_variant_or_a_missing_file_is_one_line(hub, home):
    one_line_error(s2(home, "models", "pull", "q9"), "'q9' is not a model variant", "q8_0")
    del hub.files["s2-pro-q6_k.gguf"]
    one_line_error(s2(home, "models", "pull", "q6_k"), "not on Hugging Face")


def test_synth_without_m_finds_the_model(hub, home, tmp_path):
    out = tmp_path / "out.wav"
    args = ("synth", "--text", "Hi.", "--max-tokens", "2", "--codec-cpu", "-o", out)
    one_line_error(s2(home, *args), "No model installed", "s2studio models pull q8_0")
    assert not out.exists()
    assert s2(home, "models", "pull", "q8_0", "--no-progress").returncode == 0
    r = s2(home, *args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert out.is_file() and r.stderr.strip().splitlines()[-1].startswith(f"wrote {out}")
    # A variant name works as -m; one that is not installed says how to get it.
    assert s2(home, *args, "-m", "q8_0").returncode == 0
    one_line_error(s2(home, *args, "-m", "q6_k"), "not installed", "s2studio models pull q6_k")


def test_the_default_decides_between_several_and_remove_clears_it(hub, home, tmp_path):
    models = tmp_path / "models"
    assert s2(home, "models", "pull", "q6_k", "--no-progress").returncode == 0  # the first: the default
    assert s2(home, "models", "pull", "q8_0", "--no-progress").returncode == 0
    assert s2(home, "models", "default").stdout.strip() == str((models / "s2-pro-q6_k.gguf").resolve())
    r = s2(home, "models", "default", "q8_0")
    assert r.returncode == 0 and "s2-pro-q8_0.gguf" in r.stdout
    assert "* q8_0" in s2(home, "models", "list").stdout
    removed = s2(home, "models", "remove", "q8_0")
    assert removed.returncode == 0 and "s2-pro-q8_0.gguf" in removed.stdout
    assert not (models / "s2-pro-q8_0.gguf").exists() and (models / "tokenizer.json").exists()
    out = tmp_path / "o.wav"
    # No default now, one model left: it is used.
    r = s2(home, "encode", TTS.parent / "codec_roundtrip" / "reference.wav", "-o", tmp_path / "c.npy")
    assert r.returncode == 0, r.stderr
    assert s2(home, "models", "pull", "q8_0", "--no-progress").returncode == 0  # no default: it becomes it
    assert "* q8_0" in s2(home, "models", "list").stdout
    settings = tmp_path / "config" / "settings.json"
    settings.write_text(json.dumps({**json.loads(settings.read_text()), "model_path": "", "top_k": 7}))
    one_line_error(s2(home, "synth", "--text", "Hi.", "--max-tokens", "2", "-o", out), "Several models are installed",
                   "s2studio models default")
    assert s2(home, "models", "default", "q6_k").returncode == 0
    assert json.loads(settings.read_text())["top_k"] == 7  # the app's other settings are left alone
    one_line_error(s2(home, "models", "default", "q5_k_m"), "not installed", "s2studio models pull q5_k_m")
    one_line_error(s2(home, "models", "remove", "q5_k_m"), "not installed")
    assert s2(home, "models", "remove", "q6_k").returncode == 0
    last = s2(home, "models", "remove", "q8_0")
    assert "tokenizer.json" in last.stdout and list(models.iterdir()) == []  # nothing left to use it
