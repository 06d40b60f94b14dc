"""The reference workbench under the voice panel's waveform: "Find the best part" and the checks
of the part kept (clipping, noise floor, loudness and how it is levelled when saved).

The analysis (s2studio/engine/voice_activity.py and s2studio/audio/reference_check.py) runs in QThreadPool tasks: voice activity
detection over a long clip takes seconds, and even the checks of a 15-minute clip would stall a
drag. Each result carries the number of the request it answers; a result for a clip or a part
that has since changed is dropped.
"""

from __future__ import annotations

import logging

import numpy as np
from PySide6.QtCore import QCoreApplication, QObject, QRunnable, QThreadPool, QTimer, Signal
from PySide6.QtWidgets import QHBoxLayout, QPushButton, QVBoxLayout, QWidget

from s2studio.app.widgets.wrapping_label import WrappingLabel
from s2studio.audio import reference_check
from s2studio.engine.voice_activity import SearchCancelled, propose_reference

log = logging.getLogger(__name__)

CHECK_DELAY_MS = 250  # the part kept is checked once a drag pauses, not at every mouse move
FIND_LABEL = "Find the best part"


class _Results(QObject):
    """Carries a task's answer to the UI thread (a queued signal)."""

    done = Signal(str, int, object)  # kind ("check" | "find" | "progress"), request number, result or Exception


class _Task(QRunnable):
    def __init__(self, results: _Results, kind: str, number: int, work):
        super().__init__()
        self.results, self.kind, self.number, self.work = results, kind, number, work

    def run(self) -> None:
        try:
            answer = self.work()
        except SearchCancelled:
            return  # nobody waits for it any more
        except Exception as err:  # shown as one line in the panel; the details go to the log
            log.exception("reference %s failed", self.kind)
            answer = err
        try:
            self.results.done.emit(self.kind, self.number, answer)
        except RuntimeError:  # the panel was closed meanwhile: nobody to tell
            pass


class ReferenceWorkbench(QWidget):
    proposal = Signal(int, int)  # the best part found: (start, end) in samples
    problem = Signal(str)  # the search failed (message for the banner)

    def __init__(self, sample_rate: int, parent=None):
        super().__init__(parent)
        self.sample_rate = sample_rate
        self._clip: np.ndarray | None = None
        self._kept: np.ndarray | None = None
        self._requests = {"check": 0, "find": 0}
        self._results = _Results(self)
        self._results.done.connect(self._on_done)
        self.pool = QThreadPool(self)
        self.pool.setMaxThreadCount(2)  # one check and one search at most
        self.last_check: reference_check.ClipCheck | None = None
        self.last_proposal: reference_check.Proposal | None = None

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        self.find_button = QPushButton(FIND_LABEL)
        self.find_button.setToolTip("Listen for speech and select the cleanest 5–30 s: no long pauses, "
                                    "no clipping, a quiet room and a steady level. Adjust it on the waveform.")
        self.find_button.clicked.connect(self.find_best_part)
        row.addWidget(self.find_button)
        row.addStretch(1)
        layout.addLayout(row)
        self.proposal_label = WrappingLabel("")
        self.proposal_label.hide()
        layout.addWidget(self.proposal_label)
        self.warning_label = WrappingLabel("")
        self.warning_label.setStyleSheet("color: #b26a00;")
        self.warning_label.hide()
        layout.addWidget(self.warning_label)
        self.level_label = WrappingLabel("")
        self.level_label.setStyleSheet("color: palette(placeholder-text);")
        self.level_label.hide()
        layout.addWidget(self.level_label)
        self._check_timer = QTimer(self)
        self._check_timer.setSingleShot(True)
        self._check_timer.setInterval(CHECK_DELAY_MS)
        self._check_timer.timeout.connect(self._start_check)
        self._update_button()
        app = QCoreApplication.instance()
        if app is not None:  # quitting must not wait for a long search to finish
            app.aboutToQuit.connect(self.cancel)

    # ---- inputs -----------------------------------------------------------------------------
    def set_clip(self, samples: np.ndarray | None) -> None:
        """A new clip: earlier answers no longer apply."""
        self._clip = samples
        self._requests["find"] += 1  # a search of the previous clip still running is ignored
        self.last_proposal = None
        self.proposal_label.hide()
        self._update_button()
        self.set_kept(samples)

    def set_kept(self, samples: np.ndarray | None) -> None:
        """The part kept changed: check it once the change settles."""
        self._kept = samples
        self._requests["check"] += 1
        self.last_check = None  # until the part kept now is measured (the notes stay until then)
        if samples is None or not len(samples):
            self._check_timer.stop()
            for label in (self.warning_label, self.level_label):
                label.hide()
            return
        self._check_timer.start()

    def find_best_part(self) -> None:
        if self._clip is None:
            return
        self._requests["find"] += 1
        clip, rate = self._clip, self.sample_rate
        self.find_button.setText("Finding the best part…")
        self.find_button.setEnabled(False)
        number, results = self._requests["find"], self._results
        requests = self._requests

        shown = [-1]

        def progress(percent: float) -> bool:  # in the task's thread: report, and go on while wanted
            if requests["find"] != number:
                return False
            if int(percent) != shown[0]:  # called every 32 ms of audio: tell the UI once a percent
                shown[0] = int(percent)
                try:
                    results.done.emit("progress", number, percent)
                except RuntimeError:  # the panel is gone
                    return False
            return True

        self.pool.start(_Task(results, "find", number, lambda: propose_reference(clip, rate, progress)))

    def cancel(self) -> None:
        """Stop a running search (at its next 32 ms of audio) and forget pending checks."""
        self._requests["find"] += 1
        self._requests["check"] += 1
        self._check_timer.stop()
        self._update_button()

    def wait_idle(self, ms: int = -1) -> bool:
        """For tests and shutdown: wait for the running analyses (not from a task)."""
        return self.pool.waitForDone(ms)

    # ---- work -------------------------------------------------------------------------------
    def _start_check(self) -> None:
        kept, rate = self._kept, self.sample_rate
        if kept is None:
            return
        self.pool.start(_Task(self._results, "check", self._requests["check"],
                              lambda: reference_check.check_clip(kept, rate)))

    def _on_done(self, kind: str, number: int, answer) -> None:
        if number != self._requests["find" if kind == "progress" else kind]:
            return  # about a clip or a part that has changed since
        if kind == "progress":
            self.find_button.setText(f"Finding the best part… {answer:.0f} %")
        elif kind == "find":
            self._update_button()
            self._show_proposal(answer)
        else:
            self._show_check(answer)

    def _show_proposal(self, answer) -> None:
        if isinstance(answer, Exception):
            self.problem.emit(f"The best part could not be found: {answer}")
            return
        self.last_proposal = answer
        if answer is None:
            self.proposal_label.setText("No 5 s of speech without a long pause was found in this clip: "
                                        "select a part by hand, or record a new clip.")
        else:
            self.proposal_label.setText(f"Proposed {answer.start / self.sample_rate:.1f}–"
                                        f"{answer.end / self.sample_rate:.1f} s: {answer.reason}.")
        self.proposal_label.show()
        if answer is not None:
            self.proposal.emit(answer.start, answer.end)

    def _show_check(self, answer) -> None:
        if isinstance(answer, Exception):
            self.warning_label.setText(f"The part kept could not be measured: {answer}")
            self.warning_label.show()
            return
        self.last_check = answer
        self.warning_label.setText("\n".join(answer.warnings))
        self.warning_label.setVisible(bool(answer.warnings))
        self.level_label.setText(answer.level_note)
        self.level_label.show()

    def _update_button(self) -> None:
        self.find_button.setText(FIND_LABEL)
        self.find_button.setEnabled(self._clip is not None)
