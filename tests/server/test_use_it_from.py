"""docs/server.md's "Use it from…" section, run as written (but for the port) against a real
server: its Python snippets (the OpenAI and Fish Audio SDKs) and its curl commands."""

from __future__ import annotations

import pathlib
import re
import shlex
import shutil
import subprocess

import pytest

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "server.md"


def section() -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("## Use it from…")
    return text[start:text.index("\n## ", start + 3)]


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", section(), flags=re.S)


def curl_commands() -> list[str]:
    commands, current = [], ""
    for line in blocks("bash")[0].splitlines():
        if line.startswith("#") or not line.strip():
            continue
        current += line.rstrip("\\").strip() + " "
        if not line.endswith("\\"):
            commands.append(current.strip())
            current = ""
    return commands


@pytest.fixture
def doc_server(start_server, voice_dir, api, monkeypatch):
    """A server with the section's settings (tiny takes), in a folder with reference.wav."""
    from s2studio.server.voice_map import VoiceMap

    server = start_server(max_new_tokens_limit=6, voice_map=VoiceMap(entries=(("alloy", "hope"),), default="hope"))
    work = voice_dir.parent / f"client-{server.port}"
    work.mkdir()
    shutil.copy(api.reference, work / "reference.wav")
    monkeypatch.chdir(work)
    yield server, work
    for extra in ("anna",):  # what the curl commands saved
        for path in voice_dir.glob(f"{extra}.*"):
            path.unlink()


@pytest.mark.parametrize("index", range(2), ids=["openai-sdk", "fish-sdk"])
def test_python_snippets_run(doc_server, index):
    server, _ = doc_server
    code = blocks("python")[index].replace("127.0.0.1:3030", f"127.0.0.1:{server.port}")
    exec(compile(code, f"docs/server.md python block {index}", "exec"), {})  # noqa: S102 (our own docs)


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_commands_run(doc_server):
    server, work = doc_server
    commands = curl_commands()
    assert len(commands) == 5
    outputs = []
    for command in commands:
        args = shlex.split(command.replace("127.0.0.1:3030", f"127.0.0.1:{server.port}"))[1:]
        done = subprocess.run(["curl", "-sS", "--max-time", "60", "-w", "\n%{http_code}", *args],
                              capture_output=True, text=True, timeout=90)
        assert done.returncode == 0, done.stderr
        body, status = done.stdout.rsplit("\n", 1)
        assert status == "200", (command, body[:300])
        outputs.append(body)
    assert (work / "speech.mp3").read_bytes()[:3] in (b"ID3", b"\xff\xfb", b"\xff\xf3", b"\xff\xf2")
    assert (work / "speech.ogg").read_bytes()[:4] == b"OggS"
    assert '"tts-1"' in outputs[1]
    assert '"reference_id":"anna"' in outputs[3].replace(" ", "")
    assert '"anna"' in outputs[4]
