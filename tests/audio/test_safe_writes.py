"""Output files: written through symlinks, never over devices/FIFOs/sockets, mode kept, the
format the extension names, the same bytes for the same samples, no temp files left behind."""

from __future__ import annotations

import io
import os
import socket
import stat
import subprocess
import sys
import time

import numpy as np
import pytest
import soundfile as sf

from s2studio import audio
from s2studio.audio.atomic_file import (
    OutputPathError,
    UnreadableFileError,
    atomic_output,
    check_output_path,
    read_regular_file,
    remove_stale_temp_files,
)

posix_only = pytest.mark.skipif(os.name != "posix", reason="FIFOs, sockets and modes are POSIX")

TONE = (np.sin(np.arange(22050) / 7.0) * 0.4).astype(np.float32)


def names(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# ------------------------------------------------------------------------------ symlinks, kinds, modes


@posix_only
def test_symlink_is_written_through_to_its_target(tmp_path):
    target_dir = tmp_path / "real"
    target_dir.mkdir()
    target = target_dir / "take.wav"
    target.write_bytes(b"old")
    link = tmp_path / "link.wav"
    link.symlink_to(target)
    audio.write_wav(link, TONE)
    assert link.is_symlink() and os.readlink(link) == str(target)
    np.testing.assert_array_equal(sf.read(target, dtype="float32")[0], TONE)
    assert names(tmp_path) == ["link.wav", "real"] and names(target_dir) == ["take.wav"]


@posix_only
def test_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "link.wav"
    link.symlink_to(tmp_path / "new.wav")
    with atomic_output(str(link)) as fh:
        fh.write(b"data")
    assert link.is_symlink() and (tmp_path / "new.wav").read_bytes() == b"data"


@posix_only
def test_fifo_and_socket_are_refused_not_replaced(tmp_path):
    fifo = tmp_path / "pipe.wav"
    os.mkfifo(fifo)
    with pytest.raises(OutputPathError, match="named pipe"):
        audio.write_wav(fifo, TONE)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    sock_path = tmp_path / "s.wav"
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(sock_path))
        with pytest.raises(OutputPathError, match="socket"):
            with atomic_output(str(sock_path)) as fh:
                fh.write(b"x")
        assert stat.S_ISSOCK(os.lstat(sock_path).st_mode)
    finally:
        sock.close()
    with pytest.raises(OutputPathError, match="named pipe"):
        check_output_path(fifo)
    assert names(tmp_path) == ["pipe.wav", "s.wav"]  # no temp files


@posix_only
def test_device_is_refused_by_the_check_and_the_writer():
    # Only the check runs here: old code would have replaced /dev/null when run as root.
    with pytest.raises(OutputPathError, match="device"):
        check_output_path("/dev/null")
    with pytest.raises(OutputPathError, match="device"):
        audio.atomic_file.resolve_output_path("/dev/null")


@posix_only
def test_existing_file_keeps_its_mode(tmp_path):
    path = tmp_path / "private.wav"
    path.write_bytes(b"old")
    os.chmod(path, 0o600)
    old = os.umask(0o022)
    try:
        audio.write_wav(path, TONE)
        with atomic_output(str(path)) as fh:
            fh.write(b"again")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_check_output_path_messages(tmp_path):
    with pytest.raises(OutputPathError, match="does not exist"):
        check_output_path(tmp_path / "missing" / "dir" / "out.wav")
    with pytest.raises(OutputPathError, match="is a folder"):
        check_output_path(tmp_path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputPathError, match="is not a folder"):
        check_output_path(tmp_path / "file" / "out.wav")
    assert check_output_path(tmp_path / "ok.wav") == os.path.realpath(tmp_path / "ok.wav")
    assert names(tmp_path) == ["file"]  # the write probe left nothing


@posix_only
@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root may write anywhere")
def test_check_output_path_unwritable_folder(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    os.chmod(locked, 0o500)
    try:
        with pytest.raises(OutputPathError, match="cannot create files"):
            check_output_path(locked / "out.wav")
    finally:
        os.chmod(locked, 0o700)


# ------------------------------------------------------------------------------ formats


@pytest.mark.parametrize("ext, fmt", [(".wav", "WAV"), (".flac", "FLAC"), (".ogg", "OGG"), (".mp3", "MP3")])
def test_the_extension_names_the_format(tmp_path, ext, fmt):
    if ext not in audio.supported_output_extensions():
        pytest.skip(f"this libsndfile cannot write {fmt}")
    path = tmp_path / f"take{ext}"
    audio.write_audio_file(path, TONE, 44100)
    info = sf.info(path)
    assert info.format == fmt and info.samplerate == 44100 and info.channels == 1
    if fmt in ("WAV", "FLAC"):
        np.testing.assert_allclose(sf.read(path, dtype="float32")[0], TONE, atol=1e-6)
    assert names(tmp_path) == [path.name]


def test_unknown_extension_is_refused_with_the_list(tmp_path):
    for name in ("take.xyz", "take"):
        with pytest.raises(OutputPathError) as err:
            audio.write_audio_file(tmp_path / name, TONE)
        assert ".wav" in str(err.value) and ".flac" in str(err.value)
    assert names(tmp_path) == []


# ------------------------------------------------------------------------------ same samples, same bytes


@pytest.mark.parametrize("ext", [".wav", ".flac", ".ogg", ".mp3"])
def test_same_samples_give_the_same_bytes(tmp_path, ext):
    if ext not in audio.supported_output_extensions():
        pytest.skip("format not available")
    audio.write_audio_file(tmp_path / f"a{ext}", TONE)
    # libsndfile's PEAK time stamp has one-second resolution: cross a second boundary
    second = int(time.time())
    while int(time.time()) == second:
        time.sleep(0.05)
    audio.write_audio_file(tmp_path / f"b{ext}", TONE)
    assert (tmp_path / f"a{ext}").read_bytes() == (tmp_path / f"b{ext}").read_bytes()


def test_wav_bytes_carry_no_clock():
    first = audio.wav_bytes(TONE)
    second = int(time.time())
    while int(time.time()) == second:
        time.sleep(0.05)
    assert audio.wav_bytes(TONE) == first
    np.testing.assert_array_equal(sf.read(io.BytesIO(first), dtype="float32")[0], TONE)


# ------------------------------------------------------------------------------ temp files


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@posix_only
def test_stale_temp_files_of_dead_writers_are_removed_others_kept(tmp_path):
    dead = _dead_pid()
    stale = tmp_path / f".out.wav.s2-{dead}.abcd1234.part"
    live = tmp_path / f".other.wav.s2-{os.getpid()}.abcd1234.part"
    foreign = tmp_path / ".notes.txt.part"
    for p in (stale, live, foreign):
        p.write_bytes(b"x")
    audio.write_wav(tmp_path / "next.wav", TONE)  # any write in the folder sweeps it
    assert names(tmp_path) == sorted([live.name, foreign.name, "next.wav"])
    assert remove_stale_temp_files(tmp_path) == []


@posix_only
def test_streaming_writer_sweeps_stale_parts_and_aborts_cleanly(tmp_path):
    stale = tmp_path / f".take.wav.s2-{_dead_pid()}.zz99yy88.part"
    stale.write_bytes(b"RIFF")
    writer = audio.StreamingWavWriter(tmp_path / "take.wav")
    writer.write(TONE)
    assert not stale.exists()
    writer.abort()
    assert names(tmp_path) == []


# ------------------------------------------------------------------------------ reading


@posix_only
def test_read_regular_file_refuses_fifo_and_large_files_without_reading(tmp_path):
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    with pytest.raises(UnreadableFileError, match="named pipe"):
        read_regular_file(fifo, 100)  # would block forever if it were opened for reading
    sparse = tmp_path / "big"
    with open(sparse, "wb") as fh:
        fh.truncate(20 << 30)  # 20 GB, sparse: costs nothing on disk
    with pytest.raises(UnreadableFileError, match="larger than"):
        read_regular_file(sparse, 1 << 20)
    (tmp_path / "ok").write_bytes(b"hello")
    assert read_regular_file(tmp_path / "ok", 5) == b"hello"
