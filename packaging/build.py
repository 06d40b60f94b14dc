#!/usr/bin/env python3
"""Build the s2studio bundle for this OS into ``dist/`` and report its size and build time.

    python packaging/build.py                 # CPU flavour, onedir bundle
    python packaging/build.py --strip         # strip symbols (Linux; ignored elsewhere)
    python packaging/build.py --self-test     # then run the built bundle's --self-test
    python packaging/build.py --flavour cuda  # keep CUDA libraries (needs a CUDA torch)

Needs PyInstaller in the running interpreter's environment, next to torch and s2studio's
dependencies (``packaging/requirements-build.txt``). The bundle never contains tests, test data
or tools/: only the ``s2studio`` package, its dependencies and ``resources/``.

Results: ``dist/s2studio/`` (Linux, Windows) or ``dist/s2studio.app`` (macOS).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

PACKAGING = Path(__file__).resolve().parent
ROOT = PACKAGING.parent
DIST, WORK = ROOT / "dist", ROOT / "build" / "pyinstaller"


def read_version() -> str:
    # One place for the version: s2studio/__init__.py (pyproject reads it from there too).
    text = (ROOT / "s2studio" / "__init__.py").read_text(encoding="utf-8")
    return re.search(r'^__version__ = "([^"]+)"', text, re.M).group(1)


def windows_version_file(version: str, folder: Path) -> Path:
    """The exe's version resource (Explorer's Details tab, installers, AV reputation)."""
    numbers = [int(n) for n in re.findall(r"\d+", version)[:4]]
    numbers += [0] * (4 - len(numbers))
    fields = {"CompanyName": "s2studio", "FileDescription": "s2studio voice studio", "FileVersion": version,
              "InternalName": "s2studio", "OriginalFilename": "s2studio.exe", "ProductName": "s2studio",
              "ProductVersion": version, "LegalCopyright": "Apache-2.0"}
    strings = ", ".join(f"StringStruct({k!r}, {v!r})" for k, v in fields.items())
    text = (f"VSVersionInfo(ffi=FixedFileInfo(filevers={tuple(numbers)}, prodvers={tuple(numbers)}, mask=0x3f, "
            f"flags=0x0, OS=0x40004, fileType=0x1, subtype=0x0, date=(0, 0)), "
            f"kids=[StringFileInfo([StringTable('040904B0', [{strings}])]), "
            f"VarFileInfo([VarStruct('Translation', [1033, 1200])])])\n")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "version_info.txt"
    path.write_text(text, encoding="utf-8")
    return path


def check_torch_flavour(flavour: str) -> None:
    """A CPU bundle built from a CUDA torch would ship 3+ GB of CUDA, or (once the spec drops
    those libraries) a torch that cannot load. Refuse early instead."""
    probe = "import torch; print(torch.version.cuda or '')"
    cuda = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    if flavour == "cpu" and cuda:
        raise SystemExit(f"this environment has a CUDA torch (CUDA {cuda}); for the CPU flavour install the CPU "
                         "build: pip install torch --index-url https://download.pytorch.org/whl/cpu")
    if flavour == "cuda" and not cuda:
        raise SystemExit("--flavour cuda needs a CUDA build of torch in this environment")


def bundle_paths() -> tuple[Path, Path]:
    """(what to ship, the console executable inside it)."""
    if sys.platform == "darwin":
        app = DIST / "s2studio.app"
        return app, app / "Contents" / "MacOS" / "s2studio-cli"
    exe = "s2studio-cli.exe" if sys.platform == "win32" else "s2studio-cli"
    return DIST / "s2studio", DIST / "s2studio" / exe


# auditwheel/delocate vendor libraries into "<pkg>.libs"/".dylibs" folders under hash-mangled
# names and rewrite their ELF headers with patchelf; strip corrupts those (numpy's OpenBLAS then
# fails with "ELF load command address/offset not page-aligned"), so they are left alone.
VENDORED = re.compile(r"-[0-9a-f]{8}\.(so|dylib)")


def strip_binaries(bundle: Path) -> int:
    """Strip symbols from the bundle's shared libraries; returns bytes saved."""
    # Linux only: on macOS strip invalidates the code signatures arm64 requires even for an
    # unsigned (ad-hoc signed) build; Windows has no symbol tables in its DLLs to strip.
    if not sys.platform.startswith("linux") or not shutil.which("strip"):
        print("--strip: Linux only, skipped", flush=True)
        return 0
    flags = ["--strip-unneeded"]
    saved = 0
    for path in bundle.rglob("*"):
        if path.is_symlink() or not path.is_file() or not (path.suffix in (".so", ".dylib") or ".so." in path.name):
            continue
        if VENDORED.search(path.name) or any(p.endswith(".libs") or p == ".dylibs" for p in path.parts):
            continue
        if "numba" in path.parts:  # patchelf-edited too (omppool then fails the same way); small
            continue
        before = path.stat().st_size
        if subprocess.run(["strip", *flags, str(path)], capture_output=True).returncode == 0:
            saved += before - path.stat().st_size
    return saved


def size_of(path: Path) -> tuple[int, str]:
    total = sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())
    du = ""
    if shutil.which("du"):
        du = subprocess.run(["du", "-sh", str(path)], capture_output=True, text=True).stdout.split("\t")[0]
    return total, du


def run_self_test(cli: Path) -> int:
    env = dict(os.environ)
    if sys.platform.startswith("linux") and not env.get("DISPLAY") and not env.get("WAYLAND_DISPLAY"):
        env.setdefault("QT_QPA_PLATFORM", "offscreen")
    start = time.perf_counter()
    code = subprocess.run([str(cli), "--self-test"], env=env).returncode
    print(f"bundle self-test: exit {code} in {time.perf_counter() - start:.0f} s", flush=True)
    return code


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flavour", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--strip", action="store_true", help="strip symbols from shared libraries (Linux only)")
    ap.add_argument("--self-test", action="store_true", help="run the built bundle's --self-test")
    ap.add_argument("--keep-build", action="store_true", help="reuse build/pyinstaller (faster rebuilds)")
    args = ap.parse_args(argv)

    check_torch_flavour(args.flavour)
    version = read_version()
    spec_args = ["--flavour", args.flavour]
    if sys.platform == "win32":
        spec_args += ["--version-file", str(windows_version_file(version, WORK))]
    cmd = [sys.executable, "-m", "PyInstaller", str(PACKAGING / "s2studio.spec"), "--noconfirm",
           "--distpath", str(DIST), "--workpath", str(WORK), "--log-level", "WARN"]
    if not args.keep_build:
        cmd.append("--clean")
    print(f"building s2studio {version} ({args.flavour}) for {sys.platform}: {' '.join(cmd)} -- {' '.join(spec_args)}",
          flush=True)
    start = time.perf_counter()
    subprocess.run(cmd + ["--"] + spec_args, cwd=ROOT, check=True)
    bundle, cli = bundle_paths()
    if args.strip:
        print(f"--strip: {strip_binaries(bundle) / 2**20:.0f} MiB saved", flush=True)
    minutes = (time.perf_counter() - start) / 60

    total, du = size_of(bundle)
    print(f"bundle: {bundle}\nsize: {du or '?'} (du -sh), {total / 2**20:.0f} MiB of files\n"
          f"build time: {minutes:.1f} min", flush=True)
    return run_self_test(cli) if args.self_test else 0


if __name__ == "__main__":
    raise SystemExit(main())
