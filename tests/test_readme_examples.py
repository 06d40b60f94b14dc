"""The README's command examples, run as written, in README order, against the tiny model.

The one thing substituted is the model: ``s2studio models pull q8_0`` (the README's first model
command) downloads from a fake Hugging Face on loopback that publishes the tiny golden GGUF as
``s2-pro-q8_0.gguf``, so every later command finds it the way a user's would. Two further
differences, both kept out of the commands' meaning: synth runs get ``--max-tokens 8`` (the
random tiny model rarely ends a take by itself: 1024 frames each would take minutes), and the
reference recordings the examples name (``me.wav``, ``alice.wav``) are the golden clip.

Not run: the app (``s2studio`` alone; tests/app), ``serve`` (tests/server/test_curl_readme.py
runs the README's curl examples), ``--server http://gpu-box…`` (a machine that is not here;
tests/remote), ``--self-test`` (tests/test_selftest.py), ``cluster`` (a Ray cluster: tests/cluster).
``render`` gets a small EPUB made by tests/book/books.py as the README's ``my-novel.epub``.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "tests" / "data" / "golden" / "clone_f32_qknorm" / "reference.wav"
REFERENCE_TEXT = "This is the reference voice."
NOT_HERE = ("s2studio serve", "--server", "--self-test", "s2studio cluster")  # cluster: tests/cluster


def load_fake_hub():
    spec = importlib.util.spec_from_file_location("fake_hub", pathlib.Path(__file__).parent / "fake_hub.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def readme_commands() -> list[list[str]]:
    """Every ``s2studio …`` command line in the README's ```bash blocks, continuation lines
    joined and comments dropped, as argument lists."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == ["s2studio"]:
                commands.append(words)
    return commands


def runnable(commands: list[list[str]]) -> list[list[str]]:
    kept = [c for c in commands if len(c) > 1 and not any(skip in " ".join(c) for skip in NOT_HERE)]
    # `models remove` would take the model away from the examples after it: run it last.
    return [c for c in kept if c[1:3] != ["models", "remove"]] + [c for c in kept if c[1:3] == ["models", "remove"]]


def test_the_readme_has_the_first_hour_commands():
    lines = [" ".join(c) for c in readme_commands()]
    assert lines.index("s2studio models pull q8_0") < min(i for i, c in enumerate(lines) if "synth" in c)
    for needed in ("s2studio synth", "s2studio voices add", "s2studio encode", "s2studio decode",
                   "s2studio models list", "s2studio models default"):
        assert any(line.startswith(needed) for line in lines), needed
    assert not any(" -m " in f" {line} " and "-m q" not in line for line in lines
                   if not line.startswith(("s2studio serve",))), "an example names a model file the user lacks"


@pytest.mark.slow
def test_every_readme_command_runs_as_written(tmp_path):
    fake_hub = load_fake_hub()
    hub = fake_hub.FakeHub()
    env = fake_hub.isolated_env(os.environ, hub, tmp_path / "home")
    work = tmp_path / "work"
    work.mkdir()
    for name in ("me.wav", "alice.wav"):
        shutil.copy(REFERENCE, work / name)
    from tests.book.books import make_epub

    make_epub(work / "my-novel.epub")
    ran = []
    try:
        for words in runnable(readme_commands()):
            args = words[1:]
            if args[0] in ("synth", "render"):
                args = [*args, "--max-tokens", "8", "--codec-cpu"]
            r = subprocess.run([sys.executable, "-m", "s2studio", *args], cwd=work, env=env, capture_output=True,
                               text=True, timeout=600)
            assert r.returncode == 0, (words, r.stderr[-2000:])
            assert "Traceback" not in r.stderr
            ran.append(" ".join(words))
    finally:
        hub.close()
    assert any(line.startswith("s2studio models pull") for line in ran)
    assert any((work / "my-novel-audio").glob("01-*.mp3"))  # the second render example's chapter files
    for out in ("hello.wav", "cloned.wav", "alice-hello.wav", "same.wav", "dialogue.wav", "me-codes.npy", "back.wav"):
        assert (work / out).is_file(), (out, ran)
    assert (tmp_path / "home" / "voices" / "alice.s2voice").is_file()  # named after alice.wav
    assert not (tmp_path / "home" / "models" / "s2-pro-q8_0.gguf").exists()  # the last example removed it
