"""``RemoteEngine``: the Pipeline's synthesis interface, with the model on another machine.

``synthesize(request)`` returns a ``SynthesisJob`` exactly like the local pipeline's: iterate
it for ``AudioChunk``s as the server decodes them, then ``job.result`` holds the take;
``job.cancel()`` (any thread) closes the connection, and the server cancels the job at its
next frame.

How a take is fetched, and why:

* The text is split into segments **here**, with the engine's own splitter and per-segment
  seeds, and each segment is one ``POST /generate`` (not segmented on the server). So the
  client knows where every sentence starts and ends, pauses and post-processing are applied
  here exactly as the local pipeline does, and with several servers a server that fails
  mid-take costs only the sentence it was speaking, which is retried on another server.
* Audio is asked for as live ``pcm_f32le`` (this project's server extension): the engine's
  float samples unrounded, so a seeded take fetched remotely has the same samples as the same
  take made locally on the same kind of device. A server that answers with PCM16 instead
  (s2.cpp, which knows no ``pcm_f32le``) is read as PCM16 (quantised to 1/32768).
* A voice id is looked up in the local voice library first and its ``.s2voice`` uploaded
  (``voice_file``, also this server's extension), so the laptop's saved voices work on any
  s2studio server; an id the local library does not have is sent as the server's own voice.

The take itself is assembled by :func:`s2studio.engine.take.assemble_take`, the code that
assembles a local take: a remote result has the same segments, segment audio, pauses and
post-processing. What it lacks: codes (the server does not send them; ``codes`` are empty
arrays) and the engine's internal timings (only wall-clock ones measured here).
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import time
from dataclasses import dataclass, field
from typing import Generator, Iterator

import numpy as np

from s2studio.audio import CODEC_SAMPLE_RATE, SAMPLES_PER_CODE_FRAME, wav_bytes
from s2studio.engine.api import AudioChunk, ModelInfo, PrefixCacheStats, SynthesisJob, SynthesisRequest, Timings
from s2studio.engine.take import SegmentOutcome, VoiceChoice, assemble_take, check_request, segments_of, voices_of
from s2studio.errors import InputError
from s2studio.remote import answers
from s2studio.remote.connection import (
    RETRYABLE,
    Connection,
    RemoteError,
    ServerAddress,
    ServerDropped,
    multipart_body,
    parse_server_list,
)
from s2studio.remote.printable import printable

log = logging.getLogger(__name__)

WAV_HEADER_BYTES = 44  # the live WAV header s2.cpp sends when it does not know pcm_*
WIRE_FORMATS = ("pcm_f32le", "pcm_s16le", "wav")
# Times a segment whose connection was cut mid-take is asked again of the same server (see
# SegmentFetch.chunks) before that server counts as failed for the segment.
DROPS_RETRIED_PER_SERVER = 2


@dataclass(frozen=True)
class RemoteSettings:
    """Where the engine runs. ``servers``: one or more ``http(s)://HOST:PORT`` (a string with
    commas is split). ``read_timeout_s`` bounds the silence while waiting for the next bytes,
    which includes waiting in a busy server's queue before the first chunk (1..3600 s)."""

    servers: tuple[str, ...] | str
    api_key: str | None = field(default=None, repr=False)  # a password: kept out of logs and reprs
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 300.0
    # What the audio travels as: pcm_f32le (exact, 176 kB/s), pcm_s16le (half that, rounded to
    # 1/32768 as every PCM16 output is) or wav (PCM16 in a live WAV, s2.cpp's own stream format).
    wire_format: str = "pcm_f32le"
    # The deadline of one segment: the silence allowed plus this many seconds per frame the
    # request allows (a server that drips a byte at a time stays within the read timeout).
    seconds_per_frame: float = 2.0

    def addresses(self) -> tuple[ServerAddress, ...]:
        text = self.servers if isinstance(self.servers, str) else ",".join(self.servers)
        return parse_server_list(text)

    def validated(self) -> "RemoteSettings":
        self.addresses()
        for name, value in (("connect_timeout_s", self.connect_timeout_s), ("read_timeout_s", self.read_timeout_s)):
            if not 1 <= value <= 3600:
                raise InputError(f"{name} must be between 1 and 3600 seconds, not {value}.")
        if not 0.01 <= self.seconds_per_frame <= 60:
            raise InputError(f"seconds_per_frame must be between 0.01 and 60, not {self.seconds_per_frame}.")
        if self.wire_format not in WIRE_FORMATS:
            raise InputError(f"wire_format must be one of {', '.join(WIRE_FORMATS)}, not {self.wire_format!r}.")
        return self


class RemoteEngine:
    """The engine interface (:class:`s2studio.engine.api.SynthesisEngine`) against one or more
    servers."""

    def __init__(self, settings: RemoteSettings, voices=None):
        """``voices``: the local ``VoiceLibrary`` whose voices are uploaded by id (None: ids
        are always the server's)."""
        self._settings = settings.validated()
        self._addresses = settings.addresses()
        self._voices = voices
        self._sample_rate: int | None = None

    @property
    def settings(self) -> RemoteSettings:
        return self._settings

    @property
    def addresses(self) -> tuple[ServerAddress, ...]:
        return self._addresses

    @property
    def voices(self):
        return self._voices

    def _connection(self, address: ServerAddress, read_timeout_s: float | None = None) -> Connection:
        s = self._settings
        return Connection(address, s.api_key, s.connect_timeout_s, read_timeout_s or s.read_timeout_s)

    def health(self, address: ServerAddress | None = None) -> dict:
        """The server's ``/health`` (model, device, queue...); ``RemoteError`` if it cannot say."""
        return self._connection(address or self._addresses[0], read_timeout_s=10.0).get_json(
            "/health", answers.MAX_JSON_BYTES)

    def list_voices(self, address: ServerAddress | None = None) -> list[dict]:
        """The server's voices (each a dict, its text made printable)."""
        data = self._connection(address or self._addresses[0], read_timeout_s=30.0).get_json(
            "/voices", answers.MAX_VOICES_BYTES)
        voices = data.get("voices")
        return [v for v in voices if isinstance(v, dict)] if isinstance(voices, list) else []

    def encode_voice(self, samples: np.ndarray, transcript: str):
        """A reference clip → a ``VoiceProfile`` made with the server's codec (``POST /encode``),
        ready to save in the local voice library."""
        from s2studio.engine.voices import decode_s2voice

        if not (transcript or "").strip():
            raise InputError("A voice needs the transcript of what is said in the clip.")
        body, content_type = multipart_body({"reference_text": transcript}, {"reference": (
            "reference.wav", wav_bytes(np.asarray(samples, np.float32), CODEC_SAMPLE_RATE, subtype="FLOAT"))})
        address = self.pick_server(set())
        connection = self._connection(address)
        try:
            response = connection.request("POST", "/encode", body, {"Content-Type": content_type})
            data = answers.read_capped(response, answers.MAX_VOICE_FILE_BYTES, address.url, "the encoded voice")
        finally:
            connection.close()
        return decode_s2voice(data, path=f"the voice encoded by {address.url}")

    @property
    def sample_rate(self) -> int:
        """The servers' output rate (from ``/health``; the codec's 44.1 kHz if it does not say)."""
        if self._sample_rate is None:
            try:
                rate = self.model_info().sample_rate
            except RemoteError:
                rate = None
            self._sample_rate = rate or CODEC_SAMPLE_RATE  # model_info checked it (answers.checked_rate)
        return self._sample_rate

    def is_model_rate(self, rate: int | None):
        """Whether audio at ``rate`` is at the model's rate (``None``: that rate). The codec's
        44.1 kHz is taken without a question; any other rate only when the server's ``/health``
        says the model makes it (asked once, only then: one connection fewer per take)."""
        if rate is None:
            return self._sample_rate or CODEC_SAMPLE_RATE
        if self._sample_rate is None and rate == CODEC_SAMPLE_RATE:
            return True
        return rate == self.sample_rate

    def model_info(self, load: bool = True) -> ModelInfo:
        """The model the (first) server serves, from its ``/health`` (``load=False``: none asked)."""
        address = self._addresses[0]
        if not load:
            return ModelInfo(name="", loaded=False)
        health = self.health(address)
        rate = answers.checked_rate(health.get("sample_rate"))

        def text(key):
            value = health.get(key)
            return str(value) if value is not None else None

        return ModelInfo(name=text("model") or "", loaded=bool(health.get("model_loaded", True)),
                         sample_rate=rate,
                         device=text("device"), codec_device=text("codec_device") or "the server",
                         codec_reason=f"served by {address.url} ({health.get('model')} on {health.get('device')})",
                         prefix_cache=_voice_cache(health.get("voice_cache")))

    @staticmethod
    def available_devices() -> list[tuple[str, str]]:
        """None to choose here: the server's operator chose its device."""
        return []

    def segments_of(self, request: SynthesisRequest) -> list:
        return segments_of(request)

    # ---- synthesis ------------------------------------------------------------------------
    def synthesize(self, request: SynthesisRequest, *, batched: bool = False) -> SynthesisJob:
        """``batched`` is accepted for the engine interface and changes nothing: every job is its
        own connection, so jobs started from several threads are in flight together, and the
        servers decode concurrent requests in one batch."""
        check_request(request)  # the checks a local take gets, before any request goes out
        if request.reference_codes is not None:
            raise InputError("A server cannot take reference codes directly; send the reference audio or a saved "
                             "voice instead.")
        take = RemoteTake(self)
        # Every voice's form parts before any request: a bad voice id fails here.
        for voice in voices_of(request):
            take.voice_parts(voice)
        return SynthesisJob(lambda job: assemble_take(request, take, job))

    def voice_parts(self, voice: VoiceChoice) -> tuple[dict[str, str], dict[str, tuple[str, bytes]]]:
        """The form fields and files that carry a voice (sent with each of its segments)."""
        if voice.reference_audio is not None:
            audio = np.asarray(voice.reference_audio, dtype=np.float32)
            # Float WAV: the server encodes exactly the samples the local pipeline would.
            return ({"reference_text": voice.reference_text},
                    {"reference": ("reference.wav", wav_bytes(audio, CODEC_SAMPLE_RATE, subtype="FLOAT"))})
        if voice.voice is not None:
            if self._is_local_voice(voice.voice):
                path = self._voices.path_for(voice.voice)
                with open(path, "rb") as f:
                    # The id too: a server that knows no voice_file (s2.cpp) uses its own voice of
                    # that id (or says it has none) instead of silently speaking in the default voice.
                    return {"voice": voice.voice}, {"voice_file": (path.name, f.read())}
            return {"voice": voice.voice}, {}
        return {}, {}

    def _is_local_voice(self, voice: str) -> bool:
        """Whether the local library has this id. Anything it cannot even hold (s2.cpp's path
        spellings such as ``voices/hope.s2voice``) is for the server to resolve."""
        if self._voices is None:
            return False
        try:
            return self._voices.exists(voice)
        except InputError:
            return False

    # ---- choosing a server ----------------------------------------------------------------
    def pick_server(self, exclude: set[ServerAddress]) -> ServerAddress | None:
        """The least busy server not excluded (by ``/health``'s queue; ties: the order given).
        With one server there is nothing to choose, so no ``/health`` round trip."""
        candidates = [a for a in self._addresses if a not in exclude]
        if len(candidates) <= 1:
            return candidates[0] if candidates else None
        best, best_load = None, None
        for address in candidates:
            try:
                queue = self.health(address).get("queue") or {}
                load = int(queue.get("running", 0)) + int(queue.get("waiting", 0))
            except (RemoteError, TypeError, ValueError, AttributeError, OverflowError) as exc:
                log.info("skipping %s for now: %s", address.url, exc)
                continue
            if best_load is None or load < best_load:
                best, best_load = address, load
        # None answered /health: try the first anyway, so the error the user sees is the real one.
        return best if best is not None else candidates[0]


class RemoteTake:
    """The remote engine's side of one take (:class:`engine.take.SegmentRenderer`): each
    segment is one ``POST /generate``, retried on another server if one fails."""

    verb = "fetched"
    num_codebooks = None  # a server sends no codes

    def __init__(self, engine: RemoteEngine):
        self.engine = engine
        self.sample_rate = CODEC_SAMPLE_RATE  # until a server says otherwise
        self.request: SynthesisRequest | None = None
        self._parts: dict[tuple, tuple] = {}
        self._taken_samples = 0  # of the take before the segment in flight, for messages
        self._segment_count = 0

    def voice_parts(self, voice: VoiceChoice):
        if voice.key not in self._parts:
            self._parts[voice.key] = self.engine.voice_parts(voice)
        return self._parts[voice.key]

    def plan(self, request: SynthesisRequest, timings: Timings) -> tuple[list, bool]:
        self.request = request
        segments = segments_of(request)
        self._segment_count = len(segments)
        return segments, request.segmentation.enabled

    def render(self, segment, voice: VoiceChoice, seed: int, job: SynthesisJob, timings: Timings
               ) -> Generator[AudioChunk, None, SegmentOutcome]:
        request = self.request
        fetch = SegmentFetch(self.engine, request, self.voice_parts(voice), segment.text, seed, job,
                             take_seconds=lambda: self._taken_samples / self.sample_rate)
        for chunk in fetch.chunks(segment.index, self._segment_count):
            self.sample_rate = chunk.sample_rate
            yield chunk
        self._taken_samples += fetch.delivered
        frames = fetch.frames
        if job.cancel_event.is_set():
            stop_reason = "cancelled"
        else:
            stop_reason = "max_tokens" if frames >= request.generation.max_new_tokens else "end"
        return SegmentOutcome(stop_reason, frames)


class SegmentFetch:
    """One segment from the servers: streamed, and on a server failure retried on another one,
    skipping the samples already delivered (the same seed makes the same samples)."""

    def __init__(self, engine: RemoteEngine, request: SynthesisRequest, reference, text: str, seed: int,
                 job: SynthesisJob, take_seconds):
        self.engine = engine
        self.request = request
        self.fields, self.files = reference
        self.text = text
        self.seed = seed
        self.job = job
        self.take_seconds = take_seconds  # audio of the take before this segment, for messages
        self.delivered = 0  # samples of this segment already yielded
        self.frames = 0

    def _form(self) -> tuple[bytes, str]:
        g = self.request.generation
        params = {"stream": True, "chunked": True, "output_format": self.engine.settings.wire_format,
                  "stream_start_buffer_ms": 0,
                  "stream_decode_stride_frames": self.request.stream_stride, "seed": self.seed,
                  "max_new_tokens": g.max_new_tokens, "temperature": g.temperature, "top_p": g.top_p,
                  "top_k": g.top_k, "min_tokens_before_end": g.min_tokens_before_end, "ras": g.ras}
        return multipart_body({"text": self.text, **self.fields, "params": json.dumps(params)}, self.files)

    def chunks(self, index: int, n_seg: int) -> Iterator[AudioChunk]:
        failed: set[ServerAddress] = set()
        drops: dict[ServerAddress, int] = {}
        errors: list[RemoteError] = []
        body, content_type = self._form()
        while not self.job.cancel_event.is_set():
            address = self.engine.pick_server(failed)
            if address is None:
                raise _all_failed(errors)
            try:
                yield from self._stream(address, body, content_type, index, n_seg)
                return
            except (*RETRYABLE, answers.ServerMisbehaved) as exc:
                if self.job.cancel_event.is_set():
                    return
                errors.append(exc)
                failed.add(address)
                # A connection cut mid-take, with no other server left to try, is asked again at
                # the same address: behind a cluster's proxy (Ray Serve) one address stands for
                # many replicas, and the one that died is replaced. The seed makes the same
                # samples, so the retry skips what was already delivered. Bounded, so a server
                # that always drops still fails.
                if (isinstance(exc, ServerDropped) and len(failed) == len(self.engine.addresses)
                        and drops.get(address, 0) < DROPS_RETRIED_PER_SERVER):
                    drops[address] = drops.get(address, 0) + 1
                    failed.discard(address)
                    log.warning("%s; retrying segment %d at the same address", exc, index + 1)
                    continue
                if len(failed) < len(self.engine.addresses):
                    log.warning("%s; retrying segment %d on another server", exc, index + 1)

    def _stream(self, address: ServerAddress, body: bytes, content_type: str, index: int,
                n_seg: int) -> Iterator[AudioChunk]:
        connection = self.engine._connection(address)
        self.job.set_abort(connection.abort)
        try:
            try:
                response = connection.request("POST", "/generate", body, {"Content-Type": content_type})
            except RemoteError:
                if self.job.cancel_event.is_set():
                    return
                raise
            decoder = PcmDecoder.for_response(response, self.engine.is_model_rate, address.url)
            skip = self.delivered  # a retry regenerates the segment from its start
            received = 0
            limit = answers.max_segment_samples(self.request.generation.max_new_tokens)
            settings = self.engine.settings
            allowed_s = settings.read_timeout_s + settings.seconds_per_frame * (
                self.request.generation.max_new_tokens + answers.FRAME_MARGIN)
            deadline = time.monotonic() + allowed_s
            while True:
                try:
                    data = response.read1(65536)
                except (OSError, http.client.HTTPException) as exc:
                    if self.job.cancel_event.is_set():
                        return
                    raise self._dropped(address, exc) from None
                if not data:
                    if self.job.cancel_event.is_set():
                        return
                    answers.check_complete(response, address.url, "the audio")  # a short body is no take
                    break
                if time.monotonic() > deadline:
                    raise ServerDropped(address.url, f"The server at {address.url} took longer than a segment may "
                                                     f"take ({allowed_s:.0f} s for at most "
                                                     f"{self.request.generation.max_new_tokens} frames); giving up "
                                                     "on it.")
                if received + decoder.pending_samples + len(data) // decoder.bytes_per_sample > limit:
                    raise answers.ServerMisbehaved(address.url, f"The server at {address.url} sent more audio than "
                                                   f"the request allows ({limit} samples); refusing it.")
                samples = decoder.feed(data)
                if not len(samples):
                    continue
                start = received
                received += len(samples)
                if received <= skip:
                    continue
                if start < skip:
                    samples = samples[skip - start:]
                    start = skip
                self.delivered = received
                self.frames = received // SAMPLES_PER_CODE_FRAME
                yield AudioChunk(samples, decoder.sample_rate, index, n_seg, start // SAMPLES_PER_CODE_FRAME,
                                 len(samples) // SAMPLES_PER_CODE_FRAME)
                if self.job.cancel_event.is_set():
                    return
            tail = decoder.finish()
            if len(tail) and received + len(tail) > skip:
                tail = tail[max(skip - received, 0):]
                self.delivered = received + len(tail)
                # A partial frame counts as one (frame_count 0 would read as a pause).
                yield AudioChunk(tail, decoder.sample_rate, index, n_seg, received // SAMPLES_PER_CODE_FRAME, 1)
            self.frames = max(self.frames, -(-self.delivered // SAMPLES_PER_CODE_FRAME))
        finally:
            self.job.set_abort(None)
            connection.close()

    def _dropped(self, address: ServerAddress, exc: BaseException) -> ServerDropped:
        seconds = self.take_seconds() + self.delivered / CODEC_SAMPLE_RATE
        why = "nothing arrived for {:.0f} s".format(self.engine.settings.read_timeout_s) \
            if isinstance(exc, (socket.timeout, TimeoutError)) else "the connection closed"
        return ServerDropped(address.url, f"The server at {address.url} stopped answering after {seconds:.1f} s of "
                                          f"audio ({why}).")


def _all_failed(errors: list[RemoteError]) -> RemoteError:
    if len({e.url for e in errors}) == 1:
        return errors[0]  # one server: what happened first (a retry's failure follows from it)
    return RemoteError(errors[-1].url, "No server could finish the take: " + " ".join(str(e) for e in errors))


class PcmDecoder:
    """Response bytes → float32 samples in whole frames (``SAMPLES_PER_CODE_FRAME`` each, so a
    chunk's ``frame_start``/``frame_count`` are exact), from raw float32, raw PCM16 or a live
    PCM16 WAV (what s2.cpp sends for an output format it does not know). PCM16 becomes
    ``int16 / 32768``, the inverse of the server's ``float_to_pcm16``."""

    def __init__(self, encoding: str, sample_rate: int, url: str = ""):
        self.encoding = encoding  # pcm_f32le | pcm_s16le
        self.sample_rate = sample_rate  # the model's: an answer at any other rate is refused
        self.url = url
        self._is_model_rate = lambda rate: False  # only ``sample_rate`` itself, unless for_response says more
        # PCM16 may come inside a live WAV (s2.cpp's answer to a format it does not know), whatever
        # the Content-Type says: its first bytes tell.
        self._sniffing = encoding == "pcm_s16le"
        self._buffer = bytearray()
        self.bytes_per_sample = 4 if encoding == "pcm_f32le" else 2

    @classmethod
    def for_response(cls, response: http.client.HTTPResponse, is_model_rate, url: str) -> "PcmDecoder":
        """A decoder for a ``/generate`` answer, whose audio must be at the model's rate
        (``is_model_rate(rate)``); ``X-Audio-Sample-Rate`` saying otherwise is refused: a take
        at a rate of the server's choosing made a 16 KB answer into a 720 MB file."""
        encoding = (response.getheader("X-Audio-Encoding") or "").lower()
        rate_header = (response.getheader("X-Audio-Sample-Rate") or "").strip()
        rate = int(rate_header) if rate_header.isdigit() and len(rate_header) < 10 else None
        if rate_header and (rate is None or not is_model_rate(rate)):
            raise cls._wrong_rate(url, rate_header, is_model_rate(None))
        decoder = cls("pcm_f32le" if encoding == "pcm_f32le" else "pcm_s16le", rate or is_model_rate(None), url)
        decoder._is_model_rate = is_model_rate
        return decoder

    @staticmethod
    def _wrong_rate(url: str, said, model_rate: int) -> answers.ServerMisbehaved:
        return answers.ServerMisbehaved(url, f"The server at {url} sent audio at {printable(said, 20)} Hz; the model "
                                             f"makes {model_rate} Hz. Refusing it.")

    @property
    def pending_samples(self) -> int:
        return len(self._buffer) // self.bytes_per_sample

    def _convert(self, data: bytes) -> np.ndarray:
        if self.encoding == "pcm_f32le":
            out = np.frombuffer(data, dtype="<f4").astype(np.float32)
            if not np.all(np.isfinite(out)):
                raise answers.ServerMisbehaved(self.url, f"The server at {self.url} sent invalid audio samples (NaN "
                                                         "or infinity).")
            return out
        return np.frombuffer(data, dtype="<i2").astype(np.float32) / np.float32(32768.0)

    def feed(self, data: bytes) -> np.ndarray:
        self._buffer += data
        if self._sniffing:
            if len(self._buffer) < WAV_HEADER_BYTES:
                return np.zeros(0, np.float32)
            self._sniffing = False
            if self._buffer[:4] == b"RIFF" and self._buffer[8:12] == b"WAVE":
                rate = int.from_bytes(self._buffer[24:28], "little")
                if rate != self.sample_rate and not self._is_model_rate(rate):
                    raise self._wrong_rate(self.url, rate, self.sample_rate)
                self.sample_rate = rate
                del self._buffer[:WAV_HEADER_BYTES]
        frame_bytes = SAMPLES_PER_CODE_FRAME * self.bytes_per_sample
        whole = len(self._buffer) // frame_bytes * frame_bytes
        if not whole:
            return np.zeros(0, np.float32)
        out = self._convert(bytes(self._buffer[:whole]))
        del self._buffer[:whole]
        return out

    def finish(self) -> np.ndarray:
        """What is left at the end (a partial frame; none from this project's server)."""
        if self._sniffing and self._buffer[:4] == b"RIFF":
            self._buffer.clear()  # a WAV header and nothing after it
        usable = len(self._buffer) // self.bytes_per_sample * self.bytes_per_sample
        out = self._convert(bytes(self._buffer[:usable]))
        self._buffer.clear()
        return out


def _voice_cache(value) -> PrefixCacheStats | None:
    """A server's voice cache numbers from its /health; None where it has none, or they are
    not what a server sends (a hostile server gets no say beyond five whole numbers)."""
    fields = ("hits", "misses", "entries", "bytes", "budget_bytes")
    if not isinstance(value, dict) or not all(isinstance(value.get(f), int) and not isinstance(value.get(f), bool)
                                              and 0 <= value[f] < 2**63 for f in fields):
        return None
    return PrefixCacheStats(**{f: value[f] for f in fields})
