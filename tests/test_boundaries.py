"""Imports flow one way: errors -> audio -> engine -> book, cli/server -> app. Nothing imports the app.

``s2studio.errors`` (the exception hierarchy) imports nothing of the package. ``s2studio.audio``
(numpy/soundfile, all audio file I/O) sits below the engine and imports nothing of it. The
engine (torch) reads and writes audio only through it. The CLI and the server drive the engine;
the app drives only the engine's public API (``PUBLIC_ENGINE``). ``s2studio.remote`` (the client
of a server, used by the CLI and the app) uses only the engine's torch-free parts.
"""

from __future__ import annotations

import ast
import pathlib
import re
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
    # The model files (catalogue, download, the folder and default shared with the app) and the
    # user folders: the CLI's `s2studio models` and the app's first-run page use them; no Qt, no torch.
    "models": ("s2studio.app", "s2studio.cli", "s2studio.server", "s2studio.engine", "PySide6", "torch"),
    "user_folders.py": ("s2studio.app", "s2studio.cli", "s2studio.server", "s2studio.engine", "s2studio.audio",
                        "PySide6", "torch"),
    "server": ("s2studio.app", "PySide6"),
    # Ray Serve around the server's app: never the app, the CLI or Qt.
    "cluster": ("s2studio.app", "s2studio.cli", "PySide6"),
    # Long-form rendering: used by the CLI and the app, so it knows neither; no torch of its own
    # (it drives whichever engine it is given, local or remote).
    "book": ("s2studio.app", "s2studio.cli", "s2studio.server", "PySide6", "sounddevice", "torch"),
    # The client of a server: the engine's torch-free value types and text splitter, never the model.
    "remote": ("s2studio.app", "s2studio.cli", "s2studio.server", "PySide6", "torch", "s2studio.engine.model",
               "s2studio.engine.codec", "s2studio.engine.kernels"),
    # The app's project and takes model: plain state and operations, tested without a window.
    "app/project.py": ("PySide6", "sounddevice"),
    "app/project_file.py": ("PySide6", "sounddevice"),
    "app/take_model.py": ("PySide6", "sounddevice", "s2studio.app.widgets", "s2studio.app.takes_controller"),
}
# The one sanctioned way into the app: the entry point opens it when run without a command.
ALLOWED = {("cli/__init__.py", "s2studio.app")}
# What the front ends (app, CLI, server) may use of the engine: the engine interface and its value
# types (api), the local engine (pipeline), the take's torch-free text helpers (take), sampling
# parameters, the voice library, the documented ranges and modes, the process thread count, and
# voice activity detection (the reference workbench's "Find the best part": Silero VAD needs torch).
# Never the model, the codec or the kernels: those are engine internals.
PUBLIC_ENGINE = ("s2studio.engine.api", "s2studio.engine.pipeline", "s2studio.engine.take", "s2studio.engine.params",
                 "s2studio.engine.voices", "s2studio.engine.limits", "s2studio.engine.modes", "s2studio.engine.threads",
                 "s2studio.engine.voice_activity")
# Developer commands that work below the take on purpose: `s2studio encode/decode` run the codec
# alone (no transformer loaded) and `s2studio trace` dumps the model's internals for the golden
# comparisons.
INTERNALS_ALLOWED = {"cli/codec_cmds.py", "cli/trace.py"}


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


def front_end_files():
    """(relative name, path) of every front-end module held to the engine's public API."""
    for front_end in ("app", "cli", "server", "remote", "book", "cluster"):
        for path in (ROOT / front_end).rglob("*.py"):
            rel = str(path.relative_to(ROOT))
            if rel not in INTERNALS_ALLOWED:
                yield rel, path


def test_front_ends_use_only_the_public_engine_api():
    problems = []
    for rel, path in front_end_files():
        for mod in imported_modules(path):
            if (mod == "s2studio.engine" or mod.startswith("s2studio.engine.")) and mod not in PUBLIC_ENGINE:
                problems.append(f"{rel} imports {mod}")
    assert not problems, problems


# What front ends reached into before the engine interface existed: the loaded model's config,
# the codec object, the placement, and the local/remote telling-apart by attribute.
ENGINE_INTERNALS = re.compile(r"\.model\.cfg|\.codec\.sample_rate|\bcodec_placement\b|\.placement\b|"
                              r"hasattr\([^)]*(pipeline|engine)")


def test_front_ends_do_not_touch_engine_internals():
    problems = []
    for rel, path in front_end_files():
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if ENGINE_INTERNALS.search(line.split("#", 1)[0]):
                problems.append(f"{rel}:{n}: {line.strip()}")
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
        "import s2studio.models.store, s2studio.models.download\n"
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


def test_the_window_and_the_takes_controller_keep_to_each_others_public_side():
    """The controller gets its collaborators in its constructor and answers through signals: it
    never reaches the window; the window uses the controller's public methods and signals only."""
    controller = ast.parse((ROOT / "app" / "takes_controller.py").read_text(encoding="utf-8"))
    names = {n.id for n in ast.walk(controller) if isinstance(n, ast.Name)}
    attrs = {n.attr for n in ast.walk(controller) if isinstance(n, ast.Attribute)}
    assert "window" not in names | attrs and "MainWindow" not in names
    window = ast.parse((ROOT / "app" / "main_window.py").read_text(encoding="utf-8"))
    private = sorted(n.attr for n in ast.walk(window) if isinstance(n, ast.Attribute) and n.attr.startswith("_")
                     and isinstance(n.value, ast.Attribute) and n.value.attr == "takes")
    assert not private, private
