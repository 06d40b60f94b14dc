"""``s2studio serve``: the HTTP server (s2.cpp's ``--server``), see docs/server.md.

Binds 127.0.0.1 by default: anyone who can reach the port can make the machine synthesize
speech in any saved voice, so exposing it is an explicit choice (``--host``), warned about,
and best paired with ``--api-key``.
"""

from __future__ import annotations

import argparse
import os
import sys


def _positive_mb(value: str) -> float:
    mb = float(value)
    if not mb > 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    return mb


def _non_negative(value: str) -> int:
    n = int(value)
    if n < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return n


def _positive_seconds(value: str) -> float:
    seconds = float(value)
    if not 0 < seconds <= 3600:
        raise argparse.ArgumentTypeError("must be more than 0 and at most 3600")
    return seconds


def _batch_size(value: str) -> int:
    from s2studio.server.config import MAX_BATCH

    n = int(value)
    if not 1 <= n <= MAX_BATCH:
        raise argparse.ArgumentTypeError(f"must be 1..{MAX_BATCH}")
    return n


def _positive(value: str) -> int:
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return n


def _port(value: str) -> int:
    port = int(value)
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError("must be between 0 and 65535")
    return port


def _names(value: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in value.split(",") if name.strip())


def _voice_map(value: str):
    from s2studio.errors import InputError
    from s2studio.server.voice_map import parse_voice_map

    try:
        return parse_voice_map(value)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    from s2studio.cli.options import engine_settings, generation_params
    from s2studio.engine.pipeline import Pipeline
    from s2studio.engine.voices import VoiceLibrary, default_voice_dir
    from s2studio.server import ServerConfig, create_app, serve_forever
    from s2studio.server.runner import LOOPBACK_HOSTS, listen_socket
    from s2studio.server.voice_map import VoiceMap

    api_key = args.api_key if args.api_key is not None else os.environ.get("S2STUDIO_API_KEY") or None
    if args.host not in LOOPBACK_HOSTS:
        print(f"warning: serving on {args.host}: every machine that can reach port {args.port} can use this "
              f"server{'' if api_key else ' (no --api-key set)'}.", file=sys.stderr)
    if args.cuda_graphs not in ("auto", "off") and args.max_batch > 1:
        # Batched takes share one decode step of several rows (engine.batching), which the static
        # steps do not cover: without this line the flag would quietly do nothing.
        print(f"warning: --cuda-graphs {args.cuda_graphs} applies to takes decoded one at a time; with --max-batch "
              f"{args.max_batch} requests are decoded together on the dynamic steps (use --max-batch 1).",
              file=sys.stderr)
    voice_dir = args.voice_dir or str(default_voice_dir())
    os.makedirs(voice_dir, exist_ok=True)  # so the folder checks resolve against a real path
    config = ServerConfig(voice_dir=voice_dir, queue_depth=args.queue_depth, max_batch=args.max_batch,
                          api_key=api_key,
                          max_upload_bytes=int(args.max_upload_mb * 1024 * 1024),
                          generation=generation_params(args), max_new_tokens_limit=args.max_tokens_limit,
                          max_text_chars=args.max_text_chars, allowed_hosts=args.allowed_hosts,
                          allowed_origins=args.allowed_origins, max_connections=args.max_connections,
                          header_timeout_s=args.header_timeout, body_timeout_s=args.body_timeout,
                          voice_map=VoiceMap(entries=args.voice_map, default=args.default_voice or ""))
    # The port first: a busy port is one line and exit 2 before minutes of model loading.
    sock = listen_socket(args.host, args.port)
    try:
        pipeline = Pipeline(engine_settings(args), voices=VoiceLibrary(voice_dir))
        print(f"loading {args.model} ...", file=sys.stderr)
        pipeline.load()  # before the port is announced, as s2.cpp initializes first
        port = sock.getsockname()[1]
        print(f"serving on http://{args.host}:{port} (voices: {voice_dir}, {args.max_batch} at once, "
              f"queue depth {args.queue_depth})",
              file=sys.stderr)
        serve_forever(create_app(pipeline, config), args.host, port,
                      log_level=args.log_level.replace("warn", "warning"), sock=sock)
    finally:
        sock.close()
    return 0


def register(subparsers) -> None:
    from s2studio.cli import add_log_level, add_voice_dir
    from s2studio.cli.options import add_engine_options, add_sampling_options
    from s2studio.server.config import (DEFAULT_BODY_TIMEOUT_S, DEFAULT_HEADER_TIMEOUT_S, DEFAULT_MAX_CONNECTIONS,
                                        DEFAULT_MAX_TEXT_CHARS, DEFAULT_MAX_UPLOAD_MB, DEFAULT_PORT,
                                        DEFAULT_MAX_BATCH, DEFAULT_QUEUE_DEPTH, MAX_BATCH)

    p = subparsers.add_parser("serve", help="HTTP server compatible with s2.cpp's /generate",
                              description="Serve S2 Pro over HTTP: s2.cpp's POST /generate, OpenAI's "
                                          "/v1/audio/speech and /v1/models, Fish Audio's /v1/tts and "
                                          "/v1/references/*, GET /health and /openapi.json (docs/server.md).")
    add_engine_options(p)
    p.add_argument("-H", "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("-P", "--port", type=_port, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    add_voice_dir(p, outermost=False,
                  helptext="folder of .s2voice voices; requests cannot reach outside it (default: the studio's)")
    p.add_argument("--max-batch", type=_batch_size, default=DEFAULT_MAX_BATCH,
                   help=f"requests synthesized at once, decoded together (1..{MAX_BATCH}, default "
                        f"{DEFAULT_MAX_BATCH}; 1 = one at a time, as s2.cpp)")
    p.add_argument("--queue-depth", type=_non_negative, default=DEFAULT_QUEUE_DEPTH,
                   help=f"requests that may wait behind the running ones; beyond that 503 "
                        f"(default {DEFAULT_QUEUE_DEPTH}; 0 with --max-batch 1 = s2.cpp's behaviour)")
    p.add_argument("--api-key", default=None,
                   help="require 'Authorization: Bearer KEY' (default: $S2STUDIO_API_KEY, else none)")
    p.add_argument("--max-upload-mb", type=_positive_mb, default=DEFAULT_MAX_UPLOAD_MB,
                   help=f"largest request body in MB, else 413 (default {DEFAULT_MAX_UPLOAD_MB:g})")
    p.add_argument("--max-tokens-limit", type=int, default=None,
                   help="clamp every request's max_new_tokens to this (default: the model's context)")
    p.add_argument("--max-text-chars", type=_positive, default=DEFAULT_MAX_TEXT_CHARS,
                   help=f"longest text of one request, else 413 (default {DEFAULT_MAX_TEXT_CHARS})")
    p.add_argument("--allowed-hosts", type=_names, default=(),
                   help="comma-separated Host names accepted besides localhost, 127.0.0.1, [::1] and the "
                        "address connected to ('*': any; default none)")
    p.add_argument("--allowed-origins", type=_names, default=(),
                   help="comma-separated web page origins allowed to call the server, with CORS "
                        "(e.g. http://localhost:5173; default none: requests from web pages are refused)")
    p.add_argument("--max-connections", type=_positive, default=DEFAULT_MAX_CONNECTIONS,
                   help=f"open connections at once; beyond that 503 (default {DEFAULT_MAX_CONNECTIONS})")
    p.add_argument("--header-timeout", type=_positive_seconds, default=DEFAULT_HEADER_TIMEOUT_S,
                   help=f"seconds for a request's headers to arrive, else 408 (default {DEFAULT_HEADER_TIMEOUT_S:g})")
    p.add_argument("--body-timeout", type=_positive_seconds, default=DEFAULT_BODY_TIMEOUT_S,
                   help=f"seconds for a request's body to arrive, else 408 (default {DEFAULT_BODY_TIMEOUT_S:g})")
    p.add_argument("--voice-map", type=_voice_map, default=(), metavar="NAME=VOICE,...|FILE",
                   help="OpenAI voice names to voices of the voice folder, e.g. alloy=hope,nova=anna, or a file "
                        "of such pairs (default: every stock name gets --default-voice)")
    p.add_argument("--default-voice", default=None, metavar="VOICE",
                   help="the voice an OpenAI stock name without a --voice-map entry gets "
                        "(default: the model's own voice)")
    add_sampling_options(p)
    add_log_level(p)
    p.set_defaults(handler=run)
