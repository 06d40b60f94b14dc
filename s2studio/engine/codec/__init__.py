"""S2 Pro audio codec in torch (re-implementation of s2.cpp's AudioCodec; docs/spec/codec.md).

Public API:
- ``Codec.from_gguf(path_or_gguffile, device="cpu", dtype=torch.float32, emulate_ggml=False)``
- ``Codec.encode(audio) -> int32 [10, T]``, ``Codec.decode(codes) -> float32 [2048·T]``
- ``Codec.stream_decoder() -> StreamDecoder`` with ``feed(codes[10, n])`` and ``reset()``
- ``Codec.decode_windowed(codes)``: s2.cpp's 16-frame / 144-context schedule, for parity
- ``placement.load_placed_codec(model_path, engine_device, mode)`` -> (codec, CodecPlacement):
  CPU vs GPU choice (auto benchmark / follow / cpu) with a cached verdict and CPU fallback;
  ``placement.decide`` is the pure rule.
"""

from s2studio.engine.codec.config import CodecConfig
from s2studio.engine.codec.model import Codec
from s2studio.engine.codec.streaming import StreamDecoder

__all__ = ["Codec", "CodecConfig", "StreamDecoder"]
