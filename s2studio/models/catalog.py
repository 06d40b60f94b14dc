"""The S2 Pro model files s2studio knows: where they are published and what each variant is.

A *variant* is the short name of one quantization (``q8_0``, ``q6_k`` ...); its file in the
model repository is ``s2-pro-<variant>.gguf``. The tokenizer is published beside them.
"""

from __future__ import annotations

from dataclasses import dataclass

MODEL_REPO = "rodrigomt/s2-pro-gguf"
TOKENIZER_FILE = "tokenizer.json"
FILE_PREFIX, FILE_SUFFIX = "s2-pro-", ".gguf"
DEFAULT_VARIANT = "q8_0"


@dataclass(frozen=True)
class Variant:
    name: str  # "q8_0"
    size: str  # download size, as published
    what: str  # one phrase: what it is good for

    @property
    def filename(self) -> str:
        return f"{FILE_PREFIX}{self.name}{FILE_SUFFIX}"


# On the CPU the engine computes on the file's quantized blocks (memory ≈ file size); on a GPU
# every variant becomes 16-bit (~10 GB). The README's table lists the same.
CATALOG = (
    Variant("q8_0", "5.6 GB", "near-lossless — a good default"),
    Variant("f16", "9.9 GB", "reference quality"),
    Variant("q6_k", "4.5 GB", "good"),
    Variant("q5_k_m", "4.0 GB", "smaller, still good"),
    Variant("q4_k_m", "3.6 GB", "smaller, still good"),
    Variant("q3_k", "3.0 GB", "experimental"),
    Variant("q2_k", "2.6 GB", "experimental"),
)
# (file, download size, what it is), as the app's first-run page lists them.
VARIANTS = tuple((v.filename, v.size, v.what) for v in CATALOG)


def variant_named(text: str) -> Variant | None:
    """The variant ``text`` names — ``q8_0``, ``Q8_0``, ``s2-pro-q8_0`` or ``s2-pro-q8_0.gguf`` —
    or None."""
    key = text.strip().lower()
    key = key[:-len(FILE_SUFFIX)] if key.endswith(FILE_SUFFIX) else key
    key = key[len(FILE_PREFIX):] if key.startswith(FILE_PREFIX) else key
    return next((v for v in CATALOG if v.name == key), None)


def variant_of_file(filename: str) -> str | None:
    """The variant name of a file called like a published one (``s2-pro-q6_k.gguf`` → ``q6_k``)."""
    v = variant_named(filename) if filename.lower().endswith(FILE_SUFFIX) else None
    return v.name if v else None


def variant_list() -> str:
    return ", ".join(v.name for v in CATALOG)
