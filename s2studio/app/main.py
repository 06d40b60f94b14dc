"""``run_app()``: logging, the QApplication, the worker thread and the window.

Order matters: the window is shown before anything imports torch (the worker imports the
engine on its first request), so the app appears in about a second even on a cold disk.
"""

from __future__ import annotations

import logging
import sys
import traceback

log = logging.getLogger(__name__)


def _install_excepthook() -> None:
    """Qt aborts on an exception escaping a virtual method; log it and show it instead."""
    from s2studio.app.worker import describe_error

    def hook(exc_type, exc, tb):
        log.error("uncaught exception:\n%s", "".join(traceback.format_exception(exc_type, exc, tb)))
        from PySide6.QtWidgets import QApplication

        app = QApplication.instance()
        window = getattr(app, "main_window", None) if app else None
        if window is not None:
            window.error_banner.show_error(describe_error(exc))

    sys.excepthook = hook


def tune_for_responsiveness() -> None:
    """The worker thread runs Python between torch calls; by default it may hold the GIL for
    5 ms at a time, which shows up as UI stutter. 2 ms keeps the event loop's worst gap well
    under 50 ms (benchmarks/ui_latency.py) at no measurable cost to generation speed."""
    sys.setswitchinterval(0.002)


def quit_on_terminal_signals(window):
    """Ctrl+C (SIGINT) and SIGTERM close the window cleanly. Python runs signal handlers only
    between bytecodes, and Qt's event loop is C++: a timer gives the interpreter a moment every
    200 ms, so the handler runs while the app is idle. Returns the timer (keep it alive)."""
    import signal

    from PySide6.QtCore import QTimer

    def handler(signum, frame):
        log.info("signal %s: closing the window", signum)
        window.quit_from_terminal()

    for name in ("SIGINT", "SIGTERM"):
        try:
            signal.signal(getattr(signal, name), handler)
        except (AttributeError, ValueError, OSError):  # not the main thread, or not on this platform
            pass
    timer = QTimer()
    timer.setInterval(200)
    timer.timeout.connect(lambda: None)
    timer.start()
    return timer


def run_app(argv: list[str] | None = None) -> int:
    import multiprocessing

    multiprocessing.freeze_support()
    tune_for_responsiveness()
    from s2studio.app.app_logging import setup_file_logging

    log_path = setup_file_logging()
    from PySide6.QtGui import QIcon
    from PySide6.QtWidgets import QApplication

    from s2studio.app import paths
    from s2studio.app.main_window import MainWindow
    from s2studio.app.settings import load_settings
    from s2studio.app.theme import apply_theme
    from s2studio.app.worker import WorkerThread

    app = QApplication.instance() or QApplication(list(argv) if argv is not None else sys.argv)
    app.setApplicationName("s2studio")
    app.setOrganizationName("s2studio")
    app.setStyle("Fusion")
    icon = paths.resource("s2studio.png")
    if icon.is_file():
        app.setWindowIcon(QIcon(str(icon)))
    loaded = load_settings()
    apply_theme(app, loaded.settings.theme)  # System / Light / Dark, from Settings
    voices = loaded.settings.voices_folder or str(paths.voices_dir())
    host = WorkerThread(voices)
    window = MainWindow(loaded.settings, host.worker, notice=loaded.notice)
    app.main_window = window
    _install_excepthook()
    window.show()
    app.signal_timer = quit_on_terminal_signals(window)
    # After show(): the query imports torch (seconds) on the worker's thread, so the window is
    # already up; the Settings dialog then lists the GPUs before any model is loaded.
    window.detect_devices()
    log.info("s2studio started; log file %s", log_path)
    try:
        return app.exec()
    finally:
        host.shutdown()
