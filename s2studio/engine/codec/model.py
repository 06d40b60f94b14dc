"""The S2 Pro audio codec in torch: GGUF loading, encode (audio -> codes), decode (codes -> audio).

Follows s2.cpp's ``AudioCodec`` (docs/spec/codec.md §3-§5). Public entry point: ``Codec.from_gguf``.
Stage methods (``vq_decode``, ``post_module``, ``upsample``, ``decoder``, ``encoder``,
``quantizer_front``, ``vq_encode``) exist so tests can compare every intermediate with
s2.cpp's dumps; ``decode``/``encode`` chain them.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import numpy as np
import torch

from s2studio.errors import AudioInputError, ModelFileError
from s2studio.engine.model.gguf_file import GGUFFile
from s2studio.engine.codec.config import CONVNEXT_LN_EPS, RESIDUAL_DILATIONS, CodecConfig, TransformerConfig
from s2studio.engine.codec.layers import (CausalConv, CausalTransConv, ConvNeXt, ResidualUnit, Snake, Transformer,
                     TransformerLayer, r16)

log = logging.getLogger(__name__)

Tensor = torch.Tensor

# decode() runs at most this many frames through the network at once; longer inputs go through
# the streaming decoder in chunks of this size. Same result (the codec is causal), bounded memory.
# On the CPU, small chunks are also much faster: 16 frames keep the decoder's activations
# (up to 96 ch x 32768 samples, 12 MB) near the caches and under glibc's mmap threshold, where
# whole-utterance tensors are fresh mappings that page-fault on every op. Measured at full
# size, 2 threads: 1.09 s per audio second in chunks of 16, 1.26 (8), 1.17 (32), 2.2 one-shot.
DECODE_CHUNK_FRAMES = 256
CPU_DECODE_CHUNK_FRAMES = 16
# encoder() runs at most this many latent frames (x hop samples) at once; see encoder().
ENCODE_CHUNK_FRAMES = 256


class _Loader:
    """Fetches codec tensors by unprefixed name; a missing tensor is a ModelFileError naming it."""

    def __init__(self, g: GGUFFile, prefix: str, device: torch.device, dtype: torch.dtype):
        self.g, self.prefix, self.device, self.dtype = g, prefix, device, dtype

    def has(self, name: str) -> bool:
        return self.g.has(self.prefix + name)

    def t(self, name: str) -> Tensor:
        full = self.prefix + name
        if not self.g.has(full):
            raise ModelFileError(self.g.path, f"required codec tensor '{full}' is missing. "
                                              "The file is not an S2 Pro model, or it is damaged.")
        # F16/BF16/F32 (or quantized) are all upcast to float32 first: the stored F16 values are
        # the weights s2.cpp computes with.
        arr = self.g.array(full)
        t = torch.from_numpy(np.ascontiguousarray(arr)).to(device=self.device, dtype=self.dtype)
        if not self.g.shares_map(arr):
            # A converted copy: the file's pages are no longer needed. Releasing them tensor by
            # tensor keeps peak memory at the float32 codec plus the transformer's blocks,
            # instead of both plus the whole F16 codec (0.8 GB at full size).
            self.g.drop_resident([full])
        return t

    def conv(self, name: str, stride: int = 1, dilation: int = 1, groups: int = 1) -> CausalConv:
        return CausalConv(self.t(name + ".weight"), self.t(name + ".bias"), stride, dilation, groups)

    def snake(self, name: str) -> Snake:
        return Snake(self.t(name))

    def residual_unit(self, p: str, dilation: int) -> ResidualUnit:
        return ResidualUnit(self.snake(p + ".block.0.alpha"), self.conv(p + ".block.1.conv", dilation=dilation),
                            self.snake(p + ".block.2.alpha"), self.conv(p + ".block.3.conv"))

    def convnext(self, p: str) -> ConvNeXt:
        dw_w = self.t(p + ".dwconv.conv.weight")
        dw = CausalConv(dw_w, self.t(p + ".dwconv.conv.bias"), groups=dw_w.shape[0])
        return ConvNeXt(dw, self.t(p + ".norm.weight"), self.t(p + ".norm.bias"),
                        self.t(p + ".pwconv1.weight"), self.t(p + ".pwconv1.bias"),
                        self.t(p + ".pwconv2.weight"), self.t(p + ".pwconv2.bias"),
                        self.t(p + ".gamma"), CONVNEXT_LN_EPS)

    def transformer(self, p: str, tc: TransformerConfig) -> Transformer:
        # Layers are found by probing wqkv until one is missing, as s2.cpp does.
        layers = []
        while self.has(f"{p}.layers.{len(layers)}.attention.wqkv.weight"):
            s = f"{p}.layers.{len(layers)}"
            layers.append(TransformerLayer(
                self.t(s + ".attention_norm.weight"), self.t(s + ".attention.wqkv.weight"),
                self.t(s + ".attention.wo.weight"), self.t(s + ".attention_layer_scale.gamma"),
                self.t(s + ".ffn_norm.weight"), self.t(s + ".feed_forward.w1.weight"),
                self.t(s + ".feed_forward.w2.weight"), self.t(s + ".feed_forward.w3.weight"),
                self.t(s + ".ffn_layer_scale.gamma")))
        if not layers:
            # s2.cpp aborts on a zero-layer transformer; name what is missing instead.
            raise ModelFileError(self.g.path, f"required codec tensor '{self.prefix}{p}.layers.0.attention."
                                              "wqkv.weight' is missing (the transformer has no layers)")
        tr = Transformer(layers, self.t(p + ".norm.weight"), tc.head_dim, tc.n_local_heads,
                         tc.rope_base, tc.norm_eps, tc.window)
        dim = tr.norm.shape[0]
        if dim % tc.head_dim or tr.n_head % tr.n_kv:
            raise ModelFileError(self.g.path, f"codec transformer '{self.prefix}{p}': dim {dim} does not "
                                              f"split into heads of {tc.head_dim} / {tr.n_kv} kv heads")
        return tr


@dataclass
class _VQ:
    in_w: Tensor  # (d, D)
    in_b: Tensor  # (d,)
    out_w: Tensor  # (D, d)
    out_b: Tensor  # (D,)
    codebook: Tensor  # (N, d), raw
    codebook_n: Tensor  # (N, d), rows L2-normalised (norm floored at 1e-6)

    @property
    def size(self) -> int:
        return self.codebook.shape[0]


class Codec:
    """S2 Pro codec: ``encode(audio) -> int32 [10, T]``, ``decode(codes) -> float32 [spf*T]``.

    Thread-compatible, not thread-safe: use one instance per thread or guard it.
    """

    def __init__(self, g: GGUFFile, cfg: CodecConfig, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32, emulate_ggml: bool = False):
        self.cfg = cfg
        self.path = g.path
        self.device = torch.device(device)
        self.dtype = dtype
        self.emulate_ggml = bool(emulate_ggml)
        if self.device.type == "cuda":
            # TF32 matmuls/convs cost ~1e-3 relative error: far outside parity. Global setting,
            # but nothing in this engine wants TF32.
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        ld = _Loader(g, cfg.prefix, self.device, dtype)
        self._load_decoder(ld)
        self._load_encoder(ld)

    # ---- construction ---------------------------------------------------------------------
    @classmethod
    def from_gguf(cls, source: GGUFFile | str | os.PathLike[str], device: torch.device | str = "cpu",
                  dtype: torch.dtype = torch.float32, emulate_ggml: bool = False) -> Codec:
        """Load the codec (``c.*`` tensors) from a GGUF path or an open ``GGUFFile``."""
        if isinstance(source, GGUFFile):
            g = source
            return cls(g, CodecConfig.from_gguf(g), device, dtype, emulate_ggml)
        with GGUFFile(source) as g:
            return cls(g, CodecConfig.from_gguf(g), device, dtype, emulate_ggml)

    def _load_vq(self, ld: _Loader, p: str) -> _VQ:
        in_w = ld.t(p + ".in_proj.weight")
        out_w = ld.t(p + ".out_proj.weight")
        cb = ld.t(p + ".codebook.weight")
        in_w = in_w.reshape(in_w.shape[0], -1)
        out_w = out_w.reshape(out_w.shape[0], -1)
        d = self.cfg.codebook_dim
        if cb.ndim != 2 or cb.shape[1] != d or in_w.shape[0] != d or out_w.shape[1] != d:
            raise ModelFileError(ld.g.path, f"codec VQ '{ld.prefix}{p}' does not match codebook_dim {d}")
        # Pre-normalised rows, as s2.cpp's host cache (norm floored: sqrt(max(|e|², 1e-12))).
        cb32 = cb.float()
        norm = cb32.square().sum(-1, keepdim=True).clamp_min(1e-12).sqrt()
        return _VQ(in_w, ld.t(p + ".in_proj.bias"), out_w, ld.t(p + ".out_proj.bias"), cb, cb32 / norm)

    def _load_decoder(self, ld: _Loader) -> None:
        cfg = self.cfg
        self.vqs = [self._load_vq(ld, "quantizer.semantic_quantizer.quantizers.0")]
        self.vqs += [self._load_vq(ld, f"quantizer.quantizer.quantizers.{k}") for k in range(cfg.residual_codebooks)]
        self.post_tr = ld.transformer("quantizer.post_module", cfg.rvq_transformer)
        n = len(cfg.downsample_factor)
        # upsample.i uses the factors in reverse order.
        self.up = [(CausalTransConv(ld.t(f"quantizer.upsample.{i}.0.conv.weight"),
                                    ld.t(f"quantizer.upsample.{i}.0.conv.bias"), cfg.downsample_factor[n - 1 - i]),
                    ld.convnext(f"quantizer.upsample.{i}.1")) for i in range(n)]
        self.dec_in = ld.conv("decoder.model.0.conv")
        self.dec_blocks = []
        for i, s in enumerate(cfg.decoder_rates, start=1):
            p = f"decoder.model.{i}.block"
            self.dec_blocks.append((ld.snake(p + ".0.alpha"),
                                    CausalTransConv(ld.t(p + ".1.conv.weight"), ld.t(p + ".1.conv.bias"), s),
                                    [ld.residual_unit(f"{p}.{2 + j}", d) for j, d in enumerate(RESIDUAL_DILATIONS)]))
        last = len(cfg.decoder_rates) + 1
        self.dec_snake = ld.snake(f"decoder.model.{last}.alpha")
        self.dec_out = ld.conv(f"decoder.model.{last + 1}.conv")

    def _load_encoder(self, ld: _Loader) -> None:
        cfg = self.cfg
        self.enc_in = ld.conv("encoder.block.0.conv")
        self.enc_blocks = []
        for i, s in enumerate(cfg.encoder_rates, start=1):
            p = f"encoder.block.{i}.block"
            units = [ld.residual_unit(f"{p}.{j}", d) for j, d in enumerate(RESIDUAL_DILATIONS)]
            n_tr = cfg.encoder_transformer_layers[i - 1] if i - 1 < len(cfg.encoder_transformer_layers) else 0
            tr = ld.transformer(f"{p}.5", cfg.encoder_transformer) if n_tr > 0 else None
            self.enc_blocks.append((units, ld.snake(p + ".3.alpha"), ld.conv(p + ".4.conv", stride=s), tr))
        last = len(cfg.encoder_rates) + 1
        self.enc_snake = ld.snake(f"encoder.block.{last}.alpha")
        self.enc_out = ld.conv(f"encoder.block.{last + 1}.conv")
        self.down = [(ld.conv(f"quantizer.downsample.{i}.0.conv", stride=f), ld.convnext(f"quantizer.downsample.{i}.1"))
                     for i, f in enumerate(cfg.downsample_factor)]
        self.pre_tr = ld.transformer("quantizer.pre_module", cfg.rvq_transformer)

    # ---- properties -----------------------------------------------------------------------
    @property
    def sample_rate(self) -> int:
        return self.cfg.sample_rate

    @property
    def samples_per_frame(self) -> int:
        return self.cfg.samples_per_frame

    @property
    def num_codebooks(self) -> int:
        return self.cfg.num_codebooks

    # ---- decode stages (channel-last (T, D) between stages, like the golden dumps) ---------
    def clamp_codes(self, codes: np.ndarray | Tensor) -> Tensor:
        """Validate shape and clamp each row to its codebook (semantic vs residual sizes)."""
        c = torch.as_tensor(np.asarray(codes) if not isinstance(codes, Tensor) else codes)
        if c.ndim != 2 or c.shape[0] != self.num_codebooks:
            raise ValueError(f"codes must be [{self.num_codebooks}, T], got {tuple(c.shape)}")
        if c.shape[1] < 1:
            raise ValueError("codes must have at least one frame")
        if c.dtype.is_floating_point or c.dtype == torch.bool:
            raise ValueError(f"codes must be integers, got {c.dtype}")
        c = c.to(device=self.device, dtype=torch.int64)
        hi = torch.tensor(self.cfg.codebook_sizes(), dtype=torch.int64, device=self.device)[:, None] - 1
        return torch.minimum(torch.clamp(c, min=0), hi)

    def vq_decode(self, codes: np.ndarray | Tensor) -> Tensor:
        """Σ_cb out_proj_cb(codebook_cb[code]) with raw codebook rows -> (T, D)."""
        c = self.clamp_codes(codes)
        em = self.emulate_ggml
        z = None
        for cb, vq in enumerate(self.vqs):
            e = vq.codebook[c[cb]]  # (T, d)
            part = torch.nn.functional.linear(r16(e, em), vq.out_w, vq.out_b)
            z = part if z is None else z + part
        return z

    def post_module(self, z: Tensor, state: dict | None = None) -> Tensor:
        return self.post_tr(z, self.emulate_ggml, state)

    def upsample(self, x: Tensor, state: dict | None = None) -> Tensor:
        """(T, D) -> (T·prod(factors), D)."""
        em = self.emulate_ggml
        y = x.t()
        for tconv, cnx in self.up:
            y = cnx(tconv(y, em, state), em, state)
        return y.t()

    def decoder(self, latent: Tensor, state: dict | None = None) -> Tensor:
        """(L, D) latent -> waveform (L·prod(decoder_rates),)."""
        em = self.emulate_ggml
        x = self.dec_in(latent.t(), em, state)
        for snake, tconv, units in self.dec_blocks:
            x = tconv(snake(x), em, state)
            for u in units:
                x = u(x, em, state)
        x = self.dec_out.after_snake(self.dec_snake, x, em, state)
        return torch.tanh(x[0])

    def decode_tensor(self, codes: np.ndarray | Tensor, state: dict | None = None) -> Tensor:
        """All decode stages in one go on the codec device; returns the waveform tensor."""
        with torch.inference_mode():
            z = self.post_module(self.vq_decode(codes), state)
            return self.decoder(self.upsample(z, state), state)

    def decode_stages(self, codes: np.ndarray | Tensor) -> dict[str, np.ndarray]:
        """Every decode intermediate as float32 numpy, named like s2.cpp's dumps."""
        with torch.inference_mode():
            vq = self.vq_decode(codes)
            post = self.post_module(vq)
            lat = self.upsample(post)
            audio = self.decoder(lat)
        return {name: t.float().cpu().numpy() for name, t in
                (("codec_dec_vq_sum", vq), ("codec_dec_post_module", post),
                 ("codec_dec_latent", lat), ("audio", audio))}

    def decode(self, codes: np.ndarray | Tensor) -> np.ndarray:
        """codes int [10, T] -> float32 waveform [spf·T] at ``sample_rate`` (full left context)."""
        c = self.clamp_codes(codes)
        chunk = CPU_DECODE_CHUNK_FRAMES if self.device.type == "cpu" else DECODE_CHUNK_FRAMES
        if c.shape[1] <= chunk:
            return self.decode_tensor(c).float().cpu().numpy()
        dec = self.stream_decoder()
        return np.concatenate([dec.feed(c[:, a:a + chunk]) for a in range(0, c.shape[1], chunk)])

    def decode_windowed(self, codes: np.ndarray | Tensor, stride: int = 16, history: int | None = None) -> np.ndarray:
        """s2.cpp's offline windowed decode (docs/spec/codec.md §6.2), for bit-for-bit schedule parity.

        Each window restarts RoPE at 0 and sees at most ``history`` frames of left context, so
        for T > stride + history it differs (slightly) from ``decode``, exactly as s2.cpp does.
        """
        c = self.clamp_codes(codes)
        total = c.shape[1]
        stride = max(1, int(stride))
        h = self.cfg.streaming_history_frames if history is None or history < 0 else int(history)
        spf = self.samples_per_frame
        out: list[np.ndarray] = []
        committed = 0

        def step(avail: int, final: bool) -> None:
            nonlocal committed
            if avail <= committed:
                return
            stable = avail if final else max(0, avail - h)
            if not final and stable <= committed:
                return
            ws = max(0, committed - h)
            audio = self.decode_tensor(c[:, ws:avail]).float().cpu().numpy()
            end = len(audio) if final else (stable - ws) * spf
            out.append(audio[(committed - ws) * spf:end])
            committed = stable

        avail = stride
        while avail < total:
            step(avail, False)
            avail += stride
        step(total, True)
        return np.concatenate(out)

    def stream_decoder(self):
        from s2studio.engine.codec.streaming import StreamDecoder

        return StreamDecoder(self)

    # ---- encode stages ----------------------------------------------------------------------
    def _audio_tensor(self, audio: np.ndarray | Tensor) -> Tensor:
        a = torch.as_tensor(np.asarray(audio, dtype=np.float32) if not isinstance(audio, Tensor) else audio)
        if a.ndim != 1:
            raise AudioInputError(None, f"the codec encodes mono audio; got an array of shape {tuple(a.shape)}")
        if a.numel() == 0:
            raise AudioInputError(None, "the audio is empty")
        if not torch.isfinite(a).all():
            raise AudioInputError(None, "the audio contains NaN or infinite samples")
        fl = self.cfg.frame_length
        pad = (-a.numel()) % fl  # s2.cpp pads to a multiple of frame_length (512), not 2048
        return torch.nn.functional.pad(a.to(self.device, self.dtype), (0, pad))

    def encoder(self, audio: np.ndarray | Tensor, chunk_frames: int | None = None) -> Tensor:
        """Mono samples at the codec rate -> latent (L, D), L = ceil(N / frame_length)·frame_length / hop.

        The encoder is causal, so long audio is run in chunks of ``chunk_frames`` latent frames
        (default ``ENCODE_CHUNK_FRAMES``) with the same carried state as the streaming decoder:
        identical result, but peak memory no longer grows with the length (a 60 s reference
        at full size would otherwise hold several GB of 64-channel full-rate activations).
        """
        em = self.emulate_ggml
        hop = int(np.prod(self.cfg.encoder_rates))
        chunk = (chunk_frames or ENCODE_CHUNK_FRAMES) * hop
        with torch.inference_mode():
            a = self._audio_tensor(audio)
            if a.numel() <= chunk or a.numel() % hop:
                return self._encoder_run(a, em, None)
            state: dict = {}
            return torch.cat([self._encoder_run(a[i:i + chunk], em, state)
                              for i in range(0, a.numel(), chunk)])

    def _encoder_run(self, a: Tensor, em: bool, state: dict | None) -> Tensor:
        x = self.enc_in(a[None], em, state)
        for units, snake, conv, tr in self.enc_blocks:
            for u in units:
                x = u(x, em, state)
            x = conv(snake(x), em, state)
            if tr is not None:
                x = tr(x.t(), em, state).t()
        x = self.enc_out(self.enc_snake(x), em, state)
        return x.t()

    def quantizer_front(self, latent: Tensor) -> Tensor:
        """Latent (L, D) -> downsample stages -> pre_module -> (ceil(L/4), D): the VQ input."""
        em = self.emulate_ggml
        with torch.inference_mode():
            x = torch.as_tensor(latent).to(self.device, self.dtype).t()
            for conv, cnx in self.down:
                x = cnx(conv(x, em), em)
            return self.pre_tr(x.t(), em)

    def vq_encode(self, z: np.ndarray | Tensor) -> np.ndarray:
        """Residual VQ of (T, D) in float32 -> int32 codes [10, T].

        Cosine nearest neighbour, first index on ties (s2.cpp's strict '>' = torch.argmax).
        """
        with torch.inference_mode():
            r = torch.as_tensor(z).to(self.device, torch.float32)
            codes = []
            for vq in self.vqs:
                e = torch.nn.functional.linear(r, vq.in_w.float(), vq.in_b.float())
                e = e / e.square().sum(-1, keepdim=True).clamp_min(1e-12).sqrt()
                best = torch.argmax(e @ vq.codebook_n.t(), dim=-1)
                codes.append(best)
                r = r - torch.nn.functional.linear(vq.codebook[best].float(), vq.out_w.float(), vq.out_b.float())
            return torch.stack(codes).to(torch.int32).cpu().numpy()

    def encode_stages(self, audio: np.ndarray | Tensor) -> dict[str, np.ndarray]:
        lat = self.encoder(audio)
        pre = self.quantizer_front(lat)
        return {"codec_enc_latent": lat.float().cpu().numpy(), "codec_enc_pre_vq": pre.float().cpu().numpy(),
                "codes": self.vq_encode(pre)}

    def encode(self, audio: np.ndarray | Tensor) -> np.ndarray:
        """Mono float32 samples at ``sample_rate`` -> int32 codes [10, ceil(N / spf)]."""
        return self.vq_encode(self.quantizer_front(self.encoder(audio)))
