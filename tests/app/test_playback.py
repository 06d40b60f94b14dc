"""The jitter buffer and clip source the output player reads from (no sound card needed)."""

from __future__ import annotations

import numpy as np

from s2studio.app.playback import FADE_SAMPLES, ClipSource, JitterBuffer

RATE = 1000  # small numbers keep the arithmetic readable


def test_waits_for_preroll_then_plays_in_order():
    buf = JitterBuffer(RATE, preroll_seconds=0.3)
    buf.push(np.full(200, 0.5, np.float32))
    assert not buf.read(100).any()  # 0.2 s buffered < 0.3 s pre-roll: silence, nothing consumed
    buf.push(np.arange(1, 201, dtype=np.float32))
    out = buf.read(300)
    assert np.all(out[:200] == 0.5) and np.array_equal(out[200:], np.arange(1, 101, dtype=np.float32))
    assert buf.played == 300 and buf.underruns == 0


def test_underrun_fades_out_then_waits_for_preroll_again():
    buf = JitterBuffer(RATE, preroll_seconds=0.3)
    buf.push(np.ones(400, np.float32))
    buf.read(300)
    out = buf.read(300)  # only 100 left, and more is coming: underrun
    assert buf.underruns == 1
    assert out[100:].sum() == 0 and out[0] == 1.0 and out[99] < 0.05  # faded, then silence (no click)
    buf.push(np.ones(100, np.float32))
    assert not buf.read(50).any()  # 0.1 s < pre-roll: keep waiting rather than stutter
    buf.push(np.ones(300, np.float32))
    resumed = buf.read(400)
    assert resumed[0] == 0.0 and resumed[FADE_SAMPLES] == 1.0  # fades back in


def test_end_of_stream_plays_out_the_rest_without_preroll():
    buf = JitterBuffer(RATE, preroll_seconds=0.3)
    buf.push(np.ones(50, np.float32))
    buf.end()
    out = buf.read(100)
    assert out[:50].sum() == 50 and not out[50:].any()
    assert buf.drained and buf.underruns == 0


def test_clip_source_seeks_and_stops_at_the_region_end():
    clip = ClipSource(np.arange(10, dtype=np.float32), RATE, start=2, stop=6)
    assert np.array_equal(clip.read(3), [2, 3, 4])
    assert np.array_equal(clip.read(3), [5, 0, 0]) and clip.finished
    clip.seek(3)
    assert clip.position == 3 and not clip.finished
