"""One decode path: the dynamic, batched and static steps all run the one layer function, and the
shared embedding gives the numbers of the plain per-column formula."""

from __future__ import annotations

import math
import pathlib

import numpy as np
import torch

from s2studio.engine.batching import FrameBatcher
from s2studio.engine.model import transformer
from s2studio.engine.model.generate import GenerationParams, generate_codes
from s2studio.engine.model.loader import load_dual_ar

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden"
IM_END = 514  # tiny tokenizer's <|im_end|>
PROMPT = np.load(GOLDEN / "tts_f32" / "dumps" / "prompt_tokens.npy")


def test_every_decode_path_runs_the_one_layer_function(monkeypatch):
    """A second copy of the layer maths (a path that stops calling ``layer_forward``) fails here."""
    m = load_dual_ar(GOLDEN / "tts_f32" / "model.gguf")[0]
    seen: list[str] = []
    real = transformer.layer_forward

    def counted(x, lw, cfg, ctx, layer):
        seen.append(type(ctx).__name__)
        return real(x, lw, cfg, ctx, layer)

    monkeypatch.setattr(transformer, "layer_forward", counted)
    gp = GenerationParams(max_new_tokens=3, min_tokens_before_end=3, seed=1)
    per_take = {}
    for mode in ("off", "eager"):
        seen.clear()
        per_take[mode] = generate_codes(m, PROMPT, gp, im_end_id=IM_END, cuda_graphs=mode)
        kinds = set(seen)
        assert kinds == ({"DynamicContext"} if mode == "off" else {"DynamicContext", "StaticContext"}), kinds
    seen.clear()
    batcher = FrameBatcher(m, IM_END)
    batched = np.stack([f.codes for f in batcher.frames(PROMPT, gp)], axis=1)
    batcher.wait_idle()
    assert "BatchedContext" in set(seen)
    np.testing.assert_array_equal(batched, per_take["off"])


def test_embed_equals_adding_the_codebooks_to_semantic_columns_only():
    """The branch-free embedding against the plain formula, bit for bit: a text-only prompt
    (no column semantic), the golden prompt, and a semantic decode column."""
    m = load_dual_ar(GOLDEN / "clone_f32_qknorm" / "model.gguf")[0]
    c, w = m.cfg, m.w

    def plain(tokens: torch.Tensor) -> torch.Tensor:
        rows = []
        for col in tokens.T:
            x = w.embeddings[int(col[0])].float()
            if c.semantic_begin_id <= int(col[0]) <= c.semantic_end_id:
                acc = w.codebook_embeddings[int(col[1])].float()
                for k in range(1, c.num_codebooks):
                    acc = acc + w.codebook_embeddings[int(col[k + 1]) + k * c.codebook_size].float()
                x = x + acc
                if c.scale_codebook_embeddings:
                    x = x * torch.tensor(np.float32(1.0 / math.sqrt(c.num_codebooks + 1)))
            rows.append(x)
        return torch.stack(rows)

    clone = torch.from_numpy(np.load(GOLDEN / "clone_f32_qknorm" / "dumps" / "prompt_tokens.npy").astype(np.int64))
    text_only = clone[:, ~((clone[0] >= c.semantic_begin_id) & (clone[0] <= c.semantic_end_id))]
    column = torch.tensor([[c.semantic_begin_id + 7]] + [[(3 * k) % c.codebook_size] for k in range(10)])
    assert text_only.shape[1] > 0 and text_only.shape[1] < clone.shape[1]
    for tokens in (text_only, clone, column):
        assert torch.equal(m.embed(tokens), plain(tokens))
