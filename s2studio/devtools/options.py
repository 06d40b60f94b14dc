"""Generator settings written once, as dataclass fields, and read as command-line flags from them.

Each generator (``tiny_model``, ``full_model``) declares its knobs as a frozen dataclass whose
fields carry their help text; ``add_arguments`` turns the fields into ``--flag-name`` options,
so the function API (keyword arguments), the command line and the tests' argument lists
(``"--seed", "5", "--qk-norm", "on"``) can never disagree about a name or a default.
"""

from __future__ import annotations

import argparse
from dataclasses import field, fields
from typing import Any, Callable, Sequence, TypeVar

T = TypeVar("T")


def on_off(value: str) -> bool:
    """Parse a boolean flag written as on/off (also true/false, 1/0, yes/no)."""
    if value.lower() in ("on", "true", "1", "yes"):
        return True
    if value.lower() in ("off", "false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError("expected on/off")


def knob(default: Any, help: str | None = None, *, group: str | None = None,
         choices: Sequence[str] | None = None, parse: Callable[[str], Any] | None = None):
    """A dataclass field that is also a command-line option. ``parse`` is needed only where the
    default does not tell the type (a ``None`` default); booleans are written on/off."""
    return field(default=default, metadata={"help": help, "group": group, "choices": choices, "parse": parse})


def flag_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def add_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """One ``--flag`` per field of ``cls``, in field order, under the field's argument group."""
    groups: dict[str, Any] = {}
    for f in fields(cls):
        meta = f.metadata
        parse = meta.get("parse") or (on_off if isinstance(f.default, bool) else type(f.default))
        target = parser
        if meta.get("group"):
            if meta["group"] not in groups:
                groups[meta["group"]] = parser.add_argument_group(meta["group"])
            target = groups[meta["group"]]
        target.add_argument(flag_name(f.name), dest=f.name, type=parse, default=f.default,
                            choices=meta.get("choices"), help=meta.get("help"))


def from_namespace(cls: type[T], namespace: argparse.Namespace) -> T:
    return cls(**{f.name: getattr(namespace, f.name) for f in fields(cls)})


def parse_options(cls: type[T], argv: Sequence[str]) -> T:
    """``cls`` from command-line style arguments, e.g. ``("--seed", "5", "--qk-norm", "on")``."""
    parser = argparse.ArgumentParser(prog=cls.__name__)
    add_arguments(parser, cls)
    return from_namespace(cls, parser.parse_args(list(argv)))
