"""``s2studio trace``: teacher-force a model and dump logits in the golden layout."""

from __future__ import annotations

import argparse
import os

import numpy as np

from s2studio.engine.modes import WeightDtype
from s2studio.errors import InputError


def _load_npy(path: str, what: str) -> np.ndarray:
    try:
        return np.load(path)
    except (OSError, ValueError) as exc:
        raise InputError(f"{what} file {path}: cannot be read as a .npy array ({exc})") from None


def run(args: argparse.Namespace) -> int:
    from s2studio.engine.model.loader import load_dual_ar
    from s2studio.engine.trace import teacher_forced_trace
    from s2studio.engine.threads import set_threads

    set_threads(args.threads)
    model, _ = load_dual_ar(args.model, device=args.device, dtype=args.dtype,
                            kv_round_f16=not args.no_kv_f16)
    prompt = _load_npy(args.prompt, "prompt")
    codes = _load_npy(args.codes, "codes")
    main_tokens = _load_npy(args.main_tokens, "main-tokens")
    out = teacher_forced_trace(model, prompt, codes, main_tokens)
    os.makedirs(args.out, exist_ok=True)
    for name, arr in out.items():
        np.save(os.path.join(args.out, f"{name}.npy"), arr)
    print(f"wrote {', '.join(f'{k}.npy {list(v.shape)}' for k, v in out.items())} to {args.out}")
    return 0


def register(subparsers) -> None:
    from s2studio.cli import add_log_level

    p = subparsers.add_parser("trace", help="(developer) teacher-force a model and dump its logits",
                              description="Teacher-force a model on a prompt and given frames; write "
                                          "slow_logits.npy, slow_hidden.npy and fast_logits.npy (float32).")
    p.add_argument("-m", "--model", required=True, help="GGUF model file")
    p.add_argument("--prompt", required=True, help="int32 [11, T] prompt matrix (.npy)")
    p.add_argument("--codes", required=True, help="int32 [10, F] codes to feed (.npy)")
    p.add_argument("--main-tokens", required=True, help="int32 [F] Slow-AR tokens to feed (.npy)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps (default cpu)")
    p.add_argument("--dtype", default=WeightDtype.AUTO.value,  # no choices: f16, f32, bf16 are accepted too
                   help=f"weights dtype: {WeightDtype.listing()}")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0 = all cores)")
    p.add_argument("--no-kv-f16", action="store_true",
                   help="do not round the KV cache to fp16 (s2.cpp does)")
    add_log_level(p)
    p.set_defaults(handler=run)
