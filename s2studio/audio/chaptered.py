"""One audio file for a whole book, with chapters that audiobook players show.

* ``.m4b``: AAC in MP4 (PyAV), chapter marks written by FFmpeg's muxer (a QuickTime chapter
  track and Nero ``chpl``); title, author and cover added with mutagen.
* ``.mp3``: MP3 (libsndfile's LAME), then an ID3v2 tag with a ``CTOC`` table of contents and
  one ``CHAP`` frame per chapter (mutagen), title, author and cover.

Chapters are added one at a time (``add_chapter``), so a book is never held in memory whole.
The file is written under a temporary name beside the target and renamed when complete
(``atomic_file``): a failed or interrupted export leaves no partial book behind.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from s2studio.audio.atomic_file import commit_temp, fsync_path, make_temp_beside, remove_quietly

BOOK_FORMATS = ("m4b", "mp3")
AAC_BITRATE = 64_000  # mono speech: transparent enough, ~29 MB an hour
MP3_VBR_QUALITY = 0.4  # libsndfile's scale, 0 best .. 1 smallest


@dataclass
class ChapterMark:
    title: str
    start_s: float
    end_s: float


@dataclass
class BookTags:
    title: str = ""
    author: str = ""
    cover: bytes | None = None
    cover_mime: str = "image/jpeg"


class ChapteredBookWriter:
    def __init__(self, path: str | os.PathLike[str], sample_rate: int, tags: BookTags | None = None):
        from s2studio.errors import InputError

        self.path = os.fspath(path)
        self.format = os.path.splitext(self.path)[1].lower().lstrip(".")
        if self.format not in BOOK_FORMATS:
            raise InputError(f"Book file {self.path}: a chaptered book is .m4b or .mp3, not .{self.format}.")
        self.sample_rate = sample_rate
        self.tags = tags or BookTags()
        self.chapters: list[ChapterMark] = []
        self._samples = 0
        fd, self._temp = make_temp_beside(self.path)
        os.close(fd)
        self._closed = False
        try:
            if self.format == "m4b":
                self._open_m4b()
            else:
                self._open_mp3()
        except BaseException:
            remove_quietly(self._temp)
            raise

    # ---- M4B ------------------------------------------------------------------------------------
    def _open_m4b(self) -> None:
        import av

        self._container = av.open(self._temp, "w", format="ipod")
        self._stream = self._container.add_stream("aac", rate=self.sample_rate, layout="mono")
        self._stream.bit_rate = AAC_BITRATE

    def _write_m4b(self, x: np.ndarray) -> None:
        import av

        for start in range(0, len(x), 1 << 16):
            piece = np.ascontiguousarray(x[start:start + (1 << 16)][None, :])
            frame = av.AudioFrame.from_ndarray(piece, format="fltp", layout="mono")
            frame.sample_rate = self.sample_rate
            frame.pts = self._samples + start
            frame.time_base = Fraction(1, self.sample_rate)
            for packet in self._stream.encode(frame):
                self._container.mux(packet)

    def _close_m4b(self) -> None:
        for packet in self._stream.encode(None):
            self._container.mux(packet)
        tb = Fraction(1, 1000)
        self._container.set_chapters([
            {"id": i + 1, "start": round(c.start_s * 1000), "end": round(c.end_s * 1000), "time_base": tb,
             "metadata": {"title": c.title}} for i, c in enumerate(self.chapters)])
        self._container.close()
        from mutagen.mp4 import MP4, MP4Cover

        mp4 = MP4(self._temp)
        if self.tags.title:
            mp4["\xa9nam"] = [self.tags.title]
            mp4["\xa9alb"] = [self.tags.title]
        if self.tags.author:
            mp4["\xa9ART"] = [self.tags.author]
        mp4["\xa9gen"] = ["Audiobook"]
        if self.tags.cover:
            kind = MP4Cover.FORMAT_PNG if self.tags.cover_mime == "image/png" else MP4Cover.FORMAT_JPEG
            mp4["covr"] = [MP4Cover(self.tags.cover, imageformat=kind)]
        mp4.save()

    # ---- MP3 ------------------------------------------------------------------------------------
    def _open_mp3(self) -> None:
        import soundfile as sf

        self._sf = sf.SoundFile(self._temp, "w", samplerate=self.sample_rate, channels=1, format="MP3",
                                subtype="MPEG_LAYER_III", compression_level=MP3_VBR_QUALITY)

    def _close_mp3(self) -> None:
        self._sf.close()
        from mutagen.id3 import APIC, CHAP, CTOC, ID3, TIT2, TPE1, CTOCFlags
        from mutagen.id3 import error as ID3Error

        try:
            tag = ID3(self._temp)
        except ID3Error:
            tag = ID3()
        ids = [f"chp{i}" for i in range(len(self.chapters))]
        tag.add(CTOC(element_id="toc", flags=CTOCFlags.TOP_LEVEL | CTOCFlags.ORDERED, child_element_ids=ids,
                     sub_frames=[TIT2(text=[self.tags.title or "Contents"])]))
        for cid, c in zip(ids, self.chapters):
            tag.add(CHAP(element_id=cid, start_time=round(c.start_s * 1000), end_time=round(c.end_s * 1000),
                         sub_frames=[TIT2(text=[c.title])]))
        if self.tags.title:
            tag.add(TIT2(text=[self.tags.title]))
        if self.tags.author:
            tag.add(TPE1(text=[self.tags.author]))
        if self.tags.cover:
            tag.add(APIC(mime=self.tags.cover_mime, type=3, desc="Cover", data=self.tags.cover))
        tag.save(self._temp, v2_version=4)

    # ---- both -----------------------------------------------------------------------------------
    def add_chapter(self, title: str, samples: np.ndarray) -> ChapterMark:
        x = np.clip(np.asarray(samples, dtype=np.float32), -1.0, 1.0)
        if self.format == "m4b":
            self._write_m4b(x)
        else:
            self._sf.write(x)
        start = self._samples / self.sample_rate
        self._samples += len(x)
        mark = ChapterMark(title, start, self._samples / self.sample_rate)
        self.chapters.append(mark)
        return mark

    def close(self) -> None:
        """Finish the file and move it into place."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.format == "m4b":
                self._close_m4b()
            else:
                self._close_mp3()
            fsync_path(self._temp)
            commit_temp(self._temp, self.path)
        except BaseException:
            remove_quietly(self._temp)
            raise

    def abort(self) -> None:
        """Drop the unfinished file (no-op once closed)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.format == "m4b":
                self._container.close()
            else:
                self._sf.close()
        except Exception:
            pass
        remove_quietly(self._temp)


def read_chapters(path: str | os.PathLike[str]) -> list[ChapterMark]:
    """The chapters of a book file as FFmpeg (PyAV) reads them: what a player shows."""
    import av

    with av.open(os.fspath(path)) as container:
        return [ChapterMark(c["metadata"].get("title", ""), float(c["start"] * c["time_base"]),
                            float(c["end"] * c["time_base"])) for c in container.chapters()]
