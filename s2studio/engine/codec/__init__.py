"""S2 Pro audio codec in torch (re-implementation of s2.cpp's AudioCodec; spec codec.md).

Public API:
- ``Codec.from_gguf(path_or_gguffile, device="cpu", dtype=torch.float32, emulate_ggml=False)``
- ``Codec.encode(audio) -> int32 [10, T]``, ``Codec.decode(codes) -> float32 [2048·T]``
- ``Codec.stream_decoder() -> StreamDecoder`` with ``feed(codes[10, n])`` and ``reset()``
- ``placement``: choose CPU or GPU for the codec (``choose_codec_device``).
"""

from .config import CodecConfig
from .model import Codec
from .streaming import StreamDecoder

__all__ = ["Codec", "CodecConfig", "StreamDecoder"]
