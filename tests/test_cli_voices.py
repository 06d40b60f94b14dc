"""Voices from the command line: clone, save, list, reuse; the library commands; devices."""

from __future__ import annotations

import pathlib
import struct
import subprocess
import sys

import numpy as np
import soundfile as sf

GOLDEN = pathlib.Path(__file__).resolve().parent / "data" / "golden"
CLONE = GOLDEN / "clone_f32_qknorm"
MODEL = str(CLONE / "model.gguf")
TEXT = "This is the reference voice."


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "s2studio", *args], capture_output=True, text=True, timeout=300)


def test_clone_save_list_and_reuse_gives_identical_audio(tmp_path):
    vdir = tmp_path / "voices"
    common = ["synth", "-m", MODEL, "--codec-cpu", "--voice-dir", str(vdir), "--text", "Say it again.",
              "--max-tokens", "10", "--seed", "77", "--log-level", "error"]
    r1 = cli(*common, "-pa", str(CLONE / "reference.wav"), "-pt", TEXT, "--voice", "golden", "--save-voice",
             "-o", str(tmp_path / "first.wav"))
    assert r1.returncode == 0, r1.stderr
    listed = cli("voices", "--voice-dir", str(vdir), "list")
    assert listed.returncode == 0 and listed.stdout.split()[0] == "golden"
    r2 = cli(*common, "--voice", "golden", "-o", str(tmp_path / "second.wav"))
    assert r2.returncode == 0, r2.stderr
    a, b = sf.read(tmp_path / "first.wav")[0], sf.read(tmp_path / "second.wav")[0]
    np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
    # The saved profile has s2.cpp's byte layout (docs/spec/engine.md §8.2).
    data = (vdir / "golden.s2voice").read_bytes()
    magic, version, n_cb, frames, rate, cb_size, t_len, c_size = struct.unpack_from("<8sIiiiiQQ", data, 0)
    assert magic == b"S2VOICE\0" and version == 1 and n_cb == 10 and rate == 44100 and cb_size == 128
    assert data[44:44 + t_len] == TEXT.encode() + b"\0" and c_size == 4 * n_cb * frames
    assert len(data) == 44 + t_len + c_size
    codes = np.frombuffer(data, dtype="<i4", offset=44 + t_len).reshape(n_cb, frames)
    assert frames == 44 and (codes == np.load(CLONE / "dumps" / "ref_codes.npy")).mean() >= 0.95
    assert (vdir / "golden.ref.wav").is_file() and (vdir / "golden.json").is_file()


def test_voices_commands(tmp_path):
    vdir = str(tmp_path / "v")
    add = cli("voices", "--voice-dir", vdir, "add", str(CLONE / "reference.wav"), "--text", TEXT,
              "--name", "Ref Voice", "-m", MODEL, "--codec-cpu")
    assert add.returncode == 0, add.stderr
    assert "ref-voice" in add.stdout
    show = cli("voices", "--voice-dir", vdir, "show", "ref-voice")
    assert show.returncode == 0 and "Ref Voice" in show.stdout and TEXT in show.stdout
    out = tmp_path / "exported.s2voice"
    assert cli("voices", "--voice-dir", vdir, "export", "ref-voice", "-o", str(out)).returncode == 0
    assert out.read_bytes() == (tmp_path / "v" / "ref-voice.s2voice").read_bytes()
    imp = cli("voices", "--voice-dir", vdir, "import", str(out), "--id", "copy")
    assert imp.returncode == 0, imp.stderr
    assert cli("voices", "--voice-dir", vdir, "remove", "ref-voice").returncode == 0
    listed = cli("voices", "--voice-dir", vdir, "list").stdout
    assert "copy" in listed and "ref-voice" not in listed
    missing = cli("voices", "--voice-dir", vdir, "show", "nope")
    assert missing.returncode == 2 and missing.stderr.startswith("error:") and "nope" in missing.stderr
    bad = cli("voices", "--voice-dir", vdir, "import", str(CLONE / "reference.wav"))
    assert bad.returncode == 2 and "reference.wav" in bad.stderr
    traversal = cli("voices", "--voice-dir", vdir, "remove", "../escape")
    assert traversal.returncode == 2 and "Traceback" not in traversal.stderr


def test_import_refuses_a_voice_longer_than_60_seconds(tmp_path):
    """``voices import`` used to accept a 20 000-frame profile, which then OOM-killed synth."""
    text = b"long one"
    header = struct.pack("<8sIiiiiQQ", b"S2VOICE\0", 1, 10, 20_000, 44100, 4096, len(text) + 1, 4 * 10 * 20_000)
    big = tmp_path / "long.s2voice"
    big.write_bytes(header + text + b"\0" + bytes(4 * 10 * 20_000))
    r = cli("voices", "--voice-dir", str(tmp_path / "v"), "import", str(big))
    assert r.returncode == 2 and "long.s2voice" in r.stderr and "at most 1292 frames" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not list((tmp_path / "v").glob("*.s2voice"))  # nothing imported


def test_devices_lists_the_cpu():
    r = cli("devices")
    assert r.returncode == 0 and r.stdout.splitlines()[0].split()[0] == "cpu"


def test_save_voice_needs_an_id_and_audio(tmp_path):
    r = cli("synth", "-m", MODEL, "--save-voice", "-o", str(tmp_path / "x.wav"))
    assert r.returncode == 2 and "--voice" in r.stderr


def test_voice_dir_after_the_action_and_overwrite_by_other_case(tmp_path):
    vdir = tmp_path / "lib"
    add = cli("voices", "add", str(CLONE / "reference.wav"), "--text", TEXT, "--id", "alice", "-m", MODEL,
              "--codec-cpu", "--voice-dir", str(vdir), "--log-level", "error")
    assert add.returncode == 0, add.stderr
    assert (vdir / "alice.s2voice").is_file()
    # "ALICE" is the same voice: found, and replaced in place rather than duplicated
    show = cli("voices", "show", "ALICE", "--voice-dir", str(vdir))
    assert show.returncode == 0 and "alice" in show.stdout, show.stderr
    again = cli("voices", "import", str(vdir / "alice.s2voice"), "--id", "Alice", "--overwrite", "--name", "Al",
                "--voice-dir", str(vdir))
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in vdir.iterdir()) == ["alice.json", "alice.s2voice"]


def test_a_fifo_in_the_voice_folder_does_not_hang_the_list(tmp_path):
    import os

    if os.name != "posix":
        return
    vdir = tmp_path / "v"
    vdir.mkdir()
    os.mkfifo(vdir / "x.s2voice")
    os.mkfifo(vdir / "y.json")
    (vdir / "y.s2voice").write_bytes(struct.pack("<8sIiiiiQQ", b"S2VOICE\0", 1, 10, 1, 44100, 128, 3, 40)
                                     + b"hi\0" + bytes(40))
    listed = subprocess.run([sys.executable, "-m", "s2studio", "voices", "list", "--voice-dir", str(vdir)],
                            capture_output=True, text=True, timeout=60)  # old code: blocked in open() forever
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert any(line.startswith("x ") and "not a regular file" in line for line in lines), listed.stdout
    assert any(line.startswith("y ") and "'hi'" in line for line in lines), listed.stdout
