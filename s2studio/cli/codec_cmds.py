"""``s2studio encode`` (audio -> codes.npy) and ``s2studio decode`` (codes.npy -> WAV).

Both write their output atomically (temp file beside it, then ``os.replace``), so a failure
never leaves a partial file under the requested name.
"""

from __future__ import annotations

import argparse
import logging
import os

import numpy as np

from s2studio.cli.options import model_path
from s2studio.cli.outputs import save_npy_atomic, writing
from s2studio.errors import InputError

log = logging.getLogger(__name__)


def _load_codec(args: argparse.Namespace):
    from s2studio.engine.codec.placement import load_placed_codec
    from s2studio.engine.placement import check_device_available, normalize_device
    from s2studio.engine.threads import set_threads

    set_threads(args.threads)
    device = normalize_device(args.device)
    check_device_available(device)  # as synth and serve: never fall back to the CPU silently
    codec, placement = load_placed_codec(model_path(args), device, args.codec_mode,
                                         emulate_ggml=getattr(args, "emulate_ggml", False))
    log.debug("codec device: %s (%s)", placement.device, placement.reason)
    return codec


def _check_output_dir(path: str) -> None:
    from s2studio.audio.atomic_file import check_output_path

    check_output_path(path)


def run_encode(args: argparse.Namespace) -> int:
    from s2studio.audio import read_audio

    _check_output_dir(args.output)
    codec = _load_codec(args)
    audio = read_audio(args.audio, codec.sample_rate, resampler=args.resampler,
                       max_seconds=args.max_seconds if args.max_seconds > 0 else None)
    codes = codec.encode(audio)
    with writing(args.output):
        save_npy_atomic(args.output, codes)
    print(f"wrote {args.output}: int32 codes {list(codes.shape)} "
          f"({codes.shape[1]} frames, {len(audio) / codec.sample_rate:.2f} s of audio)")
    return 0


def _load_codes(path: str, num_codebooks: int) -> np.ndarray:
    if not os.path.isfile(path):
        raise InputError(f"Codes file {path}: does not exist.")
    with open(path, "rb") as f:
        if f.read(6) != b"\x93NUMPY":  # np.load would speak of pickled data
            raise InputError(f"Codes file {path}: is not a .npy file (s2studio encode and synth --codes-out "
                             "write them).")
    try:
        codes = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(f"Codes file {path}: cannot be read as a .npy array ({exc}).") from None
    if not isinstance(codes, np.ndarray) or codes.dtype.kind not in "iu":
        raise InputError(f"Codes file {path}: expected an integer array, got {getattr(codes, 'dtype', type(codes))}.")
    if codes.ndim != 2 or codes.shape[0] != num_codebooks or codes.shape[1] < 1:
        raise InputError(f"Codes file {path}: expected shape [{num_codebooks}, T] with T >= 1, "
                         f"got {list(codes.shape)}.")
    return codes.astype(np.int32)


def run_decode(args: argparse.Namespace) -> int:
    from s2studio.audio import check_output_format, write_audio_file

    _check_output_dir(args.output)
    check_output_format(args.output)
    if not os.path.isfile(args.codes):  # fail before the (slow) model load
        raise InputError(f"Codes file {args.codes}: does not exist.")
    codec = _load_codec(args)
    codes = _load_codes(args.codes, codec.num_codebooks)
    audio = codec.decode_windowed(codes) if args.s2cpp_windows else codec.decode(codes)
    with writing(args.output):
        write_audio_file(args.output, audio, codec.sample_rate)
    print(f"wrote {args.output}: {len(audio)} samples at {codec.sample_rate} Hz "
          f"({len(audio) / codec.sample_rate:.2f} s)")
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    from s2studio.cli import add_log_level
    from s2studio.cli.options import MODEL_HELP, add_codec_mode_options, add_model_option

    add_model_option(p, MODEL_HELP + "; the codec is its c.* tensors")
    p.add_argument("-o", "--output", required=True, help="output file")
    p.add_argument("--device", default="cpu", help="engine device: cpu, cuda, cuda:N or mps (default cpu)")
    add_codec_mode_options(p)
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0 = all cores)")
    p.add_argument("--emulate-ggml", action="store_true",
                   help="round conv/matmul inputs to fp16 like s2.cpp's CPU backend (parity checks)")
    add_log_level(p)


def register(subparsers) -> None:
    p = subparsers.add_parser("encode", help="encode reference audio to codec codes (.npy)",
                              description="Encode an audio file (WAV/FLAC/OGG/MP3, any rate; mixed to mono "
                                          "and resampled to 44.1 kHz) into int32 codes [10, T].")
    p.add_argument("audio", help="audio file")
    p.add_argument("--resampler", default="soxr", choices=["soxr", "linear"],
                   help="soxr (band-limited, default) or linear (s2.cpp's exact resampler)")
    p.add_argument("--max-seconds", type=float, default=60.0,
                   help="refuse longer audio (default 60; 0 = no limit)")
    _common(p)
    p.set_defaults(handler=run_encode)

    p = subparsers.add_parser("decode", help="decode codec codes (.npy) to an audio file",
                              description="Decode int32 codes [10, T] (.npy) into 44.1 kHz audio of exactly "
                                          "2048*T samples: a 32-bit float WAV, or FLAC/OGG/MP3 by the "
                                          "output's extension.")
    p.add_argument("codes", help="codes .npy file, int32 [10, T]")
    p.add_argument("--s2cpp-windows", action="store_true",
                   help="decode in s2.cpp's 16-frame windows with 144 frames of context (bit-parity "
                        "with s2.cpp for long inputs; the default decodes with full context)")
    _common(p)
    p.set_defaults(handler=run_decode)
