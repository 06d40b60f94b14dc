"""Streaming audio encoders for HTTP responses: float chunks in, bytes of one file format out.

Every encoder takes mono float32 chunks as they are decoded (``write``) and returns the bytes
that are ready to send at once, then the rest on ``finish``; concatenated they are one
complete file a player can also read while it arrives. The formats are those of OpenAI's
``response_format`` and Fish Audio's ``format``:

* ``pcm`` — raw little-endian 16-bit, rounded as :func:`float_to_pcm16` (s2.cpp's rounding).
* ``wav`` — a 44-byte PCM16 header with s2.cpp's placeholder sizes, then the samples (a length
  unknown while streaming; every common reader takes the placeholder as "to the end").
* ``mp3`` (LAME), ``opus`` (libopus in Ogg, as OpenAI serves it), ``aac`` (FFmpeg's native
  encoder in ADTS, the streamable AAC container) and ``flac`` through PyAV, FFmpeg's Python
  binding: libsndfile (soundfile) can write FLAC and MP3, but its writers seek back to the
  header when they close, which a response already sent cannot do; FFmpeg's muxers for these
  four containers write strictly forward. :func:`encode_whole` uses libsndfile for a take
  that is already complete (WAV, FLAC, MP3).

Two optional stages go before the encoder, both streaming: a sample-rate conversion (soxr's
``ResampleStream``, the library ``resample`` uses; Opus runs at 48 kHz) and a pitch-preserving
time-stretch (FFmpeg's ``atempo`` filter through PyAV's filter graph; measured in
docs/server.md: same pitch, the duration divided by the speed).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

from s2studio.audio.validation import CODEC_SAMPLE_RATE
from s2studio.audio.wav_writing import float_to_pcm16, pcm16_wav_header

FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
MEDIA_TYPES = {"mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac", "flac": "audio/flac",
               "wav": "audio/wav", "pcm": "audio/L16"}
OPUS_RATE = 48_000  # Ogg Opus' reference rate
OPUS_RATES = (8_000, 12_000, 16_000, 24_000, 48_000)  # the only ones libopus takes
MIN_SPEED, MAX_SPEED = 0.25, 4.0
MIN_OUTPUT_RATE, MAX_OUTPUT_RATE = 8_000, 48_000
MIN_GAIN_DB, MAX_GAIN_DB = -20.0, 20.0
DEFAULT_BITRATES = {"mp3": 128_000, "opus": 32_000, "aac": 128_000}
# PyAV: (container format, codec) per compressed format.
_AV_FORMATS = {"mp3": ("mp3", "libmp3lame"), "opus": ("ogg", "libopus"), "aac": ("adts", "aac"),
               "flac": ("flac", "flac")}
# An Ogg page holds at most this long (µs): the muxer's default of 1 s would hold back the
# first second of a stream.
_OGG_PAGE_US = 100_000


class EncoderError(ValueError):
    """A format, rate, speed, bitrate or gain out of range (the message names it)."""


@dataclass(frozen=True)
class EncodeOptions:
    """What the client asked for: ``fmt`` (one of FORMATS), ``sample_rate`` of the output
    (None: the format's own: the model's rate, or 48 kHz for Opus), ``speed`` (a tempo
    factor, 0.25–4: pitch kept), ``bitrate`` in bit/s for the lossy formats (None: the
    default) and ``gain_db`` (−20–20 dB)."""

    fmt: str = "wav"
    sample_rate: int | None = None
    speed: float = 1.0
    bitrate: int | None = None
    gain_db: float = 0.0  # Fish Audio's prosody.volume

    @property
    def gain(self) -> float:
        return float(10.0 ** (self.gain_db / 20.0))

    def __post_init__(self) -> None:
        if not MIN_GAIN_DB <= self.gain_db <= MAX_GAIN_DB:
            raise EncoderError(f"The volume must be between {MIN_GAIN_DB:g} and {MAX_GAIN_DB:g} dB, "
                               f"not {self.gain_db:g}.")
        if self.fmt not in FORMATS:
            raise EncoderError(f"The audio format {self.fmt!r} is not supported; use one of {', '.join(FORMATS)}.")
        if not MIN_SPEED <= self.speed <= MAX_SPEED:
            raise EncoderError(f"speed must be between {MIN_SPEED:g} and {MAX_SPEED:g}, not {self.speed:g}.")
        if self.sample_rate is not None and not MIN_OUTPUT_RATE <= self.sample_rate <= MAX_OUTPUT_RATE:
            raise EncoderError(f"sample_rate must be between {MIN_OUTPUT_RATE} and {MAX_OUTPUT_RATE} Hz, "
                               f"not {self.sample_rate}.")
        if self.fmt == "opus" and self.sample_rate is not None and self.sample_rate not in OPUS_RATES:
            raise EncoderError(f"Opus runs at {', '.join(map(str, OPUS_RATES))} Hz, not {self.sample_rate}.")
        if self.bitrate is not None and not 8_000 <= self.bitrate <= 320_000:
            raise EncoderError(f"The bitrate must be between 8 and 320 kbit/s, not {self.bitrate / 1000:g}.")

    def output_rate(self, source_rate: int) -> int:
        if self.fmt == "opus":
            return self.sample_rate or OPUS_RATE
        return self.sample_rate or source_rate


def media_type(fmt: str, sample_rate: int) -> str:
    return f"audio/L16; rate={sample_rate}; channels=1" if fmt == "pcm" else MEDIA_TYPES[fmt]


def _mono(samples: np.ndarray) -> np.ndarray:
    x = np.asarray(samples, dtype=np.float32)
    if x.ndim != 1:
        raise ValueError(f"expected mono (1-D) samples, got shape {x.shape}")
    return x


class _PcmEncoder:
    def __init__(self, sample_rate: int, header: bool):
        self._pending = pcm16_wav_header(sample_rate, data_bytes=None) if header else b""

    def write(self, samples: np.ndarray) -> bytes:
        out = self._pending + float_to_pcm16(samples).astype("<i2", copy=False).tobytes()
        self._pending = b""
        return out

    def finish(self) -> bytes:
        out, self._pending = self._pending, b""
        return out


class _Sink:
    """A write-only file for PyAV: what the muxer wrote since the last ``take``. No ``seek``, so
    FFmpeg treats the output as a stream and never goes back."""

    def __init__(self):
        self._chunks: list[bytes] = []

    def write(self, data) -> int:
        self._chunks.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        out = b"".join(self._chunks)
        self._chunks.clear()
        return out


class _AvEncoder:
    def __init__(self, fmt: str, sample_rate: int, bitrate: int | None):
        import av

        container_format, codec = _AV_FORMATS[fmt]
        self._sink = _Sink()
        options = {"page_duration": str(_OGG_PAGE_US)} if container_format == "ogg" else {}
        self._container = av.open(self._sink, "w", format=container_format, options=options)
        self._stream = self._container.add_stream(codec, rate=sample_rate, layout="mono")
        if fmt in DEFAULT_BITRATES:
            self._stream.bit_rate = bitrate or DEFAULT_BITRATES[fmt]
        self._rate = sample_rate
        self._pts = 0
        # Encoders take fixed-size frames (AAC 1024, Opus 960 samples...); FFmpeg's audio FIFO
        # regroups whatever chunk sizes the decoder produces.
        self._fifo = av.AudioFifo()
        # The encoder's sample format (s16 for LAME and FLAC, planar float for AAC and Opus).
        self._resampler = av.AudioResampler(format=self._stream.codec_context.format.name, layout="mono",
                                            rate=sample_rate)
        self._frame_size = self._stream.codec_context.frame_size or 4096

    def _frame(self, x: np.ndarray):
        import av

        frame = av.AudioFrame.from_ndarray(x[None, :], format="flt", layout="mono")
        frame.sample_rate = self._rate
        frame.pts = self._pts
        self._pts += x.shape[0]
        return frame

    def _encode_ready(self, final: bool) -> None:
        while self._fifo.samples >= self._frame_size or (final and self._fifo.samples):
            frame = self._fifo.read(min(self._frame_size, self._fifo.samples))
            for converted in self._resampler.resample(frame):  # sample format only (flt -> s16/fltp)
                for packet in self._stream.encode(converted):
                    self._container.mux(packet)

    def write(self, samples: np.ndarray) -> bytes:
        x = _mono(samples)
        if x.size:
            self._fifo.write(self._frame(x))
            self._encode_ready(final=False)
        return self._sink.take()

    def finish(self) -> bytes:
        self._encode_ready(final=True)
        for packet in self._stream.encode(None):
            self._container.mux(packet)
        self._container.close()
        return self._sink.take()


class _TimeStretch:
    """FFmpeg's ``atempo`` (WSOLA: tempo changes, pitch stays) on a stream of float chunks.
    One atempo takes 0.5–100; slower than 0.5 is two in a row (0.25 = 0.5 × 0.5)."""

    def __init__(self, sample_rate: int, speed: float):
        import av

        self._rate = sample_rate
        self._speed = speed
        self._pts = 0
        self._consumed = self._written = 0
        self._target: int | None = None
        graph = av.filter.Graph()
        node = source = graph.add_abuffer(format="flt", sample_rate=sample_rate, layout="mono")
        factors = [0.5, speed / 0.5] if speed < 0.5 else [speed]
        for factor in factors:
            stage = graph.add("atempo", f"{factor:.6f}")
            node.link_to(stage)
            node = stage
        fmt = graph.add("aformat", sample_fmts="flt", channel_layouts="mono")
        node.link_to(fmt)
        sink = graph.add("abuffersink")
        fmt.link_to(sink)
        graph.configure()
        self._graph, self._source = graph, source

    def _pull(self) -> np.ndarray:
        import av

        pieces = []
        while True:
            try:
                frame = self._graph.pull()
            except (av.BlockingIOError, av.EOFError):
                break
            pieces.append(frame.to_ndarray().reshape(-1))
        return np.concatenate(pieces).astype(np.float32, copy=False) if pieces else np.zeros(0, np.float32)

    def _push(self, x: np.ndarray) -> None:
        import av

        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(x)[None, :], format="flt", layout="mono")
        frame.sample_rate = self._rate
        frame.pts = self._pts
        self._pts += x.shape[0]
        self._graph.push(frame)

    def _limited(self, y: np.ndarray) -> np.ndarray:
        """At most as many samples as the input's length divided by the speed, in all."""
        room = max(0, self._target - self._written) if self._target is not None else y.shape[0]
        y = y[:room]
        self._written += y.shape[0]
        return y

    def write(self, x: np.ndarray) -> np.ndarray:
        if not x.size:
            return x
        self._consumed += x.shape[0]
        self._push(x)
        return self._limited(self._pull())

    def finish(self) -> np.ndarray:
        # atempo drops the last part-filled window at the end of its input (tens of ms, much
        # of a short take), so it gets a window of silence more and the output is cut to
        # exactly the input's length divided by the speed.
        self._target = int(round(self._consumed / self._speed))
        self._push(np.zeros(self._rate // 5, np.float32))
        self._graph.push(None)
        return self._limited(self._pull())


class _Resample:
    def __init__(self, source_rate: int, rate: int):
        import soxr

        self._stream = soxr.ResampleStream(source_rate, rate, 1, dtype="float32", quality="HQ")

    def write(self, x: np.ndarray) -> np.ndarray:
        return self._stream.resample_chunk(x, last=False) if x.size else x

    def finish(self) -> np.ndarray:
        return self._stream.resample_chunk(np.zeros(0, np.float32), last=True)


class StreamEncoder:
    """Float chunks at ``source_rate`` → bytes of ``options.fmt`` (see the module doc)."""

    def __init__(self, options: EncodeOptions, source_rate: int = CODEC_SAMPLE_RATE):
        self.options = options
        self.sample_rate = options.output_rate(source_rate)
        self.media_type = media_type(options.fmt, self.sample_rate)
        self._stages = []
        if options.speed != 1.0:
            self._stages.append(_TimeStretch(source_rate, options.speed))
        if self.sample_rate != source_rate:
            self._stages.append(_Resample(source_rate, self.sample_rate))
        fmt = options.fmt
        self._encoder = (_PcmEncoder(self.sample_rate, header=fmt == "wav") if fmt in ("pcm", "wav")
                         else _AvEncoder(fmt, self.sample_rate, options.bitrate))

    def write(self, samples: np.ndarray) -> bytes:
        x = _mono(samples)
        if self.options.gain_db:
            x = x * np.float32(self.options.gain)
        for stage in self._stages:
            x = stage.write(x)
        return self._encoder.write(x)

    def finish(self) -> bytes:
        out = []
        carry = None
        for stage in self._stages:
            # What one stage flushes still has to go through the stages after it.
            if carry is not None and carry.size:
                carry = stage.write(carry)
                tail = stage.finish()
                carry = np.concatenate([carry, tail])
            else:
                carry = stage.finish()
        if carry is not None and carry.size:
            out.append(self._encoder.write(carry))
        out.append(self._encoder.finish())
        return b"".join(out)


def encode_whole(samples: np.ndarray, options: EncodeOptions, source_rate: int = CODEC_SAMPLE_RATE) -> bytes:
    """A complete take as one file. WAV (PCM16 with its real sizes), FLAC and MP3 go through
    libsndfile (after the time-stretch and resampling stages, if any); Opus and AAC, and MP3
    at a chosen bitrate, through :class:`StreamEncoder`."""
    x = _mono(samples)
    if options.fmt in ("opus", "aac", "pcm") or (options.fmt == "mp3" and options.bitrate is not None):
        encoder = StreamEncoder(options, source_rate)
        return encoder.write(x) + encoder.finish()
    import soundfile as sf

    from s2studio.audio.wav_writing import wav_bytes

    rate = options.output_rate(source_rate)
    if options.gain_db:
        x = x * np.float32(options.gain)
    if options.speed != 1.0:
        stretch = _TimeStretch(source_rate, options.speed)
        x = np.concatenate([stretch.write(x), stretch.finish()])
    if rate != source_rate:
        from s2studio.audio.resample import resample

        x = resample(x, source_rate, rate)
    if options.fmt == "wav":
        return wav_bytes(x, rate, subtype="PCM_16")
    buffer = io.BytesIO()
    subtype = "PCM_16" if options.fmt == "flac" else "MPEG_LAYER_III"
    sf.write(buffer, np.clip(x, -1.0, 1.0), rate, format=options.fmt.upper(), subtype=subtype)
    return buffer.getvalue()
