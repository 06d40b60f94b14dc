"""The engine's modes: each setting that takes one of a few words, as an enum.

Every enum here is also a ``str`` whose value is the word itself, so comparisons with plain
strings (``mode == "auto"``), dict lookups, ``str()``, f-strings and JSON all see the word:
settings files, the server's parameters and the CLI keep passing and storing strings. A value
is checked and converted once, where the settings are made (``EngineSettings``; the kernel
settings in ``engine.kernels.backend``); ``parse`` raises ``InputError`` with the sentence
a person sees. CLI choices come from ``choices()``.

Torch-free and Qt-free: the CLI builds its parser from here without starting torch.
"""

from __future__ import annotations

from enum import Enum

from s2studio.errors import InputError


class Mode(str, Enum):
    """A word-valued setting. Hashes and prints as its word (Enum's own hash is the member's
    name's, so ``{"auto": x}[Mode.AUTO]`` would miss without this), so it can stand anywhere
    the plain string stood before."""

    __str__ = str.__str__
    __hash__ = str.__hash__

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @classmethod
    def choices(cls) -> list[str]:
        """The words, in declaration order (argparse choices, combo boxes)."""
        return [m.value for m in cls]

    @classmethod
    def listing(cls, last: str = ", ") -> str:
        """"a, b, c" (or "a, b or c" with ``last=" or "``) for messages."""
        words = cls.choices()
        return words[0] if len(words) == 1 else ", ".join(words[:-1]) + last + words[-1]

    @classmethod
    def parse(cls, value):
        """The member for ``value`` (a member or its word; aliases where a mode has them), or
        ``InputError`` with the message people already know for this setting."""
        try:
            return cls(value)
        except ValueError:
            raise InputError(cls.unknown_message(value)) from None

    @classmethod
    def unknown_message(cls, value) -> str:
        return f"Unknown {cls.__name__} '{value}'. Use {cls.listing(' or ')}."


class KernelWord(Mode):
    """A kernel setting whose words are its members' names in any case, spaces around ignored
    (``S2_PREFILL=" Exact "`` as well as ``exact``): the environment's spellings."""

    @classmethod
    def _missing_(cls, value):
        return cls.__members__.get(str(value).strip().upper())


class CudaGraphs(Mode):
    """Decode steps of a take run alone (engine.model.static_step):
    off - the dynamic path (what auto means unless the whole model is on one CUDA GPU);
    on - static steps, each captured once as a CUDA graph on CUDA (eager elsewhere);
    eager - static steps, never captured; compile - torch.compile where Triton is importable."""

    AUTO = "auto"
    ON = "on"
    OFF = "off"
    EAGER = "eager"
    COMPILE = "compile"

    @classmethod
    def unknown_message(cls, value) -> str:
        return f"Unknown cuda_graphs mode '{value}'. Use {cls.listing()}."


class CodecMode(Mode):
    """Where the audio codec runs: auto (benchmark CPU vs GPU once) | cpu | follow (the engine's device)."""

    AUTO = "auto"
    CPU = "cpu"
    FOLLOW = "follow"

    @classmethod
    def unknown_message(cls, value) -> str:
        return f"Unknown codec mode '{value}'. Use {cls.listing(' or ')}."


class WeightDtype(Mode):
    """The weights' working type (engine.placement): auto (float32 files stay float32, quantized
    blocks stay quantized on the CPU where this machine runs them fast enough, the rest float16),
    quantized (keep the blocks whatever the timing), or dequantize everything to one type."""

    AUTO = "auto"
    QUANTIZED = "quantized"
    FLOAT32 = "float32"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"

    @classmethod
    def _missing_(cls, value):
        # ggml's short names, accepted by choose_dtype before there was an enum.
        return {"f32": cls.FLOAT32, "f16": cls.FLOAT16, "bf16": cls.BFLOAT16}.get(value)

    @classmethod
    def unknown_message(cls, value) -> str:
        return f"Unknown dtype '{value}'. Use {cls.listing(' or ')}."


class TokenizerMode(Mode):
    """hf: HF tokenizers, as the model was trained; s2cpp: s2.cpp's exact token ids."""

    HF = "hf"
    S2CPP = "s2cpp"

    @classmethod
    def unknown_message(cls, value) -> str:
        return f"Unknown tokenizer mode '{value}'. Use {cls.listing(' or ')}."


class SegmentationMode(Mode):
    """How long text is split (engine.text.segmentation): sentences (Unicode-aware) | s2cpp
    (s2.cpp's server rules, byte for byte)."""

    SENTENCES = "sentences"
    S2CPP = "s2cpp"

    @classmethod
    def unknown_message(cls, value) -> str:
        return f"Unknown segmentation mode {value!r}; use one of {cls.listing()}."


class IntDot(Mode):
    """Which activations the C integer-dot GEMV (engine.kernels.intdot) takes:
    precise - two int8 planes (the values and what they missed) for K-quants, int16 for Q8_0;
    int8 - one int8 plane (ggml's Q8_K: faster, ~1 % error); off - the numba float32 kernels.
    The old environment variable S2_INT_DOT spelled these 2, 1 and 0."""

    PRECISE = "precise"
    INT8 = "int8"
    OFF = "off"

    @classmethod
    def _missing_(cls, value):
        return {"2": cls.PRECISE, "1": cls.INT8, "0": cls.OFF}.get(str(value).strip())

    @classmethod
    def unknown_message(cls, value) -> str:
        return f"Unknown integer-dot mode '{value}'. Use {cls.listing(' or ')} (or 2, 1, 0)."


class KernelLevel(Mode):
    """The instruction set of the C integer kernels (engine.kernels.intdot): best - the best
    this CPU offers (the default); or one level, forced (A/B runs, or to check a level on a CPU
    that also has a better one): scalar, avx2, avxvnni (256-bit VNNI), avx512bw, avx512vnni
    on x86; neon, dotprod on AArch64. The environment variable S2_KERNEL_LEVEL spells the same."""

    BEST = "best"
    SCALAR = "scalar"
    AVX2 = "avx2"
    AVXVNNI = "avxvnni"
    AVX512BW = "avx512bw"
    AVX512VNNI = "avx512vnni"
    NEON = "neon"
    DOTPROD = "dotprod"

    @classmethod
    def _missing_(cls, value):
        word = str(value).strip().lower()
        return cls.BEST if word == "" else cls.__members__.get(word.upper())

    @classmethod
    def unknown_message(cls, value) -> str:
        return f"Unknown kernel level '{value}'. Use {cls.listing(' or ')}."


class PrefillPath(KernelWord):
    """How a quantized matrix multiplies the many rows of a prefill (engine.kernels.qmatrix):
    int - on the C integer kernels of the decode steps, 16 rows per call (where they run, with
    precise activations: int16 for Q8_0, two int8 planes for K-quants; error ~1e-5 of |x||w|;
    every row independent of the others, so prompts that start together share each weight
    read): K-quant calls of up to 64 rows (qmatrix.int_prefill_max_rows: a sentence, the rest of a
    cloned voice's prompt; longer ones exact), Q8_0 calls of any length on AVX-512 (its tiled
    kernels are faster than exact at every length measured; 64 rows elsewhere); exact - every call's matrix
    dequantized to float32 and multiplied by torch's float32 GEMM (the former path). The
    environment variable S2_PREFILL spells the same."""

    INT = "int"
    EXACT = "exact"

    @classmethod
    def unknown_message(cls, value) -> str:
        return f"Unknown prefill path '{value}'. Use {cls.listing(' or ')}."


class AttentionKernel(KernelWord):
    """Decode attention on the CPU (one query row: engine.kernels.attention): c - one C call per
    layer for every head of every request of the step (the default where the C kernels are
    built); torch - torch's ops, as prefill, GPUs and shapes the C kernel does not take use.
    The environment variable S2_ATTENTION spells the same."""

    C = "c"
    TORCH = "torch"

    @classmethod
    def unknown_message(cls, value) -> str:
        return f"Unknown attention kernel '{value}'. Use {cls.listing(' or ')}."


class GlueKernel(KernelWord):
    """A layer's small float32 ops on the CPU (RMSNorm, the QKV split with QK-norm and RoPE, the
    residual add before the FFN's norm: engine.kernels.glue): c - one C call each, the same
    float32 operations as torch's (bit-identical but for RMSNorm's square root, IEEE's where
    torch's is MKL's: ≤ ~3 ulps; the default where the C kernels are built); torch - torch's
    ops, as GPUs use.
    The environment variable S2_GLUE spells the same."""

    C = "c"
    TORCH = "torch"

    @classmethod
    def unknown_message(cls, value) -> str:
        return f"Unknown glue kernel '{value}'. Use {cls.listing(' or ')}."


class GemvSchedule(KernelWord):
    """How the integer GEMV's rows are shared among threads: dynamic - threads claim small
    tasks, so one the OS deschedules does not hold the others up; static - equal shares; pool -
    dynamic claiming on the kernels' own threads, which spin briefly between GEMVs instead of
    sleeping in OpenMP's region start and closing barrier (kernels/_pool.c; POSIX only)."""

    DYNAMIC = "dynamic"
    STATIC = "static"
    POOL = "pool"

    @classmethod
    def unknown_message(cls, value) -> str:
        return f"Unknown GEMV schedule '{value}'. Use {cls.listing(' or ')}."
