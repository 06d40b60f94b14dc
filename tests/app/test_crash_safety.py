"""The app survives (or at least explains) what kills a process outside Python's control.

- PySide6-Essentials 6.12.0 on Python < 3.12 drops a reference to None on every Qt call that
  returns nothing, and the interpreter aborts after a few thousand calls ("Fatal Python
  error: none_dealloc"). pyproject.toml excludes that release; these tests fail on any Qt
  that leaks, and the self-test runs the same check inside a built bundle.
- A native crash leaves the Python stacks in the app's log file (faulthandler).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from s2studio import selftest


def test_qt_void_calls_keep_none_refcount():
    # On Python >= 3.12 None is immortal and its refcount never moves: this passes trivially.
    drift = selftest.none_refcount_drift(calls=selftest.QT_VOID_CALLS)
    assert abs(drift) <= selftest.QT_NONE_REFCOUNT_TOLERANCE, (
        f"None's refcount moved by {drift} over {selftest.QT_VOID_CALLS} QLabel.setText calls")


def test_self_test_step_reports_refcount(tmp_path):
    detail = selftest.check_qt_refcounts(tmp_path)
    assert "None refcount drift" in detail and str(selftest.QT_VOID_CALLS) in detail


def test_native_crash_leaves_a_trace_in_the_log_file(tmp_path):
    log_dir = tmp_path / "logs"
    code = textwrap.dedent("""
        import faulthandler
        from s2studio.app.app_logging import setup_file_logging

        def crash_inside_this_function():
            faulthandler._sigsegv()

        path = setup_file_logging()
        print(path, flush=True)
        crash_inside_this_function()
    """)
    env = dict(os.environ, S2STUDIO_LOG_DIR=str(log_dir))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode != 0, "the subprocess was meant to crash"
    log_text = (log_dir / "s2studio.log").read_text(encoding="utf-8")
    assert "Segmentation fault" in log_text, log_text
    assert "crash_inside_this_function" in log_text, log_text


def test_crash_traces_follow_log_rotation(tmp_path):
    log_dir = tmp_path / "logs"
    code = textwrap.dedent("""
        import faulthandler, logging
        from s2studio.app.app_logging import setup_file_logging

        setup_file_logging()
        for h in logging.getLogger().handlers:
            if hasattr(h, "doRollover"):
                h.doRollover()
        faulthandler._sigsegv()
    """)
    env = dict(os.environ, S2STUDIO_LOG_DIR=str(log_dir))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode != 0
    assert "Segmentation fault" in (log_dir / "s2studio.log").read_text(encoding="utf-8")
