"""The AArch64 levels of _qdot.c (neon, dotprod), checked on an x86 machine under qemu.

devtools/qdot_arm_check/qdot_arm_check.c runs every row function at every level on random blocks
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
SRC = Path(__file__).resolve().parents[2] / "devtools" / "qdot_arm_check" / "qdot_arm_check.c"
FLAGS = ["-O3", "-std=c99", "-Wall", "-Werror", "-fno-strict-aliasing"]

pytestmark = pytest.mark.skipif(CC is None or QEMU is None,
                                reason="needs aarch64-linux-gnu-gcc and qemu-aarch64")


@pytest.mark.parametrize("march, cpu, levels", [
    ([], "max", "scalar neon dotprod"),
    ([], "cortex-a53", "scalar neon"),
    (["-march=armv8.2-a+dotprod"], "max", "scalar neon dotprod"),
])
def test_arm_levels_match_scalar_bit_for_bit(tmp_path, march, cpu, levels):
    exe = tmp_path / "check"
    subprocess.run([CC, *FLAGS, *march, "-o", str(exe), str(SRC), "-lm"], check=True)
    run = subprocess.run([QEMU, "-cpu", cpu, "-L", "/usr/aarch64-linux-gnu", str(exe)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert run.stdout.splitlines()[0] == "levels: " + levels
    # every type has its own function at every ARM level (none silently left at scalar)
    assert "no(scalar)" not in run.stdout
    assert run.stdout.rstrip().endswith("OK")
