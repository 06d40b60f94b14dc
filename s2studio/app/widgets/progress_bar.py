"""The generate bar: Generate/Stop button, a progress bar and a line of live statistics."""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QProgressBar, QPushButton, QWidget

from s2studio.app.requests import GenerationProgress
from s2studio.app.widgets.elided_label import ElidedLabel
from s2studio.app.progress_eta import clock


def describe_progress(p: GenerationProgress) -> str:
    rtf = f"{p.real_time_factor:.2f}" if p.audio_seconds > 0 else "–"
    cache = f" · {p.voice_cache}" if p.voice_cache else ""
    return (f"Segment {p.segment}/{p.segment_count} · {p.frames} frames · {p.audio_seconds:.1f} s of audio · "
            f"real-time factor {rtf}{cache}")


class GenerateBar(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        self.button = QPushButton("Generate")
        self.button.setToolTip("Generate (Ctrl+Enter) · Stop (Esc)")
        self.button.setMinimumWidth(120)
        self.button.setDefault(True)
        self.progress = QProgressBar()
        self.progress.setTextVisible(True)
        self.progress.hide()
        # A long statistics line ends in "…" (its tooltip has it all) and never widens the window
        # (the page then needed a horizontal scroll bar once a take had been made in a narrow window).
        self.stats = ElidedLabel("")
        row.addWidget(self.button)
        row.addWidget(self.progress, 2)  # wide enough for "Segment 2/5 · 40 % · 0:31 left"
        row.addWidget(self.stats, 3)

    def set_running(self, running: bool) -> None:
        self.button.setText("Stop" if running else "Generate")
        if not running:
            self.progress.hide()

    def show_loading(self, stage: str, fraction: float) -> None:
        self.progress.show()
        self.progress.setRange(0, 100)
        self.progress.setValue(int(fraction * 100))
        self.progress.setFormat(f"{stage}… %p%")

    def show_progress(self, p: GenerationProgress, estimate=None) -> None:
        """``estimate`` (progress_eta.Estimate): the bar fills within the segment too, and the
        statistics line says the time elapsed and the time left."""
        self.progress.show()
        if estimate is None:
            self.progress.setRange(0, p.segment_count)
            self.progress.setValue(p.segment - 1)
            self.progress.setFormat(f"Segment {p.segment} of {p.segment_count}")
            self.stats.setText(describe_progress(p))
        else:
            self.progress.setRange(0, 100 * p.segment_count)
            self.progress.setValue(100 * (p.segment - 1) + estimate.segment_percent)
            left = f" · {clock(estimate.remaining_s)} left" if estimate.remaining_s is not None else ""
            self.progress.setFormat(f"Segment {p.segment}/{p.segment_count} · {estimate.segment_percent} %{left}")
            self.stats.setText(f"{describe_progress(p)} · {estimate.describe()}")
        # (the ElidedLabel's tooltip is its whole text)
