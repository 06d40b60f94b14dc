"""The Book view in the real window: import (menu path and drag and drop), render on the tiny
model, pause, resume after a restart, one sentence regenerated or edited, the studio going first,
export. Real widgets (offscreen), a real GGUF, real files made by the tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from s2studio.app import book_controller as bc
from s2studio.book import SentenceRef
from tests.app.drag_and_drop import drop_file

MANUSCRIPT = """# The Test Book

## Chapter One

The rain came early. It did not stop.

Nobody minded.

## Chapter Two

A door opened. Someone laughed.
"""


def _book_file(tmp_path: Path) -> Path:
    path = tmp_path / "book.md"
    path.write_text(MANUSCRIPT, encoding="utf-8")
    return path


def _window(make_window, fast_settings, tts_model, **overrides):
    window = make_window(fast_settings(tts_model, max_new_tokens=6, **overrides))
    window.book_view.parallel.setValue(2)
    return window


def _rendered(controller) -> dict[SentenceRef, str]:
    """Every sentence's key, for the rendered ones."""
    project = controller.project
    out = {}
    for job in project.manuscript.jobs(None, project.fingerprint):
        if project.is_rendered(job.key):
            out[job.ref] = job.key
    return out


def _sentence_files(controller) -> dict[str, int]:
    folder = Path(controller.project.folder) / "sentences"
    return {p.name: p.stat().st_mtime_ns for p in folder.glob("*.npy")}


def _render_to_end(qtbot, window, timeout=120_000):
    view = window.book_view
    with qtbot.waitSignal(window.book.render_finished, timeout=timeout) as blocker:
        view.render_button.click()
    qtbot.waitUntil(lambda: not window.book.rendering, timeout=10_000)
    return blocker.args[0]


def test_import_through_the_menu_path_lists_chapters_and_is_remembered(make_window, fast_settings, tts_model,
                                                                      tmp_path, isolated_dirs):
    window = _window(make_window, fast_settings, tts_model)
    path = _book_file(tmp_path)
    window.ask_book_path = lambda: str(path)  # the file dialog's answer; the import itself is the real one
    window.import_book_dialog()
    view = window.book_view
    assert window.showing_book
    assert view.chapters.rowCount() == 2
    assert view.chapters.item(0, 0).text() == "1. Chapter One"
    assert view.chapters.item(1, 1).text() == "0/2"
    assert view.sentences.rowCount() == 3  # the first chapter is shown: 3 sentences in 2 paragraphs
    folder = Path(window.book.project.folder)
    assert folder.parent == isolated_dirs / "projects" / "books" and (folder / "book.json").is_file()
    assert window.settings.book_folder == str(folder)


def test_a_dropped_epub_is_imported(make_window, fast_settings, tts_model, tmp_path, qtbot):
    ebooklib = pytest.importorskip("ebooklib")
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("t1")
    book.set_title("Dropped")
    book.set_language("en")
    book.add_author("A. Writer")
    chapters = []
    for i, text in enumerate(("First words here.", "Second words here."), start=1):
        c = epub.EpubHtml(title=f"Part {i}", file_name=f"c{i}.xhtml", lang="en")
        c.content = f"<html><body><h1>Part {i}</h1><p>{text}</p></body></html>"
        book.add_item(c)
        chapters.append(c)
    book.toc = chapters
    book.spine = chapters
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    path = tmp_path / "dropped.epub"
    epub.write_epub(str(path), book)
    assert ebooklib

    window = _window(make_window, fast_settings, tts_model)
    drop_file(window.editor.edit.viewport(), path)  # on the studio's editor: still a book, not a script
    assert window.showing_book
    assert window.book.project.manuscript.title == "Dropped"
    titles = [c.title for c in window.book.project.manuscript.chapters if c.included]
    assert titles == ["Part 1", "Part 2"]
    assert window.book_view.title.text() == "Dropped — A. Writer"


def test_an_unreadable_book_gives_a_banner(make_window, fast_settings, tts_model, tmp_path):
    window = _window(make_window, fast_settings, tts_model)
    bad = tmp_path / "broken.epub"
    bad.write_bytes(b"PK\x03\x04 this is not a zip")
    assert not window.import_book(str(bad))
    assert window.book_view.error_banner.isVisible()
    assert "broken.epub" in window.book_view.error_banner.text
    assert window.book.project is None


def test_render_pause_and_resume_after_a_restart(make_window, fast_settings, tts_model, tmp_path, qtbot,
                                                 isolated_dirs):
    from s2studio.app.settings import load_settings

    window = _window(make_window, fast_settings, tts_model)
    window.book_view.parallel.setValue(1)  # one at a time: the pause lands between sentences
    assert window.import_book(str(_book_file(tmp_path)))
    controller = window.book
    total = controller.project.manuscript.sentence_count
    paused = []
    controller.progressed.connect(lambda p: paused or (paused.append(p), controller.pause()))
    with qtbot.waitSignal(controller.render_finished, timeout=120_000) as blocker:
        window.book_view.render_button.click()
    summary = blocker.args[0]
    qtbot.waitUntil(lambda: controller.state == bc.PAUSED, timeout=10_000)
    assert summary.stopped == "paused" and 1 <= summary.rendered < total
    assert window.book_view.render_button.text() == "Resume"
    done_before = _rendered(controller)
    files_before = _sentence_files(controller)
    assert len(done_before) == summary.rendered

    window.close()  # the app quits; the open book is in the settings file
    settings = load_settings(isolated_dirs / "config" / "settings.json").settings
    assert settings.book_folder == controller.project.folder
    again = make_window(settings)
    again.book_view.parallel.setValue(2)
    assert again.book.project is not None and again.book.project.folder == settings.book_folder
    again.show_book()
    first_chapter = again.book_view.chapters.item(0, 1).text()
    assert first_chapter.startswith(f"{sum(1 for r in done_before if r.chapter == 0)}/")
    summary = _render_to_end(qtbot, again)
    assert summary.rendered == total - len(done_before) and summary.skipped == len(done_before)
    assert again.book.state == bc.DONE
    files_after = _sentence_files(again.book)
    assert all(files_after[name] == mtime for name, mtime in files_before.items())  # nothing rendered twice
    qtbot.waitUntil(lambda: again.book_view.progress.value() == total, timeout=5000)  # refreshed soon after


def test_regenerate_or_edit_one_sentence_renders_only_it(make_window, fast_settings, tts_model, tmp_path, qtbot):
    window = _window(make_window, fast_settings, tts_model)
    assert window.import_book(str(_book_file(tmp_path)))
    controller, view = window.book, window.book_view
    _render_to_end(qtbot, window)
    before = _rendered(controller)
    assert len(before) == controller.project.manuscript.sentence_count

    view.sentences.selectRow(1)
    ref = view.selected_ref()
    with qtbot.waitSignal(controller.render_finished, timeout=60_000) as blocker:
        view.regenerate_button.click()
    assert blocker.args[0].rendered == 1
    qtbot.waitUntil(lambda: controller.state == bc.DONE, timeout=10_000)
    after = _rendered(controller)
    assert after[ref] != before[ref]
    assert {r: k for r, k in after.items() if r != ref} == {r: k for r, k in before.items() if r != ref}

    # Edit the first sentence's text in the table: it alone renders again, the text shown changes.
    view.sentences.selectRow(0)
    first = view.selected_ref()
    with qtbot.waitSignal(controller.render_finished, timeout=60_000) as blocker:
        view.sentences.item(0, 0).setText("The rain came late.")
    assert blocker.args[0].rendered == 1
    assert controller.project.manuscript.sentence(first).text == "The rain came late."
    qtbot.waitUntil(lambda: controller.state == bc.DONE, timeout=10_000)
    edited = _rendered(controller)
    assert edited[first] != after[first]
    assert {r: k for r, k in edited.items() if r != first} == {r: k for r, k in after.items() if r != first}


def test_the_dictionary_changes_what_the_model_reads_not_the_text_shown(make_window, fast_settings, tts_model,
                                                                       tmp_path, qtbot):
    window = _window(make_window, fast_settings, tts_model)
    assert window.import_book(str(_book_file(tmp_path)))
    view, controller = window.book_view, window.book
    view.phrase.setText("rain")
    view.say.setText("drizzle")
    view.add_phrase_button.click()
    qtbot.waitUntil(lambda: view.dictionary.rowCount() == 1, timeout=2000)
    assert view.sentences.item(0, 0).text() == "The rain came early."
    assert "drizzle" in view.sentences.item(0, 0).toolTip()
    job = controller.project.manuscript.job(SentenceRef(0, 0, 0), "")
    assert job.model_text == "The drizzle came early."


def test_a_studio_take_goes_first_and_the_book_resumes(make_window, fast_settings, tts_model, tmp_path, qtbot):
    window = _window(make_window, fast_settings, tts_model)
    assert window.import_book(str(_book_file(tmp_path)))
    controller = window.book
    states = []
    controller.state_changed.connect(states.append)
    started = []
    controller.progressed.connect(lambda p: started.append(p))
    window.book_view.render_button.click()
    qtbot.waitUntil(lambda: bool(started), timeout=60_000)  # the model is loaded and the book under way
    window.show_studio()
    window.editor.set_text("Hello there.")
    with qtbot.waitSignal(window.worker.finished, timeout=60_000):
        window.generate()
    assert bc.WAITING in states
    qtbot.waitUntil(lambda: controller.state == bc.DONE, timeout=120_000)
    assert len(_rendered(controller)) == controller.project.manuscript.sentence_count


def test_export_writes_chapter_files_and_the_book_file(make_window, fast_settings, tts_model, tmp_path, qtbot):
    pytest.importorskip("av")
    window = _window(make_window, fast_settings, tts_model)
    assert window.import_book(str(_book_file(tmp_path)))
    _render_to_end(qtbot, window)
    view = window.book_view
    view.chapter_format.setCurrentIndex(view.chapter_format.findData("flac"))
    out = tmp_path / "out"
    with qtbot.waitSignal(window.book.exported, timeout=60_000) as blocker:
        assert view.export_to(str(out))
    outputs = blocker.args[0]
    assert [os.path.basename(o.path) for o in outputs] == ["01-Chapter-One.flac", "02-Chapter-Two.flac"]
    assert (out / "The-Test-Book.m4b").is_file() and (out / "report.txt").is_file()
    assert "Exported 2 chapter file(s)" in view.notice_banner.text


def _saved_voice(library, name: str, seed: int, voice_id: str | None = None):
    import numpy as np

    codes = np.random.default_rng(seed).integers(0, 128, size=(10, 24), dtype=np.int32)
    return library.save(voice_id, codes, f"This is {name} speaking.", name=name, codebook_size=128,
                        overwrite=voice_id is not None)


def _statuses(view) -> list[str]:
    return [view.sentences.item(row, 2).text() for row in range(view.sentences.rowCount())]


def test_a_chapter_voice_renders_only_that_chapter_again_and_so_does_re_recording_it(
        make_window, fast_settings, tts_model, tmp_path, qtbot):
    from s2studio.book import BookProject

    window = _window(make_window, fast_settings, tts_model)
    reader = _saved_voice(window.library, "Reader", seed=5)
    assert window.import_book(str(_book_file(tmp_path)))
    controller, view = window.book, window.book_view
    view.max_frames.setValue(6)  # short sentences on the tiny model
    assert view.apply_sampling()
    _render_to_end(qtbot, window)
    before = _rendered(controller)

    view.select_chapter(1)
    assert view.chapter_voice.isEnabled() and view.chapter_voice.currentData() is None
    assert view.chapter_voice.currentText() == "The narrator's voice (Model's own voice)"
    index = view.chapter_voice.findData(reader.id)
    assert view.chapter_voice.itemText(index) == "Reader"
    view.chapter_voice.setCurrentIndex(index)
    view.chapter_voice.activated.emit(index)  # what a click on the item sends
    assert controller.project.manuscript.chapters[1].voice == reader.id
    assert BookProject.open(controller.project.folder).manuscript.chapters[1].voice == reader.id  # autosaved
    qtbot.waitUntil(lambda: _statuses(view) == ["…", "…"], timeout=5000)
    assert [view.sentences.item(row, 1).text() for row in range(2)] == ["Reader", "Reader"]
    assert view.chapters.item(1, 1).text() == "0/2" and view.chapters.item(0, 1).text() == "3/3"
    kept = {r for r, k in _rendered(controller).items() if before.get(r) == k}
    assert kept == {r for r in before if r.chapter == 0}  # chapter one keeps its audio

    summary = _render_to_end(qtbot, window)
    assert (summary.rendered, summary.skipped) == (2, 3)
    with_voice = _rendered(controller)

    # The voice re-recorded under the same id: its sentences show as not rendered, and only they render.
    _saved_voice(window.library, "Reader", seed=6, voice_id=reader.id)
    window.book.voices_changed()  # what the window does when the voice library says it changed
    qtbot.waitUntil(lambda: _statuses(view) == ["…", "…"], timeout=5000)
    assert {r: k for r, k in _rendered(controller).items()} == {r: k for r, k in with_voice.items() if r.chapter == 0}
    summary = _render_to_end(qtbot, window)
    assert (summary.rendered, summary.skipped) == (2, 3)


def test_the_books_sampling_settings_are_saved_and_asked_about_before_re_rendering(
        make_window, fast_settings, tts_model, tmp_path, qtbot):
    from s2studio.book import BookProject

    window = _window(make_window, fast_settings, tts_model)
    assert window.import_book(str(_book_file(tmp_path)))
    controller, view = window.book, window.book_view
    total = controller.project.manuscript.sentence_count
    view.tabs.setCurrentIndex(view.tabs.indexOf(view.temperature.parentWidget()))
    assert (view.temperature.value(), view.top_p.value(), view.top_k.value(), view.max_frames.value()) == \
        (0.8, 0.8, 30, 1024)  # the book's own settings (the studio's say 8 frames: not the book's)
    asked = []
    view.ask_confirmation = lambda title, text: asked.append(text) or False
    view.max_frames.setValue(6)
    view.top_k.setValue(20)
    assert view.apply_sampling() and asked == []  # nothing rendered yet: nothing to ask
    saved = BookProject.open(controller.project.folder).manuscript.generation
    assert (saved.max_new_tokens, saved.top_k, saved.temperature) == (6, 20, 0.8)

    view.render_button.click()  # while it renders, the settings cannot change under it
    assert not view.apply_sampling_button.isEnabled()
    assert not controller.set_sampling(top_k=5) and "Pause the book's render" in view.error_banner.text
    qtbot.waitUntil(lambda: controller.state == bc.DONE, timeout=120_000)
    assert controller.rendered_count() == total

    view.temperature.setValue(0.5)
    assert not view.apply_sampling()  # the user said Cancel: nothing changes
    assert "every sentence of the book" in asked[0] and f"the {total} sentence(s) rendered" in asked[0]
    assert controller.project.manuscript.generation.temperature == 0.8 and controller.rendered_count() == total
    view.ask_confirmation = lambda title, text: True
    assert view.apply_sampling()
    assert controller.project.manuscript.generation.temperature == 0.5
    assert BookProject.open(controller.project.folder).manuscript.generation.temperature == 0.5
    assert controller.rendered_count() == 0  # every key changed
    qtbot.waitUntil(lambda: view.chapters.item(0, 1).text() == "0/3" and set(_statuses(view)) == {"…"}, timeout=5000)
    summary = _render_to_end(qtbot, window)
    assert summary.rendered == total

    # Out of range from anywhere but the boxes (which cannot go there): a clear message, no change.
    for values, message in (({"temperature": 2.5}, "Temperature must be from 0 to 2, not 2.5"),
                            ({"top_k": 1.5}, "Top-k must be a whole number from 0 to 4096"),
                            ({"max_new_tokens": 0}, "Max frames per sentence must be from 1 to 8192, not 0"),
                            ({"top_p": float("nan")}, "Top-p must be a number from 0 to 1")):
        assert not controller.set_sampling(**values)
        assert message in view.error_banner.text
    assert controller.project.manuscript.generation.temperature == 0.5


def test_on_a_server_the_keys_keep_its_engine_when_the_sampling_changes(qapp, tmp_path):
    """A server's model name is known only from a render (kept in render-state.json): changing the
    book's sampling settings recomputes the keys with it, not with nothing."""
    import json

    from s2studio.book import BookProject, Manuscript
    from s2studio.book.importing import import_book

    path = _book_file(tmp_path)
    project = BookProject.create(tmp_path / "book", Manuscript.from_import(import_book(str(path)), seed=1))
    server_engine = "s2-pro-q8.gguf on http://127.0.0.1:9|stride=16"
    project.fingerprint = project.manuscript.settings_fingerprint(server_engine)
    project.forget([])  # writes render-state.json with that fingerprint, as a render on the server did

    class RemoteChoice:  # the studio's settings when a server is chosen: no model file here
        url = "http://127.0.0.1:9"

    controller = bc.BookController(None, engine_for=None, engine_config=RemoteChoice, books_root=lambda: tmp_path)
    assert controller.open_folder(str(tmp_path / "book")) is not None
    assert json.loads(controller.project.fingerprint)["engine"] == server_engine
    assert controller.set_sampling(top_k=5)
    fingerprint = json.loads(controller.project.fingerprint)
    assert fingerprint["engine"] == server_engine and fingerprint["generation"]["top_k"] == 5


def test_refreshes_read_the_voice_library_once_per_reload(make_window, fast_settings, tts_model, tmp_path,
                                                         monkeypatch):
    """The sentence table names each row's voice and refreshes every 400 ms during a render: the
    voice folder is listed once per ``reload_voices`` (a library change, the view shown), not once
    per row and refresh. A voice saved afterwards appears after the next reload."""
    window = _window(make_window, fast_settings, tts_model)
    assert window.import_book(str(_book_file(tmp_path)))
    view = window.book_view
    calls = []
    real_list = window.library.list
    monkeypatch.setattr(window.library, "list", lambda: calls.append(1) or real_list())
    view.select_chapter(0)
    for _ in range(3):
        view.refresh()
    assert view.sentences.rowCount() == 3 and len(calls) == 0  # listed when the view was shown
    reader = _saved_voice(window.library, "Reader", seed=5)
    window.show_book()  # what the window does on a library change, too (reload_voices)
    view.refresh()
    view.refresh()
    assert len(calls) == 1
    assert view.narrator.findData(reader.id) >= 0 and view.chapter_voice.findData(reader.id) >= 0
