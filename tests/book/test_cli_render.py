"""``s2studio render`` in a subprocess: chapter files, the chaptered book read back with
another library than wrote it, loudness, SIGKILL mid-chapter then resume."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import soundfile as sf

from tests.book.books import MARKDOWN, TINY_MODEL, make_epub

FRAMES = "8"


def render_args(book: pathlib.Path, out: pathlib.Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "s2studio", "render", str(book), "-o", str(out), "-m", str(TINY_MODEL),
            "--codec-cpu", "--log-level", "error", "--voice-dir", str(out.parent / "voices"), "--max-tokens", FRAMES,
            "--min-tokens-before-end", FRAMES, "--seed", "42", *extra]


def render(book, out, *extra, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(render_args(book, out, *extra), capture_output=True, text=True, timeout=timeout)


def long_markdown(path: pathlib.Path) -> pathlib.Path:
    """Two chapters of 16 short sentences each: long enough to be killed half way."""
    words = ["Rain fell.", "Wind blew.", "Doors shut.", "Cats slept.", "Bells rang.", "Ships sailed.",
             "Lamps glowed.", "Leaves fell."]
    body = lambda k: "\n\n".join(" ".join(f"{w[:-1]} {k}{i}." for w in words[i % 8:i % 8 + 2]) for i in range(8))
    path.write_text(f"# Long\n\n## Part A\n\n{body('a')}\n\n## Part B\n\n{body('b')}\n", encoding="utf-8")
    return path


def test_render_writes_chapter_files_a_chaptered_book_and_a_report(tmp_path):
    import av
    import pyloudnorm
    from mutagen.mp4 import MP4

    book = tmp_path / "tiny.md"
    book.write_text(MARKDOWN, encoding="utf-8")
    out = tmp_path / "out"
    r = render(book, out, "--format", "wav", "--loudness", "podcast", "--parallel", "2", "--no-progress")
    assert r.returncode == 0, r.stderr
    names = sorted(p.name for p in out.iterdir())
    assert names == ["01-Chapter-One.wav", "02-Chapter-Two.wav", "The-Tiny-Book.m4b", "book-project", "report.json",
                     "report.txt"]
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("01-Chapter-One.wav: 0:") and "LUFS" in lines[0] and "ACX" in lines[0]
    durations = []
    for name in names[:2]:
        audio, rate = sf.read(out / name, dtype="float64")
        durations.append(len(audio) / rate)
        assert abs(pyloudnorm.Meter(rate).integrated_loudness(audio) - (-16.0)) <= 0.5
    # The M4B was written by PyAV (FFmpeg); mutagen reads its chapters back.
    mp4 = MP4(out / "The-Tiny-Book.m4b")
    assert [c.title for c in mp4.chapters] == ["Chapter One", "Chapter Two"]
    assert mp4.chapters[0].start == 0 and mp4.chapters[1].start == pytest.approx(durations[0], abs=0.05)
    assert mp4.info.length == pytest.approx(sum(durations), abs=0.1)
    assert mp4["\xa9nam"] == ["The Tiny Book"]
    report = json.loads((out / "report.json").read_text())
    assert [c["title"] for c in report["chapters"]] == ["Chapter One", "Chapter Two"]
    # The MP3 book's chapters were written by mutagen (ID3 CHAP/CTOC); FFmpeg (PyAV) reads them.
    # Everything is rendered already: no sentence is rendered again, no model loaded.
    again = render(book, out, "--format", "mp3", "--book-format", "mp3", "--loudness", "podcast", "--no-progress")
    assert again.returncode == 0, again.stderr
    assert "rendered 0 sentence(s)" in again.stderr and "5 already done" in again.stderr
    with av.open(str(out / "The-Tiny-Book.mp3")) as container:
        chapters = container.chapters()
    assert [c["metadata"]["title"] for c in chapters] == ["Chapter One", "Chapter Two"]
    starts = [float(c["start"] * c["time_base"]) for c in chapters]
    assert starts == pytest.approx([0.0, durations[0]], abs=0.05)


def test_an_epub_renders_with_its_title_author_and_cover(tmp_path):
    from mutagen.mp4 import MP4

    from tests.book.books import COVER

    out = tmp_path / "out"
    r = render(make_epub(tmp_path / "small.epub"), out, "--parallel", "4", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.glob("*.flac")) == ["01-The-Beginning.flac", "02-The-End.flac"]
    mp4 = MP4(out / "A-Small-Story.m4b")
    assert mp4["\xa9ART"] == ["Ada Writer"] and bytes(mp4["covr"][0]) == COVER
    assert [c.title for c in mp4.chapters] == ["The Beginning", "The End"]
    assert "ACX pass" in r.stdout  # the default preset is ACX's


def test_sigkill_mid_chapter_then_resume_equals_an_uninterrupted_render(tmp_path):
    book = long_markdown(tmp_path / "long.md")
    whole = tmp_path / "whole"
    r = render(book, whole, "--format", "wav", "--parallel", "1", "--no-progress")
    assert r.returncode == 0, r.stderr
    out = tmp_path / "killed"
    state = out / "book-project" / "render-state.json"
    proc = subprocess.Popen(render_args(book, out, "--format", "wav", "--parallel", "4", "--no-progress"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        done_at_kill: dict = {}
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                done_at_kill = json.loads(state.read_text())["sentences"]
            except (OSError, ValueError, KeyError):
                done_at_kill = {}
            if len(done_at_kill) >= 4:
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the render ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(30)
    assert 4 <= len(done_at_kill) < 32
    assert not list(out.glob("*.wav"))  # killed mid-chapter: no chapter file yet
    stamps = {k: os.stat(out / "book-project" / "sentences" / f"{k}.npy").st_mtime_ns for k in done_at_kill}
    resumed = render(book, out, "--format", "wav", "--parallel", "4", "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    already = int(resumed.stderr.split(" already done")[0].rsplit(";", 1)[1])
    assert already >= len(done_at_kill)
    for key, stamp in stamps.items():  # no finished sentence rendered again
        assert os.stat(out / "book-project" / "sentences" / f"{key}.npy").st_mtime_ns == stamp
    for name in ("01-Part-A.wav", "02-Part-B.wav"):
        np.testing.assert_array_equal(sf.read(out / name, dtype="float32")[0], sf.read(whole / name, dtype="float32")[0])
    assert not [p for p in (out / "book-project" / "sentences").iterdir() if not p.name.endswith(".npy")]


def test_edited_manuscript_rerenders_only_the_changed_sentence(tmp_path):
    book = tmp_path / "tiny.md"
    book.write_text(MARKDOWN, encoding="utf-8")
    out = tmp_path / "out"
    assert render(book, out, "--no-progress", "--book-format", "none").returncode == 0
    book.write_text(MARKDOWN.replace("Morning came.", "Evening came."), encoding="utf-8")
    r = render(book, out, "--no-progress", "--book-format", "none")
    assert r.returncode == 0, r.stderr
    assert "rendered 1 sentence(s)" in r.stderr and "4 already done" in r.stderr


def test_continuing_without_sampling_flags_keeps_the_books_own_settings(tmp_path):
    """A book's sampling settings are saved with it (the app's Book view sets them too): running
    again without the flags keeps them, and every sentence's audio; a flag given changes them."""
    book = tmp_path / "tiny.md"
    book.write_text(MARKDOWN, encoding="utf-8")
    out = tmp_path / "out"
    assert render(book, out, "--no-progress", "--book-format", "none", "--temp", "0.5").returncode == 0
    project = out / "book-project"
    bare = [sys.executable, "-m", "s2studio", "render", str(project), "-o", str(out), "-m", str(TINY_MODEL),
            "--codec-cpu", "--log-level", "error", "--voice-dir", str(tmp_path / "voices"), "--no-progress",
            "--book-format", "none"]
    r = subprocess.run(bare, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "rendered 0 sentence(s)" in r.stderr and "5 already done" in r.stderr, r.stderr
    generation = json.loads((project / "book.json").read_text())["generation"]
    assert (generation["temperature"], generation["max_new_tokens"], generation["top_k"]) == (0.5, int(FRAMES), 30)
    r = subprocess.run(bare + ["--top-k", "20", "--max-tokens", FRAMES, "--min-tokens-before-end", FRAMES],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "rendered 5 sentence(s)" in r.stderr, r.stderr
    assert json.loads((project / "book.json").read_text())["generation"]["top_k"] == 20


@pytest.mark.parametrize("args, fragment", [
    (["--parallel", "0"], "--parallel: must be 1 to 32"),
    (["--chapters", "5-3"], "a range goes up"),
    (["--chapters", "9"], "the book has 3 chapters"),
    (["--parallel", "9"], "parallel must be 1 to 8"),
    (["--loudness", "loud"], "invalid choice"),
])
def test_bad_flags_are_one_clear_line(tmp_path, args, fragment):
    book = tmp_path / "tiny.md"
    book.write_text(MARKDOWN, encoding="utf-8")
    r = render(book, tmp_path / "out", *args)
    assert r.returncode == 2 and fragment in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_missing_book_file_is_one_clear_line(tmp_path):
    r = render(tmp_path / "nope.epub", tmp_path / "out")
    assert r.returncode == 2 and "nope.epub" in r.stderr and "Traceback" not in r.stderr, r.stderr
