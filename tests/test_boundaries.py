"""Imports flow one way: errors -> audio -> engine -> cli/server -> app. Nothing imports the app.

``s2studio.errors`` (the exception hierarchy) imports nothing of the package. ``s2studio.audio``
(numpy/soundfile, all audio file I/O) sits below the engine and imports nothing of it. The
engine (torch) reads and writes audio only through it. The CLI and the server drive the engine;
the app drives only the engine's public API (``PUBLIC_ENGINE``). ``s2studio.remote`` (the client
of a server, used by the CLI and the app) uses only the engine's torch-free parts.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1] / "s2studio"

# package -> s2studio packages it must never import (at any level)
FORBIDDEN = {
    "engine": ("s2studio.app", "s2studio.cli", "s2studio.server", "PySide6", "sounddevice"),
    "audio": ("s2studio.app", "s2studio.cli", "s2studio.server", "s2studio.engine", "PySide6", "torch"),
    "errors.py": ("s2studio.app", "s2studio.cli", "s2studio.server", "s2studio.engine", "s2studio.audio",
                  "PySide6", "torch"),
    "cli": ("PySide6",),
    "server": ("s2studio.app", "PySide6"),
    # The client of a server: the engine's torch-free value types and text splitter, never the model.
    "remote": ("s2studio.app", "s2studio.cli", "s2studio.server", "PySide6", "torch", "s2studio.engine.model",
               "s2studio.engine.codec", "s2studio.engine.kernels"),
}
# The one sanctioned way into the app: the entry point opens it when run without a command.
ALLOWED = {("cli/__init__.py", "s2studio.app")}
# What the app may use of the engine: the Pipeline API, its parameters and modes, and the voice library.
PUBLIC_ENGINE = ("s2studio.engine.pipeline", "s2studio.engine.params", "s2studio.engine.modes",
                 "s2studio.engine.voices")


def imported_modules(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            # resolve relative imports against the file's package
            pkg = path.relative_to(ROOT.parent).with_suffix("").parts[: -node.level]
            names.add(".".join(pkg + ((node.module,) if node.module else ())))
    return names


def test_packages_import_only_downstream():
    problems = []
    for pkg, forbidden in FORBIDDEN.items():
        target = ROOT / pkg
        for path in [target] if target.is_file() else target.rglob("*.py"):
            rel = str(path.relative_to(ROOT))
            for mod in imported_modules(path):
                for bad in forbidden:
                    if (mod == bad or mod.startswith(bad + ".")) and (rel, bad) not in ALLOWED:
                        problems.append(f"{rel} imports {mod}")
    assert not problems, problems


def test_nothing_outside_app_imports_app():
    problems = []
    for path in ROOT.rglob("*.py"):
        rel = str(path.relative_to(ROOT))
        if rel.startswith("app/"):
            continue
        for mod in imported_modules(path):
            if (mod == "s2studio.app" or mod.startswith("s2studio.app.")) and (rel, "s2studio.app") not in ALLOWED:
                problems.append(f"{rel} imports {mod}")
    assert not problems, problems


def test_app_uses_only_the_public_engine_api():
    problems = []
    for path in (ROOT / "app").rglob("*.py"):
        for mod in imported_modules(path):
            if (mod == "s2studio.engine" or mod.startswith("s2studio.engine.")) and mod not in PUBLIC_ENGINE:
                problems.append(f"{path.relative_to(ROOT)} imports {mod}")
    assert not problems, problems


def test_the_checks_see_the_layers():
    # A renamed folder must not turn the checks above into checks of nothing.
    for pkg in FORBIDDEN:
        assert (ROOT / pkg).exists(), pkg
    assert any(m.startswith("s2studio.engine.") for m in imported_modules(ROOT / "app" / "worker.py"))
    assert "s2studio.errors" in imported_modules(ROOT / "audio" / "reading.py")


def test_engine_audio_and_cli_import_without_qt():
    code = (
        "import sys; sys.modules['PySide6'] = None; sys.modules['sounddevice'] = None\n"
        "import s2studio.engine.model.loader, s2studio.engine.model.generate, s2studio.engine.codec, s2studio.audio\n"
        "import s2studio.cli; s2studio.cli.build_parser()\n"
        "import s2studio.remote\n"
        "assert 'PySide6' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_remote_engine_imports_without_torch():
    """The laptop side of a remote engine must not need torch (nor Qt)."""
    code = ("import sys; sys.modules['torch'] = None; sys.modules['PySide6'] = None\n"
            "import s2studio.remote\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_cli_commands_do_not_import_each_other():
    """Each command module uses the shared helpers (options, outputs, the package's own) and
    at most a lower command's listing helper; no two command modules import each other."""
    cli = ROOT / "cli"
    uses = {p.stem: {m.rsplit(".", 1)[1] for m in imported_modules(p) if m.startswith("s2studio.cli.")}
            for p in cli.glob("*.py") if p.stem != "__init__"}
    cycles = sorted(f"{a} <-> {b}" for a in uses for b in uses[a] if a < b and a in uses.get(b, ()))
    assert not cycles, cycles
    assert {"options", "outputs"} <= set(uses), "the shared CLI helper modules moved"
