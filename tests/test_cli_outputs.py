"""What the CLI writes: checked before any work, the format the name asks for, identical bytes
for identical takes, symlinks/modes/FIFOs respected, no temp files after an interruption."""

from __future__ import annotations

import os
import pathlib
import signal
import stat
import subprocess
import sys
import time

import numpy as np
import pytest
import soundfile as sf
import torch

GOLDEN = pathlib.Path(__file__).resolve().parent / "data" / "golden"
TTS = GOLDEN / "tts_f32"
CODEC = GOLDEN / "codec_roundtrip"
posix_only = pytest.mark.skipif(os.name != "posix", reason="FIFOs, signals and modes are POSIX")


def cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "s2studio", *map(str, args)], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def synth(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return cli("synth", "-m", TTS / "model.gguf", "--codec-cpu", "--log-level", "error", "--max-tokens", "2", *args,
               cwd=cwd)


def one_line_error(r: subprocess.CompletedProcess, *fragments: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for f in fragments:
        assert f in lines[0], lines[0]
    return lines[0]


def test_bad_output_paths_are_refused_before_any_work(tmp_path):
    # Each of these used to generate the whole take, then die with a traceback (exit 1).
    one_line_error(synth("-o", tmp_path / "missing" / "dir" / "out.wav"), "missing", "does not exist")
    one_line_error(synth("-o", "."), "is a folder")
    line = one_line_error(synth("-o", tmp_path / "take.xyz"), "'.xyz'", ".wav", ".flac", ".ogg")
    assert "take.xyz" in line
    one_line_error(synth("--stream-file", "-o", tmp_path / "take.flac"), "--stream-file", ".wav")
    one_line_error(synth("-o", tmp_path / "ok.wav", "--codes-out", tmp_path / "nope" / "c.npy"), "nope")
    codes = tmp_path / "c.npy"
    np.save(codes, np.zeros((10, 2), np.int32))
    one_line_error(cli("decode", codes, "-m", CODEC / "model.gguf", "-o", tmp_path / "out.xyz"), "'.xyz'")
    one_line_error(cli("encode", CODEC / "reference.wav", "-m", CODEC / "model.gguf", "-o", tmp_path), "is a folder")
    if os.name == "posix":
        fifo = tmp_path / "pipe.wav"
        os.mkfifo(fifo)
        one_line_error(synth("-o", fifo), "named pipe")
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["c.npy"] + (["pipe.wav"] if os.name == "posix" else []))


def test_output_format_follows_the_extension(tmp_path):
    from s2studio.audio import supported_output_extensions

    ext = ".mp3" if ".mp3" in supported_output_extensions() else ".ogg"
    take = tmp_path / f"take{ext}"
    r = synth("--text", "Hello.", "--max-tokens", "4", "--seed", "3", "-o", take)
    assert r.returncode == 0, r.stderr
    assert sf.info(take).format == {".mp3": "MP3", ".ogg": "OGG"}[ext]
    codes = tmp_path / "c.npy"
    np.save(codes, np.load(CODEC / "dumps" / "ref_codes.npy")[:, :4])
    r = cli("decode", codes, "-m", CODEC / "model.gguf", "-o", tmp_path / "d.flac")
    assert r.returncode == 0, r.stderr
    info = sf.info(tmp_path / "d.flac")
    assert info.format == "FLAC" and info.frames == 4 * 2048
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["c.npy", "d.flac", take.name])


@posix_only
def test_seeded_takes_are_identical_files_through_links_keeping_modes(tmp_path):
    # one thread: the samples themselves are then bit-identical run to run, so any byte that
    # differs comes from the file writer
    args = ["--text", "Again and again.", "--max-tokens", "8", "--seed", "99", "--threads", "1"]
    first = tmp_path / "first.wav"
    first.write_bytes(b"old")
    os.chmod(first, 0o600)
    assert synth(*args, "-o", first).returncode == 0
    target = tmp_path / "second.wav"
    link = tmp_path / "link.wav"
    link.symlink_to(target)
    r = synth(*args, "-o", link)
    assert r.returncode == 0, r.stderr
    assert link.is_symlink() and target.is_file()  # the link was written through, not replaced
    assert first.read_bytes() == target.read_bytes()  # no clock in the file
    assert stat.S_IMODE(os.stat(first).st_mode) == 0o600


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_encode_and_decode_refuse_a_missing_gpu_like_synth(tmp_path):
    codes = tmp_path / "c.npy"
    np.save(codes, np.zeros((10, 2), np.int32))
    enc = one_line_error(cli("encode", CODEC / "reference.wav", "-m", CODEC / "model.gguf", "--device", "cuda",
                             "-o", tmp_path / "x.npy"), "cuda:0")
    dec = one_line_error(cli("decode", codes, "-m", CODEC / "model.gguf", "--device", "cuda", "-o",
                             tmp_path / "x.wav"), "cuda:0")
    syn = one_line_error(synth("--device", "cuda", "-o", tmp_path / "y.wav"), "cuda:0")
    assert enc == dec == syn
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.npy"]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@posix_only
def test_interrupted_stream_file_leaves_no_part_files(tmp_path):
    stale = tmp_path / f".long.wav.s2-{_dead_pid()}.abcd1234.part"  # a run killed with SIGKILL
    stale.write_bytes(b"RIFF")
    unrelated = tmp_path / ".someone-elses.part"
    unrelated.write_bytes(b"keep")
    proc = subprocess.Popen([sys.executable, "-m", "s2studio", "synth", "-m", str(TTS / "model.gguf"),
                             "--codec-cpu", "--log-level", "error", "--text", "On and on.", "--max-tokens", "2000",
                             "--min-tokens-before-end", "2000", "--seed", "1", "--stream-file",
                             "-o", str(tmp_path / "long.wav")], stderr=subprocess.PIPE, text=True)
    try:
        def ours():
            return [p for p in tmp_path.iterdir() if p.name.startswith(".long.wav.s2-") and p != stale]

        deadline = time.monotonic() + 240
        while not ours() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ours(), "the stream never started"
        assert not stale.exists()  # swept when the new stream began
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == [unrelated.name]


def test_shared_options_before_and_after_the_command(tmp_path):
    vdir = tmp_path / "v"
    r = cli("--log-level", "error", "voices", "list", "--voice-dir", vdir)
    assert r.returncode == 0 and str(vdir) in r.stdout, r.stderr
    r = cli("voices", "--voice-dir", vdir, "list", "--log-level", "error")
    assert r.returncode == 0 and str(vdir) in r.stdout, r.stderr
    r = cli("--log-level", "error", "synth", "--list-voices", "--voice-dir", vdir)
    assert r.returncode == 0 and str(vdir) in r.stdout, r.stderr
    r = cli("devices", "--log-level", "error")
    assert r.returncode == 0, r.stderr
    r = cli("--voice-dir", vdir, "voices", "list")
    assert r.returncode == 0 and str(vdir) in r.stdout, r.stderr
    r = cli("--voice-dir", tmp_path / "outer", "synth", "--list-voices", "--voice-dir", vdir)
    assert r.returncode == 0 and str(vdir) in r.stdout, r.stderr
    # the innermost value wins
    r = cli("--log-level", "debug", "voices", "list", "--voice-dir", vdir, "--log-level", "error")
    assert r.returncode == 0 and "DEBUG" not in r.stderr, r.stderr
