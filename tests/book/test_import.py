"""Manuscripts made by the tests import to the expected chapters, normalised as documented."""

from __future__ import annotations

import zipfile

import pytest

from s2studio.book import import_book
from s2studio.book.normalise import normalise_text, paragraphs_of
from s2studio.errors import InputError

from tests.book.books import COVER, MARKDOWN, make_epub


def test_an_epub_imports_its_spine_titled_by_its_navigation(tmp_path):
    book = import_book(make_epub(tmp_path / "small.epub"))
    assert (book.title, book.author, book.language) == ("A Small Story", "Ada Writer", "en")
    assert book.cover == COVER and book.cover_mime == "image/jpeg"
    titles = [(c.title, c.skip_reason) for c in book.chapters]
    assert titles == [("Cover", "front matter"), ("A Small Story", "front matter"), ("Copyright", "front matter"),
                      ("The Beginning", None), ("The End", None), ("Notes", "empty")]
    beginning = book.chapters[3].paragraphs
    # Curly quotes straightened, <br/> inside a paragraph joined, the page number dropped, the
    # word hyphenated at a line end joined, the heading not repeated as a paragraph.
    assert beginning == ['"Hello," said the fox.', "The sun was up. Birds sang.",
                         "A very long example of a broken word."]
    assert book.chapters[4].paragraphs == ["They all went home."]


def test_markdown_chapters_come_from_its_headings(tmp_path):
    path = tmp_path / "tiny.md"
    path.write_text(MARKDOWN, encoding="utf-8")
    book = import_book(path)
    assert book.title == "The Tiny Book"
    assert [(c.title, c.skip_reason) for c in book.chapters] == [
        ("Front matter", "front matter"), ("Chapter One", None), ("Chapter Two", None)]
    assert book.chapters[1].paragraphs == ['It was a dark night \u2014 the wind howled. "Come in," she said.',
                                           "The door opened; nobody was there."]


def test_markdown_markup_is_not_read_aloud(tmp_path):
    path = tmp_path / "m.md"
    path.write_text("# One\n\nSome **bold** and *soft* words, a [link](http://x.y) and `code`.\n\n"
                    "![a picture](p.png)\n\n```\nprint('no')\n```\n\n- a list item\n\n# Two\n\n> quoted text\n",
                    encoding="utf-8")
    book = import_book(path)
    assert [c.title for c in book.chapters] == ["One", "Two"]
    assert book.chapters[0].paragraphs == ["Some bold and soft words, a link and code.", "a list item"]
    assert book.chapters[1].paragraphs == ["quoted text"]


def test_speaker_turns_survive_the_markdown_import(tmp_path):
    """<|speaker:N|> looks like inline HTML but is a turn of the cast: kept, and split into turns."""
    from s2studio.book import Manuscript

    path = tmp_path / "turns.md"
    path.write_text("# T\n\n## One\n\n<|speaker:1|>Is anyone <b>there</b>? <|speaker:0|>Only the sea.\n",
                    encoding="utf-8")
    book = import_book(path)
    assert book.chapters[0].paragraphs[-1] == "<|speaker:1|>Is anyone there? <|speaker:0|>Only the sea."
    sentences = [(s.speaker, s.text) for p in Manuscript.from_import(book).chapters[0].paragraphs for s in p.sentences]
    assert sentences[-2:] == [(1, "Is anyone there?"), (0, "Only the sea.")]


def test_text_chapters_come_from_chapter_lines(tmp_path):
    path = tmp_path / "novel.txt"
    path.write_text("The Novel\nby Someone\n\nCHAPTER I\n\nIt began.\n\n7\n\nChapter 2: The Sea\n\nWaves.\r\n"
                    "More waves.\n\nEpilogue\n\nDone.\n", encoding="utf-8")
    book = import_book(path)
    assert [(c.title, c.skip_reason) for c in book.chapters] == [
        ("Front matter", "front matter"), ("CHAPTER I", None), ("Chapter 2: The Sea", None), ("Epilogue", None)]
    assert book.chapters[1].paragraphs == ["It began."]  # the page number "7" is gone
    assert book.chapters[2].paragraphs == ["Waves. More waves."]


def test_text_without_chapter_lines_is_one_chapter(tmp_path):
    path = tmp_path / "note.txt"
    path.write_text("Just a note.\n\nTwo paragraphs.", encoding="utf-8")
    book = import_book(path)
    assert [(c.title, c.paragraphs) for c in book.chapters] == [("note", ["Just a note.", "Two paragraphs."])]


@pytest.mark.parametrize("raw, expected", [
    ("\u201cQuoted\u201d and \u2018single\u2019, don\u2019t", "\"Quoted\" and 'single', don't"),
    ("wait -- what --- now", "wait \u2014 what \u2014 now"),
    ("pages 10\u201312 and 3\u22124", "pages 10\u201312 and 3\u20134"),
    ("one - two", "one \u2014 two"),
    ("well-\nknown", "wellknown"),
    ("well-\nKnown", "well-\nKnown"),
    ("a\u00a0b\u2009c  d\u00adz\u200b", "a b c dz"),
    ("text\n- 12 -\nmore\nPage 3\n[4]\nxii\nI\n", "text\nmore\nI\n"),
    ("line\r\nnext\rlast\fpage", "line\nnext\nlast\n\npage"),
])
def test_each_normalisation_rule(raw, expected):
    assert normalise_text(raw) == expected


def test_paragraphs_are_blocks_between_blank_lines():
    assert paragraphs_of("one\ntwo\n\n\n  three  \n") == ["one two", "three"]


def test_bad_book_files_are_one_clear_error(tmp_path):
    cases = {
        "book.pdf": (b"%PDF", "cannot import .pdf"),
        "bad.epub": (b"not a zip", "is not an EPUB"),
        "latin1.txt": ("caf\u00e9".encode("latin-1"), "is not UTF-8"),
        "empty.md": (b"# Title\n\n", "no text"),
    }
    for name, (data, fragment) in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(InputError, match=fragment) as err:
            import_book(path)
        assert str(path) in str(err.value)
    with pytest.raises(InputError, match="cannot be read"):
        import_book(tmp_path / "missing.txt")


def test_an_epub_that_inflates_too_far_is_refused_before_it_is_read(tmp_path, monkeypatch):
    from s2studio.book import importing

    path = tmp_path / "bomb.epub"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("mimetype", "application/epub+zip")
        zf.writestr("big.xhtml", b"<p>" + b"a" * 2_000_000 + b"</p>")
    monkeypatch.setattr(importing, "MAX_EPUB_UNCOMPRESSED_BYTES", 1_000_000)
    with pytest.raises(InputError, match="unpacks to"):
        import_book(path)
