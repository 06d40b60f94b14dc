"""Books made by the tests: an EPUB (ebooklib), Markdown and text manuscripts; the tiny model."""

from __future__ import annotations

import pathlib

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden"
TINY_MODEL = GOLDEN / "tts_f32" / "model.gguf"
# A 1x1 JPEG: the smallest cover there is.
COVER = bytes.fromhex(
    "ffd8ffe000104a46494600010100000100010000ffdb004300080606070605080707070909080a0c140d0c0b0b0c1912130f141d1a1f1e"
    "1d1a1c1c20242e2720222c231c1c2837292c30313434341f27393d38323c2e333432ffc0000b080001000101011100ffc4001f000001"
    "0501010101010100000000000000000102030405060708090a0bffc400b5100002010303020403050504040000017d01020300041105"
    "122131410613516107227114328191a1082342b1c11552d1f02433627282090a161718191a25262728292a3435363738393a43444546"
    "4748494a535455565758595a636465666768696a737475767778797a838485868788898a92939495969798999aa2a3a4a5a6a7a8a9aa"
    "b2b3b4b5b6b7b8b9bac2c3c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae1e2e3e4e5e6e7e8e9eaf1f2f3f4f5f6f7f8f9faffda0008010100"
    "003f00fbd3ffd9")

MARKDOWN = """# The Tiny Book

A note before the first chapter.

## Chapter One

It was a dark night -- the wind howled. "Come in," she said.

The door opened; nobody was there.

## Chapter Two

Morning came. The end.
"""


def make_epub(path: pathlib.Path) -> pathlib.Path:
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("tiny-book-1")
    book.set_title("A Small Story")
    book.set_language("en")
    book.add_author("Ada Writer")
    book.set_cover("cover.jpg", COVER, create_page=True)
    pages = [
        ("copyright.xhtml", "Copyright", "<h1>Copyright</h1><p>All rights reserved. 2026.</p>"),
        ("ch1.xhtml", "The Beginning",
         "<h1>The Beginning</h1><p>\u201cHello,\u201d said the fox.</p><p>The sun was up.<br/>Birds sang.</p>"
         "<p class='pagenum'>12</p><p>A very long exam-\nple of a broken word.</p>"),
        ("ch2.xhtml", "The End", "<h2>The End</h2><p>They all went home.</p>"),
        ("blank.xhtml", "Notes", "<div><img src='x.png'/></div>"),
    ]
    items = []
    for name, title, body in pages:
        item = epub.EpubHtml(title=title, file_name=name, lang="en")
        item.content = f"<html><body>{body}</body></html>"
        book.add_item(item)
        items.append(item)
    book.toc = [epub.Link(i.file_name, t, i.file_name.split(".")[0]) for i, (_, t, _) in zip(items, pages)]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["cover", "nav"] + items
    epub.write_epub(str(path), book)
    return path
