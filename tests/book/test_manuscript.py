"""The manuscript model: dictionary, cast, keys, and the project file."""

from __future__ import annotations

import json

import pytest

from s2studio.book import BookProject, Cast, ImportedBook, ImportedChapter, Manuscript, PronunciationDictionary, \
    SentenceRef
from s2studio.errors import InputError


def small_manuscript(seed: int = 1) -> Manuscript:
    imported = ImportedBook("T", chapters=[
        ImportedChapter("Front", ["Title page."], "front matter"),
        ImportedChapter("One", ["Ann met Anne. Then Dr. Who came.", "<|speaker:1|>Hi! <|speaker:2|>Hello."]),
        ImportedChapter("Two", ["Yes. Yes."])])
    return Manuscript.from_import(imported, seed=seed)


def test_paragraphs_become_the_engines_sentences_and_turns():
    m = small_manuscript()
    one = m.chapters[1]
    assert [s.text for s in one.paragraphs[0].sentences] == ["Ann met Anne.", "Then Dr. Who came."]
    assert [(s.speaker, s.text) for s in one.paragraphs[1].sentences] == [(1, "Hi!"), (2, "Hello.")]
    yes = m.chapters[2].paragraphs[0].sentences
    assert yes[0].seed != yes[1].seed  # the same words twice are two takes
    assert [c.included for c in m.chapters] == [False, True, True]


@pytest.mark.parametrize("entries, text, expected", [
    ([("Ann", "Ahn")], "Ann met Anne and ANN.", "Ahn met Anne and Ahn."),  # whole words, any case
    ([("Ann", "Ahn", True)], "Ann met ANN.", "Ahn met ANN."),  # match case
    ([("New York", "NYC"), ("New York City", "the big apple")], "New York City, New  York.",
     "the big apple, NYC."),  # longest first; spaces in the text may vary
    ([("A", "B"), ("B", "C")], "A B", "B C"),  # a replacement is not replaced again
    ([("C++", "C plus plus")], "I like C++.", "I like C plus plus."),  # no word edge after '+'
    ([("Ümit", "Oomit")], "Ümit and ümit.", "Oomit and Oomit."),
])
def test_dictionary_rules(entries, text, expected):
    d = PronunciationDictionary()
    for e in entries:
        d.add(e[0], e[1], match_case=len(e) > 2 and e[2])
    assert d.apply(text) == expected


def test_the_dictionary_changes_what_the_model_reads_not_the_shown_text():
    m = small_manuscript()
    ref = SentenceRef(1, 0, 0)
    before = m.job(ref, "")
    m.dictionary.add("Anne", "Ann-ee")
    after = m.job(ref, "")
    assert m.sentence(ref).text == "Ann met Anne."
    assert (before.model_text, after.model_text) == ("Ann met Anne.", "Ann met Ann-ee.")
    assert before.key != after.key
    # Only the sentences whose model text changed get a new key.
    others = [m.job(SentenceRef(1, 0, 1), ""), m.job(SentenceRef(2, 0, 0), "")]
    m.dictionary.remove("Anne")
    assert [m.job(SentenceRef(1, 0, 1), ""), m.job(SentenceRef(2, 0, 0), "")] == others


def test_voices_come_from_sentence_speaker_character_chapter_then_book():
    m = small_manuscript()
    m.voice = "narrator"
    m.cast.set_character("Hero", "hero-voice")
    m.cast.set_character("Silent", None)  # the model's own voice, on purpose
    m.cast.assign_speaker(1, "Hero")
    assert m.voice_for(SentenceRef(1, 0, 0)) == "narrator"
    m.chapters[1].voice = "chapter-voice"
    assert m.voice_for(SentenceRef(1, 0, 0)) == "chapter-voice"
    m.chapters[1].paragraphs[0].character = "Silent"
    assert m.voice_for(SentenceRef(1, 0, 0)) is None
    assert m.voice_for(SentenceRef(1, 1, 0)) == "hero-voice"  # <|speaker:1|>
    assert m.voice_for(SentenceRef(1, 1, 1)) == "chapter-voice"  # speaker 2 has no character
    m.chapters[1].paragraphs[1].sentences[1].voice = "own"
    assert m.voice_for(SentenceRef(1, 1, 1)) == "own"
    with pytest.raises(InputError, match="no character"):
        m.cast.assign_speaker(3, "Nobody")


def test_editing_one_sentence_changes_only_its_key():
    m = small_manuscript()
    keys = [j.key for j in m.jobs(None, "f")]
    m.edit_sentence(SentenceRef(1, 0, 1), "Then Dr. No came.")
    changed = [a != b for a, b in zip(keys, [j.key for j in m.jobs(None, "f")])]
    assert changed == [False, True, False, False, False, False]
    m.cast.set_character("Hero", "hero-voice")
    m.cast.assign_speaker(2, "Hero")
    changed = [a != b for a, b in zip(keys, [j.key for j in m.jobs(None, "f")])]
    assert changed == [False, True, False, True, False, False]
    assert [j.key for j in m.jobs(None, "other settings")] != [j.key for j in m.jobs(None, "f")]


def test_reimporting_an_edited_file_keeps_the_unchanged_sentences_seeds():
    a = small_manuscript(seed=5)
    b = Manuscript.from_import(ImportedBook("T", chapters=[
        ImportedChapter("One", ["A new first sentence. Ann met Anne. Then Dr. Who came."])]), seed=5)
    seeds_a = {s.text: s.seed for _, _, s in a.chapters[1].sentences()}
    seeds_b = {s.text: s.seed for _, _, s in b.chapters[0].sentences()}
    assert seeds_b["Ann met Anne."] == seeds_a["Ann met Anne."]
    assert seeds_b["Then Dr. Who came."] == seeds_a["Then Dr. Who came."]


def test_the_project_round_trips_and_checks_what_it_reads(tmp_path):
    m = small_manuscript()
    m.dictionary.add("Anne", "Ann-ee", match_case=True)
    m.cast.set_character("Hero", "hero-voice")
    m.cast.assign_speaker(1, "Hero")
    m.chapters[1].paragraphs[0].character = "Hero"
    m.chapters[0].include = True
    BookProject.create(tmp_path / "b", m, cover=b"\xff\xd8jpeg", cover_mime="image/jpeg")
    again = BookProject.open(tmp_path / "b")
    assert again.manuscript.jobs(None, "x") == m.jobs(None, "x")
    assert again.manuscript.cast == m.cast and again.cover() == (b"\xff\xd8jpeg", "image/jpeg")
    assert again.manuscript.dictionary.to_json() == m.dictionary.to_json()
    with pytest.raises(InputError, match="already holds a book"):
        BookProject.create(tmp_path / "b", m)
    book_json = tmp_path / "b" / "book.json"
    data = json.loads(book_json.read_text())
    for field, value, fragment in (("chapters", "x", "'chapters' must be a list"),
                                   ("generation", {"temperature": 99}, "generation settings"),
                                   ("version", 9, "format version"),
                                   ("cast", {"characters": {"A": 5}}, "must be a saved voice"),
                                   ("voice_digests", {"hero-voice": "xyz"}, "'voice_digests' must map"),
                                   ("voice_digests", ["hero-voice"], "'voice_digests' must map")):
        bad = dict(data, **{field: value})
        book_json.write_text(json.dumps(bad))
        with pytest.raises(InputError, match=fragment) as err:
            BookProject.open(tmp_path / "b")
        assert "book.json" in str(err.value) or field == "cast"
    data["chapters"][1]["paragraphs"][0]["sentences"][0][1] = -1
    book_json.write_text(json.dumps(data))
    with pytest.raises(InputError, match="seed"):
        BookProject.open(tmp_path / "b")
    with pytest.raises(InputError, match="not a book project"):
        BookProject.open(tmp_path / "nothing")


def test_a_sentence_file_that_disagrees_with_the_state_is_not_used(tmp_path):
    import numpy as np

    m = small_manuscript()
    project = BookProject.create(tmp_path / "b", m)
    job = m.jobs(None, "")[0]
    project.store(job, np.ones(100, np.float32), 44100, "end")
    assert project.is_rendered(job.key)
    np.save(project.sentence_path(job.key), np.ones(5, np.float32))
    with pytest.raises(InputError, match="not what the render state says"):
        project.audio_of(job.key)
    np.save(project.sentence_path(job.key), np.array([object()], dtype=object), allow_pickle=True)
    with pytest.raises(InputError, match="cannot be read"):
        project.audio_of(job.key)


def test_cast_and_dictionary_ranges():
    with pytest.raises(InputError):
        Cast().set_character("", "v")
    with pytest.raises(InputError):
        Cast().assign_speaker(1000, "x")
    with pytest.raises(InputError):
        PronunciationDictionary().add("word", "")


def test_importing_a_file_again_keeps_the_cast_dictionary_seed_and_rendered_sentences(tmp_path):
    import numpy as np

    from tests.book.books import MARKDOWN

    book = tmp_path / "b.md"
    book.write_text(MARKDOWN, encoding="utf-8")
    project = BookProject.from_book_file(book, tmp_path / "p")
    project.manuscript.cast.set_character("Hero", "hero")
    project.manuscript.dictionary.add("door", "dohr")
    project.save()
    jobs = project.manuscript.jobs(None, "")
    for job in jobs:
        project.store(job, np.zeros(10, np.float32), 44100, "end")
    project.store_failure(jobs[0], "it broke")
    assert [project.status(j.key) for j in jobs[:2]] == ["failed", "rendered"]
    book.write_text(MARKDOWN.replace("Morning came.", "Evening came."), encoding="utf-8")
    again = BookProject.from_book_file(book, tmp_path / "p")
    assert again.manuscript.cast.characters == {"Hero": "hero"} and again.manuscript.dictionary.entries
    assert again.manuscript.generation.seed == project.manuscript.generation.seed
    assert [again.status(j.key) for j in again.manuscript.jobs(None, "")] == \
        ["failed", "rendered", "rendered", "missing", "rendered"]
    fresh = BookProject.from_book_file(book, tmp_path / "p", restart=True)
    assert {fresh.status(j.key) for j in fresh.manuscript.jobs(None, "")} == {"missing"}


def test_voice_digests_change_only_the_keys_of_that_voices_sentences(tmp_path):
    """Books made before digests keep the keys of every sentence without a saved voice: the key
    is the same hash of the same four parts; a digest is a fifth part only where it applies."""
    import hashlib

    m = small_manuscript()
    m.chapters[2].voice = "reader"
    m.voice_digests = {"reader": "0123456789abcdef", "unused": "fedcba9876543210"}
    for job in m.jobs([1, 2], "fp"):
        parts = [job.model_text, job.voice, job.seed, "fp"] + (["0123456789abcdef"] if job.voice else [])
        assert job.key == hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]
    old = {j.ref: j.key for j in m.jobs([2], "fp")}
    m.voice_digests["reader"] = "1111111111111111"  # saved again under the same id
    assert all(j.key != old[j.ref] for j in m.jobs([2], "fp"))
    assert m.voices_used() == {"reader"}
    BookProject.create(tmp_path / "b", m)
    again = BookProject.open(tmp_path / "b").manuscript
    assert again.voice_digests == m.voice_digests and again.jobs(None, "fp") == m.jobs(None, "fp")
    data = json.loads((tmp_path / "b" / "book.json").read_text())
    del data["voice_digests"]  # a book saved before digests existed: read, with none known
    (tmp_path / "b" / "book.json").write_text(json.dumps(data))
    assert BookProject.open(tmp_path / "b").manuscript.voice_digests == {}


def test_only_voices_the_library_holds_get_a_digest(tmp_path):
    """A voice the library lacks (a server's own voice with --server, or a missing one) keys as
    before digests; one it holds is found as the engine finds it (ids ignore case)."""
    import numpy as np

    from s2studio.book.voice_digests import voice_digest
    from s2studio.engine.voices import VoiceLibrary

    library = VoiceLibrary(tmp_path / "voices")
    codes = np.arange(240, dtype=np.int32).reshape(10, 24) % 128
    library.save("alice", codes, "Alice here.", name="Alice", codebook_size=128)
    m = small_manuscript()
    m.voice = "ALICE"
    m.chapters[2].voice = "on-the-server"
    project = BookProject.create(tmp_path / "b", m)
    before = {j.ref: j.key for j in m.jobs([1, 2], "fp")}
    assert project.refresh_voice_digests(library)
    assert m.voice_digests == {"ALICE": voice_digest(codes, "Alice here.")}
    assert not project.refresh_voice_digests(library)  # nothing changed
    after = {j.ref: j.key for j in m.jobs([1, 2], "fp")}
    assert {r for r in after if after[r] == before[r]} == {r for r in after if r.chapter == 2}  # the server's voice
    assert {r for r in after if after[r] != before[r]} == {r for r in after if r.chapter == 1}  # alice's
    assert project.refresh_voice_digests(None) and m.voice_digests == {}  # no library: no digests
