"""What the terminal shows, for every command: one-line argument errors, quiet logging, and a
progress bar that log lines never run into (synth in a pseudo-terminal, as a person sees it)."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

TTS = pathlib.Path(__file__).resolve().parent / "data" / "golden" / "tts_f32"


def s2(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "s2studio", *map(str, args)], capture_output=True, text=True,
                          timeout=300, **kw)


@pytest.mark.parametrize("args, fragment", [
    (("synth", "--max-tokens", "0"), "--max-tokens"),
    (("synth", "--seed", "-1"), "--seed"),
    (("synth", "--temp", "9"), "--temp"),
    (("synth", "--no-such-flag"), "unrecognized arguments: --no-such-flag"),
    (("synth", "--device"), "expected one argument"),
    (("serve", "--port", "70000"), "--port"),
    (("voices", "add", "x.wav"), "--text"),
    (("models", "pull"), "VARIANT"),
    (("models", "frobnicate"), "invalid choice"),
    (("encode",), "required"),
    (("nonsense",), "invalid choice"),
    (("--log-level", "loud", "synth"), "--log-level"),
])
def test_every_argument_error_is_one_line_and_exit_2(args, fragment):
    r = s2(*args)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], r.stderr
    assert "usage:" not in r.stderr and r.stdout == ""


def test_help_still_shows_the_usage():
    r = s2("synth", "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: s2studio synth") and "--verbose" in r.stdout


def test_default_is_quiet_and_verbose_shows_the_engine(tmp_path):
    base = ("synth", "-m", TTS / "model.gguf", "--codec-cpu", "--text", "Hi.", "--max-tokens", "2")
    quiet = s2(*base, "-o", tmp_path / "a.wav")
    assert quiet.returncode == 0, quiet.stderr
    lines = quiet.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"wrote {tmp_path / 'a.wav'}"), quiet.stderr  # the summary
    verbose = s2(*base, "--verbose", "-o", tmp_path / "b.wav")
    assert verbose.returncode == 0 and "INFO s2studio" in verbose.stderr and "[Metrics]" in verbose.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_progress_bar_and_log_lines_never_share_a_line(tmp_path):
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a 120-column terminal
    out = tmp_path / "p.wav"
    proc = subprocess.Popen([sys.executable, "-m", "s2studio", "synth", "-m", str(TTS / "model.gguf"), "--codec-cpu",
                             "--text", "First sentence here. And a second one.", "--segment-sentences",
                             "--max-tokens", "24", "--min-tokens-before-end", "24", "--verbose", "-o", str(out)],
                            stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=dict(os.environ, COLUMNS="100"))
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=300) == 0
    text = b"".join(chunks).decode("utf-8", errors="replace")
    pieces = [p.strip() for p in re.split(r"[\r\n]", re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)) if p.strip()]
    bars = [p for p in pieces if re.search(r"segment \d/2: +\d+%\|.*\| \d+/\d+ \[\d\d:\d\d<\d\d:\d\d", p)]
    assert bars, text  # percent, frames, elapsed < time left
    logs = [p for p in pieces if "INFO s2studio" in p]
    assert logs and all(p.startswith("INFO s2studio") for p in logs), text  # each log line on its own line
    assert pieces[-1].startswith(f"wrote {out}"), text
