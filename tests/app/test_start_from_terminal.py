"""``s2studio`` started from a terminal, in a subprocess: no display is one line (not Qt's abort),
and Ctrl+C closes the window as its close button does."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest


def folders(tmp_path) -> dict:
    return dict(S2STUDIO_CONFIG_DIR=str(tmp_path / "config"), S2STUDIO_LOG_DIR=str(tmp_path / "logs"),
                S2STUDIO_VOICES_DIR=str(tmp_path / "voices"), S2STUDIO_MODELS_DIR=str(tmp_path / "models"),
                S2STUDIO_PROJECTS_DIR=str(tmp_path / "projects"), HOME=str(tmp_path))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Windows and macOS always have a display plugin")
def test_no_display_is_one_line_and_exit_2(tmp_path):
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.environ.get("PYTHONPATH", ""), **folders(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "s2studio"], capture_output=True, text=True, env=env, timeout=120,
                       cwd=os.getcwd())
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.strip().splitlines() == [
        "error: no display found: run on a desktop, or use `s2studio synth` / `serve`; for a virtual screen set "
        "QT_QPA_PLATFORM=offscreen"], r.stderr
    assert not (tmp_path / "config").exists()  # nothing started


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT cannot be sent to a console process this way")
def test_ctrl_c_closes_the_app_cleanly(tmp_path):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", **folders(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "s2studio"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    log = tmp_path / "logs" / "s2studio.log"
    try:
        deadline = time.monotonic() + 120
        while not (log.is_file() and "s2studio started" in log.read_text(encoding="utf-8", errors="replace")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the app did not start"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, (proc.returncode, err)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    # Closed the way the close button closes it: the settings were saved on the way out.
    assert json.loads((tmp_path / "config" / "settings.json").read_text())["window_geometry"]
