"""Export refuses a path it cannot or must not write, with one sentence in the error banner."""

from __future__ import annotations

import os
import stat

import numpy as np
import soundfile as sf

from s2studio.app.widgets.output_panel import Take


def _take() -> Take:
    return Take(text="hi", voice="default", seed=1, params="", audio=np.full(4410, 0.25, np.float32),
                sample_rate=44100)


def test_export_into_a_missing_folder_or_onto_a_folder_shows_one_sentence(make_window, fast_settings, tmp_path):
    window = make_window(fast_settings())
    window.pages.setCurrentIndex(1)  # the studio page, where the banner lives
    for bad, words in ((tmp_path / "gone" / "take.wav", "does not exist"), (tmp_path / "dir.wav", "is a folder")):
        if bad.name == "dir.wav":
            bad.mkdir()
        window.output.ask_save_path = lambda suggestion, bad=bad: str(bad)
        assert window.output.export_take(_take()) is None
        assert window.error_banner.isVisible() and words in window.error_banner.text, window.error_banner.text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.wav"]


def test_export_over_a_pipe_is_refused_and_over_a_private_file_keeps_it_private(make_window, fast_settings, tmp_path):
    if os.name != "posix":
        return
    window = make_window(fast_settings())
    window.pages.setCurrentIndex(1)  # the studio page, where the banner lives
    fifo = tmp_path / "pipe.wav"
    os.mkfifo(fifo)
    window.output.ask_save_path = lambda suggestion: str(fifo)
    assert window.output.export_take(_take()) is None
    assert "named pipe" in window.error_banner.text and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    private = tmp_path / "mine.wav"
    private.write_bytes(b"old")
    os.chmod(private, 0o600)
    window.output.ask_save_path = lambda suggestion: str(private)
    assert window.output.export_take(_take()) == str(private)
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o600 and sf.info(private).frames == 4410
