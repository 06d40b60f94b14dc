"""Memory that must stay linear in the prompt length (a long text once grew to 24 GB).

The prefill used to materialise every query × key attention score of the prompt at once
(H·T² floats, plus a T×T mask and its copies). These tests run the real tiny model; the memory
test runs in a subprocess so its peak resident size (ru_maxrss) is its own.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest
import torch

from s2studio.engine.model import transformer
from s2studio.engine.model.loader import load_dual_ar
from s2studio.engine.model.transformer import KVCache, attend

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden"
ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_blocked_attention_computes_what_one_block_does():
    torch.manual_seed(0)
    h, hkv, hd, n_old, n = 4, 2, 16, 37, 50

    class Cfg:
        n_kv_head, head_dim = hkv, hd

    cache = KVCache(Cfg, n_old + n, [torch.device("cpu")])
    cache.store(0, 0, torch.randn(hkv, n_old, hd), torch.randn(hkv, n_old, hd))
    q, k, v = torch.randn(h, n, hd), torch.randn(hkv, n, hd), torch.randn(hkv, n, hd)
    for pos0, c in ((0, None), (n_old, cache)):
        whole = attend(q, k, v, c, 0, pos0, block=n)
        for block in (1, 7, 49):
            torch.testing.assert_close(attend(q, k, v, c, 0, pos0, block=block), whole, atol=1e-6, rtol=0)


@pytest.mark.parametrize("case", ["tts_f32", "clone_f32_qknorm"])
def test_blocked_prefill_keeps_golden_parity(case, monkeypatch):
    """s2.cpp prefills in one graph; with blocks of a few query rows we still match its dumps at
    the golden tolerance (the same one test_dual_ar_golden uses)."""
    monkeypatch.setattr(transformer, "ATTENTION_BLOCK_BYTES", 4 * 4 * 64 * 5)  # ~5 rows a block
    monkeypatch.setattr(transformer, "ATTENTION_MIN_BLOCK_ROWS", 1)
    m = load_dual_ar(GOLDEN / case / "model.gguf")[0]
    prompt = torch.from_numpy(np.load(GOLDEN / case / "dumps" / "prompt_tokens.npy").astype(np.int64))
    assert transformer.attention_query_block(m.cfg.slow.n_head, prompt.shape[1]) < prompt.shape[1] // 4
    m.new_cache(prompt.shape[1] + 1)
    layers: list[torch.Tensor] = []
    m.forward_slow(prompt, collect=layers)
    np.testing.assert_allclose(torch.stack(layers).numpy(), np.load(GOLDEN / case / "dumps" / "slow_prefill_layer_out.npy"),
                               atol=1e-4, rtol=0)


PREFILL_PEAK = r"""
import resource, sys
import numpy as np, torch
from s2studio.engine.model.loader import load_dual_ar
m = load_dual_ar(sys.argv[1])[0]
n = int(sys.argv[2])
tokens = torch.zeros((m.cfg.num_codebooks + 1, n), dtype=torch.int64)
tokens[0] = torch.arange(n) % 500  # text ids of the tiny vocabulary
m.new_cache(n + 1)
m.forward_slow(tokens[:, :8])  # warm up: everything but the long prefill is allocated
m.cache.reset()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
m.forward_slow(tokens)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print((after - before) // 1024)
"""


def test_long_prefill_memory_is_linear_not_quadratic():
    """A 4000-position prefill on the tiny model (its whole context) needs a few MB of
    activations; the old T×T attention took ~4·4000²·4 bytes = 256 MB per copy (scores, masked
    scores, softmax: ~800 MB)."""
    r = subprocess.run([sys.executable, "-c", PREFILL_PEAK, str(GOLDEN / "tts_f32" / "model.gguf"), "4000"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    grew_mb = int(r.stdout.strip())
    assert grew_mb < 120, f"prefill of 4000 positions raised the peak RSS by {grew_mb} MB"
