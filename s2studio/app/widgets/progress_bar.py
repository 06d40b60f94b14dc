"""The generate bar: Generate/Stop button, a progress bar and a line of live statistics."""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QPushButton, QWidget

from s2studio.app.requests import GenerationProgress


def describe_progress(p: GenerationProgress) -> str:
    rtf = f"{p.real_time_factor:.2f}" if p.audio_seconds > 0 else "–"
    return (f"Segment {p.segment}/{p.segment_count} · {p.frames} frames · {p.audio_seconds:.1f} s of audio · "
            f"real-time factor {rtf}")


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
        self.stats = QLabel("")
        # A long statistics line may be cut, but must not widen the window (the page then needed a
        # horizontal scroll bar once a take had been made in a narrow window).
        self.stats.setMinimumWidth(1)
        row.addWidget(self.button)
        row.addWidget(self.progress, 1)
        row.addWidget(self.stats, 2)

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
            self.progress.setFormat(f"Segment {p.segment} of {p.segment_count} · {estimate.segment_percent} %")
            self.stats.setText(f"{describe_progress(p)} · {estimate.describe()}")
        self.stats.setToolTip(self.stats.text())
