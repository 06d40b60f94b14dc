"""Voice profiles: s2.cpp's .s2voice layout byte for byte, validation, the library folder, ids."""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest

from s2studio.errors import InputError, S2Error
from s2studio.engine.voices import (
    IncompatibleVoiceError,
    InvalidVoiceIdError,
    VoiceExistsError,
    VoiceFileError,
    VoiceLibrary,
    VoiceNotFoundError,
    VoiceProfile,
    check_compatible,
    check_existing_voice_id,
    decode_s2voice,
    encode_s2voice,
    read_s2voice,
    resolve_voice_path,
    slugify,
    validate_voice_id,
    write_s2voice,
)


def s2cpp_bytes(codes: np.ndarray, transcript: str, sample_rate=44100, codebook_size=4096) -> bytes:
    """What s2.cpp's VoiceProfile::save writes, field by field (each write is its own, so no
    padding): magic, u32 version, i32 n_cb, i32 T, i32 sr, i32 cb_size, u64 tlen, u64 csize."""
    t = transcript.encode("utf-8")
    out = b"S2VOICE\x00"
    out += struct.pack("<I", 1)
    out += struct.pack("<i", codes.shape[0])
    out += struct.pack("<i", codes.shape[1])
    out += struct.pack("<i", sample_rate)
    out += struct.pack("<i", codebook_size)
    out += struct.pack("<Q", len(t) + 1)
    out += struct.pack("<Q", codes.size * 4)
    out += t + b"\x00"
    for cb in range(codes.shape[0]):  # codebook-major: codes[cb * T + t]
        for frame in range(codes.shape[1]):
            out += struct.pack("<i", int(codes[cb, frame]))
    return out


CODES = (np.arange(10 * 7, dtype=np.int32).reshape(10, 7) * 53) % 4096
TRANSCRIPT = "Héllo, wörld — 你好"


@pytest.fixture
def s2cpp_file(tmp_path):
    path = tmp_path / "alice.s2voice"
    path.write_bytes(s2cpp_bytes(CODES, TRANSCRIPT))
    return path


# -- the file format ----------------------------------------------------------------------


def test_header_is_44_bytes_and_codes_codebook_major():
    data = s2cpp_bytes(CODES, TRANSCRIPT)
    tlen = len(TRANSCRIPT.encode()) + 1
    assert len(data) == 44 + tlen + CODES.size * 4
    first_codebook_1 = struct.unpack_from("<i", data, 44 + tlen + 4 * CODES.shape[1])[0]
    assert first_codebook_1 == CODES[1, 0]


def test_s2cpp_file_loads(s2cpp_file):
    profile = read_s2voice(s2cpp_file)
    assert profile.transcript == TRANSCRIPT
    assert profile.codes.dtype == np.int32
    np.testing.assert_array_equal(profile.codes, CODES)
    assert (profile.num_codebooks, profile.num_frames) == (10, 7)
    assert (profile.sample_rate, profile.codebook_size) == (44100, 4096)


def test_our_bytes_are_s2cpp_bytes_and_round_trip(s2cpp_file, tmp_path):
    profile = read_s2voice(s2cpp_file)
    assert encode_s2voice(profile) == s2cpp_file.read_bytes()
    out = tmp_path / "copy.s2voice"
    write_s2voice(out, profile)
    assert out.read_bytes() == s2cpp_file.read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["alice.s2voice", "copy.s2voice"]  # no temp files


def test_encode_accepts_int64_and_non_contiguous_codes():
    codes64 = np.asfortranarray(CODES.astype(np.int64))
    assert encode_s2voice(VoiceProfile(codes64, TRANSCRIPT)) == s2cpp_bytes(CODES, TRANSCRIPT)


def _corrupt(data: bytes, offset: int, fmt: str, value) -> bytes:
    b = bytearray(data)
    struct.pack_into(fmt, b, offset, value)
    return bytes(b)


GOOD = s2cpp_bytes(CODES, "hi")  # transcript_len = 3, codes at 47


@pytest.mark.parametrize(
    "data, fragment",
    [
        (b"RIFF" + GOOD[4:], "does not start with"),
        (b"S2VO", "does not start with"),
        (GOOD[:30], "truncated"),
        (_corrupt(GOOD, 8, "<I", 2), "version 2"),
        (_corrupt(GOOD, 12, "<i", 0), "number of codebooks"),
        (_corrupt(GOOD, 12, "<i", 1_000_000), "number of codebooks"),
        (_corrupt(GOOD, 16, "<i", 0), "number of frames"),
        (_corrupt(GOOD, 16, "<i", -5), "number of frames"),
        (_corrupt(GOOD, 20, "<i", 0), "sample rate"),
        (_corrupt(GOOD, 24, "<i", -1), "codebook size"),
        (_corrupt(GOOD, 28, "<Q", 0), "transcript length of 0"),
        (_corrupt(GOOD, 28, "<Q", 1 << 62), "truncated"),
        (_corrupt(GOOD, 36, "<Q", CODES.size * 4 - 4), "need 280"),
        (_corrupt(_corrupt(GOOD, 36, "<Q", 8), 16, "<i", 8), "need 320"),
        (GOOD[:-1], "truncated"),
        (GOOD[:47], "truncated"),
        (GOOD + b"\x00", "unexpected bytes"),
        (_corrupt(GOOD, 46, "<B", ord("!")), "not NUL-terminated"),
        (_corrupt(GOOD, 45, "<B", 0), "NUL byte inside"),
        (_corrupt(GOOD, 44, "<B", 0xFF), "not valid UTF-8"),
        (s2cpp_bytes(CODES, ""), "empty transcript"),
        (_corrupt(GOOD, 47, "<i", 4096), "outside [0, 4096)"),
        (_corrupt(GOOD, 47 + 4 * 8, "<i", -1), "codebook 1, frame 1"),
    ],
)
def test_every_corruption_is_a_clear_error_naming_the_file(tmp_path, data, fragment):
    path = tmp_path / "bad.s2voice"
    path.write_bytes(data)
    with pytest.raises(VoiceFileError) as err:
        read_s2voice(path)
    assert fragment in str(err.value)
    assert str(path) in str(err.value)
    assert isinstance(err.value, S2Error)


def test_missing_file_and_folder_are_clear(tmp_path):
    with pytest.raises(VoiceFileError, match="does not exist"):
        read_s2voice(tmp_path / "nope.s2voice")
    with pytest.raises(VoiceFileError, match="is a folder"):
        read_s2voice(tmp_path)


@pytest.mark.parametrize(
    "profile",
    [
        VoiceProfile(np.zeros((10, 0), np.int32), "hi"),
        VoiceProfile(np.zeros(10, np.int32), "hi"),
        VoiceProfile(np.zeros((10, 2), np.float32), "hi"),
        VoiceProfile(np.full((10, 2), 4096, np.int32), "hi"),
        VoiceProfile(np.full((10, 2), -1, np.int32), "hi"),
        VoiceProfile(CODES, ""),
        VoiceProfile(CODES, "a\x00b"),
        VoiceProfile(CODES, "bad \ud800 surrogate"),
        VoiceProfile(CODES, "hi", sample_rate=0),
    ],
)
def test_writer_refuses_what_s2cpp_could_not_use(profile):
    with pytest.raises(InputError):
        encode_s2voice(profile)


def test_compatibility_check_names_each_mismatch():
    profile = decode_s2voice(GOOD, "v.s2voice")
    check_compatible(profile, num_codebooks=10, codebook_size=4096, sample_rate=44100)
    with pytest.raises(IncompatibleVoiceError) as err:
        check_compatible(profile, num_codebooks=8, codebook_size=1024, sample_rate=44100, path="v.s2voice")
    message = str(err.value)
    assert "v.s2voice" in message and "codebooks 10 (the model needs 8)" in message
    assert "codebook size 4096 (the model needs 1024)" in message and "sample rate" not in message


# -- ids and paths ------------------------------------------------------------------------


@pytest.mark.parametrize("good", ["alice", "Alice_2", "bob-smith", "v1.2", "a", "x" * 64, "9lives", "console", "com10"])
def test_valid_new_ids(good):
    assert validate_voice_id(good) == good


@pytest.mark.parametrize(
    "bad",
    [
        "", " ", "../x", "..", ".", "a/../../etc", "/etc/passwd", "a/b", "a\\b", "..\\..\\x", "C:x", "c:\\x",
        "a\x00b", "a\nb", "a\tb", "\x7f", "a\u202eb", ".hidden", "trailing.", " lead", "trail ", "-flag", "_x",
        "CON", "con", "Con.txt", "prn", "AUX.s2voice", "nul", "NUL.tar.gz", "COM1", "com9.x", "LPT1", "lpt9",
        "x" * 65, "naïve", "名字", "a b", "a*b", "a?b", 'a"b', "a<b", "a|b", 42, None,
    ],
)
def test_invalid_new_ids(bad):
    with pytest.raises(InvalidVoiceIdError):
        validate_voice_id(bad)


def test_existing_ids_are_looser_but_still_safe():
    # s2.cpp itself accepts any stem, so a copied-in "my voice" or "naïve" must stay usable...
    for ok in ["my voice", "naïve", "名字", "_x", "-x"]:
        assert check_existing_voice_id(ok) == ok
    # ...but never anything that leaves the folder or names a device.
    for bad in ["../x", "a/b", "a\\b", "..", "C:x", "a\x00b", "CON", "lpt1.txt", " x", "x."]:
        with pytest.raises(InvalidVoiceIdError):
            check_existing_voice_id(bad)


@pytest.mark.parametrize(
    "name, slug",
    [
        ("Alice", "alice"),
        ("Dr. Émilie Dupont", "dr.-emilie-dupont"),
        ("  spaced   out  ", "spaced-out"),
        ("../../etc/passwd", "etc-passwd"),
        ("小明", "voice"),
        ("😀", "voice"),
        ("", "voice"),
        ("CON", "con-voice"),
        ("a" * 100, "a" * 64),
        ("...dots...", "dots"),
    ],
)
def test_slugify_always_gives_a_valid_id(name, slug):
    assert slugify(name) == slug
    validate_voice_id(slugify(name))


def test_resolve_voice_path_accepts_ids_and_inside_paths(tmp_path):
    (tmp_path / "alice.s2voice").write_bytes(GOOD)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "bob.s2voice").write_bytes(GOOD)
    real = tmp_path.resolve()
    assert resolve_voice_path(tmp_path, "alice") == real / "alice.s2voice"
    assert resolve_voice_path(tmp_path, "alice.s2voice") == real / "alice.s2voice"
    assert resolve_voice_path(tmp_path, "sub/bob.s2voice") == real / "sub" / "bob.s2voice"
    assert resolve_voice_path(tmp_path, str(tmp_path / "alice.s2voice")) == real / "alice.s2voice"
    with pytest.raises(VoiceNotFoundError):
        resolve_voice_path(tmp_path, "carol")
    assert resolve_voice_path(tmp_path, "carol", must_exist=False) == real / "carol.s2voice"


def test_resolve_voice_path_refuses_escapes(tmp_path):
    voices = tmp_path / "voices"
    voices.mkdir()
    outside = tmp_path / "secret.s2voice"
    outside.write_bytes(GOOD)
    (voices / "link.s2voice").symlink_to(outside)
    (voices / "dirlink").symlink_to(tmp_path)
    for value in [
        "../secret.s2voice", "../secret", str(outside), "link", "link.s2voice", "dirlink/secret.s2voice",
        "..\\secret.s2voice", "/etc/passwd", "sub/alice.wav", "", "a\x00b", "CON",
    ]:
        with pytest.raises(InvalidVoiceIdError):
            resolve_voice_path(voices, value)


# -- the library --------------------------------------------------------------------------


def _codes(seed: int, frames: int = 5) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 4096, size=(10, frames), dtype=np.int32)


def test_save_list_get(tmp_path):
    lib = VoiceLibrary(tmp_path / "voices")  # created on first save
    assert lib.list() == []
    ref = (np.sin(np.arange(44100) / 10) * 0.3).astype(np.float32)
    info = lib.save(None, _codes(1), "Hello there.", name="Zoë Example", language="en", notes="calm", reference_audio=ref)
    assert info.id == "zoe-example" and info.name == "Zoë Example"
    assert info.created.endswith("Z") and info.created[:4].isdigit()
    lib.save("bob", _codes(2, 3), "Hi.", name="bob")
    assert [v.name for v in lib.list()] == ["bob", "Zoë Example"]  # by name, case-insensitive
    voice = lib.get("zoe-example")
    np.testing.assert_array_equal(voice.codes, _codes(1))
    assert voice.transcript == "Hello there."
    assert (voice.info.language, voice.info.notes, voice.info.num_frames) == ("en", "calm", 5)
    assert voice.reference_audio == lib.folder / "zoe-example.ref.wav"
    import soundfile as sf

    clip, rate = sf.read(voice.reference_audio, dtype="float32")
    assert rate == 44100 and sf.info(voice.reference_audio).subtype == "FLOAT"
    np.testing.assert_array_equal(clip, ref)
    assert lib.get("bob").reference_audio is None
    sidecar = json.loads((lib.folder / "zoe-example.json").read_text("utf-8"))
    assert sidecar["transcript"] == "Hello there." and sidecar["name"] == "Zoë Example"
    # the .s2voice is exactly what s2.cpp would have written for these codes
    assert lib.path_for("bob").read_bytes() == s2cpp_bytes(_codes(2, 3), "Hi.")


def test_reference_clip_at_another_rate_is_stored_at_44k(tmp_path):
    lib = VoiceLibrary(tmp_path)
    lib.save("x", _codes(1), "t", name="x", reference_audio=np.full(22050, 0.25, np.float32), sample_rate=22050,
             codebook_size=4096)
    import soundfile as sf

    clip, rate = sf.read(lib.get("x").reference_audio, dtype="float32")
    assert rate == 44100 and abs(len(clip) - 44100) <= 2


def test_ids_made_unique_and_clashes_refused(tmp_path):
    lib = VoiceLibrary(tmp_path)
    assert lib.save(None, _codes(1), "t", name="Anna").id == "anna"
    assert lib.save(None, _codes(1), "t", name="Anna").id == "anna-2"
    assert lib.save(None, _codes(1), "t", name="ANNA").id == "anna-3"
    assert lib.save(None, _codes(1), "t", name="小明").id == "voice"
    assert lib.save(None, _codes(1), "t", name="小红").id == "voice-2"
    with pytest.raises(VoiceExistsError):
        lib.save("anna", _codes(2), "t", name="x")
    with pytest.raises(VoiceExistsError):
        lib.save("Anna", _codes(2), "t", name="x")  # same file on Windows and macOS
    with pytest.raises(InvalidVoiceIdError):
        lib.save("../evil", _codes(2), "t", name="x")
    assert not (tmp_path.parent / "evil.s2voice").exists()


def test_overwrite_replaces_codes_and_drops_stale_clip(tmp_path):
    lib = VoiceLibrary(tmp_path)
    created = lib.save("a", _codes(1), "one", name="A", reference_audio=np.full(4410, 0.1, np.float32)).created
    sidecar = tmp_path / "a.json"
    sidecar.write_text(sidecar.read_text("utf-8").replace(created, "2020-01-01T00:00:00Z"), "utf-8")
    lib.save("a", _codes(2), "two", name="A2", overwrite=True)
    voice = lib.get("a")
    assert voice.info.created == "2020-01-01T00:00:00Z"
    np.testing.assert_array_equal(voice.codes, _codes(2))
    assert voice.transcript == "two" and voice.info.name == "A2" and voice.reference_audio is None


def test_plain_s2voice_without_sidecar_is_listed(tmp_path, s2cpp_file):
    lib = VoiceLibrary(tmp_path)
    (tmp_path / "my voice.s2voice").write_bytes(GOOD)  # s2.cpp allows any stem
    infos = lib.list()
    assert [(v.id, v.name, v.has_sidecar, v.created) for v in infos] == [
        ("alice", "alice", False, None),
        ("my voice", "my voice", False, None),
    ]
    assert infos[0].transcript == TRANSCRIPT and infos[0].num_frames == 7
    assert lib.get("my voice").transcript == "hi"


def test_broken_files_are_listed_with_their_problem(tmp_path):
    lib = VoiceLibrary(tmp_path)
    lib.save("good", _codes(1), "t", name="Good")
    (tmp_path / "bad.s2voice").write_bytes(b"garbage")
    (tmp_path / "good.json").write_text("{not json", "utf-8")  # damaged sidecar: metadata lost only
    infos = {v.id: v for v in lib.list()}
    assert "does not start with" in infos["bad"].problem and str(tmp_path / "bad.s2voice") in infos["bad"].problem
    assert infos["good"].problem is None and infos["good"].name == "good"
    with pytest.raises(VoiceFileError):
        lib.get("bad")


def test_rename_changes_display_name_only(tmp_path, s2cpp_file):
    lib = VoiceLibrary(tmp_path)
    lib.save("bob", _codes(1), "t", name="Bob", language="fr")
    before = lib.path_for("bob").read_bytes()
    info = lib.rename("bob", "Robert")
    assert (info.id, info.name, info.language) == ("bob", "Robert", "fr")
    assert lib.path_for("bob").read_bytes() == before
    # a plain s2.cpp file gains a sidecar; its .s2voice is untouched
    assert lib.rename("alice", "Alice A.").name == "Alice A."
    assert lib.get("alice").info.name == "Alice A."
    assert s2cpp_file.read_bytes() == s2cpp_bytes(CODES, TRANSCRIPT)
    with pytest.raises(InputError):
        lib.rename("bob", "   ")
    with pytest.raises(VoiceNotFoundError):
        lib.rename("nobody", "x")


def test_delete_removes_every_file(tmp_path):
    lib = VoiceLibrary(tmp_path)
    lib.save("a", _codes(1), "t", name="A", reference_audio=np.full(4410, 0.1, np.float32))
    lib.save("b", _codes(1), "t", name="B")
    lib.delete("a")
    assert sorted(os.listdir(tmp_path)) == ["b.json", "b.s2voice"]
    with pytest.raises(VoiceNotFoundError, match="'a'"):
        lib.delete("a")
    with pytest.raises(VoiceNotFoundError):
        lib.get("a")
    with pytest.raises(InvalidVoiceIdError):
        lib.delete("../b")


def test_writes_are_atomic_and_leave_no_temp_files(tmp_path, monkeypatch):
    lib = VoiceLibrary(tmp_path)
    lib.save("a", _codes(1), "first", name="A")
    before = {n: (tmp_path / n).read_bytes() for n in os.listdir(tmp_path)}

    def failing_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError):
        lib.save("a", _codes(2), "second", name="A2", overwrite=True)
    monkeypatch.undo()
    after = {n: (tmp_path / n).read_bytes() for n in os.listdir(tmp_path)}
    assert after == before  # old voice intact, no ".a.s2voice.xxx.part" left behind
    lib.save("a", _codes(2), "second", name="A2", overwrite=True)
    assert sorted(os.listdir(tmp_path)) == ["a.json", "a.s2voice"]


def test_invalid_codes_write_nothing(tmp_path):
    lib = VoiceLibrary(tmp_path / "v")
    with pytest.raises(InputError):
        lib.save("a", np.full((10, 3), 5000, np.int32), "t", name="A")
    with pytest.raises(InputError):
        lib.save("a", _codes(1), "  ", name="A")
    assert not (tmp_path / "v").exists()


def test_default_folder_is_per_user(monkeypatch, tmp_path):
    import platformdirs

    monkeypatch.setattr(platformdirs, "user_data_dir", lambda *a, **k: str(tmp_path / "data"))
    assert VoiceLibrary().folder == tmp_path / "data" / "voices"


# -- size limits ----------------------------------------------------------------------------


def test_a_voice_longer_than_60_seconds_is_refused_naming_the_file(tmp_path):
    """A 20 000-frame (~15 min) .s2voice once loaded fine and then exhausted memory as a prompt."""
    from s2studio.engine.limits import MAX_REFERENCE_FRAMES
    from s2studio.engine.voices import VoiceFileError, read_s2voice

    assert MAX_REFERENCE_FRAMES == 1292  # 60 s at 44 100 Hz, 2048 samples per frame
    long = tmp_path / "podcast.s2voice"
    long.write_bytes(s2cpp_bytes(np.zeros((10, 20_000), np.int32), "a very long reference"))
    with pytest.raises(VoiceFileError, match=r"podcast\.s2voice.*20000 frames.*at most 1292"):
        read_s2voice(long)
    longest_ok = tmp_path / "ok.s2voice"
    longest_ok.write_bytes(s2cpp_bytes(np.zeros((10, MAX_REFERENCE_FRAMES), np.int32), "just fits"))
    assert read_s2voice(longest_ok).num_frames == MAX_REFERENCE_FRAMES
    with pytest.raises(InputError, match="1293 frames"):
        encode_s2voice(VoiceProfile(np.zeros((10, MAX_REFERENCE_FRAMES + 1), np.int32), "too long"))
