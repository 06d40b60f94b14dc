"""``s2studio render INPUT -o OUTDIR``: a manuscript (.txt, .md, .epub) or a book project folder
to chapter files, one chaptered book file and a report (docs/book.md).

The book project lives in ``OUTDIR/book-project`` (manuscript, render state, every rendered
sentence). Running the same command again continues where the last run stopped (after a crash
or Ctrl+C too); an edited input file is imported again and only its changed sentences are
rendered; ``--restart`` starts over; sampling flags not given keep the book's own settings (the
app's Book view sets them too). Self-contained on purpose: the other commands' progress
display is being reworked, and this one only shares the option helpers.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

from s2studio.cli.options import add_engine_options, add_sampling_options, engine_settings

PROJECT_FOLDER = "book-project"
# argparse dest -> GenerationParams field, for the sampling flags a book keeps between runs
SAMPLING_FLAGS = {"max_tokens": "max_new_tokens", "temperature": "temperature", "top_p": "top_p", "top_k": "top_k",
                  "min_tokens_before_end": "min_tokens_before_end"}


def chapters_arg(text: str) -> list[tuple[int, int]]:
    """``3-5``, ``2``, ``1,3-4`` → 1-based inclusive ranges (checked against the book later)."""
    ranges = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d{1,5})\s*(?:-\s*(\d{1,5})\s*)?", part)
        if not m:
            raise argparse.ArgumentTypeError(f"{text!r}: give chapter numbers or ranges, e.g. 3-5 or 1,4-6")
        first, last = int(m.group(1)), int(m.group(2) or m.group(1))
        if first < 1 or last < first:
            raise argparse.ArgumentTypeError(f"{part.strip()!r}: chapters count from 1, a range goes up (3-5)")
        ranges.append((first, last))
    return ranges


def parallel_arg(text: str) -> int:
    from s2studio.book.renderer import MAX_PARALLEL

    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= n <= MAX_PARALLEL:
        raise argparse.ArgumentTypeError(f"must be 1 to {MAX_PARALLEL} (a local engine: 1 to 8)")
    return n


def read_dictionary(path: str):
    """A pronunciation file: one ``phrase = how to say it`` per line (``==``: match case);
    ``#`` starts a comment."""
    from s2studio.audio.atomic_file import read_regular_file
    from s2studio.book.dictionary import PronunciationDictionary
    from s2studio.errors import InputError

    try:
        text = read_regular_file(path, 2**20, what="pronunciation file").decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"Pronunciation file {path}: cannot be read ({exc}).") from None
    out = PronunciationDictionary()
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match_case = "==" in line
        phrase, sep, say = line.partition("==" if match_case else "=")
        if not sep or not phrase.strip() or not say.strip():
            raise InputError(f"Pronunciation file {path}, line {number}: write 'phrase = how to say it'.")
        try:
            out.add(phrase, say, match_case=match_case)
        except InputError as exc:
            raise InputError(f"Pronunciation file {path}, line {number}: {exc}") from None
    return out


class RenderProgressLine:
    """Chapter, sentence, %, elapsed and time left on stderr: one line rewritten on a terminal,
    a line every 10 % otherwise (logs stay short)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.last_tenth = -1

    def __call__(self, p) -> None:
        if not self.enabled:
            return
        percent = 100.0 * p.done / max(p.total, 1)
        left = _clock(p.eta_s) if p.eta_s is not None else "?"
        line = (f"chapter {p.chapter + 1} \"{p.chapter_title[:40]}\"  sentence {p.chapter_done}/{p.chapter_total}  "
                f"{percent:5.1f}%  elapsed {_clock(p.elapsed_s)}  left {left}")
        if self.tty:
            print("\r" + line.ljust(100), end="", file=sys.stderr, flush=True)
        elif int(percent // 10) > self.last_tenth:
            self.last_tenth = int(percent // 10)
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.enabled and self.tty:
            print(file=sys.stderr)


def _clock(seconds: float) -> str:
    seconds = int(max(0, seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def open_project(args, outdir: str):
    """The book project: INPUT itself when it is a project folder, else ``OUTDIR/book-project``
    made from (or updated with) the book file INPUT."""
    from s2studio.book import BookProject
    from s2studio.book.project import BOOK_FILE
    from s2studio.errors import InputError

    if os.path.isdir(args.input):
        if not os.path.exists(os.path.join(args.input, BOOK_FILE)):
            raise InputError(f"{args.input} is a folder but not a book project (it has no {BOOK_FILE}).")
        project = BookProject.open(args.input)
        if args.restart:
            project.restart()
        return project
    return BookProject.from_book_file(args.input, os.path.join(outdir, PROJECT_FOLDER), seed=args.seed,
                                      restart=args.restart)


def apply_flags(args, project) -> None:
    """What the command line says about voices, sampling and pronunciation."""
    import dataclasses

    m = project.manuscript
    if args.voice is not None:
        m.voice = args.voice
    # Only the sampling flags given change the book's settings (set in the app's Book view too):
    # continuing a book without them keeps its settings, hence its keys and audio.
    given = {field: getattr(args, dest) for dest, field in SAMPLING_FLAGS.items() if getattr(args, dest) is not None}
    if args.no_ras:
        given["ras"] = False
    m.generation = dataclasses.replace(m.generation, **given)
    for speaker, voice in args.speaker_voice:
        name = f"speaker {speaker}"
        m.cast.set_character(name, voice)
        m.cast.assign_speaker(speaker, name)
    if args.dictionary:
        m.dictionary = read_dictionary(args.dictionary)
    if args.sentence_pause_ms is not None:
        m.sentence_pause_ms = args.sentence_pause_ms
    if args.paragraph_pause_ms is not None:
        m.paragraph_pause_ms = args.paragraph_pause_ms
    project.save()


def chosen_chapters(args, project) -> list[int]:
    from s2studio.errors import InputError

    chapters = project.manuscript.chapters
    if not args.chapters:
        return [i for i, c in enumerate(chapters) if c.included or args.include_front_matter]
    out: list[int] = []
    for first, last in args.chapters:
        if last > len(chapters):
            raise InputError(f"--chapters {first}-{last}: the book has {len(chapters)} chapters.")
        out.extend(i for i in range(first - 1, last) if i not in out)
    return out


def run(args: argparse.Namespace) -> int:
    from s2studio.audio.atomic_file import check_output_path
    from s2studio.book import BookRenderer
    from s2studio.book.mastering import export_book, report_line
    from s2studio.cli.synth import remote_engine, voice_library
    from s2studio.engine.pipeline import Pipeline
    from s2studio.errors import InputError

    outdir = os.path.abspath(args.output)
    if os.path.exists(outdir) and not os.path.isdir(outdir):
        raise InputError(f"Output folder {outdir}: is a file, not a folder.")
    try:
        os.makedirs(outdir, exist_ok=True)
    except OSError as exc:
        raise InputError(f"Output folder {outdir}: cannot be created ({exc.strerror or exc}).") from None
    check_output_path(os.path.join(outdir, "report.txt"))
    settings = engine_settings(args)
    project = open_project(args, outdir)
    apply_flags(args, project)
    chapters = chosen_chapters(args, project)
    voices = voice_library(args)
    engine = remote_engine(args, voices) if args.server else Pipeline(settings, voices=voices)
    renderer = BookRenderer(engine, project, parallel=args.parallel)
    total = len(project.manuscript.jobs(chapters, project.fingerprint))
    print(f"{project.manuscript.title}: {len(chapters)} chapter(s), {total} sentence(s), {renderer.parallel} at once; "
          f"project {project.folder}", file=sys.stderr)
    progress = RenderProgressLine(not args.no_progress)
    renderer.on_progress = progress
    t0 = time.perf_counter()
    try:
        summary = renderer.run(chapters)
    finally:
        progress.close()
    print(f"rendered {summary.rendered} sentence(s) ({summary.audio_s:.1f} s of audio) in {summary.elapsed_s:.1f} s; "
          f"{summary.skipped} already done; {summary.failed} failed", file=sys.stderr)
    outputs = export_book(project, outdir, chapters=chapters, fmt=args.format, loudness=args.loudness,
                          book_format=None if args.book_format == "none" else args.book_format)
    for out in outputs:
        print(report_line(out))
    book = [n for n in os.listdir(outdir) if n.endswith((".m4b", ".mp3")) and not n[:2].isdigit()]
    print(f"wrote {sum(1 for o in outputs if o.path)} chapter file(s){', ' + book[0] if book else ''} and report.txt "
          f"in {outdir} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    for ref, message in summary.failures[:5]:
        print(f"sentence {ref.chapter + 1}.{ref.paragraph + 1}.{ref.sentence + 1} failed: {message}", file=sys.stderr)
    return 1 if summary.failed else 0


def register(subparsers) -> None:
    from s2studio.audio.loudness import PRESETS
    from s2studio.book.mastering import CHAPTER_FORMATS
    from s2studio.cli import add_log_level, add_voice_dir
    from s2studio.cli.synth import speaker_voice_arg
    from s2studio.engine.limits import argparse_type

    p = subparsers.add_parser("render", help="render a book (.txt, .md, .epub) to chapter files and an audiobook",
                              description="Render a manuscript to one audio file per chapter, one chaptered book "
                                          "file (.m4b or .mp3) and a loudness report. Run it again to continue an "
                                          "interrupted render. The sampling flags are saved with the book: "
                                          "those not given keep the book's own (a new book: the defaults).")
    p.add_argument("input", help="the manuscript (.txt, .md, .epub) or a book project folder")
    p.add_argument("-o", "--output", required=True, metavar="OUTDIR",
                   help="folder for the chapter files, the book file, the report and the book project")
    add_engine_options(p)
    add_sampling_options(p)
    # Not given: the book's own (a new book's are the defaults the help names).
    p.set_defaults(**{dest: None for dest in SAMPLING_FLAGS})
    p.add_argument("--voice", default=None, help="the narrator: a saved voice's id (default: the model's own voice)")
    p.add_argument("--speaker-voice", action="append", default=[], metavar="N=VOICE", type=speaker_voice_arg,
                   help="speak <|speaker:N|>'s turns with the saved voice VOICE (repeat per speaker)")
    p.add_argument("--dictionary", default=None, metavar="FILE",
                   help="pronunciations, one 'phrase = how to say it' per line ('==' to match case)")
    add_voice_dir(p, outermost=False)
    p.add_argument("--parallel", type=parallel_arg, default=None, metavar="N",
                   help="sentences rendered at once, decoded together: 1-8 with a local model, 1-32 with --server "
                        "(default: 4 on a CPU, 8 on a GPU, 4 per server)")
    p.add_argument("--chapters", type=chapters_arg, default=None, metavar="RANGE",
                   help="only these chapters, counted from 1 as the book lists them, e.g. 3-5 or 1,4-6")
    p.add_argument("--include-front-matter", action="store_true",
                   help="also render the sections marked as front matter or empty")
    p.add_argument("--format", choices=CHAPTER_FORMATS, default="flac", help="chapter files (default: flac)")
    p.add_argument("--book-format", choices=("m4b", "mp3", "none"), default="m4b",
                   help="the one chaptered book file: m4b (AAC with chapter marks, default), mp3 (ID3 chapters) or "
                        "none")
    p.add_argument("--loudness", choices=tuple(PRESETS), default="acx",
                   help="mastering preset: acx (RMS -20 dB, peaks under -3 dBFS; default), podcast (-16 LUFS), "
                        "ebu-r128 (-23 LUFS) or none")
    p.add_argument("--sentence-pause-ms", type=argparse_type("pause_ms", "--sentence-pause-ms"), default=None,
                   help="room tone between sentences, 0-10000 (default 350)")
    p.add_argument("--paragraph-pause-ms", type=argparse_type("pause_ms", "--paragraph-pause-ms"), default=None,
                   help="room tone between paragraphs, 0-10000 (default 800)")
    p.add_argument("--restart", action="store_true", help="forget every rendered sentence and start over")
    p.add_argument("--no-progress", action="store_true", help="no progress on stderr")
    remote = p.add_argument_group("engine on other machines")
    remote.add_argument("--server", default=None, metavar="URL[,URL...]",
                        help="render on `s2studio serve` at these addresses instead of loading a model here")
    remote.add_argument("--api-key", default=None, help="the server's API key (default: $S2STUDIO_API_KEY)")
    remote.add_argument("--wire-format", choices=["pcm_f32le", "pcm_s16le", "wav"], default="pcm_f32le",
                        help="how the audio travels (default pcm_f32le, the exact samples)")
    add_log_level(p)
    p.set_defaults(handler=run)
