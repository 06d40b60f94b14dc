"""Every document a comment, docstring or doc points at is in the repository, and says what it is cited for.

References to the specification take one form, ``docs/spec/engine.md §8.1`` (a list may follow:
``docs/spec/engine.md §2, §9``), and the section must exist as a numbered heading of that file.
The old forms that pointed outside the repository ("spec §8.1", "codec spec §8.3", "ANCHORS
§4", "perf-anchor notes") and the old kernel module names (``qkernels``, ``qkernels_k``) must
not come back. Module paths named in ``docs/*.md`` must exist, so the docs follow renames.
"""

from __future__ import annotations

import glob
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED_DIRS = ("s2studio", "tests", "benchmarks", "tools", "devtools", "docs", "packaging")
SCANNED_FILES = ("README.md", "pyproject.toml", "setup.py")
SUFFIXES = {".py", ".md", ".toml", ".sh", ".c"}

# A path inside docs/ (trailing sentence punctuation is not part of it).
DOCS_PATH_RE = re.compile(r"(?<![\w/.-])docs/[\w./*-]*[\w*]")
# "docs/spec/engine.md §2, §9", "docs/spec/codec.md §3-§5", "docs/spec/engine.md §4.3 / §4.4".
SECTION_NUMBER = r"§\d+(?:\.\d+)*"
SECTION_REF_RE = re.compile(rf"(docs/[\w./-]+\.md)((?:\s*(?:,|/|and|-|–|to)?\s*{SECTION_NUMBER})+)")
ISSUE_SECTION_RE = re.compile(rf"\bissue \d+,? {SECTION_NUMBER}")
HEADING_RE = re.compile(r"^#{1,6}\s+(\d+(?:\.\d+)*)[.\s]", re.MULTILINE)
# Forms that pointed at documents outside the repository, or at modules that were renamed.
OLD_FORMS = {
    "a spec reference without its docs/spec/ path": re.compile(
        r"\bspec\s+(?:§|quirk|engine\.md|codec\.md)|\bcodec spec\b|(?<![\w/])(?:engine|codec)\.md\b"
        r"|\bquirk Q\d"),
    "the style anchors file (not in the repository)": re.compile(r"ANCHORS|perf-anchor"),
}
OLD_MODULE_NAME_RE = re.compile(r"\bqkernels(?:_k)?\b")
# Module paths in docs/*.md: relative to the root, to s2studio/ or to s2studio/engine/.
MODULE_PATH_RE = re.compile(r"(?<![\w/.-])((?:s2studio|engine|codec|model|text|voices|kernels|tests|benchmarks"
                            r"|tools|devtools|packaging)/[\w/*.-]*\.py)\b")
MODULE_ROOTS = (ROOT, ROOT / "s2studio", ROOT / "s2studio" / "engine")


def scanned_files() -> list[Path]:
    files = [ROOT / name for name in SCANNED_FILES if (ROOT / name).is_file()]
    for folder in SCANNED_DIRS:
        files += [p for p in sorted((ROOT / folder).rglob("*")) if p.suffix in SUFFIXES and p.is_file()]
    # This file is left out: its docstring and patterns show the old forms on purpose.
    return [p for p in files if "__pycache__" not in p.parts and p != Path(__file__).resolve()]


def prose_of(path: Path, text: str) -> str:
    """What people read: a Python file's comments and strings; any other file whole.

    Code is left out so a local alias (``import common as qkernels``) is not mistaken for a
    reference to a module that no longer exists."""
    if path.suffix != ".py":
        return text
    parts = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT or tok.type == getattr(tokenize, "FSTRING_MIDDLE", -1):
            parts.append(tok.string)
        elif tok.type == tokenize.STRING:
            prefix = re.match(r"[A-Za-z]*", tok.string).group(0).lower()
            # An f-string's replacement fields are code (before Python 3.12 it is one token).
            parts.append(re.sub(r"\{[^{}]*\}", "", tok.string) if "f" in prefix else tok.string)
    return "\n".join(parts)


def headings(doc: Path) -> set[str]:
    return set(HEADING_RE.findall(doc.read_text(encoding="utf-8")))


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


FILES = scanned_files()
TEXTS = {p: p.read_text(encoding="utf-8", errors="replace") for p in FILES}


def test_the_scan_sees_the_repository():
    assert ROOT / "s2studio" / "engine" / "pipeline.py" in TEXTS
    assert any(p.suffix == ".c" for p in FILES) and any(p.suffix == ".md" for p in FILES)


def test_every_docs_path_exists():
    missing = []
    for path, text in TEXTS.items():
        for m in DOCS_PATH_RE.finditer(text):
            target = m.group(0).rstrip(".")
            found = glob.glob(str(ROOT / target)) if "*" in target else (ROOT / target).exists()
            if not found:
                missing.append(f"{rel(path)}: {target}")
    assert not missing, "paths under docs/ that do not exist:\n" + "\n".join(missing)


def test_every_section_reference_resolves():
    broken = []
    for path, text in TEXTS.items():
        for m in SECTION_REF_RE.finditer(text):
            doc = ROOT / m.group(1)
            if not doc.is_file():
                broken.append(f"{rel(path)}: {m.group(0)} (no such file)")
                continue
            have = headings(doc)
            for number in re.findall(r"§(\d+(?:\.\d+)*)", m.group(2)):
                if number not in have:
                    broken.append(f"{rel(path)}: {m.group(1)} §{number} (no heading numbered {number})")
    assert not broken, "section references that do not resolve:\n" + "\n".join(broken)


def test_the_spec_documents_cross_reference_their_own_sections():
    spec = sorted((ROOT / "docs" / "spec").glob("*.md"))
    assert {p.name for p in spec} >= {"engine.md", "codec.md"}
    broken = []
    for doc in spec:
        text = SECTION_REF_RE.sub("", TEXTS[doc])  # references to another file were checked above
        have = headings(doc)
        for number in re.findall(r"§(\d+(?:\.\d+)*)", text):
            if number not in have:
                broken.append(f"{rel(doc)}: §{number}")
    assert not broken, "sections cited inside the spec that it does not have:\n" + "\n".join(broken)


def test_no_bare_section_numbers_in_code():
    """In code files a § belongs to a docs/ reference (or names an issue's goal)."""
    bare = []
    for path, text in TEXTS.items():
        if path.suffix == ".md":
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            rest = ISSUE_SECTION_RE.sub("", SECTION_REF_RE.sub("", line))
            if "§" in rest:
                bare.append(f"{rel(path)}:{lineno}: {line.strip()}")
    assert not bare, "a § without the document it belongs to:\n" + "\n".join(bare)


@pytest.mark.parametrize("what", sorted(OLD_FORMS))
def test_no_old_reference_forms(what):
    pattern = OLD_FORMS[what]
    found = []
    for path, text in TEXTS.items():
        if path.is_relative_to(ROOT / "docs" / "spec"):
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            if pattern.search(line):
                found.append(f"{rel(path)}:{lineno}: {line.strip()}")
    assert not found, f"{what}:\n" + "\n".join(found)


def test_no_old_module_names_in_prose():
    found = []
    for path, text in TEXTS.items():
        for line in prose_of(path, text).splitlines():
            if OLD_MODULE_NAME_RE.search(line):
                found.append(f"{rel(path)}: {line.strip()}")
    assert not found, "old module names (now s2studio/engine/kernels/):\n" + "\n".join(found)


def test_module_paths_in_the_docs_exist():
    missing = []
    for path in sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]:
        for m in MODULE_PATH_RE.finditer(TEXTS[path]):
            target = m.group(1)
            if not any(glob.glob(str(base / target)) for base in MODULE_ROOTS):
                missing.append(f"{rel(path)}: {target}")
    assert not missing, "module paths in the docs that do not exist:\n" + "\n".join(missing)


def test_old_kernel_module_names_are_gone_from_code_too():
    # The kernels live in s2studio/engine/kernels (common, quant_types); no alias keeps the old name.
    this = Path(__file__).resolve()
    found = [f"{p.relative_to(ROOT)}:{n}" for folder in ("s2studio", "tests", "benchmarks", "tools")
             for p in (ROOT / folder).rglob("*.py") if p.resolve() != this
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if OLD_MODULE_NAME_RE.search(line)]
    assert not found, found
