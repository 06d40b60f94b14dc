"""``s2studio synth``: text (and optionally a reference voice) to a WAV file.

Flag names follow s2.cpp's CLI (docs/spec/engine.md §8.5), including its single-dash long forms
(``-text``, ``-max-tokens``...), so existing scripts keep working.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from s2studio.cli.console import TakeProgress
from s2studio.cli.options import (
    add_engine_options,
    add_sampling_options,
    engine_settings,
    generation_params,
    read_reference_clip_noting,
)
from s2studio.cli.voices_cmd import print_voices
from s2studio.engine.limits import argparse_type


def voice_library(args: argparse.Namespace):
    from s2studio.engine.voices import VoiceLibrary

    return VoiceLibrary(args.voice_dir)


def speaker_voice_arg(text: str) -> tuple[int, str]:
    """``N=VOICE`` of ``--speaker-voice``."""
    number, sep, voice = text.partition("=")
    if not sep or not number.strip().isdigit() or not voice.strip() or int(number) > 999:
        raise argparse.ArgumentTypeError(f"{text!r}: give SPEAKER=VOICE, e.g. 0=alice (speaker 0 to 999)")
    return int(number), voice.strip()


def run(args: argparse.Namespace) -> int:
    import logging

    from s2studio.audio import StreamingWavWriter, write_audio_file
    from s2studio.cli.outputs import save_npy_atomic, writing
    from s2studio.errors import InputError
    from s2studio.engine.pipeline import Pipeline, PostProcess, Segmentation, SynthesisRequest

    log = logging.getLogger("s2studio.synth")
    voices = voice_library(args)
    if args.list_voices and args.server:
        return print_server_voices(remote_engine(args, voices))
    if args.list_voices:
        return print_voices(voices)
    # The model file is looked up (-m, the default, the only one installed) only where it is used:
    # --list-voices and --server need none.
    settings = None if args.server else engine_settings(args)
    check_synth_outputs(args)  # before the model loads: a bad -o must not cost a whole take
    if args.codec_context_frames is not None:
        log.warning("--codec-context-frames is accepted for compatibility and has no effect: the incremental "
                    "decoder keeps the codec's whole causal state, which equals a full decode")
    if args.save_voice and not args.voice:
        raise InputError("--save-voice needs --voice ID, the id to save the voice under.")
    if args.save_voice and not args.prompt_audio:
        raise InputError("--save-voice needs --prompt-audio (and --prompt-text): the voice to encode and save.")
    if args.server and args.codes_out:
        raise InputError("--codes-out is not available with --server: the server sends audio, not codes.")
    reference = None
    if args.prompt_audio:
        if not (args.prompt_text or "").strip():
            raise InputError("--prompt-audio needs --prompt-text, the transcript of the reference audio.")
        reference = read_reference_clip_noting(args.prompt_audio)
        if args.voice and not args.save_voice:
            log.warning("both --voice and --prompt-audio given: using the audio (as s2.cpp)")
    elif args.voice and args.prompt_text:
        log.warning("--prompt-text is ignored with --voice: the voice's own transcript is used")
    pipeline = remote_engine(args, voices) if args.server else Pipeline(settings, voices=voices)
    ref_codes = None
    if reference is not None and args.save_voice:
        # Encode once (the server's codec, or ours), save, and synthesize from the saved voice:
        # a server gets the .s2voice uploaded with each take, the local engine the saved codes.
        profile = pipeline.encode_voice(reference, args.prompt_text)
        info = voices.save_profile(args.voice, profile, name=args.voice, reference_audio=reference, overwrite=True)
        print(f"saved voice '{info.id}' ({info.num_frames} frames) in {voices.folder}", file=sys.stderr)
        if args.server:
            reference = None
        else:
            ref_codes = profile.codes
    request = SynthesisRequest(
        text=args.text,
        voice=args.voice if reference is None else None,
        reference_audio=reference if ref_codes is None else None,
        reference_codes=ref_codes,
        reference_text=args.prompt_text if reference is not None else None,
        generation=generation_params(args),
        segmentation=Segmentation(enabled=args.segment_sentences, max_chars=args.segment_max_chars,
                                  pause_ms=args.sentence_pause_ms),
        postprocess=PostProcess(trim_silence=args.trim_silence, normalize=args.normalize,
                                dynamic_normalize=args.dynamic_normalize),
        # 16 frames per codec call: on a CPU small chunks cost more per second of audio (fixed
        # per-call work); 16 is also s2.cpp's stream stride.
        stream_stride=args.stream_decode_stride or 16,
        speaker_voices=dict(args.speaker_voice) or None)
    progress = TakeProgress([seg.text for seg in pipeline.segments_of(request)] if sys.stderr.isatty() else [],
                            args.max_tokens, enabled=not args.no_progress)
    job = pipeline.synthesize(request)
    try:
        if args.stream_file:
            # PCM16 written as it is decoded, no post-processing (as s2.cpp's --stream-file).
            with writing(args.output):
                writer = StreamingWavWriter(args.output, pipeline.sample_rate)
            try:
                for chunk in job:
                    with writing(args.output):
                        writer.write(chunk.samples)
                    progress.update(chunk)
                with writing(args.output):
                    writer.close()
            finally:
                writer.abort()  # no-op once closed; otherwise removes the temp file
        else:
            for chunk in job:
                progress.update(chunk)
    finally:
        progress.close()
    result = job.result
    if not args.stream_file:
        with writing(args.output):
            write_audio_file(args.output, result.audio, result.sample_rate)
    if args.codes_out:
        with writing(args.codes_out):
            save_npy_atomic(args.codes_out, result.codes.astype(np.int32))
    t = result.timings
    if args.server:
        # The engine's own timings stay on the server; these are the client's wall clock.
        print(f"wrote {args.output}: {t.audio_s:.2f} s of audio, {len(result.segments)} segment(s), {t.frames} "
              f"frames ({result.stop_reason}), seed {result.seed}; {t.total_s:.1f} s total from {args.server}, "
              f"first audio after {t.first_audio_s:.2f} s", file=sys.stderr)
        return 0
    log.info("[Metrics] load_ms=%.0f prefill_ms=%.0f frames=%d ms_per_frame=%.1f codec_ms=%.0f "
             "first_audio_ms=%.0f chunk_ms=%.1f rtf=%.3f peak_rss_mb=%.0f", 1000 * t.load_s, 1000 * t.prefill_s,
             t.frames, t.ms_per_frame, 1000 * t.decode_s, 1000 * t.first_audio_s, t.ms_per_chunk,
             t.real_time_factor, peak_rss_mb())
    print(f"wrote {args.output}: {t.audio_s:.2f} s of audio, {len(result.segments)} segment(s), {t.frames} frames "
          f"({result.stop_reason}), seed {result.seed}; {t.total_s:.1f} s total, prefill {t.prefill_s:.2f} s, "
          f"{t.ms_per_frame:.0f} ms/frame, codec {t.decode_s:.2f} s, real-time factor {t.real_time_factor:.2f}",
          file=sys.stderr)
    return 0


def remote_engine(args: argparse.Namespace, voices):
    """The engine on the servers of ``--server`` (voices of the local library are uploaded)."""
    import os

    from s2studio.remote import RemoteEngine, RemoteSettings

    api_key = args.api_key if args.api_key is not None else os.environ.get("S2STUDIO_API_KEY") or None
    engine = RemoteEngine(RemoteSettings(args.server, api_key=api_key, wire_format=args.wire_format), voices=voices)
    for address in engine.addresses:
        if address.insecure_warning:
            print(f"warning: {address.insecure_warning}", file=sys.stderr)
    return engine


def check_synth_outputs(args: argparse.Namespace) -> None:
    """Every file synth will write can be written, in a format its name allows."""
    from s2studio.audio import check_output_format
    from s2studio.audio.atomic_file import check_output_path
    from s2studio.errors import InputError

    check_output_path(args.output)
    fmt, _subtype = check_output_format(args.output)
    if args.stream_file and fmt != "WAV":
        raise InputError(f"Output {args.output}: --stream-file writes a 16-bit WAV as it goes; "
                         "give an output name ending in .wav.")
    if args.codes_out:
        check_output_path(args.codes_out)


def peak_rss_mb() -> float:
    """Peak resident memory of this process (MB); 0 where the platform does not say.

    On Linux from VmHWM: ``ru_maxrss`` carries over the parent's peak through fork and exec, so
    a small command started by a big process would report the parent's size."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    try:
        import resource
    except ImportError:  # Windows
        return 0.0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024  # bytes on macOS, KiB elsewhere


def print_server_voices(engine) -> int:
    """The voices in the server's own folder (usable by id with --server; the local library's
    voices are sent along with each request anyway)."""
    from s2studio.remote.printable import printable

    for address in engine.addresses:
        voices = engine.list_voices(address)
        print(f"{address.url}: {len(voices)} voice(s)")
        for v in voices:  # each a dict, its text already made printable (remote/answers.py)
            note = "" if v.get("usable", True) is not False else "  [unusable]"
            print(f"  {printable(v.get('id', '?'), 64):<24} {printable(v.get('name', ''), 120)}{note}")
    return 0


def register(subparsers) -> None:
    from s2studio.cli import add_log_level, add_voice_dir

    p = subparsers.add_parser("synth", help="synthesize speech to an audio file",
                              description="Synthesize speech with S2 Pro, optionally cloning a reference voice.")
    add_engine_options(p)
    p.add_argument("-text", "--text", default="Hello world", help="text to speak")
    p.add_argument("-pa", "--prompt-audio", default=None, help="reference audio to clone (WAV/FLAC/OGG/MP3)")
    p.add_argument("-pt", "--prompt-text", default=None, help="transcript of the reference audio")
    p.add_argument("-o", "--output", default="out.wav",
                   help="output file; the extension picks the format: .wav (32-bit float), .flac, .ogg or .mp3 "
                        "(default: out.wav)")
    p.add_argument("--codes-out", default=None, help="also save the codes, int32 [10, frames] (.npy)")
    add_sampling_options(p)
    for name, helptext in (("normalize", "peak-normalize to 0.95"),
                           ("trim-silence", "cut trailing silence"),
                           ("dynamic-normalize", "even out loudness (1 s RMS windows)")):
        g = p.add_mutually_exclusive_group()
        g.add_argument(f"--{name}", action="store_true", help=f"{helptext} (off by default)")
        g.add_argument(f"--no-{name}", dest=name.replace("-", "_"), action="store_false", help="(default)")
    p.add_argument("--voice", default=None, help="use the saved voice with this id (or the id to save with "
                                                "--save-voice)")
    p.add_argument("--speaker-voice", action="append", default=[], metavar="N=VOICE", type=speaker_voice_arg,
                   help="a dialogue: speak <|speaker:N|>'s turns with the saved voice VOICE (repeat per speaker; "
                        "other speakers use --voice/--prompt-audio, or the model's own voice)")
    p.add_argument("--save-voice", action="store_true",
                   help="encode --prompt-audio once and save it as voice --voice for later runs")
    add_voice_dir(p, outermost=False)
    p.add_argument("--list-voices", action="store_true",
                   help="list the saved voices and exit (with --server: the server's voices)")
    p.add_argument("--segment-sentences", action="store_true",
                   help="split long text into sentences, synthesized one after another")
    p.add_argument("--sentence-pause-ms", type=argparse_type("pause_ms", "--sentence-pause-ms"), default=180,
                   help="silence between sentences, 0-10000 (default 180)")
    p.add_argument("--segment-max-chars", type=argparse_type("max_chars", "--segment-max-chars"), default=0,
                   help="also split sentences longer than this at clauses/spaces (0 = no limit)")
    p.add_argument("--codec-context-frames", type=int, default=None,
                   help="accepted for s2.cpp compatibility; the incremental decoder needs no context window")
    p.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    p.add_argument("--stream-file", action="store_true",
                   help="write 16-bit PCM through the streaming decoder as frames are generated")
    p.add_argument("--stream-decode-stride", type=argparse_type("stream_stride", "--stream-decode-stride", also=(0,)),
                   default=0, help="frames per decoded chunk, 1-1024 (0 = 16, as s2.cpp)")
    remote = p.add_argument_group("engine on another machine")
    remote.add_argument("--server", default=None, metavar="URL[,URL...]",
                        help="synthesize on `s2studio serve` at this address instead of loading a model here "
                             "(several, comma-separated: the least busy is used, and a server that fails "
                             "mid-take is replaced for the rest of the take)")
    remote.add_argument("--api-key", default=None,
                        help="the server's API key (default: $S2STUDIO_API_KEY)")
    remote.add_argument("--wire-format", choices=["pcm_f32le", "pcm_s16le", "wav"], default="pcm_f32le",
                        help="how the audio travels: pcm_f32le, the exact samples (default); pcm_s16le, half the "
                             "bytes, rounded to 16 bits; wav, s2.cpp's live PCM16 WAV")
    add_log_level(p)
    p.set_defaults(handler=run)
