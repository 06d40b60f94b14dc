"""Codec hyperparameters read from the GGUF metadata (docs/spec/codec.md §1).

Only the keys s2.cpp actually reads are required; keys it ignores (decoder_transformer_layers,
quantizer_type, rvq n_head, feed_forward_length) are not looked at, so a file s2.cpp accepts is
accepted here too. Unlike ggml's typed getters (which abort on a type mismatch) we accept any
integer type for integer keys and any number for float keys: being lenient costs nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from s2studio.errors import ModelFileError
from s2studio.engine.model.gguf_file import GGUFFile

KEY = "fish_speech.codec."

# general.architecture -> tensor-name prefix (s2.cpp src/s2_codec.cpp:815-822)
ARCH_PREFIX = {"fish-speech": "c.", "fish-speech-codec": ""}

# Ranges of the numbers read (out of range: a ModelFileError naming the key). Wide: S2 Pro has
# rates of at most 8, 44.1 kHz and sizes of a few thousand. A hostile rate would otherwise size
# the codec's buffers (one file asked for 1.5 TB).
MAX_SIZE = 1 << 20  # any dimension or codebook size
MAX_RATE = 64  # one up/down-sampling factor
MAX_RATE_PRODUCT = 1 << 16  # samples per latent step (the product of a rate list; hop_length)
MAX_SAMPLE_RATE = 384_000
MAX_LAYERS = 256
MAX_WINDOW = 1 << 13  # RVQ attention window in frames (S2 Pro: 128); sizes the streaming history

# Hard-coded in s2.cpp, not in the file (docs/spec/codec.md §1.4).
ENCODER_ATTENTION_WINDOW = 512
RESIDUAL_DILATIONS = (1, 3, 9)
CONVNEXT_LN_EPS = 1e-6


@dataclass(frozen=True)
class TransformerConfig:
    head_dim: int
    n_local_heads: int  # < 1 means "= n_head" (resolved per stack from the weight shapes)
    rope_base: float
    norm_eps: float
    window: int


@dataclass(frozen=True)
class CodecConfig:
    prefix: str
    sample_rate: int
    hop_length: int
    frame_length: int
    latent_dim: int
    encoder_rates: tuple[int, ...]
    decoder_rates: tuple[int, ...]
    encoder_transformer_layers: tuple[int, ...]
    codebook_dim: int
    residual_codebooks: int
    residual_codebook_size: int
    semantic_codebook_size: int
    downsample_factor: tuple[int, ...]
    encoder_transformer: TransformerConfig
    rvq_transformer: TransformerConfig

    @property
    def num_codebooks(self) -> int:
        return self.residual_codebooks + 1

    @property
    def samples_per_frame(self) -> int:
        """Samples per code frame (2048 for S2 Pro); hop_length alone is the latent hop (512)."""
        return self.hop_length * math.prod(self.downsample_factor)

    @property
    def streaming_history_frames(self) -> int:
        """s2.cpp's windowed-decode left context H = round_up_8(window - 1 + 16) (docs/spec/codec.md §1.3)."""
        h = ((max(0, self.rvq_transformer.window - 1) + 16 + 7) // 8) * 8
        return h if h > 0 else 160

    def codebook_sizes(self) -> list[int]:
        return [self.semantic_codebook_size] + [self.residual_codebook_size] * self.residual_codebooks

    @classmethod
    def from_gguf(cls, g: GGUFFile) -> CodecConfig:
        arch = g.meta("general.architecture")
        if arch is None:
            raise ModelFileError(g.path, "required metadata key 'general.architecture' is missing")
        if arch not in ARCH_PREFIX:
            raise ModelFileError(g.path, f"general.architecture is '{arch}'; a codec needs 'fish-speech' "
                                         "or 'fish-speech-codec'")

        def req(suffix: str):
            value = g.meta(KEY + suffix)
            if value is None:
                raise ModelFileError(g.path, f"required codec metadata key '{KEY + suffix}' is missing")
            return value

        def req_int(suffix: str) -> int:
            value = req(suffix)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ModelFileError(g.path, f"codec metadata key '{KEY + suffix}' should be an integer, "
                                             f"got {value!r}")
            return int(value)

        def req_float(suffix: str) -> float:
            value = req(suffix)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ModelFileError(g.path, f"codec metadata key '{KEY + suffix}' should be a number, "
                                             f"got {value!r}")
            return float(value)

        def req_list(suffix: str) -> tuple[int, ...]:
            value = req(suffix)
            if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
                raise ModelFileError(g.path, f"codec metadata key '{KEY + suffix}' should be an integer "
                                             f"array, got {value!r}")
            return tuple(int(v) for v in value)

        def positive(name: str, value: int, hi: int = MAX_SIZE) -> int:
            if not 1 <= value <= hi:
                raise ModelFileError(g.path, f"codec metadata '{KEY + name}' is {value}; it must be between 1 "
                                             f"and {hi}. The file is damaged or not an S2 Pro model.")
            return value

        def real(name: str, lo: float, hi: float) -> float:
            value = req_float(name)
            if not lo < value <= hi:  # NaN fails too
                raise ModelFileError(g.path, f"codec metadata '{KEY + name}' is {value!r}; it must be above "
                                             f"{lo:g} and at most {hi:g}. The file is damaged.")
            return value

        def rates(name: str) -> tuple[int, ...]:
            values = tuple(positive(name, r, MAX_RATE) for r in req_list(name))
            if math.prod(values) > MAX_RATE_PRODUCT:
                raise ModelFileError(g.path, f"codec metadata '{KEY + name}' {list(values)} multiplies to "
                                             f"{math.prod(values)}; at most {MAX_RATE_PRODUCT} samples per step "
                                             "are allowed. The file is damaged.")
            return values

        frame_length = g.meta(KEY + "frame_length")
        if not isinstance(frame_length, int) or frame_length <= 0:  # s2.cpp: default / <=0 -> 512
            frame_length = 512

        # Required by s2.cpp even though the graph does not use them: a file without them is
        # not one s2.cpp would load, so refuse it the same way.
        req_int("encoder_dim")
        req_int("decoder_dim")
        req_int("rvq_transformer.block_size")
        req_int("transformer.block_size")
        req_int("rvq_transformer.n_layer")
        req_int("rvq_transformer.dim")

        enc_rates = rates("encoder_rates")
        dec_rates = rates("decoder_rates")
        enc_layers = req_list("encoder_transformer_layers")
        if any(not 0 <= n <= MAX_LAYERS for n in enc_layers):
            raise ModelFileError(g.path, f"codec metadata '{KEY}encoder_transformer_layers' {list(enc_layers)} "
                                         f"must hold layer counts between 0 and {MAX_LAYERS}")
        down = rates("quantizer_downsample_factor")
        if not enc_rates or not dec_rates or not down:
            raise ModelFileError(g.path, "codec rate arrays (encoder_rates, decoder_rates, "
                                         "quantizer_downsample_factor) must not be empty")
        window = positive("rvq_transformer.window_size", req_int("rvq_transformer.window_size"), MAX_WINDOW)

        cfg = cls(
            prefix=ARCH_PREFIX[arch],
            sample_rate=positive("sample_rate", req_int("sample_rate"), MAX_SAMPLE_RATE),
            hop_length=positive("hop_length", req_int("hop_length"), MAX_RATE_PRODUCT),
            frame_length=frame_length,
            latent_dim=positive("latent_dim", req_int("latent_dim")),
            encoder_rates=enc_rates,
            decoder_rates=dec_rates,
            encoder_transformer_layers=enc_layers,
            codebook_dim=positive("quantizer_codebook_dim", req_int("quantizer_codebook_dim")),
            residual_codebooks=positive("quantizer_residual_codebooks", req_int("quantizer_residual_codebooks"), 255),
            residual_codebook_size=positive("quantizer_residual_codebook_size",
                                            req_int("quantizer_residual_codebook_size")),
            semantic_codebook_size=positive("quantizer_semantic_codebook_size",
                                            req_int("quantizer_semantic_codebook_size")),
            downsample_factor=down,
            encoder_transformer=TransformerConfig(
                head_dim=positive("transformer.head_dim", req_int("transformer.head_dim")),
                n_local_heads=req_int("transformer.n_local_heads"),
                rope_base=real("transformer.rope_freq_base", 1.0, 1e15),
                norm_eps=real("transformer.layer_norm_rms_eps", 0.0, 0.1),
                window=ENCODER_ATTENTION_WINDOW,
            ),
            rvq_transformer=TransformerConfig(
                head_dim=positive("rvq_transformer.head_dim", req_int("rvq_transformer.head_dim")),
                n_local_heads=req_int("rvq_transformer.n_local_heads"),
                rope_base=real("rvq_transformer.rope_freq_base", 1.0, 1e15),
                norm_eps=real("rvq_transformer.layer_norm_rms_eps", 0.0, 0.1),
                window=window,
            ),
        )
        req_int("quantizer_input_dim")
        return cfg
