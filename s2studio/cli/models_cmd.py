"""``s2studio models list|pull|path|remove|default``: the model files, shared with the app.

The models folder and the default model are the app's (``s2studio/models/store.py``); the
download is the app's too (``s2studio/models/download.py``: resume from the ``.part`` file,
checksum against what the Hub publishes), with a terminal progress bar.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

from s2studio.errors import InputError
from s2studio.models.catalog import CATALOG, MODEL_REPO, TOKENIZER_FILE, variant_list, variant_named


def _store():
    from s2studio.models.store import ModelStore

    return ModelStore()


def _size(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def _variant(name: str):
    v = variant_named(name)
    if v is None:
        raise InputError(f"{name!r} is not a model variant; choose one of: {variant_list()}.")
    return v


def run_list(args: argparse.Namespace) -> int:
    store = _store()
    models = store.installed()
    print(f"models folder: {store.folder}")
    if not models:
        print(f"no model installed; get one with: s2studio models pull q8_0  (variants: {variant_list()})")
    for m in models:
        mark = "*" if m.is_default else " "
        print(f"{mark} {m.label:<10} {_size(m.size):>9}  {m.path}")
    for part in store.partial_downloads():
        print(f"  (incomplete download: {part.name}, {_size(part.stat().st_size)}; `s2studio models pull` "
              "continues it)")
    if models and not any(m.is_default for m in models):
        print("no default set: commands use the only model installed, or say which to choose")
    elif models:
        print("* = the default (the app uses it too)")
    if args.available:
        print(f"available from huggingface.co/{MODEL_REPO}:")
        for v in CATALOG:
            print(f"  {v.name:<10} {v.size:>9}  {v.what}")
    return 0


def run_pull(args: argparse.Namespace) -> int:
    from s2studio.cli.console import progress_bar
    from s2studio.models.download import HuggingFaceClient, download_file

    v = _variant(args.variant)
    store = _store()
    client = HuggingFaceClient()
    started = time.monotonic()
    paths = {}
    for name in (v.filename, TOKENIZER_FILE):
        bar = progress_bar(None, description=name, unit="B", scale_bytes=True, enabled=not args.no_progress)

        def progress(done: int, total: int, bar=bar) -> None:
            if bar.total != total:
                bar.reset(total=total)
            bar.update(done - bar.n)

        try:
            paths[name] = download_file(client, MODEL_REPO, name, store.folder, cancel=threading.Event(),
                                        progress=progress)
        finally:
            bar.close()
    model = paths[v.filename]
    made_default = False
    if store.default_path() is None or args.default:
        store.set_default(model)
        made_default = True
    took = time.monotonic() - started
    print(f"{v.name}: {model} ({_size(model.stat().st_size)}, checksum verified, tokenizer beside it) in "
          f"{took:.0f} s{'; now the default model' if made_default else ''}", file=sys.stderr)
    return 0


def run_path(args: argparse.Namespace) -> int:
    store = _store()
    if args.variant is None:
        print(store.folder)
        return 0
    v = _variant(args.variant)
    path = store.installed_variant(v.name)
    if path is None:
        raise InputError(f"Model {v.name} is not installed; get it with: s2studio models pull {v.name}")
    print(path)
    return 0


def run_remove(args: argparse.Namespace) -> int:
    removed = _store().remove(args.variant)
    for path in removed:
        print(f"removed {path}")
    return 0


def run_default(args: argparse.Namespace) -> int:
    store = _store()
    if args.variant is None:
        default = store.default_path()
        print(default if default is not None else "no default model set")
        return 0
    v = _variant(args.variant)
    path = store.installed_variant(v.name)
    if path is None:
        raise InputError(f"Model {v.name} is not installed; get it with: s2studio models pull {v.name}")
    store.set_default(path)
    print(f"default model: {path} (the app uses it too)")
    return 0


def register(subparsers) -> None:
    from s2studio.cli import add_log_level

    p = subparsers.add_parser("models", help="download and choose the S2 Pro model files",
                              description="The model files in the models folder the app uses too "
                                          "(S2STUDIO_MODELS_DIR overrides it), and the default model that "
                                          "synth, serve, voices add, encode and decode load without -m.")
    add_log_level(p)
    sub = p.add_subparsers(dest="models_command", metavar="ACTION", required=True)

    def action(name: str, helptext: str):
        parser = sub.add_parser(name, help=helptext, description=helptext[0].upper() + helptext[1:] + ".")
        add_log_level(parser)
        return parser

    ls = action("list", "show the installed models, their size and which is the default")
    ls.add_argument("--available", action="store_true", help="also list the variants that can be pulled")
    ls.set_defaults(handler=run_list)
    pull = action("pull", f"download a variant and the tokenizer from huggingface.co/{MODEL_REPO} "
                          "(resumes an interrupted download; checks the checksum)")
    pull.add_argument("variant", metavar="VARIANT", help=f"one of: {variant_list()} (q8_0 is a good default)")
    pull.add_argument("--default", action="store_true",
                      help="make it the default model (the first model pulled becomes the default anyway)")
    pull.add_argument("--no-progress", action="store_true", help="no progress bar")
    pull.set_defaults(handler=run_pull)
    path = action("path", "print the models folder, or the file of an installed VARIANT")
    path.add_argument("variant", metavar="VARIANT", nargs="?", default=None)
    path.set_defaults(handler=run_path)
    rm = action("remove", "delete an installed variant (and an incomplete download of it)")
    rm.add_argument("variant", metavar="VARIANT")
    rm.set_defaults(handler=run_remove)
    default = action("default", "make an installed VARIANT the default model (the app's too), or show it")
    default.add_argument("variant", metavar="VARIANT", nargs="?", default=None)
    default.set_defaults(handler=run_default)
