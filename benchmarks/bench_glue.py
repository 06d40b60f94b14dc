#!/usr/bin/env python3
"""The non-matmul ops of one decode layer ("glue": RMSNorms, the QKV split, QK-norm, RoPE,
transposes, residual adds, SiLU product) per layer call: torch's ops against the C glue
(engine/kernels/glue.py), at the full-size model's shapes, no model file needed.

    python benchmarks/bench_glue.py [--rows 1,4] [--rounds 7] [--calls 200] [--threads 2]

Each case runs ``transformer.layer_forward`` over a context whose matmuls and attention return
tensors made beforehand (the right shapes, random values), so what is timed is exactly the
layer's glue as the engine runs it; then the single ops (``rms_norm`` of a row, ``split_qkv`` +
``apply_rope``) on their own. Shapes: the S2 Pro's Slow-AR and Fast-AR layers are alike (width
2560, 32 query heads, 8 KV heads of 128, QK-norm, FFN 9728); 1 row is a decode step or a
Fast-AR call, 4 rows a small batched step or a short prompt. The two settings are timed in
alternation in every round and the best of ``--rounds`` is kept, so a busy moment slows both;
the machine may be shared: the load average is printed.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import s2studio  # noqa: E402,F401  (first: it sets OMP_WAIT_POLICY before torch starts)
import torch  # noqa: E402

from s2studio.engine.kernels import backend, glue  # noqa: E402
from s2studio.engine.kernels.backend import KernelSettings  # noqa: E402
from s2studio.engine.model import transformer  # noqa: E402
from s2studio.engine.model.config import TransformerConfig  # noqa: E402
from s2studio.engine.model.weights import LayerWeights  # noqa: E402
from s2studio.engine.threads import set_threads  # noqa: E402

DIM, H, HKV, HD, FFN = 2560, 32, 8, 128, 9728
CFG = TransformerConfig(dim=DIM, n_layer=1, n_head=H, n_kv_head=HKV, head_dim=HD, rope_base=1e6,
                        norm_eps=1e-6, qk_norm=True)


class CannedContext(transformer.DynamicContext):
    """A one-request context whose matmuls and attention hand back tensors made beforehand."""

    def __init__(self, n: int, outs: dict[int, torch.Tensor], attn: torch.Tensor):
        super().__init__(transformer.RopeTable(HD, CFG.rope_base), 70, n, None)
        self.outs, self.attn = outs, attn

    def linear(self, x, w):
        return self.outs[id(w)]

    def attend(self, layer, q, k, v):
        return self.attn


def layer_case(n: int, gen: torch.Generator):
    def norm_w(d):
        return 1 + 0.1 * torch.randn(d, generator=gen)

    lw = LayerWeights(attention_norm=norm_w(DIM), wqkv=torch.empty((H + 2 * HKV) * HD, 1), wo=torch.empty(DIM, 1),
                      ffn_norm=norm_w(DIM), w1=torch.empty(FFN, 1), w3=torch.empty(FFN, 1), w2=torch.empty(DIM, 1),
                      q_norm=norm_w(HD), k_norm=norm_w(HD))
    outs = {id(w): torch.randn(n, w.shape[0], generator=gen) for w in (lw.wqkv, lw.wo, lw.w1, lw.w3, lw.w2)}
    ctx = CannedContext(n, outs, torch.randn(n, H * HD, generator=gen))
    x = torch.randn(n, DIM, generator=gen)
    return lambda: transformer.layer_forward(x, lw, CFG, ctx, 0)


def op_cases(n: int, gen: torch.Generator) -> dict[str, callable]:
    x = torch.randn(n, DIM, generator=gen)
    w = 1 + 0.1 * torch.randn(DIM, generator=gen)
    qkv = torch.randn(n, (H + 2 * HKV) * HD, generator=gen)
    lw = LayerWeights(attention_norm=w, wqkv=None, wo=None, ffn_norm=w, w1=None, w3=None, w2=None,
                      q_norm=1 + 0.1 * torch.randn(HD, generator=gen), k_norm=1 + 0.1 * torch.randn(HD, generator=gen))
    cos, sin = transformer.RopeTable(HD, CFG.rope_base).get(70, n, torch.device("cpu"))
    return {
        f"rms_norm ({n}x{DIM})": lambda: transformer.rms_norm(x, w, CFG.norm_eps),
        f"qkv split+norm+rope ({n} rows)": lambda: transformer.qkv_heads(qkv, lw, CFG, cos, sin),
    }


def best_of(fn, calls: int) -> float:
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t) / calls


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="1,4")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    set_threads(a.threads)
    gen = torch.Generator().manual_seed(0)
    print(f"load average {os.getloadavg()[0]:.1f}; C glue built: {glue.built()}")
    cases = {}
    for n in (int(r) for r in a.rows.split(",")):
        cases[f"layer glue ({n} rows)"] = layer_case(n, gen)
        cases.update(op_cases(n, gen))
    settings = {"torch": KernelSettings(glue="torch"), "c": KernelSettings(glue="c")}
    best = {(c, s): float("inf") for c in cases for s in settings}
    for _ in range(a.rounds):
        for name, fn in cases.items():
            for sname, st in settings.items():
                with backend.configured(st):
                    fn()  # warm
                    best[name, sname] = min(best[name, sname], best_of(fn, a.calls))
    print(f"{'case':<34} {'torch us':>9} {'C us':>8} {'C/torch':>8}")
    for name in cases:
        t, c = best[name, "torch"] * 1e6, best[name, "c"] * 1e6
        print(f"{name:<34} {t:>9.1f} {c:>8.1f} {c / t:>8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
