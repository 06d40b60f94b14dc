"""Where each part of the Dual-AR runs: a pure function of the request and the machine.

``gpu_layers`` follows s2.cpp's ``-ngl``: -1 = every layer on the chosen GPU, 0 = CPU only,
N = Slow-AR layers 0..N-1 on the GPU and the rest on the CPU. The Fast-AR (small, run 9 times
per frame) goes to the GPU when any layer does. The tied embedding/head table is held once: on
the GPU when any layer is there (the head is the largest single matmul), otherwise on the CPU.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from s2studio.engine.modes import WeightDtype
from s2studio.errors import InputError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Placement:
    layer_devices: tuple[str, ...]  # one per Slow-AR layer
    head_device: str  # embeddings (tied head), codebook embeddings, final norm
    fast_device: str
    dtype: torch.dtype  # working dtype of the weights that are not kept quantized
    # CPU parts keep quantized GGUF blocks (Q8_0, K-quants) and compute on them (engine/kernels),
    # when a kernel exists for the block type; everything else is dequantized to ``dtype``.
    quantized: bool = False

    @property
    def uses_gpu(self) -> bool:
        return self.fast_device != "cpu"

    @property
    def gpu_layer_count(self) -> int:
        return sum(d != "cpu" for d in self.layer_devices)


def normalize_device(device: str) -> str:
    """'cuda' → 'cuda:0'; validates the spelling. Does not check that the device exists."""
    d = device.strip().lower()
    if d in ("cpu", "mps"):
        return d
    if d == "cuda":
        return "cuda:0"
    if d.startswith("cuda:") and d[5:].isdigit():
        return d
    raise InputError(f"Unknown device '{device}'. Use cpu, cuda, cuda:N or mps.")


def choose_dtype(device: str, weights_are_f32: bool, requested: str = "auto") -> torch.dtype:
    """Working dtype for the weights.

    auto: float32 when the file itself stores float32 weights (test and reference models:
    exact parity), otherwise float16 (and quantized blocks stay quantized on the CPU, see
    ``plan_placement``). ``quantized`` is auto without the float32 case. ggml multiplies F16 weights with fp16-rounded
    activations too, so f16 loses nothing against s2.cpp; on CPU torch's f16 GEMV is also
    faster than bf16 here (docs/performance.md). The residual stream always stays float32.
    """
    table = {WeightDtype.FLOAT32: torch.float32, WeightDtype.FLOAT16: torch.float16,
             WeightDtype.BFLOAT16: torch.bfloat16}
    requested = WeightDtype.parse(requested)  # already one where it came from EngineSettings
    if requested == WeightDtype.QUANTIZED:
        return torch.float16
    if requested != WeightDtype.AUTO:
        return table[requested]
    return torch.float32 if weights_are_f32 else torch.float16


def plan_placement(device: str, gpu_layers: int, n_layers: int, *, weights_are_f32: bool,
                   dtype: str = "auto") -> Placement:
    dev = normalize_device(device)
    if gpu_layers < -1:
        raise InputError(f"gpu_layers must be -1 (all), 0 (none) or a positive count, not {gpu_layers}")
    if dev == "cpu":
        if gpu_layers > 0:
            log.warning("gpu_layers=%d ignored: the device is the CPU", gpu_layers)
        n_gpu = 0
    else:
        n_gpu = n_layers if gpu_layers == -1 else min(gpu_layers, n_layers)
    layers = tuple(dev if i < n_gpu else "cpu" for i in range(n_layers))
    gpu_side = dev if n_gpu > 0 else "cpu"
    # auto keeps quantized blocks on the CPU: resident memory stays at the file's size and the
    # quantized GEMV reads half the bytes of a float16 copy (docs/performance.md).
    quantized = dtype == "quantized" or (dtype == "auto" and not weights_are_f32)
    return Placement(layers, gpu_side, gpu_side, choose_dtype(gpu_side, weights_are_f32, dtype), quantized)


def available_devices() -> list[tuple[str, str]]:
    """(device id, human description) for what torch reports on this machine."""
    out = [("cpu", "CPU")]
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            out.append((f"cuda:{i}", f"{p.name} ({p.total_memory / 2**30:.1f} GiB)"))
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        out.append(("mps", "Apple GPU (MPS)"))
    return out


def check_device_available(device: str) -> None:
    dev = normalize_device(device)
    if dev.startswith("cuda"):
        if not torch.cuda.is_available():
            raise InputError(f"Device {dev} was requested but this torch build has no usable CUDA GPU.")
        idx = int(dev.split(":")[1])
        if idx >= torch.cuda.device_count():
            raise InputError(f"Device {dev} does not exist: {torch.cuda.device_count()} CUDA GPU(s) found.")
    elif dev == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise InputError("Device mps (Apple GPU) was requested but is not available on this machine.")
