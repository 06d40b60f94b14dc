"""Command line: ``s2studio`` (no arguments) opens the app; subcommands do the rest.

Each subcommand lives in its own module with a ``register(subparsers)`` function that adds
its parser and sets ``handler``. The handler returns an exit code. ``S2Error``s become one
line on stderr and exit code 2; other exceptions are bugs and keep their traceback.

Shared options (``--log-level`` for every command, ``--voice-dir`` for synth, voices and serve)
are accepted before and after the subcommand: ``s2studio --log-level debug synth`` and
``s2studio synth --log-level debug``, ``s2studio --voice-dir X voices add``, ``voices
--voice-dir X add`` and ``voices add --voice-dir X``. The top-level parser holds the default;
the inner copies default to "not given" (``argparse.SUPPRESS``) so they cannot overwrite a
value given further out, and the innermost value given wins.

SIGTERM and SIGHUP end the command the way Ctrl+C does (``finally`` blocks and context
managers run), so an interrupted ``--stream-file`` removes its temp file.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys

from s2studio import __version__

# Modules providing subcommands, in the order they appear in --help.
SUBCOMMAND_MODULES = [
    "s2studio.cli.synth",
    "s2studio.cli.render",
    "s2studio.cli.codec_cmds",
    "s2studio.cli.voices_cmd",
    "s2studio.cli.trace",
    "s2studio.cli.serve",
    "s2studio.cli.cluster",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="s2studio",
        description="Voice-cloning studio for Fish Audio S2 Pro. Without a command, opens the app.",
    )
    parser.add_argument("--version", action="version", version=f"s2studio {__version__}")
    add_log_level(parser, outermost=True)
    add_voice_dir(parser, outermost=True,
                  helptext="voice library folder for synth, voices and serve (default: the app's voice folder)")
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


LOG_LEVELS = ["debug", "info", "warn", "error"]


def add_log_level(parser: argparse.ArgumentParser, *, outermost: bool = False) -> None:
    """``--log-level``; only the top-level parser carries the default (see the module docstring)."""
    parser.add_argument("--log-level", default="info" if outermost else argparse.SUPPRESS, choices=LOG_LEVELS,
                        help="logging verbosity (default: info)")


def add_voice_dir(parser: argparse.ArgumentParser, *, outermost: bool = False, helptext: str | None = None) -> None:
    """``--voice-dir``: only the top-level parser carries the default (see the module docstring)."""
    parser.add_argument("--voice-dir", default=None if outermost else argparse.SUPPRESS,
                        help=helptext or "voice library folder (default: the app's voice folder)")


def _terminate_like_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _install_termination_handlers() -> dict:
    """Route SIGTERM/SIGHUP to KeyboardInterrupt; returns the handlers to put back."""
    previous = {}
    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None:
            try:
                previous[sig] = signal.signal(sig, _terminate_like_interrupt)
            except (ValueError, OSError):  # not the main thread, or not allowed here
                pass
    return previous


def _restore_handlers(previous: dict) -> None:
    for sig, handler in previous.items():
        try:
            signal.signal(sig, handler)
        except (ValueError, OSError, TypeError):
            pass


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
    previous_handlers = _install_termination_handlers()
    try:
        return int(args.handler(args) or 0)
    except S2Error as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        _restore_handlers(previous_handlers)
