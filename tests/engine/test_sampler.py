"""s2.cpp's sampler semantics and the generation loop's controls."""

from __future__ import annotations

import pathlib
import threading

import numpy as np
import pytest
import torch

from s2studio.errors import InputError
from s2studio.engine.model.generate import GenerationParams, GenerationStats, generate_codes, generate_frames
from s2studio.engine.model.loader import load_dual_ar
from s2studio.engine.model.sampler import RAS_WINDOW, RepetitionWindow, sample_token

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden"
PROMPT = np.load(GOLDEN / "tts_f32" / "dumps" / "prompt_tokens.npy")
IM_END = 514


def logits_for(probs):
    return torch.log(torch.tensor(probs, dtype=torch.float32))


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_greedy_is_argmax_and_ties_take_the_lowest_index():
    assert sample_token(torch.tensor([0.1, 3.0, -1.0, 2.0]), 0.0, 0.8, 30) == 1
    assert sample_token(torch.tensor([1.0, 5.0, 5.0, 2.0]), 0.0, 1.0, 0) == 1


def test_top_p_drops_the_item_that_crosses_the_threshold():
    # p = (0.5, 0.4, 0.1), top_p 0.8: cum 0.5 keep, 0.9 > 0.8 drop -> only item 0 survives,
    # whatever the temperature.
    logits = logits_for([0.5, 0.4, 0.1])
    picks = {sample_token(logits, 5.0, 0.8, 0, gen(s)) for s in range(50)}
    assert picks == {0}
    # top_p 0.95 keeps items 0 and 1 (cum 0.9), drops 2 (cum 1.0).
    picks = {sample_token(logits, 5.0, 0.95, 0, gen(s)) for s in range(200)}
    assert picks == {0, 1}


def test_top_p_uses_temperature_one_probabilities():
    # At T=0.1 item 0 would hold ~100% of the mass; the cut still uses raw p = (0.45, 0.45, 0.1).
    logits = logits_for([0.45, 0.45, 0.1])
    picks = {sample_token(logits, 0.1, 0.95, 0, gen(s)) for s in range(300)}
    assert picks == {0, 1}


def test_top_k_limits_candidates_and_item_zero_is_always_kept():
    logits = -torch.arange(100, dtype=torch.float32) * 0.01
    picks = {sample_token(logits, 1.0, 1.0, 3, gen(s)) for s in range(300)}
    assert picks == {0, 1, 2}
    assert {sample_token(logits_for([0.9, 0.1]), 1.0, 0.0, 0, gen(s)) for s in range(20)} == {0}


def test_draws_follow_softmax_over_temperature():
    logits = torch.tensor([1.0, 0.0, -1.0])
    t = 2.0
    g = gen(123)
    counts = np.bincount([sample_token(logits, t, 1.0, 0, g) for _ in range(6000)], minlength=3)
    want = torch.softmax(logits / t, 0).numpy()
    np.testing.assert_allclose(counts / counts.sum(), want, atol=0.025)


def test_minus_infinity_is_never_drawn():
    logits = torch.tensor([0.0, float("-inf"), 0.0, float("-inf")])
    assert {sample_token(logits, 1.0, 1.0, 0, gen(s)) for s in range(100)} == {0, 2}


def test_repetition_window_keeps_the_last_ten():
    w = RepetitionWindow()
    for t in range(15):
        w.push(t)
    assert len(w.tokens) == RAS_WINDOW and 4 not in w and 5 in w and 14 in w


@pytest.fixture(scope="module")
def model():
    return load_dual_ar(GOLDEN / "tts_f32" / "model.gguf")[0]


def test_seed_makes_runs_reproducible_and_is_reported(model):
    p = GenerationParams(max_new_tokens=20, temperature=0.9, top_p=0.9, seed=7)
    s1, s2 = GenerationStats(), GenerationStats()
    a = generate_codes(model, PROMPT, p, im_end_id=IM_END, stats=s1)
    b = generate_codes(model, PROMPT, p, im_end_id=IM_END, stats=s2)
    np.testing.assert_array_equal(a, b)
    assert s1.seed == 7
    c = generate_codes(model, PROMPT, GenerationParams(max_new_tokens=20, temperature=0.9, top_p=0.9, seed=8),
                       im_end_id=IM_END)
    assert not np.array_equal(a, c)
    s3 = GenerationStats()
    generate_codes(model, PROMPT, GenerationParams(max_new_tokens=2), im_end_id=IM_END, stats=s3)
    assert s3.seed != 0  # a fresh random seed is drawn and reported


def test_ras_switch_changes_repeating_output(model):
    # Flat sampling where the window will see repeats: with RAS on, repeats get resampled.
    base = dict(max_new_tokens=40, temperature=0.3, top_p=1.0, top_k=2, seed=3)
    on = generate_codes(model, PROMPT, GenerationParams(**base, ras=True), im_end_id=IM_END)
    off = generate_codes(model, PROMPT, GenerationParams(**base, ras=False), im_end_id=IM_END)
    assert not np.array_equal(on, off)


def test_im_end_stops_generation_when_allowed(model):
    # Scale the tied head row of <|im_end|> far up: greedy picks it at the first unblocked step.
    saved = model.w.embeddings[IM_END].clone()
    model._head_ids = None
    hidden_dir = torch.ones_like(saved)
    try:
        model.w.embeddings[IM_END] = hidden_dir * 1e3
        model.new_cache(PROMPT.shape[1] + 1)
        h = model.forward_slow(torch.from_numpy(PROMPT.astype(np.int64)))
        # Make sure the bias is in the right direction for this hidden state.
        if float(h.sum()) < 0:
            model.w.embeddings[IM_END] = -hidden_dir * 1e3
        model._head_ids = None
        stats = GenerationStats()
        codes = generate_codes(model, PROMPT, GenerationParams(max_new_tokens=12, temperature=0, ras=False,
                                                               min_tokens_before_end=3),
                               im_end_id=IM_END, stats=stats)
        assert codes.shape[1] == 3 and stats.stop_reason == "end"
        stats = GenerationStats()
        codes = generate_codes(model, PROMPT, GenerationParams(max_new_tokens=12, temperature=0, ras=False),
                               im_end_id=IM_END, stats=stats)
        assert codes.shape[1] == 0 and stats.stop_reason == "end"
    finally:
        model.w.embeddings[IM_END] = saved
        model._head_ids = None


def test_cancel_stops_between_frames(model):
    cancel = threading.Event()
    stats = GenerationStats()
    frames = []
    for frame in generate_frames(model, PROMPT, GenerationParams(max_new_tokens=50, seed=1), im_end_id=IM_END,
                                 cancel=cancel, stats=stats):
        frames.append(frame)
        if frame.index == 2:
            cancel.set()
    assert len(frames) == 3 and stats.stop_reason == "cancelled"
    # The model is immediately usable again.
    assert generate_codes(model, PROMPT, GenerationParams(max_new_tokens=4, seed=1), im_end_id=IM_END).shape[1] > 0


def test_bad_parameters_are_input_errors(model):
    for bad in (dict(max_new_tokens=0), dict(temperature=-1.0), dict(top_k=-2)):
        with pytest.raises(InputError):
            list(generate_frames(model, PROMPT, GenerationParams(**bad), im_end_id=IM_END))
