"""Write a tiny random-weight S2 Pro model (GGUF + tokenizer.json) into a folder.

One GGUF holds both parts, as the real ``s2-pro-*.gguf`` does: the Dual-AR transformer
(``tiny_text``) and the RVQ codec (``tiny_codec``). Transformer weights are float32, the codec's
float16 (s2.cpp's CPU codec needs F16 conv kernels; the real files ship it that way too).
A few MB in all, built in well under a second of numpy; the self-test and
``tests/devtools`` use it to drive the real loader, generator and codec without a download.

The vocabulary layout (semantic id range, vocab size, ``<|audio_pad|>``) is read back from the
tokenizer just built, so both files always agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .random_init import Init
from .tiny_codec import CodecConfig, codec_metadata, codec_tensors
from .tiny_text import ARCH, TextConfig, text_metadata, text_tensors
from .tiny_tokenizer import build_tokenizer

CODEBOOK_SIZE = 128  # semantic tokens; also the codec's semantic codebook
BPE_VOCAB = 512
VOCAB_PAD = 8  # vocab_size rounded up to a multiple of this, as the exporter does


@dataclass(frozen=True)
class TinyModel:
    model_path: Path
    tokenizer_path: Path
    sample_rate: int
    samples_per_frame: int  # audio samples per generated frame (hop x downsampling)


def vocab_layout(tokenizer_json: dict, pad_to: int = VOCAB_PAD) -> dict:
    """The TextConfig fields that must agree with the tokenizer."""
    ids = dict(tokenizer_json["model"]["vocab"])
    for tok in tokenizer_json.get("added_tokens", []):
        ids[tok["content"]] = tok["id"]
    sem = sorted(i for name, i in ids.items() if name.startswith("<|semantic:"))
    if not sem or sem != list(range(sem[0], sem[0] + len(sem))):
        raise ValueError("the tokenizer's <|semantic:N|> ids are missing or not contiguous")
    n_tokens = max(ids.values()) + 1
    return dict(vocab_size=-(-n_tokens // pad_to) * pad_to, semantic_begin=sem[0], semantic_end=sem[-1],
                codebook_size=len(sem), audio_pad_id=ids.get("<|audio_pad|>", 0))


def write_gguf(path: Path, text: TextConfig, codec: CodecConfig, seed: int) -> None:
    import gguf  # imported here: only this step needs it, and it is the slowest import

    init = Init(seed)
    w = gguf.GGUFWriter(str(path), ARCH)
    w.add_name("tiny-s2-random")
    w.add_description(f"random-weight S2 Pro layout test model, seed {seed} (s2studio.devtools)")
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    text_metadata(w, text)
    codec_metadata(w, codec)
    for name, arr in text_tensors(init, text).items():
        w.add_tensor(name, arr.astype(np.float32))
    for name, arr in codec_tensors(init, codec).items():
        w.add_tensor(name, arr.astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def make_tiny_model(folder: str | Path, seed: int = 0) -> TinyModel:
    """Write ``tiny.gguf`` and ``tokenizer.json`` into ``folder`` (created if needed).

    Same seed, same bytes: the tokenizer trainer and every tensor are deterministic.
    """
    import json

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer_path = folder / "tokenizer.json"
    build_tokenizer(CODEBOOK_SIZE, BPE_VOCAB).save(str(tokenizer_path))
    layout = vocab_layout(json.loads(tokenizer_path.read_text(encoding="utf-8")))
    text = TextConfig(**layout)
    codec = CodecConfig(residual_codebooks=text.num_codebooks - 1,
                        semantic_codebook_size=layout["codebook_size"])
    model_path = folder / "tiny.gguf"
    write_gguf(model_path, text, codec, seed)
    return TinyModel(model_path=model_path, tokenizer_path=tokenizer_path, sample_rate=codec.sample_rate,
                     samples_per_frame=codec.hop_length * int(np.prod(codec.downsample_factor)))
