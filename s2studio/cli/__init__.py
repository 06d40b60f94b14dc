"""Command line: ``s2studio`` (no arguments) opens the app; subcommands do the rest.

Each subcommand lives in its own module with a ``register(subparsers)`` function that adds
its parser and sets ``handler``. The handler returns an exit code. ``S2Error``s become one
line on stderr and exit code 2; other exceptions are bugs and keep their traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from s2studio import __version__

# Modules providing subcommands, in the order they appear in --help.
SUBCOMMAND_MODULES = [
    "s2studio.cli.synth",
    "s2studio.cli.codec_cmds",
    "s2studio.cli.voices_cmd",
    "s2studio.cli.trace",
    "s2studio.cli.serve",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="s2studio",
        description="Voice-cloning studio for Fish Audio S2 Pro. Without a command, opens the app.",
    )
    parser.add_argument("--version", action="version", version=f"s2studio {__version__}")
    parser.add_argument("--self-test", action="store_true",
                        help="check the installation (imports, a tiny model, one second of speech, the window) "
                             "and exit")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:  # a real missing dependency inside the module: surface it
                raise
            continue
        module.register(subparsers)
    return parser


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def add_log_level(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warn", "error"],
                        help="logging verbosity (default: info)")


def main(argv: list[str] | None = None) -> int:
    from s2studio.errors import S2Error

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.self_test:
        # The bundle's smoke test (s2studio/selftest.py). The app's entry is handed in from
        # here, the one module allowed to reach into the app.
        from s2studio.app import run_app
        from s2studio.selftest import run_self_test

        return run_self_test(run_app)
    if args.command is None:
        from s2studio.app import run_app  # imported lazily: the CLI must not need Qt

        return run_app()
    setup_logging(getattr(args, "log_level", "info").replace("warn", "warning"))
    try:
        return int(args.handler(args) or 0)
    except S2Error as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
