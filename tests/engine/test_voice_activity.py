"""Voice activity detection with Silero VAD (s2studio/engine/voice_activity.py) on real speech:
the golden reference clip's spoken second, repeated in a noisy, a clipped and a clean part."""

from __future__ import annotations

import pytest
import torch

from s2studio.audio import reference_check as rc
from s2studio.engine import voice_activity as va

RATE = 44100


def test_speech_is_found_in_real_speech_and_not_in_silence(long_reference_clip):
    clip = long_reference_clip
    regions = va.speech_regions(clip.samples, RATE)
    assert regions, "Silero VAD heard no speech in the golden reference clip"
    clean_start, clean_end = clip.parts["clean"]
    assert any(clean_start - 0.2 <= s / RATE < clean_end for s, _ in regions)
    for gap in ("gap1", "gap2", "gap3"):  # digital silence: no speech starts there
        a, b = clip.parts[gap]
        assert not any(a + 0.5 <= s / RATE <= b - 0.5 for s, _ in regions), (gap, regions)
    assert va.speech_regions(clip.samples[:0], RATE) == []


def test_the_proposal_lies_in_the_clean_part_and_spans_5_to_30_s(long_reference_clip):
    clip = long_reference_clip
    proposal = va.propose_reference(clip.samples, RATE)
    assert proposal is not None
    clean_start, clean_end = clip.parts["clean"]
    start, end = proposal.start / RATE, proposal.end / RATE
    assert clean_start - rc.EDGE_PAD_S - 0.05 <= start and end <= clean_end + 0.05, (start, end, clip.parts)
    assert rc.MIN_WINDOW_S <= end - start <= rc.MAX_WINDOW_S
    assert "no clipping" in proposal.reason


def test_loading_silero_leaves_the_engine_thread_count_alone(long_reference_clip):
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        va.speech_regions(long_reference_clip.samples[: 3 * RATE], RATE)
        assert torch.get_num_threads() == 2  # `import silero_vad` sets it to 1; put back
    finally:
        torch.set_num_threads(before)


def test_a_search_stops_when_progress_says_so(long_reference_clip):
    seen = []

    def progress(percent):
        seen.append(percent)
        return percent < 10  # "no longer wanted" a tenth of the way in

    with pytest.raises(va.SearchCancelled):
        va.propose_reference(long_reference_clip.samples, RATE, progress)
    assert seen and seen[-1] >= 10 and max(seen) < 20  # it stopped there, not at the end
    done = []
    assert va.propose_reference(long_reference_clip.samples, RATE, lambda p: done.append(p) or True) is not None
    assert done[-1] == pytest.approx(100, abs=1)
