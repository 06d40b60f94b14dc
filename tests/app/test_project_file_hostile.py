"""Project files made by someone else (issue 24): every field is held to the stated schema
(s2studio/app/project_schema.py), each failure is the one ProjectFileError the app shows as a
banner, memory is bounded before decoding, and nothing is ever written outside the project."""

from __future__ import annotations

import json
import tracemalloc
import zipfile

import numpy as np
import pytest

from s2studio.app.project import Project, ProjectTake, Sentence, SentenceVersion
from s2studio.app.project_file import ProjectFileError, load_project_file, load_project_folder, save_project_folder
from s2studio.app.project_schema import MAX_JSON_DEPTH, MAX_PROJECT_SAMPLES, MAX_VERSION_SAMPLES
from s2studio.audio import wav_bytes

RATE = 8000


def _version(vid="abc", file=None, samples=RATE, rate=RATE, **extra):
    return {"id": vid, "seed": 1, "sample_rate": rate, "samples": samples, "file": file or f"audio/{vid}.wav",
            **extra}


def _manifest(versions=None, sentence_extra=None, take_extra=None):
    sentence = {"text": "x", "versions": versions if versions is not None else [_version()], **(sentence_extra or {})}
    return {"format": "s2studio-project", "version": 1, "takes": [
        {"id": "t", "text": "x", "base_seed": 1, "sentences": [sentence], **(take_extra or {})}]}


def _write(path, manifest, members=None, compression=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", compression=compression) as z:
        # 1e999 as written, not json's "Infinity": Python reads it back as float('inf')
        text = manifest if isinstance(manifest, str) else json.dumps(manifest).replace("Infinity", "1e999")
        z.writestr("project.json", text)
        for name, data in (members or {}).items():
            z.writestr(name, data)
    return path


def _one_second(rate=RATE):
    return wav_bytes(np.full(rate, 0.1, np.float32), rate)


def _refused(path, problem):
    with pytest.raises(ProjectFileError) as err:
        load_project_file(path)
    assert str(path) in str(err.value) and problem in str(err.value), str(err.value)
    return err.value


def test_a_version_id_cannot_send_the_autosave_outside_the_project(tmp_path):
    """The id names the version's WAV in the autosave folder: '../../x' wrote a WAV anywhere."""
    path = _write(tmp_path / "evil.s2project", _manifest([_version(vid="../../escaped", file="audio/abc.wav")]),
                  {"audio/abc.wav": _one_second()})
    _refused(path, "'id' must be an id")
    # and a project built in memory with such an id writes nothing anywhere
    version = SentenceVersion(seed=1, audio=np.zeros(10, np.float32), sample_rate=RATE, id="../../escaped")
    project = Project(takes=[ProjectTake(text="x", sentences=[Sentence("x", 0, [version], 0)], base_seed=1)])
    folder = tmp_path / "deep" / "auto"
    with pytest.raises((ProjectFileError, ValueError)):
        save_project_folder(project, folder)
    assert not (tmp_path / "escaped.wav").exists() and not list(tmp_path.rglob("escaped*"))


def test_a_symlinked_audio_folder_does_not_redirect_the_autosave(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    folder = tmp_path / "auto"
    folder.mkdir()
    (folder / "audio").symlink_to(elsewhere, target_is_directory=True)
    version = SentenceVersion(seed=1, audio=np.zeros(10, np.float32), sample_rate=RATE)
    project = Project(takes=[ProjectTake(text="x", sentences=[Sentence("x", 0, [version], 0)], base_seed=1)])
    with pytest.raises(ProjectFileError, match="outside the project's folder"):
        save_project_folder(project, folder)
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("rate", [10_000_000, 0, -44100, 44101])
def test_a_sample_rate_outside_the_supported_set_is_refused_before_any_resampling(tmp_path, rate):
    """A 1 s clip declared at 2 GHz crashed inside the resampler; 10 MHz already loads on main."""
    path = _write(tmp_path / "rate.s2project", _manifest([_version(rate=rate)]), {"audio/abc.wav": _one_second()})
    _refused(path, "is not one s2studio uses" if 0 < rate <= 10**6 else "'sample_rate' must be")


def test_one_compressible_member_is_decoded_once_however_many_versions_name_it(tmp_path):
    """Many versions naming one highly compressible member decoded it again and again (a 261 KB
    file took 2.35 GB). Now it is decoded once: memory stays near one copy of it."""
    n = 1 << 20  # 4 MB of float32 audio, a few KB deflated
    member = wav_bytes(np.zeros(n, np.float32), RATE)
    versions = [_version(vid=f"v{i}", file="audio/abc.wav", samples=n) for i in range(40)]
    path = _write(tmp_path / "bomb.s2project", _manifest(versions), {"audio/abc.wav": member},
                  compression=zipfile.ZIP_DEFLATED)
    assert path.stat().st_size < 100_000
    tracemalloc.start()
    try:
        project = load_project_file(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(project.takes[0].sentences[0].versions) == 40
    assert peak < 6 * 4 * n, f"peak {peak / 2**20:.0f} MiB for one 4 MiB member"


def test_the_total_audio_is_bounded_before_anything_is_decoded(tmp_path):
    count = MAX_PROJECT_SAMPLES // MAX_VERSION_SAMPLES + 1
    versions = [_version(vid=f"v{i}", samples=MAX_VERSION_SAMPLES) for i in range(count)]
    members = {f"audio/v{i}.wav": b"RIFF" for i in range(count)}  # never read: refused from the manifest
    path = _write(tmp_path / "huge.s2project", _manifest(versions), members)
    _refused(path, "longer than a project may hold")


def test_a_member_larger_than_its_declared_samples_is_not_decoded(tmp_path):
    path = _write(tmp_path / "big.s2project", _manifest([_version(samples=10)]),
                  {"audio/abc.wav": wav_bytes(np.zeros(10 * RATE, np.float32), RATE)})
    _refused(path, "larger than the 10 samples it declares")


@pytest.mark.parametrize("sentence_extra, problem", [
    ({"pause_after_ms": 1e999}, "not a finite number"),  # OverflowError on main
    ({"pause_after_ms": [1]}, "'pause_after_ms' must be a whole number"),  # TypeError on main
    ({"pause_after_ms": 10**9}, "'pause_after_ms' must be a whole number in 0..10000"),
    ({"locked": "yes"}, "'locked' must be true or false"),
    ({"chosen": True}, "'chosen' must be a whole number"),
])
def test_wrong_or_infinite_numbers_are_the_project_error(tmp_path, sentence_extra, problem):
    path = _write(tmp_path / "bad.s2project", _manifest(sentence_extra=sentence_extra),
                  {"audio/abc.wav": _one_second()})
    _refused(path, problem)


@pytest.mark.parametrize("raw, problem", [
    ('{"format": "s2studio-project", "version": 1, "takes": [], "script": NaN}', "NaN, which is not a finite"),
    ('{"format": "s2studio-project", "version": 1, "takes": [], "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
     "nested too deeply"),  # RecursionError on main
    ('{"format": "s2studio-project", "version": 1, "takes": [], "x": ' + "[" * (MAX_JSON_DEPTH + 5)
     + "]" * (MAX_JSON_DEPTH + 5) + "}", "nested too deeply"),
])
def test_json_that_is_not_a_project_value_is_the_project_error(tmp_path, raw, problem):
    _refused(_write(tmp_path / "bad.s2project", raw), problem)


@pytest.mark.parametrize("settings, problem", [
    ({"postprocess": [1]}, "postprocess is not an object"),  # loaded on main; assemble() then raised
    ({"sampling": {"temperature": 1e308}}, "'temperature' must be a number in 0..5"),
    ({"segmentation": {"pause_ms": "long"}}, "'pause_ms' must be a whole number"),
    ({"speaker_voices": [[1, 2, 3]]}, "speaker_voices"),
])
def test_take_settings_are_checked_too(tmp_path, settings, problem):
    path = _write(tmp_path / "bad.s2project", _manifest(take_extra={"settings": settings}),
                  {"audio/abc.wav": _one_second()})
    _refused(path, problem)


@pytest.mark.parametrize("member", [b"garbage, not audio at all", b"RIFF\x10\x00\x00\x00WAVEfmt junk"])
def test_an_unreadable_audio_member_is_the_project_error(tmp_path, member):
    """It escaped as AudioInputError, which the app does not catch as a project problem."""
    path = _write(tmp_path / "bad.s2project", _manifest([_version(samples=len(member))]), {"audio/abc.wav": member})
    _refused(path, "audio/abc.wav")


def test_the_autosave_folder_is_held_to_the_same_schema(tmp_path):
    folder = tmp_path / "auto"
    (folder / "audio").mkdir(parents=True)
    (folder / "audio" / "abc.wav").write_bytes(_one_second())
    (folder / "project.json").write_text(json.dumps(_manifest([_version(vid="../x", file="audio/abc.wav")])))
    with pytest.raises(ProjectFileError, match="'id' must be an id"):
        load_project_folder(folder)
    (folder / "audio" / "abc.wav").unlink()
    (folder / "audio" / "abc.wav").symlink_to(tmp_path / "outside.wav")
    (tmp_path / "outside.wav").write_bytes(_one_second())
    (folder / "project.json").write_text(json.dumps(_manifest()))
    with pytest.raises(ProjectFileError, match="missing"):  # a link to a file elsewhere is not the project's
        load_project_folder(folder)
