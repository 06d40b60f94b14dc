"""A layer's small float32 ops in C (``_glue.c``, built into the ``_qdot`` extension), for
tensors on the CPU: RMSNorm, the fused QKV projection's split with the QK-norm and RoPE (and the
transposes attention wants), and the residual add before the FFN's norm.

Why: at one row (a decode step, each Fast-AR call) these are ~25 torch calls per layer, each
3-30 µs of dispatch for a few KB of data: ~70 ms of a ~400 ms full-size frame, ~18 % (docs/
performance.md, "The decode layer's glue in C"). Here each group is one call (~1-3 µs).

The same float32 operations as the torch ops they replace (``transformer.rms_norm``,
``split_qkv`` + ``apply_rope``), in the same order, no fused multiply-add. RoPE, the split, the
adds and the layouts are bit-identical to torch's; RMSNorm is not quite: torch's float32
``sqrt`` on the CPU is MKL's vector square root (within 1 ulp, not correctly rounded: 14 % of
its results are 1 ulp off, measured), the kernel's is C's ``sqrtf`` (IEEE, correctly rounded, as
s2.cpp's ggml takes it), so a normed value may differ from torch's by up to ~3 ulps
(tests/engine/test_glue_kernel.py: bit for bit against the formula with an IEEE square root,
within 4 ulps of torch's). Hence: while switched on, the kernel is THE RMSNorm of every CPU path
(prefill, decode, batched, the QK-norm, the final norms; a layout it cannot read is copied
first, never sent to torch), so a row gets the same bits on each.

Switch: ``backend.KernelSettings.glue`` (``S2_GLUE=torch`` turns it off); where the extension
is not built, or for a tensor it does not take (another device or dtype, a layout it does not
read), the callers in ``transformer`` use torch.
"""

from __future__ import annotations

import torch

from s2studio.engine.kernels import backend
from s2studio.engine.modes import GlueKernel

try:
    from s2studio.engine.kernels import _qdot
except ImportError:  # no compiler at install time: intdot says why
    _qdot = None

_OK = _qdot is not None and hasattr(_qdot, "qkv_heads")
MAX_HEAD_DIM = _qdot.GLUE_MAX_HEAD_DIM if _OK else 0
_F32 = torch.float32


def built() -> bool:
    """The extension has the kernels (whatever the settings say)."""
    return _OK


def enabled() -> bool:
    """Built and not switched off (``KernelSettings.glue``)."""
    return _OK and backend.settings().glue == GlueKernel.C


# The checks below run several times per layer and step: plain attribute reads (``device.type``
# and ``is_contiguous`` cost more than ``is_cpu`` and strides).

def _vector_ok(w: torch.Tensor, d: int) -> bool:
    return w.dtype is _F32 and w.is_cpu and w.shape == (d,) and w.stride() == (1,)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor | None:
    """``transformer.rms_norm`` of x (..., d) float32 on the CPU over its last dimension, w (d,)
    float32: a new contiguous tensor of x's shape (rows read in place where the kernel can: a
    2-D tensor with contiguous rows at any distance, any contiguous tensor; else from a
    contiguous copy). None where it does not apply (switched off, another device or dtype)."""
    if not enabled() or x.dtype is not _F32 or not x.is_cpu:
        return None
    d = x.shape[-1]
    if not _vector_ok(w, d):
        return None
    if x.dim() == 2 and x.stride(1) == 1:
        rows, step = x.shape[0], x.stride(0)
    else:
        x = x.contiguous()  # (a view of heads within wider rows: split_qkv's torch path)
        rows, step = x.numel() // d if d else 0, d
    out = torch.empty(x.shape, dtype=_F32)
    if rows:
        _qdot.rms_norm(x.data_ptr(), step, w.data_ptr(), out.data_ptr(), d, rows, d, eps)
    return out


def add_rms_norm(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, eps: float
                 ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(x + y, ``rms_norm(x + y, w, eps)``) for contiguous (n, d) float32 x, y on the CPU, in one
    call: the residual add of the attention and the FFN's norm. None where it does not apply."""
    if not enabled():
        return None
    if not (x.dtype is _F32 and y.dtype is _F32 and x.is_cpu and y.is_cpu and x.dim() == 2
            and y.shape == x.shape and x.is_contiguous() and y.is_contiguous()):
        return None
    n, d = x.shape
    if not _vector_ok(w, d):
        return None
    hsum, f = torch.empty(n, d, dtype=_F32), torch.empty(n, d, dtype=_F32)
    _qdot.add_rms_norm(x.data_ptr(), y.data_ptr(), w.data_ptr(), hsum.data_ptr(), f.data_ptr(), n, d, eps)
    return hsum, f


def qkv_heads(qkv: torch.Tensor, n_head: int, n_kv_head: int, head_dim: int, q_norm: torch.Tensor | None,
              k_norm: torch.Tensor | None, eps: float, cos: torch.Tensor, sin: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """``transformer.qkv_heads`` in one call: the fused projection's rows qkv (n, (H + 2·Hkv)·hd)
    float32 on the CPU (rows contiguous at any distance) → q (H, n, hd) (the transpose of a
    contiguous (n, H, hd)), k, v (Hkv, n, hd) contiguous, with the QK-norm where ``q_norm`` and
    ``k_norm`` are given and RoPE of row r at cos/sin row r ((n, hd/2), contiguous). None where
    it does not apply (use torch)."""
    if not enabled():
        return None
    n, width = qkv.shape
    hd, h, hkv = head_dim, n_head, n_kv_head
    half = hd // 2
    if not (qkv.dtype is _F32 and qkv.is_cpu and qkv.stride(1) == 1 and width == (h + 2 * hkv) * hd
            and 0 < hd <= MAX_HEAD_DIM and hd % 2 == 0):
        return None
    for t in (cos, sin):
        if not (t.dtype is _F32 and t.is_cpu and t.shape == (n, half) and t.stride() == (half, 1)):
            return None
    qn = kn = 0
    if q_norm is not None:
        if not (_vector_ok(q_norm, hd) and k_norm is not None and _vector_ok(k_norm, hd)):
            return None
        qn, kn = q_norm.data_ptr(), k_norm.data_ptr()
    q = torch.empty(n, h, hd, dtype=_F32)
    k = torch.empty(hkv, n, hd, dtype=_F32)
    v = torch.empty(hkv, n, hd, dtype=_F32)
    rc = _qdot.qkv_heads(qkv.data_ptr(), qkv.stride(0), n, h, hkv, hd, qn, kn, eps, cos.data_ptr(), sin.data_ptr(),
                         q.data_ptr(), k.data_ptr(), v.data_ptr())
    return (q.transpose(0, 1), k, v) if rc == 0 else None
