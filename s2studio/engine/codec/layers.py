"""Codec building blocks (docs/spec/codec.md §3), written once for both one-shot and streaming use.

Every block is causal, so a streaming decoder only has to remember a short tail per block:
- a stride-1 causal conv needs the last (K-1)*dilation input samples;
- a transposed conv needs the last ceil(K/stride)-1 input frames (the ones whose kernels
  still overlap the next output);
- a windowed-attention layer needs the keys/values (after RoPE) of the last window-1
  positions, plus the running position counter.

Each module's ``__call__(x, em, state)`` takes ``state=None`` for a one-shot call (the tails
are zeros, which is exactly the causal zero padding) or a dict that the module reads its tail
from and writes the new tail to, keyed by the module object itself. So streaming and one-shot
share every line of math, and "chunked == one-shot" follows from causality alone.

``em`` (emulate ggml) rounds the inputs of every F16 convolution (im2col has an F16 destination)
and of every F16-weight matmul to float16, which is what s2.cpp's CPU backend does (docs/spec/codec.md §9). It
is only meaningful in float32 and only used for parity tests.

Layouts: convs take channel-first (C, L); transformers and ConvNeXt MLPs work channel-last
(L, C). Both are plain 2-D tensors without a batch axis.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from s2studio.engine.codec import snake_kernel

Tensor = torch.Tensor

# Use the one-pass numba Snake on the CPU when numba is present (a switch for A/B benchmarks
# and tests; the torch form is the reference).
FUSED_SNAKE = True
# Run a one-output-channel conv as GEMM + shifted sums on the CPU (see CausalConv._conv); a
# switch for A/B benchmarks, oneDNN is the reference.
SINGLE_OUTPUT_GEMM = True


def r16(x: Tensor, em: bool) -> Tensor:
    """Round to float16 and back: what ggml does to an activation entering an F16 op."""
    if em and x.dtype == torch.float32:
        return x.to(torch.float16).to(torch.float32)
    return x


def _tail(state: dict | None, key: object, like: Tensor, rows: int, length: int) -> Tensor:
    t = state.get(key) if state is not None else None
    if t is None:
        return like.new_zeros((rows, length))
    return t


# From this many input frames on, a convolution beats the GEMM + overlap-add below on CPU
# (oneDNN's transposed conv: 26 vs 47 ms for 768->384 ch at 513 frames, 34 vs 58 ms for
# 384->192 at 4097; at 65 frames it loses, 47 vs 34 ms. Measured at full size, 2 threads).
TRANSCONV_CONV_MIN_LEN = 256
# On CPU, run those long transposed convs as stride-1 convolutions over the input, one output
# channel per (channel, phase) (CausalTransConv._polyphase), not as oneDNN's transposed conv,
# whose results depend on the thread count (1, 2 and 3 threads: three different roundings
# of the same decode, ~1e-7 apart); its forward convolutions and MKL's GEMMs in strict mode
# (MKL_CBWR, set in s2studio/__init__.py) do not. A switch for A/B benchmarks; the transposed
# conv is the reference.
POLYPHASE_TRANSCONV = True
# Output lengths up to which short dilated convs use im2col + matmul on CPU (see CausalConv).
SMALL_DILATED_LEN = 2048


class CausalConv:
    """``CausalConvNet``: left pad (K-1)*d+1-s zeros, right pad to complete the last stride."""

    def __init__(self, w: Tensor, b: Tensor, stride: int = 1, dilation: int = 1, groups: int = 1):
        self.w, self.b = w, b
        self.stride, self.dilation, self.groups = stride, dilation, groups
        self.k_eff = (w.shape[-1] - 1) * dilation + 1
        self.pad = self.k_eff - stride

    def __call__(self, x: Tensor, em: bool, state: dict | None = None) -> Tensor:
        if self.stride == 1:
            if self.pad == 0:
                xin = x  # a 1x1 conv: no context, so no padded copy of the input
            elif state is None:
                xin = F.pad(x, (self.pad, 0))
            else:
                xin = torch.cat([_tail(state, self, x, x.shape[0], self.pad), x], dim=1)
                state[self] = xin[:, xin.shape[1] - self.pad:].clone()
        elif state is not None:
            # Chunked encoder: every chunk is a whole number of strides, so the right padding
            # is never needed and the left context is the last K_eff - s input samples.
            if x.shape[1] % self.stride:
                raise ValueError("a chunk for a strided conv must be a multiple of its stride")
            xin = torch.cat([_tail(state, self, x, x.shape[0], self.pad), x], dim=1)
            state[self] = xin[:, xin.shape[1] - self.pad:].clone()
        else:
            length = x.shape[1]
            n_frames = (length - self.k_eff + self.pad) / self.stride + 1
            extra = (math.ceil(n_frames) - 1) * self.stride + (self.k_eff - self.pad) - length
            xin = F.pad(x, (self.pad, max(0, extra)))
        return self._conv(xin, em)

    def after_snake(self, snake: Snake, x: Tensor, em: bool, state: dict | None = None) -> Tensor:
        """``self(snake(x))``, with the fused Snake writing straight into the padded input.

        Saves the padding copy (a full pass over the activation) where the fused kernel
        applies; the values are the same as ``self(snake(x), ...)``.
        """
        if self.stride != 1 or self.pad == 0 or not snake.fusable(x):
            return self(snake(x), em, state)
        xin = torch.empty((x.shape[0], self.pad + x.shape[1]), dtype=x.dtype)
        tail = state.get(self) if state is not None else None
        if tail is None:
            xin[:, : self.pad].zero_()
        else:
            xin[:, : self.pad].copy_(tail)
        snake.into(x, xin, self.pad)
        if state is not None:
            state[self] = xin[:, xin.shape[1] - self.pad:].clone()
        return self._conv(xin, em)

    def _conv(self, xin: Tensor, em: bool) -> Tensor:
        xin = r16(xin, em)
        if self.w.shape[-1] == 1 and self.groups == 1 and self.stride == 1:
            # A 1x1 conv is a GEMM; oneDNN's conv path for it was 2-2.7x slower on CPU (e.g.
            # 96 ch x 32768 samples: 14 ms vs 6.6 ms) and it runs after every residual unit.
            return torch.addmm(self.b[:, None], self.w[:, :, 0], xin)
        if (SINGLE_OUTPUT_GEMM and self.w.shape[0] == 1 and self.w.shape[-1] > 1 and self.groups == 1
                and self.stride == 1 and xin.device.type == "cpu"):
            # One output channel (the decoder's last conv, 96 -> 1 at full rate): oneDNN reorders
            # the whole input for it (a copy as long as the conv). As one GEMM instead, every tap
            # k's row of (K, Cin) @ (Cin, Lin) is the input's contribution shifted by k·d;
            # summing the K shifted rows is cheap (1-D).
            taps = torch.mm(self.w[0].t(), xin)  # (K, Lin)
            n = xin.shape[1] - self.k_eff + 1
            y = taps[0, :n] + self.b[0]
            for k in range(1, self.w.shape[-1]):
                y += taps[k, k * self.dilation:k * self.dilation + n]
            return y[None]
        if (self.dilation > 1 and self.groups == 1 and self.stride == 1 and xin.device.type == "cpu"
                and xin.shape[1] - self.k_eff + 1 <= SMALL_DILATED_LEN):
            # PyTorch's CPU conv falls back to a very slow reference kernel
            # (slow_conv_dilated2d) for short dilated inputs, i.e. exactly the streaming chunks;
            # an explicit im2col + matmul (what ggml does) is 10-100x faster there.
            k = self.w.shape[-1]
            cols = xin.unfold(1, self.k_eff, 1)[:, :, :: self.dilation]  # (C, Lout, K)
            cols = cols.permute(0, 2, 1).reshape(xin.shape[0] * k, -1)
            return torch.addmm(self.b[:, None], self.w.reshape(self.w.shape[0], -1), cols)
        y = F.conv1d(xin[None], self.w, self.b, stride=self.stride,
                     dilation=self.dilation, groups=self.groups)
        return y[0]


class CausalTransConv:
    """``CausalTransConvNet``: conv_transpose1d, then crop K - s samples from the right.

    F32 in s2.cpp (the kernel is upcast), so no F16 rounding here even when emulating.
    """

    def __init__(self, w: Tensor, b: Tensor, stride: int):
        self.w, self.b, self.stride = w, b, stride
        k = w.shape[-1]
        # (Cout·K, Cin) view of the (Cin, Cout, K) weight, for the GEMM form of the op.
        self.w_t = w.permute(1, 2, 0).reshape(-1, w.shape[0]).contiguous()
        # Earlier input frames whose kernels still reach the next chunk's outputs.
        self.hist = max(0, -(-k // stride) - 1)
        self._phase_w: Tensor | None = None  # the polyphase weight, made at first use

    def _polyphase(self, x: Tensor) -> Tensor:
        """Uncropped conv_transpose1d as one stride-1 conv1d: with the kernel zero-padded to
        r·s taps, output sample t·s + p is sum_i sum_c x[c, t - i] · w[c, o, i·s + p], i.e. a
        conv of the input (r - 1 zeros each side) with r taps and Cout·s output channels
        (channel o, phase p), the phases then interleaved. The same products and no more than
        the transposed conv; the sums in another order (within ~1e-6 of it, relative)."""
        s = self.stride
        cin, cout, k = self.w.shape
        r = -(-k // s)
        if self._phase_w is None:
            w = F.pad(self.w, (0, r * s - k))  # (Cin, Cout, r·s); the added taps are zeros
            # phase_w[o·s + p, c, j] = w[c, o, (r - 1 - j)·s + p]: tap j meets x[t - (r - 1 - j)]
            self._phase_w = w.reshape(cin, cout, r, s).flip(2).permute(1, 3, 0, 2) \
                .reshape(cout * s, cin, r).contiguous()
        length = x.shape[1]
        y = F.conv1d(F.pad(x, (r - 1, r - 1))[None], self._phase_w)[0]  # (Cout·s, L + r - 1)
        y = y.reshape(cout, s, length + r - 1).transpose(1, 2).reshape(cout, -1)
        return y[:, : (length - 1) * s + k] + self.b[:, None]

    def _full(self, x: Tensor) -> Tensor:
        """Uncropped conv_transpose1d, length (L-1)·s + K."""
        s = self.stride
        cin, cout, k = self.w.shape
        if x.device.type == "cpu" and POLYPHASE_TRANSCONV and (k % s or x.shape[1] >= TRANSCONV_CONV_MIN_LEN):
            return self._polyphase(x)
        if x.device.type != "cpu" or k % s or x.shape[1] >= TRANSCONV_CONV_MIN_LEN:
            return F.conv_transpose1d(x[None], self.w, self.b, stride=s)[0]
        # CPU: torch falls back to a slow reference kernel for short inputs (streaming chunks).
        # With K = r·s the op is one GEMM (every input frame -> r blocks of s outputs) followed
        # by an overlap-add of r shifted copies.
        r, length = k // s, x.shape[1]
        cols = torch.matmul(self.w_t, x).reshape(cout, r, s, length)  # (Cout, r, s, L)
        out = x.new_zeros((cout, s, length + r - 1))
        for i in range(r):
            out[:, :, i:i + length] += cols[:, i]
        return (out.transpose(1, 2).reshape(cout, -1) + self.b[:, None])

    def __call__(self, x: Tensor, em: bool, state: dict | None = None) -> Tensor:
        n, s = x.shape[1], self.stride
        if state is None:
            return self._full(x)[:, : n * s]
        m = self.hist
        xin = torch.cat([_tail(state, self, x, x.shape[0], m), x], dim=1)
        if m:
            state[self] = xin[:, xin.shape[1] - m:].clone()
        return self._full(xin)[:, m * s:(m + n) * s]


class Snake:
    """y = x + sin(αx)² / α (no epsilon, as in s2.cpp)."""

    def __init__(self, alpha: Tensor):
        self.alpha = alpha.reshape(-1, 1)
        self.inv_alpha = 1.0 / self.alpha
        # Flat float32 copies for the fused CPU kernel (snake_kernel.py).
        self._a32 = self.alpha.reshape(-1).float().contiguous()
        self._ia32 = self.inv_alpha.reshape(-1).float().contiguous()

    def fusable(self, x: Tensor) -> bool:
        """Whether the one-pass numba kernel applies (float32 on the CPU, numba present)."""
        return (FUSED_SNAKE and x.device.type == "cpu" and x.dtype == torch.float32 and x.dim() == 2
                and self.alpha.device.type == "cpu" and snake_kernel.usable())

    def into(self, x: Tensor, out: Tensor, offset: int) -> None:
        """Write snake(x) to out[:, offset:offset + L] (fused kernel; see ``fusable``)."""
        snake_kernel.snake_into(x.contiguous().numpy(), self._a32.numpy(), self._ia32.numpy(),
                                out.numpy(), offset)

    def __call__(self, x: Tensor, em: bool = False, state: dict | None = None) -> Tensor:
        if self.fusable(x):
            out = torch.empty_like(x, memory_format=torch.contiguous_format)
            self.into(x, out, 0)
            return out
        # One temporary, four passes (sin, square, scale-and-add): these run over every sample
        # of every decoder channel, ~30 times per decode. ·(1/α) for /α: within 1 ulp.
        t = torch.sin(self.alpha * x)
        t.mul_(t)
        return torch.addcmul(x, t, self.inv_alpha, out=t)


class ResidualUnit:
    def __init__(self, snake1: Snake, conv1: CausalConv, snake2: Snake, conv2: CausalConv):
        self.snake1, self.conv1, self.snake2, self.conv2 = snake1, conv1, snake2, conv2

    def __call__(self, x: Tensor, em: bool, state: dict | None = None) -> Tensor:
        y = self.conv1.after_snake(self.snake1, x, em, state)
        y = self.conv2(self.snake2(y), em, state)
        return x + y


class ConvNeXt:
    """Causal depthwise conv k7 -> LayerNorm(1e-6) -> Linear -> GELU(erf) -> Linear -> ×γ -> +x."""

    def __init__(self, dw: CausalConv, ln_w: Tensor, ln_b: Tensor, pw1_w: Tensor, pw1_b: Tensor,
                 pw2_w: Tensor, pw2_b: Tensor, gamma: Tensor, eps: float):
        self.dw, self.ln_w, self.ln_b = dw, ln_w, ln_b
        self.pw1_w, self.pw1_b, self.pw2_w, self.pw2_b = pw1_w, pw1_b, pw2_w, pw2_b
        self.gamma, self.eps = gamma, eps

    def __call__(self, x: Tensor, em: bool, state: dict | None = None) -> Tensor:
        y = self.dw(x, em, state).t()
        y = F.layer_norm(y, (y.shape[-1],), self.ln_w, self.ln_b, self.eps)
        y = F.gelu(F.linear(r16(y, em), self.pw1_w, self.pw1_b))
        y = F.linear(r16(y, em), self.pw2_w, self.pw2_b) * self.gamma
        return x + y.t()


def rms_norm(x: Tensor, w: Tensor, eps: float) -> Tensor:
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps) * w


def rope_tables(positions: range, head_dim: int, base: float, dtype: torch.dtype,
                device: torch.device) -> tuple[Tensor, Tensor]:
    """cos/sin of pos·base^(-2i/hd), shaped (L, 1, hd/2) for ``rope``.

    Angles are computed in float64 on the CPU (MPS has no float64) so that long streams
    (large absolute positions) keep their precision; one-shot and streaming use the same
    absolute positions, hence the same tables.
    """
    inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    ang = torch.arange(positions.start, positions.stop, dtype=torch.float64)[:, None] * inv[None, :]
    return (torch.cos(ang).to(device=device, dtype=dtype)[:, None, :],
            torch.sin(ang).to(device=device, dtype=dtype)[:, None, :])


def rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """ggml "normal" RoPE on x (L, H, hd): rotate adjacent pairs (x[2i], x[2i+1]), not NeoX halves."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)


class TransformerLayer:
    def __init__(self, attn_norm: Tensor, wqkv: Tensor, wo: Tensor, attn_gamma: Tensor,
                 ffn_norm: Tensor, w1: Tensor, w2: Tensor, w3: Tensor, ffn_gamma: Tensor):
        self.attn_norm, self.wqkv, self.wo, self.attn_gamma = attn_norm, wqkv, wo, attn_gamma
        self.ffn_norm, self.w1, self.w2, self.w3, self.ffn_gamma = ffn_norm, w1, w2, w3, ffn_gamma


# Queries per attention block: bounds the score matrix to about
# heads x Q_BLOCK x (Q_BLOCK + window) floats whatever the sequence length.
Q_BLOCK = 256


def windowed_attention(q: Tensor, k: Tensor, v: Tensor, q_pos0: int, k_pos0: int, window: int) -> Tensor:
    """Causal attention where query at p sees keys at [p-window+1, p].

    q: (H, Lq, hd) at positions q_pos0..; k, v: (H, Lk, hd) at positions k_pos0.. (the keys
    include the queries' own positions). Returns (H, Lq, hd).
    """
    lq, lk = q.shape[1], k.shape[1]
    outs = []
    for a in range(0, lq, Q_BLOCK):
        b = min(lq, a + Q_BLOCK)
        # Only keys some query of this block can see.
        k_lo = max(0, q_pos0 + a - window + 1 - k_pos0)
        k_hi = min(lk, q_pos0 + b - k_pos0)
        qp = torch.arange(q_pos0 + a, q_pos0 + b, device=q.device)[:, None]
        kp = torch.arange(k_pos0 + k_lo, k_pos0 + k_hi, device=q.device)[None, :]
        mask = (kp <= qp) & (kp > qp - window)
        outs.append(F.scaled_dot_product_attention(q[:, a:b], k[:, k_lo:k_hi], v[:, k_lo:k_hi],
                                                   attn_mask=mask))
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)


class Transformer:
    """Pre-norm RMSNorm transformer with layer scales, windowed causal attention and a final norm.

    Streaming state per layer: keys (after RoPE) and values of the last window-1 positions;
    plus the next absolute position. RoPE uses the absolute position, so chunked calls see the
    same angles as one call over the whole sequence.
    """

    def __init__(self, layers: list[TransformerLayer], norm: Tensor, head_dim: int, n_local_heads: int,
                 rope_base: float, eps: float, window: int):
        self.layers, self.norm = layers, norm
        self.head_dim, self.rope_base, self.eps, self.window = head_dim, rope_base, eps, window
        dim = norm.shape[0]
        self.n_head = dim // head_dim
        self.n_kv = n_local_heads if n_local_heads >= 1 else self.n_head

    def __call__(self, x: Tensor, em: bool, state: dict | None = None) -> Tensor:
        length = x.shape[0]
        hd, nh, nkv = self.head_dim, self.n_head, self.n_kv
        pos0 = state.get((self, "pos"), 0) if state is not None else 0
        cos, sin = rope_tables(range(pos0, pos0 + length), hd, self.rope_base, x.dtype, x.device)
        keep = self.window - 1
        for layer in self.layers:
            n = rms_norm(x, layer.attn_norm, self.eps)
            qkv = F.linear(r16(n, em), layer.wqkv)
            q = qkv[:, : nh * hd].reshape(length, nh, hd)
            k = qkv[:, nh * hd: (nh + nkv) * hd].reshape(length, nkv, hd)
            v = qkv[:, (nh + nkv) * hd: (nh + 2 * nkv) * hd].reshape(length, nkv, hd)
            q = rope(q, cos, sin).transpose(0, 1)
            k = rope(k, cos, sin).transpose(0, 1)
            v = v.transpose(0, 1)
            k_pos0 = pos0
            if state is not None:
                past = state.get((layer, "kv"))
                if past is not None:
                    k = torch.cat([past[0], k], dim=1)
                    v = torch.cat([past[1], v], dim=1)
                    k_pos0 = pos0 - past[0].shape[1]
                start = max(0, k.shape[1] - keep)
                state[(layer, "kv")] = (k[:, start:].clone(), v[:, start:].clone())
            if nkv != nh:
                k = k.repeat_interleave(nh // nkv, dim=0)
                v = v.repeat_interleave(nh // nkv, dim=0)
            o = windowed_attention(q, k, v, pos0, k_pos0, self.window)
            o = o.transpose(0, 1).reshape(length, nh * hd)
            h = x + layer.attn_gamma * F.linear(r16(o, em), layer.wo)
            m = r16(rms_norm(h, layer.ffn_norm, self.eps), em)
            ff = F.silu(F.linear(m, layer.w1)) * F.linear(m, layer.w3)
            x = h + layer.ffn_gamma * F.linear(r16(ff, em), layer.w2)
        if state is not None:
            state[(self, "pos")] = pos0 + length
        return rms_norm(x, self.norm, self.eps)
