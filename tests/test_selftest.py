"""``s2studio --self-test`` from source (CI runs the same command inside the built bundle)."""

from __future__ import annotations

import os
import subprocess
import sys


def _run(args: list[str], tmp_path) -> subprocess.CompletedProcess:
    # The self-test isolates the app's folders itself; point HOME-like folders at tmp anyway so a
    # bug there could not reach the developer's real settings.
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", S2STUDIO_CONFIG_DIR=str(tmp_path / "outer-config"))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600, env=env,
                          cwd=tmp_path)


def test_self_test_passes_from_source(tmp_path):
    r = _run(["-m", "s2studio", "--self-test"], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    for step in ("imports", "audio devices", "synthesis", "window"):
        assert f"ok   {step}" in r.stdout
    assert "self-test passed" in r.stdout
    # The user's (here: the outer) config folder is never written.
    assert not (tmp_path / "outer-config").exists()


def test_a_failing_step_exits_1_and_names_it(tmp_path):
    # Synthesis is swapped out to keep this fast; the app entry "fails" with exit code 5.
    code = ("import s2studio.selftest as t\n"
            "t.check_synthesis = lambda work: 'skipped'\n"
            "raise SystemExit(t.run_self_test(lambda argv: 5))\n")
    r = _run(["-c", code], tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAIL window" in r.stdout and "exited with code 5" in r.stdout
    assert "self-test FAILED (1 step(s))" in r.stdout
