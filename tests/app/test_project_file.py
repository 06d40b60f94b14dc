"""The project model's arithmetic (assembly, spans, the sentence at a sample) and its files:
round trips are sample-exact, and every damaged or hostile file is one clear ProjectFileError."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from s2studio.app.project import Project, ProjectTake, Sentence, SentenceVersion
from s2studio.app.project_file import (
    ProjectFileError,
    load_project_file,
    load_project_folder,
    save_project_file,
    save_project_folder,
)

RATE = 1000  # samples per second: pauses in ms are samples
FILE_RATE = 8000  # the lowest rate a project file may hold (project_schema.SAMPLE_RATES)


def _version(value: float, n: int, seed: int = 1, rate: int = RATE) -> SentenceVersion:
    return SentenceVersion(seed=seed, audio=np.full(n, value, np.float32), sample_rate=rate)


def _take(rate: int = RATE, **settings) -> ProjectTake:
    sentences = [Sentence("One.", 100, [_version(0.1, 300, rate=rate)], 0),
                 Sentence("Two.", 50, [_version(0.2, 200, rate=rate)], 0),
                 Sentence("Three.", 0, [_version(0.3, 100, rate=rate)], 0)]
    return ProjectTake(text="One. Two. Three.", sentences=sentences, base_seed=5, settings=settings)


def test_a_take_is_its_sentences_with_the_pipelines_pauses():
    take = _take()
    audio = take.assemble()
    assert len(audio) == 300 + 100 + 200 + 50 + 100
    assert take.spans() == [(0, 300), (400, 600), (650, 750)]
    assert not audio[300:400].any() and np.all(audio[400:600] == np.float32(0.2))
    assert [take.sentence_at(x) for x in (0, 350, 400, 649, 650, 749, 750)] == [0, 0, 1, 1, 2, 2, None]
    take.sentences[1].add_version(_version(0.5, 120, seed=9))  # a new version is chosen at once
    assert take.spans() == [(0, 300), (400, 520), (570, 670)]
    np.testing.assert_array_equal(take.assemble()[570:670], audio[650:750])


def test_a_stopped_take_has_no_pause_after_its_last_sentence_and_post_processing_applies():
    take = _take()
    take.sentences[2] = Sentence("Three.", 0)
    assert len(take.assemble()) == 300 + 100 + 200  # as the pipeline: no pause after the last made
    gap = _take()
    gap.sentences[1] = Sentence("Two.", 50)  # not generated yet: an empty span, the pause before it stays
    assert gap.spans() == [(0, 300), (400, 400), (400, 500)]
    assert [gap.sentence_at(x) for x in (399, 400, 499, 500)] == [0, 2, 2, None]
    loud = _take(postprocess={"normalize": True})
    assert np.abs(loud.assemble()).max() == pytest.approx(0.95)


def test_project_file_and_folder_round_trips_are_sample_exact(tmp_path):
    rng = np.random.default_rng(1)
    take = _take(rate=FILE_RATE, sampling={"temperature": 0.7})
    take.sentences[0].versions[0].audio = rng.uniform(-1.2, 1.2, 300).astype(np.float32)  # even past full scale
    take.sentences[1].locked = True
    project = Project(script="One. Two. Three.", voice_id="v1", voice_label="Narrator", takes=[take],
                      current_take=take.id)
    save_project_file(project, tmp_path / "p.s2project")
    save_project_folder(project, tmp_path / "auto")
    for loaded in (load_project_file(tmp_path / "p.s2project"), load_project_folder(tmp_path / "auto")):
        t = loaded.takes[0]
        assert (loaded.script, loaded.voice_id, loaded.current_take) == ("One. Two. Three.", "v1", take.id)
        assert t.settings == {"sampling": {"temperature": 0.7}} and t.sentences[1].locked
        np.testing.assert_array_equal(t.assemble(), take.assemble())
    assert load_project_folder(tmp_path / "nothing-yet") is None


def _write_zip(path, manifest, members=None):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("project.json", manifest if isinstance(manifest, str) else json.dumps(manifest))
        for name, data in (members or {}).items():
            z.writestr(name, data)


def _manifest(file="audio/abc.wav", samples=300, version=1):
    return {"format": "s2studio-project", "version": version, "takes": [{
        "id": "t", "text": "x", "base_seed": 1, "sentences": [{"text": "x", "versions": [
            {"id": "abc", "seed": 1, "sample_rate": FILE_RATE, "samples": samples, "file": file}]}]}]}


@pytest.mark.parametrize("content, problem", [
    (b"not a zip at all", "not a readable zip file"),
    (None, "has no project.json"),
    ("{not json", "not JSON text"),
    ({"format": "something else"}, "not an s2studio project"),
    (_manifest(version=99), "newer s2studio"),
    (_manifest(file="../../etc/passwd"), "is not an audio file of the project"),
    (_manifest(), "its audio audio/abc.wav is missing"),
])
def test_damaged_project_files_are_one_clear_error(tmp_path, content, problem):
    path = tmp_path / "bad.s2project"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is None:
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("other.txt", "hello")
    else:
        _write_zip(path, content)
    with pytest.raises(ProjectFileError, match="bad.s2project") as err:
        load_project_file(path)
    assert problem in str(err.value)


def test_a_truncated_take_audio_is_reported(tmp_path):
    from s2studio.audio import wav_bytes

    path = tmp_path / "short.s2project"
    _write_zip(path, _manifest(samples=500), {"audio/abc.wav": wav_bytes(np.zeros(300, np.float32), FILE_RATE)})
    with pytest.raises(ProjectFileError, match="truncated"):
        load_project_file(path)
    with pytest.raises(ProjectFileError, match="not a file"):
        load_project_file(tmp_path)
