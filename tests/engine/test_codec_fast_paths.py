"""CPU fast paths of CausalConv that replace a oneDNN call: same values as F.conv1d.

Bound: float32 summation order only (<= 1e-5 absolute on O(1) data).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from s2studio.engine.codec.layers import CausalConv


@pytest.mark.parametrize("dilation", [1, 2, 9])
@pytest.mark.parametrize("length", [1, 40, 5000])
def test_single_output_channel_conv_equals_conv1d(dilation, length):
    g = torch.Generator().manual_seed(dilation * 7 + length)
    w, b = torch.randn(1, 12, 7, generator=g) * 0.3, torch.randn(1, generator=g)
    conv = CausalConv(w, b, dilation=dilation)
    x = torch.randn(12, length, generator=g)
    want = F.conv1d(F.pad(x, (conv.pad, 0))[None], w, b, dilation=dilation)[0]
    got = conv(x, False)
    assert got.shape == (1, length)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    # Streaming in chunks carries the same tail.
    state: dict = {}
    parts = [conv(x[:, a:a + 17], False, state) for a in range(0, length, 17)]
    torch.testing.assert_close(torch.cat(parts, dim=1), want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("cin,cout,k,stride", [(12, 6, 16, 8), (10, 5, 8, 4), (8, 4, 4, 2), (6, 3, 2, 2), (6, 4, 7, 3)])
@pytest.mark.parametrize("length", [1, 37, 300])
def test_polyphase_transposed_conv_equals_conv_transpose1d(cin, cout, k, stride, length):
    """The transposed conv as one stride-1 conv (CPU, long inputs, and kernels that are not a
    multiple of the stride): the outputs of F.conv_transpose1d, one-shot and streamed."""
    from s2studio.engine.codec.layers import CausalTransConv

    g = torch.Generator().manual_seed(cin * 100 + k * 10 + length)
    w, b = torch.randn(cin, cout, k, generator=g) * 0.3, torch.randn(cout, generator=g)
    tc = CausalTransConv(w, b, stride)
    x = torch.randn(cin, length, generator=g)
    want = F.conv_transpose1d(x[None], w, b, stride=stride)[0]
    full = tc._polyphase(x)
    assert full.shape == want.shape
    torch.testing.assert_close(full, want, atol=1e-5, rtol=0)
    torch.testing.assert_close(tc(x, False), want[:, : length * stride], atol=1e-5, rtol=0)
    state: dict = {}
    parts = [tc(x[:, a:a + 29], False, state) for a in range(0, length, 29)]
    torch.testing.assert_close(torch.cat(parts, dim=1), want[:, : length * stride], atol=1e-5, rtol=0)
