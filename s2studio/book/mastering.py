"""From rendered sentences to the finished files: each chapter assembled with room tone,
mastered to a loudness preset and written as ``NN-<title>.<ext>``, one chaptered book file
(.m4b / .mp3) and a report (docs/book.md, "Output").

A chapter is: ``HEAD_ROOM_TONE_MS`` of room tone, its sentences with ``sentence_pause_ms``
between sentences of a paragraph and ``paragraph_pause_ms`` between paragraphs, then
``chapter_pause_ms`` of room tone at the end (ACX asks for 0.5–1 s at the start and 1–5 s at the
end). The speech is normalised with the gaps silent, then room tone (quiet noise, not digital
silence) fills the gaps: BS.1770's gate ignores it, so it does not move the measured loudness.
One chapter is in memory at a time.
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from dataclasses import dataclass

import numpy as np

from s2studio.audio.loudness import LoudnessReport, measure, normalise, preset, room_tone
from s2studio.book.project import BookProject
from s2studio.errors import InputError

HEAD_ROOM_TONE_MS = 750
CHAPTER_FORMATS = ("wav", "flac", "mp3")
REPORT_FILE = "report.txt"


@dataclass
class ChapterOutput:
    index: int  # in the manuscript
    title: str
    path: str | None  # None: not written (sentences missing)
    report: LoudnessReport | None
    missing: int = 0  # sentences not rendered (or failed)


def chapter_audio(project: BookProject, chapter: int) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(samples, gap mask, sample rate, missing sentences) of one chapter, before mastering."""
    m = project.manuscript
    ch = m.chapters[chapter]
    pieces: list[np.ndarray] = []
    gaps: list[bool] = []
    rate, missing = None, 0
    jobs = {(j.ref.paragraph, j.ref.sentence): j for j in m.jobs([chapter], project.fingerprint)}

    def gap(ms: int) -> None:
        pieces.append(np.zeros(int(round(ms * (rate or 44100) / 1000)), np.float32))
        gaps.append(True)

    for p, paragraph in enumerate(ch.paragraphs):
        for s in range(len(paragraph.sentences)):
            job = jobs[(p, s)]
            if not project.is_rendered(job.key):
                missing += 1
                continue
            audio, r = project.audio_of(job.key)
            if rate is None:
                rate = r
                gap(HEAD_ROOM_TONE_MS)
            elif r != rate:
                raise InputError(f"Book {project.folder}: sentences were rendered at {rate} and {r} Hz; render "
                                 "again with --restart.")
            if pieces and not gaps[-1]:
                gap(m.sentence_pause_ms if s > 0 else m.paragraph_pause_ms)
            pieces.append(audio)
            gaps.append(False)
    if rate is None:
        return np.zeros(0, np.float32), np.zeros(0, bool), 44100, missing
    gap(m.chapter_pause_ms)
    mask = np.concatenate([np.full(len(x), g) for x, g in zip(pieces, gaps)])
    return np.concatenate(pieces), mask, rate, missing


def master_chapter(samples: np.ndarray, gap_mask: np.ndarray, rate: int, loudness: str, seed: int = 0
                   ) -> np.ndarray:
    out = normalise(samples, rate, preset(loudness))
    tone = room_tone(int(gap_mask.sum()), seed)
    out = out.copy()
    out[gap_mask] += tone
    return out


def chapter_file_name(number: int, title: str, ext: str) -> str:
    """``NN-<title>.<ext>``: the title made safe for every file system (letters, digits, spaces
    as dashes; at most 60 characters)."""
    text = unicodedata.normalize("NFKD", title)
    text = "".join(c for c in text if not unicodedata.combining(c))
    slug = re.sub(r"[^\w]+", "-", text, flags=re.UNICODE).strip("-_")[:60].strip("-_") or "chapter"
    return f"{number:02d}-{slug}.{ext}"


def export_book(project: BookProject, outdir: str, *, chapters: list[int] | None = None, fmt: str = "wav",
                loudness: str = "acx", book_format: str | None = "m4b",
                on_chapter=None) -> list[ChapterOutput]:
    """Write every chapter (default: the included ones) that is fully rendered, the book file
    (of those chapters, when all of them are complete) and the report. ``on_chapter(output)``
    after each chapter."""
    from s2studio.audio import write_audio_file
    from s2studio.audio.chaptered import BookTags, ChapteredBookWriter

    if fmt not in CHAPTER_FORMATS:
        raise InputError(f"A chapter file is {', '.join(CHAPTER_FORMATS)}, not {fmt!r}.")
    preset(loudness)
    m = project.manuscript
    wanted = chapters if chapters is not None else [i for i, c in enumerate(m.chapters) if c.included]
    os.makedirs(outdir, exist_ok=True)
    outputs: list[ChapterOutput] = []
    book = None
    complete = all(project.chapter_progress(c)[0] == project.chapter_progress(c)[1] for c in wanted)
    if book_format and complete and wanted:
        cover = project.cover()
        tags = BookTags(m.title, m.author, cover[0] if cover else None, cover[1] if cover else "image/jpeg")
        book = ChapteredBookWriter(os.path.join(outdir, book_file_name(m.title, book_format)), _rate(project, wanted),
                                   tags)
    try:
        for number, c in enumerate(wanted, start=1):
            title = m.chapters[c].title
            samples, mask, rate, missing = chapter_audio(project, c)
            if missing or not len(samples):
                out = ChapterOutput(c, title, None, None, missing)
            else:
                audio = master_chapter(samples, mask, rate, loudness, seed=c)
                path = os.path.join(outdir, chapter_file_name(number, title, fmt))
                write_audio_file(path, audio, rate)
                out = ChapterOutput(c, title, path, measure(audio, rate))
                if book is not None:
                    book.add_chapter(title, audio)
            outputs.append(out)
            if on_chapter is not None:
                on_chapter(out)
        if book is not None:
            book.close()
    finally:
        if book is not None:
            book.abort()
    write_report(project, outdir, outputs, loudness, book.path if book is not None else None)
    return outputs


def _rate(project: BookProject, chapters: list[int]) -> int:
    for c in chapters:
        for job in project.manuscript.jobs([c], project.fingerprint):
            return project.audio_of(job.key)[1]
    return 44100


def book_file_name(title: str, ext: str) -> str:
    return chapter_file_name(0, title or "book", ext)[3:]


def report_line(out: ChapterOutput) -> str:
    if out.path is None:
        return f"{out.title}: not written, {out.missing} sentence(s) not rendered"
    r = out.report
    verdict = "ACX pass" if r.acx_pass else "ACX fail: " + "; ".join(r.acx_problems)
    minutes, seconds = divmod(r.duration_s, 60)
    return (f"{os.path.basename(out.path)}: {int(minutes)}:{seconds:04.1f}, {r.integrated_lufs:.1f} LUFS, "
            f"RMS {r.rms_dbfs:.1f} dB, peak {r.peak_dbfs:.1f} dBFS, noise floor {r.noise_floor_dbfs:.1f} dB, {verdict}")


def write_report(project: BookProject, outdir: str, outputs: list[ChapterOutput], loudness: str,
                 book_path: str | None) -> None:
    from s2studio.audio.atomic_file import atomic_output

    lines = [f"{project.manuscript.title} — loudness preset {loudness}", ""]
    lines += [report_line(o) for o in outputs]
    lines += ["", f"book file: {os.path.basename(book_path)}" if book_path else "book file: not written (chapters "
              "missing)"]
    with atomic_output(os.path.join(outdir, REPORT_FILE)) as fh:
        fh.write(("\n".join(lines) + "\n").encode())
    data = [{"chapter": o.index + 1, "title": o.title, "file": os.path.basename(o.path) if o.path else None,
             "missing_sentences": o.missing,
             **({"duration_s": _num(o.report.duration_s), "integrated_lufs": _num(o.report.integrated_lufs),
                 "rms_dbfs": _num(o.report.rms_dbfs), "peak_dbfs": _num(o.report.peak_dbfs),
                 "noise_floor_dbfs": _num(o.report.noise_floor_dbfs), "acx_pass": o.report.acx_pass,
                 "acx_problems": o.report.acx_problems} if o.report else {})} for o in outputs]
    with atomic_output(os.path.join(outdir, "report.json")) as fh:
        fh.write(json.dumps({"title": project.manuscript.title, "loudness": loudness, "chapters": data,
                             "book_file": os.path.basename(book_path) if book_path else None},
                            indent=1, allow_nan=False).encode())


def _num(x: float) -> float | None:
    """JSON has no infinity (the loudness of silence): null."""
    return round(float(x), 3) if np.isfinite(x) else None
