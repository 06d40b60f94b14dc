"""Options several commands share (engine, codec placement, sampling) and what they turn into
(``EngineSettings``, ``GenerationParams``). One module, so the commands never import each other."""

from __future__ import annotations

import argparse

from s2studio.engine.limits import DEFAULT_VOICE_CACHE_MB, argparse_type
from s2studio.engine.modes import CodecMode, CudaGraphs, TokenizerMode, WeightDtype

# From the torch-free engine.modes, so building the parser (and --help) never imports torch;
# tests/test_cli_synth.py checks they equal engine.model.static_step.MODES.
CUDA_GRAPH_MODES = tuple(CudaGraphs.choices())


MODEL_HELP = ("S2 Pro GGUF file, or an installed variant such as q8_0 (default: the default model of "
              "`s2studio models`, else the only one installed)")


def add_model_option(p: argparse.ArgumentParser, helptext: str = MODEL_HELP) -> None:
    """``-m/--model``: a file or a variant name; unset means "the default" (:func:`model_path`)."""
    p.add_argument("-m", "--model", default=None, help=helptext)


def model_path(args: argparse.Namespace) -> str:
    """The model file the command loads (``s2studio/models/store.py`` says in which order it is
    looked for). Stored back into ``args.model``, so what a command prints names the file."""
    from s2studio.models.store import resolve_model

    args.model = resolve_model(args.model)
    return args.model


def add_engine_options(p: argparse.ArgumentParser) -> None:
    """Model, tokenizer and device flags shared by commands that load the Dual-AR."""
    add_model_option(p)
    p.add_argument("-t", "--tokenizer", default=None,
                   help="tokenizer.json (default: beside the model, its parent folder, or ./)")
    p.add_argument("--tokenizer-mode", choices=TokenizerMode.choices(), default=TokenizerMode.HF.value,
                   help="hf: HF tokenizers, as the model was trained (default); s2cpp: s2.cpp's exact ids")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps (default: cpu)")
    p.add_argument("-c", "--cuda", type=int, metavar="N", default=None, help="same as --device cuda:N")
    p.add_argument("-M", "--metal", action="store_true", help="same as --device mps")
    p.add_argument("-v", "--vulkan", type=int, metavar="N", default=None,
                   help="not available in the torch engine (use --cuda or --metal)")
    p.add_argument("-ngl", "--gpu-layers", type=argparse_type("gpu_layers", "--gpu-layers"), default=-1,
                   help="Slow-AR layers on the GPU: -1 all (default), 0 none, N the first N")
    p.add_argument("--dtype", default=WeightDtype.AUTO.value, choices=WeightDtype.choices(),
                   help="weights: auto (float32 files stay float32; quantized blocks stay quantized on the CPU, "
                        "the rest float16), quantized, or dequantize everything to float32/float16/bfloat16")
    p.add_argument("-threads", "--threads", type=argparse_type("threads", "--threads"), default=0,
                   help="CPU threads (0 = all cores; more than the cores is clamped to them)")
    p.add_argument("--cuda-graphs", choices=CUDA_GRAPH_MODES, default=CudaGraphs.AUTO.value,
                   help="decode steps as CUDA graphs (fewer kernel launches); matters only on CUDA: auto "
                        "(default) = on when the whole model is on one CUDA GPU, off = dynamic steps")
    p.add_argument("--voice-cache-mb", type=argparse_type("voice_cache_mb", "--voice-cache-mb"),
                   default=DEFAULT_VOICE_CACHE_MB,
                   help="memory for the voice prefix cache, MB: a voice's prompt is computed once and reused by "
                        f"every sentence (~40 MB per 10 s voice at full size; 0 = off; default "
                        f"{DEFAULT_VOICE_CACHE_MB})")
    add_codec_mode_options(p)


def add_codec_mode_options(p: argparse.ArgumentParser) -> None:
    """s2.cpp's three codec placement flags, stored as ``codec_mode``."""
    codec = p.add_mutually_exclusive_group()
    codec.add_argument("--codec-auto", dest="codec_mode", action="store_const", const=CodecMode.AUTO.value,
                       help="benchmark the codec on CPU and GPU once, keep the faster (default)")
    codec.add_argument("--codec-cpu", dest="codec_mode", action="store_const", const=CodecMode.CPU.value,
                       help="always decode audio on the CPU")
    codec.add_argument("--codec-follow-backend", dest="codec_mode", action="store_const", const=CodecMode.FOLLOW.value,
                       help="decode audio on the engine's device")
    p.set_defaults(codec_mode=CodecMode.AUTO.value)


def engine_settings(args: argparse.Namespace):
    from s2studio.errors import InputError
    from s2studio.engine.pipeline import EngineSettings

    device = args.device
    if args.vulkan is not None:
        raise InputError("--vulkan is not available in the torch engine; use --cuda N (NVIDIA), "
                         "--metal (Apple) or the CPU.")
    if args.cuda is not None:
        device = f"cuda:{args.cuda}"
    if args.metal:
        device = "mps"
    return EngineSettings(model_path=model_path(args), tokenizer_path=args.tokenizer, tokenizer_mode=args.tokenizer_mode,
                          device=device, gpu_layers=args.gpu_layers, dtype=args.dtype, threads=args.threads,
                          codec_mode=args.codec_mode, cuda_graphs=args.cuda_graphs,
                          voice_cache_mb=args.voice_cache_mb)


def add_sampling_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-max-tokens", "--max-tokens", type=argparse_type("max_new_tokens", "--max-tokens"), default=1024,
                   help="most audio frames to generate, ~21.5 per second (default 1024; prompt + frames must "
                        "fit the model's context)")
    p.add_argument("--min-tokens-before-end", type=argparse_type("min_tokens_before_end", "--min-tokens-before-end"),
                   default=0,
                   help="frames before the model may end the utterance (default 0)")
    p.add_argument("-temp", "--temp", "--temperature", dest="temperature", type=argparse_type("temperature", "--temp"),
                   default=0.8, help="sampling temperature, 0-5; 0 = greedy (default 0.8)")
    p.add_argument("-top-p", "--top-p", dest="top_p", type=argparse_type("top_p", "--top-p"), default=0.8,
                   help="nucleus cut, 0-1 (default 0.8)")
    p.add_argument("-top-k", "--top-k", dest="top_k", type=argparse_type("top_k", "--top-k"), default=30,
                   help="top-k cut, 0-4096; 0 = none (default 30)")
    p.add_argument("--seed", type=argparse_type("seed", "--seed"), default=None,
                   help="random seed, 0 to 2^64-1 (default: a new one, printed)")
    p.add_argument("--no-ras", action="store_true",
                   help="turn off repetition-aware resampling (it is also off at temperature 0)")


def generation_params(args: argparse.Namespace):
    from s2studio.engine.params import GenerationParams

    return GenerationParams(max_new_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
                            top_k=args.top_k, min_tokens_before_end=max(args.min_tokens_before_end, 0),
                            ras=not args.no_ras, seed=args.seed)


def read_reference_clip_noting(path: str):
    """The reference clip; one longer than 60 s is trimmed to its first 60 s (as the app does),
    with a note on stderr."""
    import sys

    from s2studio.audio import DEFAULT_MAX_REFERENCE_SECONDS, read_reference_clip

    samples, seconds = read_reference_clip(path)
    if seconds > DEFAULT_MAX_REFERENCE_SECONDS:
        print(f"note: {path} is {seconds:.1f} s long; using its first {DEFAULT_MAX_REFERENCE_SECONDS:g} s as the "
              "reference (as the app does); the transcript should be of those seconds", file=sys.stderr)
    return samples
