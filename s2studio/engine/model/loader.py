"""Open a model file and build the Dual-AR on the planned devices."""

from __future__ import annotations

import logging
import os
from typing import Callable

from s2studio.engine.model.config import read_model_config
from s2studio.engine.model.dual_ar import DualAR
from s2studio.errors import ModelFileError
from s2studio.engine.model.gguf_file import GGUFFile
from s2studio.engine.placement import Placement, check_device_available, plan_placement
from s2studio.engine.model.weights import load_weights

log = logging.getLogger(__name__)


def load_dual_ar(path: str | os.PathLike[str], *, device: str = "cpu", gpu_layers: int = -1,
                 dtype: str = "auto", kv_round_f16: bool | None = None,
                 progress: Callable[[float], None] | None = None,
                 gguf: GGUFFile | None = None) -> tuple[DualAR, Placement]:
    """Load the transformer. ``kv_round_f16`` defaults to on for float32 weights on the CPU
    (s2.cpp parity: its KV cache is F16) and is moot otherwise."""
    f = gguf or GGUFFile(path)
    cfg = read_model_config(f)
    if cfg.fast is None:
        raise ModelFileError(f.path, "the file has no Fast-AR (architecture is not 'fish-speech')")
    check_device_available(device)
    weights_f32 = all(i.type_name == "F32" for n, i in f.tensors.items()
                      if not n.startswith("c.") and len(i.shape) == 2)
    plan = plan_placement(device, gpu_layers, cfg.slow.n_layer, weights_are_f32=weights_f32, dtype=dtype)
    log.info("placement: %d/%d Slow-AR layers on %s, Fast-AR on %s, weights %s",
             plan.gpu_layer_count, cfg.slow.n_layer, plan.layer_devices[0] if plan.gpu_layer_count else "cpu",
             plan.fast_device, str(plan.dtype).replace("torch.", ""))
    quantized_types: frozenset[str] = frozenset()
    if plan.quantized and plan.gpu_layer_count < cfg.slow.n_layer:
        from s2studio.engine.kernels import backend
        from s2studio.engine.kernels import common as kcommon
        from s2studio.engine.kernels.qmatrix import supported_types

        in_file = {i.type_name for n, i in f.tensors.items() if i.type_name in supported_types()}
        if kcommon.available():
            from s2studio.engine.kernels.qmatrix import warm_up

            warm_up(in_file)  # numba compiles here (first start only), not in the first prefill
        else:
            log.warning("quantized CPU kernels unavailable (%s): dequantizing the weights to %s, which "
                        "takes about twice the memory", kcommon.IMPORT_ERROR, str(plan.dtype).replace("torch.", ""))
        # auto: keep the blocks unless this machine runs them clearly slower than float16
        quantized_types = backend.keep_quantized(in_file, measure=dtype == "auto")
        if quantized_types:
            log.info("CPU weights kept quantized: %s", ", ".join(sorted(quantized_types)))
        if in_file:
            log.info("%s", backend.describe(in_file, kept=quantized_types))  # the one line that says which path
    weights = load_weights(f, cfg, dtype=plan.dtype, slow_layer_devices=list(plan.layer_devices),
                           head_device=plan.head_device, fast_device=plan.fast_device, progress=progress,
                           quantized_types=quantized_types)
    round_f16 = kv_round_f16 if kv_round_f16 is not None else True
    model = DualAR(cfg, weights, kv_round_f16=round_f16, source=f.path)
    check_first_step_is_finite(model)
    return model, plan


def check_first_step_is_finite(model: DualAR) -> None:
    """One Slow-AR and one Fast-AR step on a minimal prompt, at load: NaN or infinite weights
    (in any layer matrix, norm or head row) make every output non-finite, and a server would
    otherwise report itself healthy while every request fails. Costs one decode step.
    Weights that only some tokens reach (one embedding row) are caught during generation."""
    import torch

    from s2studio.engine.model.generate import check_finite

    cfg = model.cfg
    tokens = torch.zeros((cfg.num_codebooks + 1, 1), dtype=torch.int64)
    tokens[0, 0] = cfg.semantic_begin_id  # a semantic token: the codebook embeddings are used too
    model.new_cache(1)
    hidden = model.forward_slow(tokens)
    check_finite(model, model.sampled_logits(hidden, cfg.semantic_end_id), "Slow-AR logits", 0,
                 when="while checking it at load")
    _, fast = model.fast_start(hidden, 0)
    check_finite(model, fast, "Fast-AR logits", 0, when="while checking it at load")
    model.drop_caches()  # generation sizes its own
