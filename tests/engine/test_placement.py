"""The GPU-layer placement plan is a pure function; the GPU paths run where a GPU exists."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import torch

from s2studio.errors import InputError
from s2studio.engine.placement import available_devices, check_device_available, normalize_device, plan_placement

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden"


def test_cpu_puts_everything_on_the_cpu_and_ignores_gpu_layers():
    for ngl in (-1, 0, 5):
        p = plan_placement("cpu", ngl, 4, weights_are_f32=False)
        assert p.layer_devices == ("cpu",) * 4 and p.head_device == p.fast_device == "cpu"
        assert not p.uses_gpu and p.gpu_layer_count == 0


def test_all_layers_on_gpu_with_minus_one():
    p = plan_placement("cuda", -1, 4, weights_are_f32=False)
    assert p.layer_devices == ("cuda:0",) * 4
    assert p.head_device == p.fast_device == "cuda:0" and p.dtype == torch.float16


def test_partial_split_and_fast_ar_follows_any_gpu_layer():
    p = plan_placement("cuda:1", 2, 5, weights_are_f32=False)
    assert p.layer_devices == ("cuda:1", "cuda:1", "cpu", "cpu", "cpu")
    assert p.fast_device == "cuda:1" and p.gpu_layer_count == 2
    p = plan_placement("mps", 99, 3, weights_are_f32=False)
    assert p.layer_devices == ("mps",) * 3


def test_zero_gpu_layers_keeps_everything_on_cpu():
    p = plan_placement("cuda", 0, 4, weights_are_f32=False)
    assert p.layer_devices == ("cpu",) * 4 and p.fast_device == "cpu" and not p.uses_gpu


def test_dtype_choice():
    assert plan_placement("cpu", 0, 1, weights_are_f32=True).dtype == torch.float32
    assert plan_placement("cpu", 0, 1, weights_are_f32=False).dtype == torch.float16
    assert plan_placement("cpu", 0, 1, weights_are_f32=False, dtype="bf16").dtype == torch.bfloat16
    with pytest.raises(InputError):
        plan_placement("cpu", 0, 1, weights_are_f32=False, dtype="int3")


def test_quantized_blocks_stay_quantized_unless_a_float_dtype_is_asked():
    assert plan_placement("cpu", 0, 1, weights_are_f32=False).quantized
    assert not plan_placement("cpu", 0, 1, weights_are_f32=True).quantized  # parity models
    assert plan_placement("cpu", 0, 1, weights_are_f32=True, dtype="quantized").quantized
    q = plan_placement("cpu", 0, 1, weights_are_f32=False, dtype="quantized")
    assert q.quantized and q.dtype == torch.float16  # for whatever has no kernel
    for dtype in ("float16", "bfloat16", "float32"):
        assert not plan_placement("cpu", 0, 1, weights_are_f32=False, dtype=dtype).quantized


def test_device_spelling():
    assert normalize_device("CUDA") == "cuda:0" and normalize_device("cuda:2") == "cuda:2"
    for bad in ("gpu", "cuda:x", "vulkan"):
        with pytest.raises(InputError):
            normalize_device(bad)
    with pytest.raises(InputError):
        plan_placement("cpu", -2, 3, weights_are_f32=True)


def test_reported_devices_and_missing_gpu_message():
    devs = dict(available_devices())
    assert devs["cpu"] == "CPU"
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match="no usable CUDA"):
            check_device_available("cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("gpu_layers", [-1, 1])
def test_cuda_matches_cpu_teacher_forced(gpu_layers):
    from s2studio.engine.model.loader import load_dual_ar
    from s2studio.engine.trace import teacher_forced_trace

    d = GOLDEN / "clone_f32_qknorm"
    args = [np.load(d / "dumps" / f"{n}.npy") for n in ("prompt_tokens", "codes", "main_tokens")]
    cpu = teacher_forced_trace(load_dual_ar(d / "model.gguf")[0], *args)
    gpu_model, plan = load_dual_ar(d / "model.gguf", device="cuda", gpu_layers=gpu_layers)
    assert plan.gpu_layer_count == (3 if gpu_layers == -1 else 1)
    gpu = teacher_forced_trace(gpu_model, *args)
    for name in cpu:
        np.testing.assert_allclose(gpu[name], cpu[name], atol=2e-2, rtol=0)
