"""Rendering a book on the tiny model: N at once equals one at a time equals each sentence
alone; editing re-renders only what changed; pause, cancel, order of need."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest

from s2studio.book import BookProject, BookRenderer, ImportedBook, ImportedChapter, Manuscript, SentenceRef
from s2studio.engine.params import GenerationParams
from s2studio.errors import InputError

FRAMES = 5


def project_at(folder, seed: int = 11) -> BookProject:
    imported = ImportedBook("Tiny", chapters=[
        ImportedChapter("One", ["The first sentence. A second one!", "Another paragraph here."]),
        ImportedChapter("Two", ["Chapter two starts. It ends."]),
        ImportedChapter("Three", ["Last words."])])
    m = Manuscript.from_import(imported, seed=seed)
    m.generation = GenerationParams(max_new_tokens=FRAMES, min_tokens_before_end=FRAMES, seed=seed)
    return BookProject.create(folder, m)


def all_audio(project: BookProject) -> list[np.ndarray]:
    return [project.audio_of(j.key)[0] for j in project.manuscript.jobs(None, project.fingerprint)]


def test_parallel_renders_equal_one_at_a_time_and_each_sentence_alone(tmp_path, tiny_pipeline):
    one, four = project_at(tmp_path / "one"), project_at(tmp_path / "four")
    s1 = BookRenderer(tiny_pipeline, one, parallel=1).run()
    s4 = BookRenderer(tiny_pipeline, four, parallel=4).run()
    assert (s1.rendered, s4.rendered, s1.failed, s4.failed) == (6, 6, 0, 0)
    a1, a4 = all_audio(one), all_audio(four)
    assert all(len(a) == FRAMES * 2048 for a in a1)
    for x, y in zip(a1, a4):
        np.testing.assert_array_equal(x, y)
    # A sentence alone, as the studio would synthesize it: the same samples.
    renderer = BookRenderer(tiny_pipeline, one, parallel=1)
    job = one.manuscript.jobs(None, one.fingerprint)[4]
    alone = tiny_pipeline.synthesize(renderer.request_for(job)).run_to_end()
    np.testing.assert_array_equal(alone.audio, a1[4])
    assert renderer.request_for(job).text == "It ends." and renderer.request_for(job).generation.seed == job.seed


def test_a_second_run_renders_only_what_changed(tmp_path, tiny_pipeline):
    project = project_at(tmp_path / "b")
    BookRenderer(tiny_pipeline, project, parallel=2).run()
    files = {j.key: project.sentence_path(j.key) for j in project.manuscript.jobs(None, project.fingerprint)}
    stamps = {k: __import__("os").stat(p).st_mtime_ns for k, p in files.items()}
    again = BookRenderer(tiny_pipeline, project, parallel=2).run()
    assert (again.rendered, again.skipped) == (0, 6)
    project.manuscript.edit_sentence(SentenceRef(1, 0, 1), "It ends well.")
    project.manuscript.dictionary.add("Last", "Lost")
    project.save()
    reopened = BookProject.open(project.folder)
    renderer = BookRenderer(tiny_pipeline, reopened, parallel=2)
    assert [j.model_text for j in renderer.plan()] == ["It ends well.", "Lost words."]
    summary = renderer.run()
    assert (summary.rendered, summary.skipped) == (2, 4)
    for key, path in files.items():
        if reopened.is_rendered(key) and key in {j.key for j in reopened.manuscript.jobs(None, reopened.fingerprint)}:
            assert __import__("os").stat(path).st_mtime_ns == stamps[key]  # not rendered again
    # Regenerating one sentence: a new seed, only it renders.
    job = renderer.regenerate(SentenceRef(0, 1, 0), seed=123)
    assert [j.key for j in renderer.plan()] == [job.key]
    assert renderer.run().rendered == 1
    reopened = BookProject.open(project.folder)
    assert reopened.manuscript.sentence(SentenceRef(0, 1, 0)).seed == 123
    # Without a renderer (listening or exporting after a restart): the keys of the last render.
    assert reopened.fingerprint == project.fingerprint != ""
    assert [reopened.status(j.key) for j in reopened.manuscript.jobs(None, reopened.fingerprint)] == ["rendered"] * 6


def test_the_chapter_asked_for_renders_first(tmp_path, tiny_pipeline):
    project = project_at(tmp_path / "b")
    order = []
    renderer = BookRenderer(tiny_pipeline, project, parallel=1, on_progress=lambda p: order.append(p.chapter))
    renderer.prioritise(2)
    renderer.run()
    assert order == [2, 0, 0, 0, 1, 1]


class _PauseAtTheSecondTake:
    """The engine, with a pause asked for as the second take starts (a person pressing Pause
    while two sentences are in flight)."""

    def __init__(self, engine, pause):
        self._engine, self._pause, self._takes = engine, pause, 0
        self._lock = threading.Lock()  # the render's worker threads start takes at once

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def synthesize(self, request, **kw):
        with self._lock:
            self._takes += 1
            if self._takes == 2:
                self._pause()
        return self._engine.synthesize(request, **kw)


def test_pause_keeps_finished_sentences_and_resume_continues(tmp_path, tiny_pipeline):
    project = project_at(tmp_path / "b")
    renderer = BookRenderer(_PauseAtTheSecondTake(tiny_pipeline, lambda: renderer.pause()), project, parallel=2)
    first = renderer.run()
    # Paused as the second sentence started: both in flight finish and are kept, no third starts
    # (pausing from the progress callback raced the workers: under load they could finish all six
    # before the render's thread saw the first).
    assert first.stopped == "paused" and first.rendered == 2
    assert first.rendered + BookRenderer(tiny_pipeline, project, parallel=2).run().rendered == 6
    reference = project_at(tmp_path / "ref")
    BookRenderer(tiny_pipeline, reference, parallel=1).run()
    for x, y in zip(all_audio(project), all_audio(reference)):
        np.testing.assert_array_equal(x, y)


def test_cancel_stops_the_sentences_in_flight(tmp_path, tiny_pipeline):
    project = project_at(tmp_path / "b")
    project.manuscript.generation = dataclasses.replace(project.manuscript.generation, max_new_tokens=400,
                                                        min_tokens_before_end=400)
    renderer = BookRenderer(tiny_pipeline, project, parallel=2)
    done = threading.Event()
    result = {}

    def go():
        result["summary"] = renderer.run()
        done.set()

    thread = threading.Thread(target=go)
    thread.start()
    while not renderer._in_flight and thread.is_alive():
        done.wait(0.01)
    renderer.cancel()
    thread.join(60)
    assert not thread.is_alive()
    summary = result["summary"]
    assert summary.stopped == "cancelled" and summary.rendered == 0


def test_a_failing_sentence_is_recorded_and_the_render_goes_on(tmp_path, tiny_pipeline):
    project = project_at(tmp_path / "b")
    project.manuscript.chapters[2].paragraphs[0].sentences[0].voice = "no-such-voice"
    summary = BookRenderer(tiny_pipeline, project, parallel=2).run()
    assert (summary.rendered, summary.failed) == (5, 1)
    ref, message = summary.failures[0]
    assert ref == SentenceRef(2, 0, 0) and "no-such-voice" in message
    assert project.failure(project.manuscript.job(ref, project.fingerprint).key) == message


def test_parallel_has_a_range(tmp_path, tiny_pipeline):
    project = project_at(tmp_path / "b")
    for bad in (0, 9, True, "4"):
        with pytest.raises(InputError, match="parallel must be 1 to 8"):
            BookRenderer(tiny_pipeline, project, parallel=bad)
    assert BookRenderer(tiny_pipeline, project).parallel == 4  # a CPU's default


def _save_voice(library, voice_id: str, seed: int, transcript: str = "A voice speaking."):
    codes = np.random.default_rng(seed).integers(0, 128, size=(10, 24), dtype=np.int32)
    return library.save(voice_id, codes, transcript, name=voice_id, codebook_size=128, overwrite=True)


def test_a_voice_saved_again_under_its_id_renders_only_its_sentences_again(tmp_path, tiny_pipeline):
    from s2studio.book.voice_digests import voice_digest

    library = tiny_pipeline.voices  # a real VoiceLibrary in a folder of the test's own
    _save_voice(library, "reader", seed=1)
    _save_voice(library, "other", seed=2)
    project = project_at(tmp_path / "b")
    project.manuscript.chapters[1].voice = "reader"  # chapter Two: two sentences
    project.manuscript.chapters[2].paragraphs[0].sentences[0].voice = "other"
    project.save()
    no_voice_keys = {j.ref: j.key for j in project.manuscript.jobs(None, "") if j.voice is None}
    renderer = BookRenderer(tiny_pipeline, project, parallel=2)
    stored = library.get("reader")
    assert project.manuscript.voice_digests == {"reader": voice_digest(stored.codes, stored.transcript),
                                                "other": voice_digest(library.get("other").codes,
                                                                      library.get("other").transcript)}
    assert renderer.run().rendered == 6
    before = {j.ref: j.key for j in project.manuscript.jobs(None, project.fingerprint)}
    # Digests never move the keys of sentences without a saved voice.
    assert {j.ref: j.key for j in project.manuscript.jobs(None, "") if j.voice is None} == no_voice_keys

    # The same voice saved again (same codes and transcript, another display name): nothing to do.
    library.rename("reader", "The Reader")
    assert BookRenderer(tiny_pipeline, BookProject.open(project.folder), parallel=2).plan() == []

    # Re-recorded under the same id: only its sentences are planned, rendered, and get new keys.
    _save_voice(library, "reader", seed=3)
    reopened = BookProject.open(project.folder)
    renderer = BookRenderer(tiny_pipeline, reopened, parallel=2)
    assert [j.ref for j in renderer.plan()] == [SentenceRef(1, 0, 0), SentenceRef(1, 0, 1)]
    summary = renderer.run()
    assert (summary.rendered, summary.skipped) == (2, 4)
    after = {j.ref: j.key for j in reopened.manuscript.jobs(None, reopened.fingerprint)}
    assert {r for r in after if after[r] != before[r]} == {SentenceRef(1, 0, 0), SentenceRef(1, 0, 1)}
    # The digests are in book.json: status and export after a restart, without a library, agree.
    again = BookProject.open(project.folder)
    assert again.manuscript.voice_digests == reopened.manuscript.voice_digests
    assert [again.status(k) for k in after.values()] == ["rendered"] * 6

    # A changed transcript alone is another voice too.
    stored = library.get("other")
    library.save("other", stored.codes, "Another transcript.", name="other", codebook_size=128, overwrite=True)
    assert [j.ref for j in BookRenderer(tiny_pipeline, again, parallel=2).plan()] == [SentenceRef(2, 0, 0)]


def test_a_book_from_before_voice_digests_keeps_its_rendered_audio(tmp_path, tiny_pipeline):
    """What an older s2studio left: keys without digests, no "voice_digests" in book.json. The
    first render moves that audio to the new keys instead of rendering it again."""
    import json
    import os

    library = tiny_pipeline.voices
    _save_voice(library, "elder", seed=7)
    project = project_at(tmp_path / "b")
    project.manuscript.voice = "elder"  # the narrator: every sentence
    project.save()
    BookRenderer(tiny_pipeline, project, parallel=2).run()
    audio = {j.ref: project.audio_of(j.key)[0] for j in project.manuscript.jobs(None, project.fingerprint)}
    # Back to the old layout: each sentence's audio under its key without the digest.
    digests, project.manuscript.voice_digests = project.manuscript.voice_digests, {}
    old = {j.ref: j.key for j in project.manuscript.jobs(None, project.fingerprint)}
    project.manuscript.voice_digests = digests
    state = json.loads((tmp_path / "b" / "render-state.json").read_text())
    for job in project.manuscript.jobs(None, project.fingerprint):
        os.replace(project.sentence_path(job.key), project.sentence_path(old[job.ref]))
        state["sentences"][old[job.ref]] = state["sentences"].pop(job.key)
    (tmp_path / "b" / "render-state.json").write_text(json.dumps(state))
    book = json.loads((tmp_path / "b" / "book.json").read_text())
    del book["voice_digests"]
    (tmp_path / "b" / "book.json").write_text(json.dumps(book))

    legacy = BookProject.open(tmp_path / "b")
    assert legacy.legacy_voice_keys and all(legacy.is_rendered(k) for k in old.values())
    renderer = BookRenderer(tiny_pipeline, legacy, parallel=2)
    assert renderer.plan() == [] and renderer.run().rendered == 0
    for job in legacy.manuscript.jobs(None, legacy.fingerprint):
        assert job.key != old[job.ref] and not os.path.exists(legacy.sentence_path(old[job.ref]))
        np.testing.assert_array_equal(legacy.audio_of(job.key)[0], audio[job.ref])
    again = BookProject.open(tmp_path / "b")  # saved: no longer an old book, the digests known
    assert not again.legacy_voice_keys and again.manuscript.voice_digests == digests
    # From now on a re-recorded voice renders its sentences again, as in any book.
    _save_voice(library, "elder", seed=8)
    assert len(BookRenderer(tiny_pipeline, again, parallel=2).plan()) == 6
