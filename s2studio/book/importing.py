"""A manuscript file (.txt, .md, .epub) → chapters of normalised paragraphs (docs/book.md).

Chapters come from the EPUB's spine (titled by its navigation), from Markdown headings, or from
"Chapter N"-style lines in plain text. Sections that are front matter (cover, title page,
copyright, contents, dedication...) or hold no words are kept but marked skippable, with the
reason, so a UI can show them and a render leaves them out unless asked.

Threat model: a book file comes from anyone. Sizes are bounded before anything is parsed (the
file, and an EPUB's uncompressed total, so a zip bomb fails before it is inflated); HTML is
parsed by BeautifulSoup without fetching anything it references.
"""

from __future__ import annotations

import os
import re
import zipfile
from dataclasses import dataclass, field

from s2studio.book.normalise import paragraphs_of
from s2studio.errors import InputError

MAX_BOOK_FILE_BYTES = 200 * 2**20  # an EPUB with images; a text file is far smaller
MAX_EPUB_UNCOMPRESSED_BYTES = 600 * 2**20
MAX_BOOK_CHARS = 20_000_000  # ~ 25 long novels: beyond that it is not one book
MAX_COVER_BYTES = 20 * 2**20
BOOK_EXTENSIONS = (".txt", ".md", ".markdown", ".epub")

# Titles / EPUB types / file names that mark a section as front or back matter.
_FRONT_MATTER = re.compile(
    r"\b(cover|title ?page|titlepage|half ?title|copyright|colophon|contents|table of contents|toc|dedication|"
    r"epigraph|acknowledge?ments?|about the (author|publisher)|also by|imprint|praise for|frontmatter|"
    r"front matter|landmarks|index)\b", re.IGNORECASE)
_CHAPTER_LINE = re.compile(
    r"^\s*(?:(?:chapter|part|book)\s+(?:\d{1,4}|[ivxlcdm]{1,8}|[a-z]+(?:[- ][a-z]+)?)\b[^\n]{0,70}"
    r"|prologue\b[^\n]{0,70}|epilogue\b[^\n]{0,70}|interlude\b[^\n]{0,70})\s*$", re.IGNORECASE)


@dataclass
class ImportedChapter:
    title: str
    paragraphs: list[str]
    skip_reason: str | None = None  # "front matter", "empty": skipped by a render unless asked

    @property
    def skippable(self) -> bool:
        return self.skip_reason is not None


@dataclass
class ImportedBook:
    title: str
    author: str = ""
    language: str = ""
    cover: bytes | None = None  # image bytes from the EPUB
    cover_mime: str = ""
    chapters: list[ImportedChapter] = field(default_factory=list)


def import_book(path: str | os.PathLike[str]) -> ImportedBook:
    """Read a .txt, .md or .epub file into chapters. Every problem is one ``InputError`` naming
    the file."""
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext not in BOOK_EXTENSIONS:
        raise InputError(f"Book file {path}: cannot import {ext or 'a file without extension'}; a book is a "
                         f"{', '.join(BOOK_EXTENSIONS)} file.")
    data = _read(path)
    if ext == ".epub":
        book = _import_epub(path, data)
    else:
        text = _decode_text(path, data)
        stem = os.path.splitext(os.path.basename(path))[0]
        book = _import_markdown(text, stem) if ext in (".md", ".markdown") else _import_text(text, stem)
    chars = sum(len(p) for c in book.chapters for p in c.paragraphs)
    if chars > MAX_BOOK_CHARS:
        raise InputError(f"Book file {path}: {chars} characters of text; at most {MAX_BOOK_CHARS} can be imported.")
    if not any(c.paragraphs for c in book.chapters):
        raise InputError(f"Book file {path}: there is no text in it to speak.")
    for chapter in book.chapters:
        if chapter.skip_reason is None and not chapter.paragraphs:
            chapter.skip_reason = "empty"
    return book


def _read(path: str) -> bytes:
    from s2studio.audio.atomic_file import read_regular_file

    try:
        return read_regular_file(path, MAX_BOOK_FILE_BYTES, what="book file")
    except InputError:
        raise
    except OSError as exc:
        raise InputError(f"Book file {path}: cannot be read ({exc.strerror or exc}).") from None


def _decode_text(path: str, data: bytes) -> str:
    if data.startswith(b"\xff\xfe") or data.startswith(b"\xfe\xff"):
        return data.decode("utf-16")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"Book file {path}: is not UTF-8 text (byte {exc.start}); save it as UTF-8.") from None


# ---- plain text ------------------------------------------------------------------------------------
def _import_text(text: str, stem: str) -> ImportedBook:
    """Chapters at lines such as "Chapter 3", "CHAPTER IV: The Sea", "Part Two", "Prologue"
    that stand alone (a blank line or the file's start before them)."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    heads = [i for i, line in enumerate(lines)
             if _CHAPTER_LINE.match(line) and (i == 0 or not lines[i - 1].strip())]
    if not heads:
        return ImportedBook(title=stem, chapters=[ImportedChapter(stem, paragraphs_of(text))])
    book = ImportedBook(title=stem)
    before = "\n".join(lines[:heads[0]])
    if before.strip():
        book.chapters.append(ImportedChapter("Front matter", paragraphs_of(before), "front matter"))
    for k, start in enumerate(heads):
        end = heads[k + 1] if k + 1 < len(heads) else len(lines)
        title = " ".join(lines[start].split())
        book.chapters.append(ImportedChapter(title, paragraphs_of("\n".join(lines[start + 1:end]))))
    return book


# ---- Markdown ----------------------------------------------------------------------------------------
_MD_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")


def _import_markdown(text: str, stem: str) -> ImportedBook:
    """Chapters at the shallowest heading level used more than once (a single ``# Title``
    above ``## Chapter`` headings is the book's title); front matter as in text files."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    in_fence = False
    headings: list[tuple[int, int, str]] = []  # (line, level, title)
    for i, line in enumerate(lines):
        if line.lstrip().startswith(("```", "~~~")):
            in_fence = not in_fence
            continue
        m = None if in_fence else _MD_HEADING.match(line)
        if m:
            headings.append((i, len(m.group(1)), _md_inline(m.group(2))))
    book = ImportedBook(title=stem)
    levels = sorted({lvl for _, lvl, _ in headings})
    level = next((lvl for lvl in levels if sum(1 for _, x, _ in headings if x == lvl) > 1), levels[0] if levels else 0)
    tops = [(i, lvl, t) for i, lvl, t in headings if lvl < level]
    if len(tops) == 1 and tops[0][1] == 1:
        book.title = tops[0][2]
    chapter_heads = [(i, t) for i, lvl, t in headings if lvl == level]
    if not chapter_heads:
        book.chapters.append(ImportedChapter(book.title, paragraphs_of(_md_body(lines))))
        return book
    before = [line for k, line in enumerate(lines[:chapter_heads[0][0]]) if not (tops and k == tops[0][0])]
    if _md_body(before).strip():
        book.chapters.append(ImportedChapter("Front matter", paragraphs_of(_md_body(before)), "front matter"))
    for k, (start, title) in enumerate(chapter_heads):
        end = chapter_heads[k + 1][0] if k + 1 < len(chapter_heads) else len(lines)
        body = paragraphs_of(_md_body(lines[start + 1:end]))
        book.chapters.append(ImportedChapter(title, body, "front matter" if _FRONT_MATTER.fullmatch(title.strip())
                                             else None))
    return book


def _md_body(lines: list[str]) -> str:
    """Markdown to plain text: code blocks, images, HTML tags and markup dropped; link text
    kept; a deeper heading becomes a paragraph of its own."""
    out, in_fence = [], False
    for line in lines:
        if line.lstrip().startswith(("```", "~~~")):
            in_fence = not in_fence
            continue
        if in_fence or re.match(r"^\s*([-*_]\s*){3,}$", line):
            continue
        m = _MD_HEADING.match(line)
        if m:
            out.extend(["", _md_inline(m.group(2)), ""])
            continue
        line = re.sub(r"^\s{0,3}>\s?", "", line)  # block quote
        line = re.sub(r"^\s*(?:[-*+]|\d+[.)])\s+", "", line)  # list item
        out.append(_md_inline(line))
    return "\n".join(out)


def _md_inline(text: str) -> str:
    text = re.sub(r"!\[[^\]]*\]\([^)]*\)", "", text)  # images
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: their text
    text = re.sub(r"<(?!\|speaker:\d{1,3}\|>)[^>]+>", "", text)  # inline HTML; a <|speaker:N|> turn stays
    text = re.sub(r"(\*\*|__|\*|`)(?=\S)(.+?)(?<=\S)\1", r"\2", text)  # emphasis, code
    text = re.sub(r"(?<!\w)_(?=\S)(.+?)(?<=\S)_(?!\w)", r"\1", text)
    return text


# ---- EPUB ---------------------------------------------------------------------------------------
def _import_epub(path: str, data: bytes) -> ImportedBook:
    import io

    import ebooklib
    from ebooklib import epub

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            inflated = sum(info.file_size for info in zf.infolist())
    except zipfile.BadZipFile:
        raise InputError(f"Book file {path}: is not an EPUB (not a zip archive).") from None
    if inflated > MAX_EPUB_UNCOMPRESSED_BYTES:
        raise InputError(f"Book file {path}: unpacks to {inflated} bytes; at most {MAX_EPUB_UNCOMPRESSED_BYTES} "
                         "are read from an EPUB.")
    try:
        book = epub.read_epub(io.BytesIO(data), options={"ignore_ncx": False})
    except Exception as exc:  # ebooklib raises anything from KeyError to lxml errors on a bad file
        raise InputError(f"Book file {path}: is not a readable EPUB ({type(exc).__name__}: {exc}).") from None

    def meta(name: str) -> str:
        values = book.get_metadata("DC", name)
        return " ".join(str(values[0][0]).split()) if values and values[0][0] else ""

    out = ImportedBook(title=meta("title") or os.path.splitext(os.path.basename(path))[0], author=meta("creator"),
                       language=meta("language"))
    out.cover, out.cover_mime = _epub_cover(book, ebooklib)
    titles = _toc_titles(book.toc)
    for idref, _linear in book.spine:
        item = book.get_item_with_id(idref)
        if item is None or item.get_type() not in (ebooklib.ITEM_DOCUMENT, ebooklib.ITEM_NAVIGATION):
            continue
        name = item.get_name()
        soup_text, heading, epub_type = _html_text(item.get_content())
        stem = os.path.splitext(os.path.basename(name))[0].replace("_", " ").replace("-", " ")
        title = titles.get(name) or titles.get(os.path.basename(name)) or heading or \
            (stem.strip().capitalize() if _FRONT_MATTER.search(stem) else f"Section {len(out.chapters) + 1}")
        reason = None
        if item.get_type() == ebooklib.ITEM_NAVIGATION or isinstance(item, epub.EpubNav):
            reason = "front matter"
        elif _FRONT_MATTER.search(epub_type) or _FRONT_MATTER.fullmatch(title.strip()) or \
                _FRONT_MATTER.search(stem):
            reason = "front matter"
        paragraphs = paragraphs_of(soup_text)
        if paragraphs and heading and paragraphs[0] == " ".join(heading.split()):
            paragraphs = paragraphs[1:]  # the heading is the chapter's title, not its first paragraph
        out.chapters.append(ImportedChapter(title, paragraphs, reason))
    return out


def _toc_titles(toc) -> dict[str, str]:
    """File name (without fragment) → the navigation's title for it (the first entry wins)."""
    from ebooklib import epub

    titles: dict[str, str] = {}

    def walk(entries) -> None:
        for entry in entries:
            if isinstance(entry, tuple):  # (Section, children)
                section, children = entry
                if getattr(section, "href", None):
                    titles.setdefault(section.href.split("#")[0], " ".join(section.title.split()))
                walk(children)
            elif isinstance(entry, (epub.Link, epub.EpubHtml)) and getattr(entry, "href", None) is not None:
                titles.setdefault(entry.href.split("#")[0], " ".join((entry.title or "").split()))
            elif isinstance(entry, list):
                walk(entry)

    walk(toc)
    return {k: v for k, v in titles.items() if v}


_BLOCKS = ("p", "div", "h1", "h2", "h3", "h4", "h5", "h6", "li", "blockquote", "pre", "tr", "dt", "dd",
           "section", "article", "header", "footer", "aside", "figcaption", "br", "hr")


def _html_text(content: bytes) -> tuple[str, str, str]:
    """(text with a blank line between blocks, the first heading, the epub:type words)."""
    import warnings

    from bs4 import BeautifulSoup, XMLParsedAsHTMLWarning

    with warnings.catch_warnings():
        # XHTML read by the forgiving HTML parser on purpose: EPUBs in the wild are often not
        # well-formed XML.
        warnings.simplefilter("ignore", XMLParsedAsHTMLWarning)
        soup = BeautifulSoup(content, "lxml")
    for tag in soup(["script", "style", "head", "svg", "math", "img"]):
        tag.decompose()
    types = " ".join(str(t.get("epub:type", "")) for t in soup.find_all(attrs={"epub:type": True}))
    heading_tag = soup.find(["h1", "h2", "h3"])
    heading = " ".join(heading_tag.get_text(" ").split()) if heading_tag else ""
    for tag in soup.find_all("br"):
        tag.replace_with("\n")
    for tag in soup.find_all(_BLOCKS):
        tag.insert_before("\n\n")
        tag.insert_after("\n\n")
    text = soup.get_text()
    # A blank line between blocks; inside a block, line breaks stay (normalisation joins a word
    # hyphenated at a line end, then the paragraph's lines).
    blocks = ["\n".join(" ".join(line.split()) for line in b.split("\n") if line.strip())
              for b in re.split(r"\n\s*\n", text)]
    return "\n\n".join(b for b in blocks if b), heading, types


def _epub_cover(book, ebooklib) -> tuple[bytes | None, str]:
    candidates = list(book.get_items_of_type(ebooklib.ITEM_COVER))
    for meta_value, attrs in book.get_metadata("OPF", "cover"):
        item = book.get_item_with_id(attrs.get("content", "")) if isinstance(attrs, dict) else None
        if item is not None:
            candidates.append(item)
    for item in candidates:
        content = item.get_content()
        mime = getattr(item, "media_type", "") or ""
        if content and len(content) <= MAX_COVER_BYTES and mime in ("image/jpeg", "image/png"):
            return content, mime
    return None, ""
