"""Incremental decoder: feed code frames as they are generated, get their audio back.

s2.cpp re-decodes a window of up to 144 + 16 frames on every step (docs/spec/codec.md §6), so each chunk
costs ~150 frames of compute. The codec is strictly causal, so we instead keep each block's
tail (conv inputs, transposed-conv inputs, attention keys/values of the last window-1
positions) and run only the new frames. The cost of a chunk is then proportional to its size
and independent of how much was decoded before, and the output equals a one-shot full-context
``Codec.decode`` up to float rounding.

Note: that is the fish-speech / full-context result. For T > 160 frames s2.cpp's windowed
decode truncates the post_module context and so differs slightly; ``Codec.decode_windowed``
reproduces that schedule when bit-parity with s2.cpp matters more than quality.
"""

from __future__ import annotations

import numpy as np
import torch


class StreamDecoder:
    """``feed(codes[10, n]) -> float32 [spf·n]``; ``reset()`` starts a new utterance."""

    def __init__(self, codec):
        self.codec = codec
        self._state: dict = {}
        self.frames = 0

    def reset(self) -> None:
        self._state = {}
        self.frames = 0

    def feed_tensor(self, codes) -> torch.Tensor:
        """Like ``feed`` but returns the waveform tensor on the codec's device."""
        c = self.codec.clamp_codes(codes)
        out = self.codec.decode_tensor(c, self._state)
        self.frames += c.shape[1]
        return out

    def feed(self, codes) -> np.ndarray:
        """Decode the next ``n >= 1`` frames; returns exactly ``samples_per_frame·n`` samples."""
        return self.feed_tensor(codes).float().cpu().numpy()
