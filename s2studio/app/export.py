"""Writing a take to disk: the formats the studio offers, a default file name from the script,
and one file per sentence.

The formats are what people expect of a studio's export (WAV at 16/24-bit or 32-bit float,
FLAC, and MP3/OGG where this libsndfile build can write them). Every file is written atomically
(temp file then rename, see ``s2studio.audio``); a per-sentence export that fails half-way
removes the files it already wrote, so a failed export leaves nothing behind.
"""

from __future__ import annotations

import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from s2studio.audio import write_audio_file, write_wav
from s2studio.audio.atomic_file import check_output_path, remove_quietly
from s2studio.audio.wav_writing import supported_output_extensions


@dataclass(frozen=True)
class ExportFormat:
    key: str  # stored in the settings
    label: str  # shown in the save dialog's type list
    extension: str
    wav_subtype: str | None = None  # WAV only: FLOAT, PCM_24, PCM_16

    @property
    def file_filter(self) -> str:
        return f"{self.label} (*{self.extension})"


ALL_FORMATS = (
    ExportFormat("wav32f", "WAV 32-bit float", ".wav", "FLOAT"),
    ExportFormat("wav24", "WAV 24-bit", ".wav", "PCM_24"),
    ExportFormat("wav16", "WAV 16-bit", ".wav", "PCM_16"),
    ExportFormat("flac", "FLAC 24-bit", ".flac"),
    ExportFormat("mp3", "MP3", ".mp3"),
    ExportFormat("ogg", "OGG Vorbis", ".ogg"),
)
DEFAULT_FORMAT = "wav32f"  # s2.cpp's own output: nothing lost
MAX_NAME_WORDS = 6
MAX_NAME_CHARS = 60
FALLBACK_NAME = "s2studio-take"


def available_formats() -> tuple[ExportFormat, ...]:
    """The formats this machine's libsndfile can write (MP3 needs libsndfile 1.1+)."""
    writable = set(supported_output_extensions())
    return tuple(f for f in ALL_FORMATS if f.extension in writable)


def format_by_key(key: str) -> ExportFormat:
    formats = available_formats()
    return next((f for f in formats if f.key == key), formats[0])


def format_by_filter(file_filter: str) -> ExportFormat | None:
    return next((f for f in available_formats() if f.file_filter == file_filter), None)


def format_for_path(path: str, preferred: ExportFormat) -> ExportFormat | None:
    """The format a chosen file name asks for: its extension decides; for ``.wav`` the preferred
    WAV depth is kept (the name cannot say 16 or 24 bit). None for an extension we cannot write."""
    ext = os.path.splitext(path)[1].lower()
    if ext == ".wave":
        ext = ".wav"
    if ext == preferred.extension:
        return preferred
    return next((f for f in available_formats() if f.extension == ext), None)


def with_extension(path: str, fmt: ExportFormat) -> str:
    """``path`` ending in the format's extension: a name typed without one gets it appended."""
    ext = os.path.splitext(path)[1].lower()
    if ext == fmt.extension or (fmt.extension == ".wav" and ext == ".wave"):
        return path
    return path + fmt.extension


_SPEAKER_OR_TAG = re.compile(r"<\|[^|]*\|>|\[[^\]]*\]")  # <|speaker:0|>, [laugh]: not words of the name
_NOT_NAME_CHARS = re.compile(r"[^\w]+", re.UNICODE)
_WINDOWS_RESERVED = frozenset(["CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)),
                               *(f"LPT{i}" for i in range(1, 10))])


def default_file_name(text: str, extension: str = ".wav") -> str:
    """A safe file name from the script's first words: "Hello, world! How are you?" →
    ``hello-world-how-are-you.wav``. Letters of any script are kept (NFC); separators, tags,
    punctuation and characters Windows forbids are not; never empty, never a dot-name."""
    plain = unicodedata.normalize("NFC", _SPEAKER_OR_TAG.sub(" ", text or ""))
    words = [w for w in _NOT_NAME_CHARS.split(plain.casefold()) if w and w != "_"]
    stem = "-".join(words[:MAX_NAME_WORDS])[:MAX_NAME_CHARS].strip("-_")
    if stem.upper() in _WINDOWS_RESERVED:  # "con.wav" cannot be created on Windows
        stem = f"{FALLBACK_NAME}-{stem}"
    return (stem or FALLBACK_NAME) + extension


def numbered_paths(path: str, count: int) -> list[str]:
    """``take.wav`` → ``take-01.wav``, ``take-02.wav``…: as many digits as the count needs (2 at least)."""
    base, ext = os.path.splitext(path)
    width = max(2, len(str(count)))
    return [f"{base}-{i:0{width}d}{ext}" for i in range(1, count + 1)]


def write_take(path: str, samples: np.ndarray, sample_rate: int, fmt: ExportFormat) -> None:
    """One file, atomically; raises ``OutputPathError`` (bad place), ``OSError`` or ``ValueError``."""
    check_output_path(path)
    if fmt.wav_subtype is not None:
        write_wav(path, samples, sample_rate, subtype=fmt.wav_subtype)
    else:
        write_audio_file(path, samples, sample_rate)


def sentence_pieces(audio: np.ndarray, segments) -> list[np.ndarray]:
    """The take's audio cut at its segments' ``(start, end)`` sample ranges (pauses left out);
    the whole take when it has no segment boundaries."""
    if not segments:
        return [audio]
    n = len(audio)
    pieces = [audio[min(start, n):min(end, n)] for start, end in segments]
    return [p for p in pieces if len(p)] or [audio]


def write_sentences(path: str, samples: np.ndarray, sample_rate: int, segments, fmt: ExportFormat) -> list[str]:
    """Each sentence of the take in its own numbered file beside ``path``. All targets are
    checked before the first is written; a failure removes the files already written."""
    pieces = sentence_pieces(samples, segments)
    targets = numbered_paths(path, len(pieces))
    for target in targets:
        check_output_path(target)
    written: list[str] = []
    try:
        for target, piece in zip(targets, pieces):
            write_take(target, piece, sample_rate, fmt)
            written.append(target)
    except BaseException:
        for target in written:
            remove_quietly(target)
        raise
    return written


def safe_folder(folder: str) -> Path:
    """The remembered export folder if it still exists, else the home folder."""
    return Path(folder) if folder and Path(folder).is_dir() else Path.home()
