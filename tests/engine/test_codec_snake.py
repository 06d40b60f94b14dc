"""The fused one-pass Snake (engine/codec/snake_kernel.py) against the torch form it replaces.

Error bound: the fused kernel rounds only α·x to float32 (as torch does) and evaluates sin² in
float64, so against a float64 reference it is never worse than torch's float32 Snake (plus
1e-7); a whole decode with it stays within 1e-5 of the torch-form decode and at >= 46 dB SNR
against s2.cpp's golden audio (the golden rms-ratio bound 5e-3).
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import torch

from s2studio.engine.codec import Codec, layers, snake_kernel
from s2studio.engine.codec.layers import CausalConv, Snake

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden"

pytestmark = pytest.mark.skipif(not snake_kernel.available(), reason="numba is not installed")


def torch_snake(x: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    t = torch.sin(alpha * x)
    return x + t * t / alpha


def snr_db(ref: np.ndarray, y: np.ndarray) -> float:
    ref = ref.astype(np.float64)
    return float(10 * np.log10(np.sum(ref ** 2) / np.sum((ref - y) ** 2)))


@pytest.mark.parametrize("scale", [1.0, 30.0, 3000.0])
def test_fused_snake_is_as_accurate_as_torch(scale):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(17, 1001, generator=g) * scale
    alpha = torch.rand(17, generator=g) * 8 + 0.02
    s = Snake(alpha)
    assert s.fusable(x)
    fused = s(x)
    ref = torch_snake(x.double(), alpha.double()[:, None])
    torch_err = float((torch_snake(x, alpha[:, None]).double() - ref).abs().max())
    fused_err = float((fused.double() - ref).abs().max())
    assert fused_err <= torch_err + 1e-7, (fused_err, torch_err)


def test_fused_snake_handles_views_and_writes_at_an_offset():
    x = torch.randn(40, 8).t()  # not contiguous
    s = Snake(torch.rand(8) + 0.5)
    out = torch.full((8, 45), 7.0)
    s.into(x, out, 5)
    assert torch.all(out[:, :5] == 7.0)
    torch.testing.assert_close(out[:, 5:], torch_snake(x, s.alpha), atol=2e-6, rtol=0)
    torch.testing.assert_close(s(x), torch_snake(x, s.alpha), atol=2e-6, rtol=0)


def test_fused_snake_is_not_used_off_float32_or_when_switched_off(monkeypatch):
    s = Snake(torch.rand(4) + 0.5)
    assert not s.fusable(torch.randn(4, 10, dtype=torch.float64))
    assert not s.fusable(torch.randn(4, 10, dtype=torch.bfloat16))
    monkeypatch.setattr(layers, "FUSED_SNAKE", False)
    assert not s.fusable(torch.randn(4, 10))
    monkeypatch.setattr(layers, "FUSED_SNAKE", True)
    monkeypatch.setattr(snake_kernel, "usable", lambda: False)
    assert not s.fusable(torch.randn(4, 10))


def test_a_kernel_that_fails_to_run_falls_back_to_torch(monkeypatch, caplog):
    def broken(*args):
        raise RuntimeError("LLVM is missing")

    monkeypatch.setattr(snake_kernel, "_usable", None)
    monkeypatch.setattr(snake_kernel, "snake_into", broken)
    s = Snake(torch.rand(3) + 0.5)
    x = torch.randn(3, 20)
    with caplog.at_level("WARNING"):
        torch.testing.assert_close(s(x), torch_snake(x, s.alpha), atol=2e-6, rtol=0)
    assert "LLVM is missing" in caplog.text
    assert not s.fusable(x)


@pytest.mark.parametrize("dilation", [1, 3])
def test_conv_after_snake_equals_conv_of_snake_one_shot_and_streaming(dilation):
    g = torch.Generator().manual_seed(2)
    conv = CausalConv(torch.randn(6, 5, 7, generator=g) * 0.3, torch.randn(6, generator=g), dilation=dilation)
    s = Snake(torch.rand(5, generator=g) + 0.3)
    x = torch.randn(5, 60, generator=g)
    want = conv(torch_snake(x, s.alpha), False)
    torch.testing.assert_close(conv.after_snake(s, x, False), want, atol=1e-5, rtol=0)
    state: dict = {}
    parts = [conv.after_snake(s, x[:, a:a + 13], False, state) for a in range(0, 60, 13)]
    torch.testing.assert_close(torch.cat(parts, dim=1), want, atol=1e-5, rtol=0)


def test_decode_with_fused_snake_matches_torch_form_and_s2cpp(monkeypatch):
    case = GOLDEN / "codec_roundtrip"
    codes = np.load(case / "dumps" / "codec_dec_codes_in.npy")
    gold = np.load(case / "dumps" / "audio.npy")
    codec = Codec.from_gguf(case / "model.gguf")
    fused = codec.decode(codes)
    monkeypatch.setattr(layers, "FUSED_SNAKE", False)
    plain = codec.decode(codes)
    assert np.abs(fused - plain).max() <= 1e-5
    assert snr_db(gold, fused) >= 46.0
    assert snr_db(gold, plain) >= 46.0


def test_one_kernel_specialization_whatever_the_caller_passes():
    """A strided view must not leave an any-layout version behind that later contiguous calls
    would reuse (vectorized differently, it may round differently)."""
    x = torch.randn(4, 64)
    alpha = torch.rand(4) + 0.5
    out = np.zeros((4, 70), np.float32)
    snake_kernel.snake_into(x.numpy()[:, ::2], alpha.numpy(), (1 / alpha).numpy(), out, 3)
    snake_kernel.snake_into(x.numpy(), alpha.numpy(), (1 / alpha).numpy(), out, 3)
    layouts = {arg.layout for sig in snake_kernel._kernel.signatures for arg in sig if hasattr(arg, "layout")}
    assert layouts == {"C"}, snake_kernel._kernel.signatures
    with pytest.raises(ValueError):
        snake_kernel.snake_into(x.numpy(), alpha.numpy(), (1 / alpha).numpy(), out[:, ::2], 0)
