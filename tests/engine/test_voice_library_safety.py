"""The voice library never loses or mixes a voice: a replace is one unit (a full disk or a
kill -9 part-way leaves the old voice or the new one, never half of each), leftovers are swept
at start, ids ignore case, and only bounded regular files are read."""

from __future__ import annotations

import errno
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from s2studio.engine.voices import VoiceFileError, VoiceLibrary, read_s2voice, resolve_voice_path

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX process ids and sparse files")


def _codes(seed: int, frames: int = 5) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 4096, size=(10, frames), dtype=np.int32)


def _clip(level: float) -> np.ndarray:
    return np.full(4410, level, np.float32)


def _snapshot(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _save_old(lib: VoiceLibrary, voice_id: str = "alice"):
    return lib.save(voice_id, _codes(1), "old words", name="Old", reference_audio=_clip(0.1))


def _assert_one_generation(lib: VoiceLibrary, voice_id: str = "alice") -> str:
    """The voice is wholly old or wholly new; returns which."""
    voice = lib.get(voice_id)
    clip = sf.read(voice.reference_audio, dtype="float32")[0] if voice.reference_audio else None
    meta = json.loads((lib.folder / f"{voice.id}.json").read_text("utf-8"))
    old = (np.array_equal(voice.codes, _codes(1)), voice.transcript == "old words", voice.info.name == "Old",
           meta["transcript"] == "old words", clip is not None and np.allclose(clip, 0.1))
    new = (np.array_equal(voice.codes, _codes(2)), voice.transcript == "new words", voice.info.name == "New",
           meta["transcript"] == "new words", clip is not None and np.allclose(clip, 0.2))
    assert all(old) or all(new), f"a mix of two generations: old {old}, new {new}"
    return "old" if all(old) else "new"


class _DiskFull:
    """os.fsync that fails from the n-th call on, like a disk filling up mid-save."""

    def __init__(self, monkeypatch, fail_from: int):
        self.calls, self.fail_from, self.real = 0, fail_from, os.fsync
        monkeypatch.setattr(os, "fsync", self)

    def __call__(self, fd):
        self.calls += 1
        if self.calls >= self.fail_from:
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.real(fd)


@pytest.mark.parametrize("new_id", ["alice", "ALICE"])
def test_disk_full_during_overwrite_keeps_the_old_voice_whole(tmp_path, monkeypatch, new_id):
    lib = VoiceLibrary(tmp_path)
    _save_old(lib)
    before = _snapshot(tmp_path)
    _DiskFull(monkeypatch, fail_from=2)  # the clip gets written, the next file does not
    with pytest.raises(OSError, match="No space"):
        lib.save(new_id, _codes(2), "new words", name="New", reference_audio=_clip(0.2), overwrite=True)
    monkeypatch.undo()
    assert _snapshot(tmp_path) == before  # nothing deleted, nothing half-replaced, no temp files
    assert _assert_one_generation(VoiceLibrary(tmp_path)) == "old"


class _Killed(BaseException):
    """Stands for kill -9: nothing after it runs, no cleanup."""


@pytest.mark.parametrize("renames_before_kill", [0, 1, 2, 3])
def test_kill_between_renames_is_finished_at_the_next_start(tmp_path, monkeypatch, renames_before_kill):
    lib = VoiceLibrary(tmp_path)
    _save_old(lib)
    real_replace, done = os.replace, []

    def replace_then_die(src, dst):
        if len(done) == renames_before_kill:
            raise _Killed
        done.append(dst)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace_then_die)
    with pytest.raises(_Killed):
        lib.save("alice", _codes(2), "new words", name="New", reference_audio=_clip(0.2), overwrite=True)
    monkeypatch.undo()
    restarted = VoiceLibrary(tmp_path)
    assert _assert_one_generation(restarted) in ("old", "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alice.json", "alice.ref.wav", "alice.s2voice"]


def test_a_sidecar_of_another_generation_is_not_trusted(tmp_path):
    lib = VoiceLibrary(tmp_path)
    _save_old(lib)
    lib.save("bob", _codes(2), "bob words", name="Bob")
    # as if a reader caught alice's .s2voice mid-replace: the sidecar was written for other codes
    (tmp_path / "alice.s2voice").write_bytes((tmp_path / "bob.s2voice").read_bytes())
    info = lib.get("alice").info
    assert info.name == "alice" and info.transcript == "bob words" and not info.has_sidecar


@posix_only
def test_leftovers_are_swept_at_start_and_nothing_else(tmp_path):
    lib = VoiceLibrary(tmp_path)
    lib.save("keep", _codes(1), "t", name="Keep")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    # an interrupted delete: the .s2voice went first, its sidecar and clip stayed
    (tmp_path / "gone.json").write_text(json.dumps({"format": "s2studio-voice", "name": "Gone"}), "utf-8")
    (tmp_path / "gone.ref.wav").write_bytes(b"RIFF")
    # a save killed before its commit record: staged files of a dead process
    (tmp_path / f".new.s2voice.s2stage-{dead.pid}.abcd1234.part").write_bytes(b"x")
    (tmp_path / f".new.json.s2stage-{dead.pid}.abcd1234.part").write_bytes(b"x")
    # an atomic write killed half-way
    (tmp_path / f".keep.json.s2-{dead.pid}.abcd1234.part").write_bytes(b"x")
    # not ours: kept
    (tmp_path / "notes.json").write_text('{"mine": true}', "utf-8")
    (tmp_path / "README.txt").write_text("hello", "utf-8")
    (tmp_path / f".other.s2voice.s2stage-{os.getpid()}.abcd1234.part").write_bytes(b"x")  # a live writer
    VoiceLibrary(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([
        "keep.json", "keep.s2voice", "notes.json", "README.txt", f".other.s2voice.s2stage-{os.getpid()}.abcd1234.part"])


def test_ids_that_differ_only_in_case_are_one_voice(tmp_path):
    lib = VoiceLibrary(tmp_path)
    lib.save("alice", _codes(1), "t", name="Alice")
    assert lib.exists("ALICE") and lib.get("ALICE").id == "alice"
    assert lib.path_for("ALICE") == tmp_path / "alice.s2voice"  # what callers open after exists()
    assert resolve_voice_path(tmp_path, "Alice") == (tmp_path / "alice.s2voice").resolve()
    info = lib.save("Alice", _codes(2), "u", name="A2", overwrite=True)
    assert info.id == "alice"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alice.json", "alice.s2voice"]
    np.testing.assert_array_equal(lib.get("alice").codes, _codes(2))
    lib.delete("ALICE")
    assert list(tmp_path.iterdir()) == []


def _header(transcript_len: int, frames: int, n_cb: int = 10) -> bytes:
    return struct.pack("<8sIiiiiQQ", b"S2VOICE\0", 1, n_cb, frames, 44100, 4096, transcript_len, 4 * n_cb * frames)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sparse files; reads VmHWM from /proc")
def test_huge_and_sparse_files_are_refused_unread(tmp_path):
    # the header announces a small voice; the file is 1 GiB (sparse): refused by its size alone
    big = tmp_path / "big.s2voice"
    with open(big, "wb") as fh:
        fh.write(_header(3, 2) + b"hi\0")
        fh.truncate(1 << 30)
    # a header announcing an absurd transcript, and a file really that long
    absurd = tmp_path / "absurd.s2voice"
    with open(absurd, "wb") as fh:
        fh.write(_header(1 << 40, 2))
        fh.truncate(44 + (1 << 40) + 80)
    code = (
        "import sys\n"
        "from s2studio.engine.voices import read_s2voice, VoiceFileError\n"
        "for p in sys.argv[1:]:\n"
        "    try:\n"
        "        read_s2voice(p)\n"
        "    except VoiceFileError as e:\n"
        "        print(e)\n"
        # VmHWM, not ru_maxrss: that starts at the parent's (pytest's) peak, through fork and exec
        "print(next(l for l in open('/proc/self/status') if l.startswith('VmHWM:')).split()[1])\n"
    )
    r = subprocess.run([sys.executable, "-c", code, str(big), str(absurd)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "unexpected bytes" in lines[0] and "big.s2voice" in lines[0]
    assert "at most" in lines[1] and "absurd.s2voice" in lines[1]
    assert int(lines[2]) < 400 * 1024, "peak memory in KiB: the file was read"


def test_a_good_file_still_reads(tmp_path):
    path = tmp_path / "ok.s2voice"
    codes = _codes(3, 2)
    path.write_bytes(_header(3, 2) + b"hi\0" + codes.astype("<i4").tobytes())
    assert read_s2voice(path).transcript == "hi"
    path.write_bytes(_header(3, 2) + b"hi\0")
    with pytest.raises(VoiceFileError, match="truncated"):
        read_s2voice(path)


@posix_only
def test_a_symlinked_voice_is_replaced_at_its_target_and_a_pipe_is_refused(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    lib = VoiceLibrary(tmp_path / "lib")
    lib.save("alice", _codes(1), "old words", name="Old")
    os.replace(lib.folder / "alice.s2voice", store / "alice.s2voice")
    (lib.folder / "alice.s2voice").symlink_to(store / "alice.s2voice")
    os.chmod(store / "alice.s2voice", 0o600)
    lib.save("alice", _codes(2), "new words", name="New", overwrite=True)
    assert (lib.folder / "alice.s2voice").is_symlink()
    assert read_s2voice(store / "alice.s2voice").transcript == "new words"
    assert os.stat(store / "alice.s2voice").st_mode & 0o777 == 0o600
    assert sorted(p.name for p in store.iterdir()) == ["alice.s2voice"]
    os.mkfifo(lib.folder / "bob.json")
    from s2studio.audio.atomic_file import OutputPathError

    with pytest.raises(OutputPathError, match="named pipe"):
        lib.save("bob", _codes(3), "bob", name="Bob")
    assert sorted(p.name for p in lib.folder.iterdir()) == ["alice.json", "alice.s2voice", "bob.json"]


def test_a_foreign_commit_record_is_ignored(tmp_path):
    lib = VoiceLibrary(tmp_path)
    lib.save("alice", _codes(1), "t", name="A")
    victim = tmp_path.parent / f"{tmp_path.name}-victim.txt"
    victim.write_text("keep")
    (tmp_path / ".evil.commit.json").write_text(json.dumps(
        {"id": "evil", "moves": [[str(tmp_path / "alice.s2voice"), str(victim)]], "remove": ["../x", "alice.s2voice"]}))
    VoiceLibrary(tmp_path)
    assert victim.read_text() == "keep" and (tmp_path / "alice.s2voice").is_file()
    assert not (tmp_path / ".evil.commit.json").exists()
