"""The AArch64 levels of _qdot.c (neon, dotprod), checked on an x86 machine under qemu.

tools/qdot_arm_check/qdot_arm_check.c runs every row function at every level on random blocks
of each type and requires each level's outputs to be bit-identical to the scalar level's and
each activation row among m rows to be bit-identical to it alone (see its README). Built with
setup.py's flags, once for baseline AArch64 (sdot chosen at run time by the hwcaps) and once for
a CPU with sdot; run on qemu CPUs with (max) and without (cortex-a53) the dot product, so the
run-time detection's both answers are taken. Skipped where the cross compiler or qemu is missing.
"""

import shutil
import subprocess
from pathlib import Path

import pytest

CC = shutil.which("aarch64-linux-gnu-gcc")
QEMU = shutil.which("qemu-aarch64")
SRC = Path(__file__).resolve().parents[2] / "tools" / "qdot_arm_check" / "qdot_arm_check.c"
FLAGS = ["-O3", "-std=c99", "-Wall", "-Werror", "-fno-strict-aliasing"]

pytestmark = pytest.mark.skipif(CC is None or QEMU is None,
                                reason="needs aarch64-linux-gnu-gcc and qemu-aarch64")


CLANG = shutil.which("clang")
# clang compiles sdot only when the whole file targets it (e.g. -mcpu=apple-m1, Apple's default)
CLANG_ARM = None if CLANG is None else [CLANG, "--target=aarch64-linux-gnu"]


@pytest.mark.parametrize("compiler, march, cpu, levels", [
    ("gcc", [], "max", "scalar neon dotprod"),
    ("gcc", [], "cortex-a53", "scalar neon"),
    ("gcc", ["-march=armv8.2-a+dotprod"], "max", "scalar neon dotprod"),
    # FMA contraction on (GNU C's default, clang's within expressions): the ARM levels still write
    # the scalar rows' float expressions, so they stay bit-identical to that build's scalar level
    ("gcc", ["-ffp-contract=fast"], "max", "scalar neon dotprod"),
    ("clang", [], "max", "scalar neon"),
    ("clang", ["-mcpu=apple-m1"], "max", "scalar neon dotprod"),
])
def test_arm_levels_match_scalar_bit_for_bit(tmp_path, compiler, march, cpu, levels):
    if compiler == "clang" and CLANG_ARM is None:
        pytest.skip("needs clang")
    cc = [CC] if compiler == "gcc" else CLANG_ARM
    exe = tmp_path / "check"
    subprocess.run([*cc, *FLAGS, *march, "-o", str(exe), str(SRC), "-lm"], check=True)
    run = subprocess.run([QEMU, "-cpu", cpu, "-L", "/usr/aarch64-linux-gnu", str(exe)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert run.stdout.splitlines()[0] == "levels: " + levels
    # every type has its own function at every ARM level (none silently left at scalar)
    assert "no(scalar)" not in run.stdout
    assert run.stdout.rstrip().endswith("OK")


NATIVE_CC = shutil.which("gcc") or shutil.which("cc")


def _hashes(stdout: str) -> list[str]:
    return [line.split("hash")[1].strip() for line in stdout.splitlines() if "hash" in line]


@pytest.mark.skipif(NATIVE_CC is None, reason="needs a native C compiler")
def test_arm_scalar_level_is_bit_identical_to_this_machines(tmp_path):
    """The scalar rows give the same bits on AArch64 as here (IEEE float, no FMA contraction under
    -std=c99), so the ARM levels, bit-identical to their scalar level, equal the scalar level that
    test_intdot.py checks against float math on this machine. The native run's --bound 1 leaves
    this machine's vector levels to test_intdot.py (it still requires rows alone == among others)."""
    native, arm = tmp_path / "native", tmp_path / "arm"
    subprocess.run([NATIVE_CC, *FLAGS, "-o", str(native), str(SRC), "-lm"], check=True)
    subprocess.run([CC, *FLAGS, "-o", str(arm), str(SRC), "-lm"], check=True)
    here = subprocess.run([str(native), "--bound", "1"], capture_output=True, text=True, timeout=600)
    there = subprocess.run([QEMU, "-cpu", "max", "-L", "/usr/aarch64-linux-gnu", str(arm)],
                           capture_output=True, text=True, timeout=600)
    assert here.returncode == 0 and there.returncode == 0, here.stdout[-2000:] + there.stdout[-2000:]
    assert len(_hashes(here.stdout)) == 7
    assert _hashes(here.stdout) == _hashes(there.stdout)
