"""Streaming decoder: chunked output == one-shot decode, bounded state, reset."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import torch

from s2studio.engine.codec import Codec, model as codec_model
from s2studio.engine.codec.layers import windowed_attention

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden"


@pytest.fixture(scope="module")
def codec():
    return Codec.from_gguf(GOLDEN / "codec_roundtrip" / "model.gguf")


def random_codes(codec, frames, seed=0):
    rng = np.random.default_rng(seed)
    return np.stack([rng.integers(0, n, size=frames) for n in codec.cfg.codebook_sizes()]).astype(np.int32)


def stream(dec, codes, sizes):
    out, a, i = [], 0, 0
    while a < codes.shape[1]:
        n = sizes[i % len(sizes)]
        chunk = dec.feed(codes[:, a:a + n])
        assert chunk.dtype == np.float32
        assert chunk.shape == (2048 * min(n, codes.shape[1] - a),)
        out.append(chunk)
        a, i = a + n, i + 1
    return np.concatenate(out)


# 50 frames: > the post_module window (8) and > s2.cpp's history (24), so both the attention
# KV window and every conv tail are exercised across many chunk boundaries.
@pytest.fixture(scope="module")
def long_codes(codec):
    assert codec.cfg.rvq_transformer.window == 8
    return random_codes(codec, 50)


@pytest.fixture(scope="module")
def one_shot(codec, long_codes):
    return codec.decode(long_codes)


@pytest.mark.parametrize("n", [1, 3, 4, 16])
def test_chunked_equals_one_shot(codec, long_codes, one_shot, n):
    out = stream(codec.stream_decoder(), long_codes, [n])
    assert out.shape == one_shot.shape
    assert np.abs(out - one_shot).max() <= 1e-4


def test_irregular_chunks_equal_one_shot(codec, long_codes, one_shot):
    out = stream(codec.stream_decoder(), long_codes, [5, 1, 2, 9, 1, 7])
    assert np.abs(out - one_shot).max() <= 1e-4


def test_golden_codes_streamed_match_s2cpp_audio(codec):
    codes = np.load(GOLDEN / "codec_roundtrip" / "dumps" / "codec_dec_codes_in.npy")
    gold = np.load(GOLDEN / "codec_roundtrip" / "dumps" / "audio.npy")
    out = stream(codec.stream_decoder(), codes, [4])
    assert np.abs(out - gold).max() <= 1e-2


def test_reset_starts_a_new_utterance(codec, long_codes, one_shot):
    dec = codec.stream_decoder()
    stream(dec, random_codes(codec, 13, seed=5), [3])
    assert dec.frames == 13
    dec.reset()
    assert dec.frames == 0
    out = stream(dec, long_codes, [4])
    assert np.abs(out - one_shot).max() <= 1e-4


def test_without_reset_state_carries_over(codec, long_codes, one_shot):
    # Proves the state matters: continuing after other frames gives different audio.
    dec = codec.stream_decoder()
    stream(dec, random_codes(codec, 13, seed=5), [3])
    out = stream(dec, long_codes, [4])
    assert np.abs(out - one_shot).max() > 1e-3


def _state_elems(dec):
    n = 0
    for v in dec._state.values():
        for t in (v if isinstance(v, tuple) else (v,)):
            if isinstance(t, torch.Tensor):
                n += t.numel()
    return n


def test_state_is_bounded(codec, long_codes):
    dec = codec.stream_decoder()
    stream(dec, long_codes[:, :12], [1])
    size_12 = _state_elems(dec)
    stream(dec, long_codes[:, 12:], [1])
    assert _state_elems(dec) == size_12 > 0  # KV caches hold window-1 = 7 frames at most


def test_long_decode_goes_through_chunks_and_matches(codec, long_codes, one_shot, monkeypatch):
    monkeypatch.setattr(codec_model, "DECODE_CHUNK_FRAMES", 7)
    out = codec.decode(long_codes)
    assert out.shape == one_shot.shape
    assert np.abs(out - one_shot).max() <= 1e-4


def test_prefix_property(codec, long_codes, one_shot):
    # Causality: decoding a prefix reproduces the prefix of the longer decode.
    k = 21
    assert np.abs(codec.decode(long_codes[:, :k]) - one_shot[: 2048 * k]).max() <= 1e-5


def _naive_attention(q, k, v, window):
    length = q.shape[1]
    p = torch.arange(length)
    mask = (p[None, :] <= p[:, None]) & (p[None, :] > p[:, None] - window)
    s = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    s = s.masked_fill(~mask, -1e9)
    return torch.softmax(s, -1) @ v


@pytest.mark.parametrize("length,window", [(600, 512), (300, 8), (40, 512), (513, 300)])
def test_blocked_windowed_attention_equals_naive(length, window):
    g = torch.Generator().manual_seed(length)
    q, k, v = (torch.randn(2, length, 16, generator=g) for _ in range(3))
    out = windowed_attention(q, k, v, 0, 0, window)
    assert torch.allclose(out, _naive_attention(q, k, v, window), atol=1e-5)


def test_encoder_window_beyond_512_latent_frames(codec):
    # 600 latent frames: more than the encoder transformer's 512-frame window and more than one
    # encoder chunk (256), so the chunked encoder carries conv tails and the window's KV state.
    rng = np.random.default_rng(3)
    t = np.arange(600 * 512) / 44100.0
    audio = (0.3 * np.sin(2 * np.pi * 180 * t * (1 + 0.2 * np.sin(t)))
             + 0.02 * rng.standard_normal(t.size)).astype(np.float32)
    chunked = codec.encoder(audio)
    one_shot = codec.encoder(audio, chunk_frames=10**6)
    assert chunked.shape == one_shot.shape == (600, codec.cfg.latent_dim)
    assert (chunked - one_shot).abs().max().item() <= 1e-4
    full = codec.encode(audio)
    assert full.shape == (10, 150)
    # Causality: a prefix's codes equal the first codes of the whole (the last prefix frame
    # sees zero padding where the whole sees audio, so it is left out).
    part = codec.encode(audio[: 2048 * 100])
    assert (full[:, :99] == part[:, :99]).mean() >= 0.99


@pytest.mark.parametrize("chunk", [1, 7, 16])
def test_chunked_encoder_equals_one_shot_on_golden_audio(codec, chunk):
    audio = np.load(GOLDEN / "codec_roundtrip" / "dumps" / "ref_audio.npy")
    one_shot = codec.encoder(audio, chunk_frames=10**6)
    assert (codec.encoder(audio, chunk_frames=chunk) - one_shot).abs().max().item() <= 1e-4
