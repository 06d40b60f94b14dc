"""Codec vs the real s2.cpp: every dumped stage of decode and encode, at the golden tolerances
(tests/data/golden/README.md, "Tolerances")."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import torch

from s2studio.engine.codec import Codec, CodecConfig
from s2studio.errors import AudioInputError, ModelFileError
from s2studio.engine.model.gguf_file import GGUFFile

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden"
DECODE_CASES = ["codec_roundtrip", "tts_f32", "clone_f32_qknorm"]
ROUNDTRIP = GOLDEN / "codec_roundtrip"


def dump(case: str, name: str) -> np.ndarray:
    return np.load(GOLDEN / case / "dumps" / f"{name}.npy")


_CODECS: dict = {}


def codec(case: str, emulate: bool = False) -> Codec:
    key = (case, emulate)
    if key not in _CODECS:
        _CODECS[key] = Codec.from_gguf(GOLDEN / case / "model.gguf", emulate_ggml=emulate)
    return _CODECS[key]


def max_abs(a: np.ndarray, b: np.ndarray) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.abs(a.astype(np.float64) - b).max())


# ---- decode ---------------------------------------------------------------------------------

@pytest.mark.parametrize("case", DECODE_CASES)
def test_decode_stages_match_s2cpp(case):
    c = codec(case)
    codes = dump(case, "codec_dec_codes_in")
    st = c.decode_stages(codes)
    assert max_abs(st["codec_dec_vq_sum"], dump(case, "codec_dec_vq_sum")) <= 1e-4
    assert max_abs(st["codec_dec_post_module"], dump(case, "codec_dec_post_module")) <= 2e-3
    assert max_abs(st["codec_dec_latent"], dump(case, "codec_dec_latent")) <= 5e-3
    gold = dump(case, "audio")
    audio = st["audio"]
    assert audio.dtype == np.float32 and audio.shape == (c.samples_per_frame * codes.shape[1],)
    assert max_abs(audio, gold) <= 1e-2
    rms_ratio = np.sqrt(np.mean((audio.astype(np.float64) - gold) ** 2)) / np.sqrt(np.mean(gold.astype(np.float64) ** 2))
    assert rms_ratio <= 5e-3
    # The public decode() is the same computation, in causal 16-frame chunks on the CPU: equal
    # up to float32 summation order (the streaming bound, test_codec_streaming).
    np.testing.assert_allclose(c.decode(codes), audio, atol=3e-6, rtol=0)


@pytest.mark.parametrize("case", ["tts_f32", "clone_f32_qknorm"])
def test_decode_clamps_residual_codes_to_their_codebook(case):
    codes = dump(case, "codec_dec_codes_in")
    c = codec(case)
    # These LLM codes run up to 127 while residual codebooks have 32 entries: without s2.cpp's
    # clamping the lookups would fail or pick different rows.
    assert (codes[1:] >= c.cfg.residual_codebook_size).any()
    clamped = codes.copy()
    clamped[1:] = np.minimum(clamped[1:], c.cfg.residual_codebook_size - 1)
    np.testing.assert_array_equal(c.clamp_codes(codes).cpu().numpy(), clamped)
    # Negative codes clamp to 0; too-large semantic codes to the semantic size - 1.
    wild = codes.copy()
    wild[0, 0], wild[3, 1] = 10**6, -5
    c2 = c.clamp_codes(wild).cpu().numpy()
    assert c2[0, 0] == c.cfg.semantic_codebook_size - 1 and c2[3, 1] == 0


def test_decode_with_ggml_emulation_is_tighter():
    # F16 rounding at ggml's points brings post_module from ~3e-4 to ~2e-5 (docs/spec/codec.md §9).
    case = "codec_roundtrip"
    st = codec(case, emulate=True).decode_stages(dump(case, "codec_dec_codes_in"))
    assert max_abs(st["codec_dec_post_module"], dump(case, "codec_dec_post_module")) <= 2e-4
    assert max_abs(st["audio"], dump(case, "audio")) <= 1e-2


def test_windowed_decode_equals_golden_and_full_decode_for_short_input():
    # T = 44 <= 160: s2.cpp's windowed decode is one call, identical to the full decode.
    c = codec("codec_roundtrip")
    codes = dump("codec_roundtrip", "codec_dec_codes_in")
    np.testing.assert_allclose(c.decode_windowed(codes), c.decode(codes), atol=3e-6, rtol=0)  # decode() runs in chunks
    assert max_abs(c.decode_windowed(codes), dump("codec_roundtrip", "audio_full_decode")) <= 1e-2


def test_windowed_decode_longer_than_history_has_exact_length_and_close_audio():
    c = codec("codec_roundtrip")
    h = c.cfg.streaming_history_frames  # 24 for window 8
    rng = np.random.default_rng(1)
    codes = np.stack([rng.integers(0, n, size=h + 40) for n in c.cfg.codebook_sizes()])
    w = c.decode_windowed(codes, stride=4)
    full = c.decode(codes)
    assert w.shape == full.shape
    # Context truncated to h >= window + 16 frames: the post_module (1 layer, window 8) sees
    # everything it needs, so only float noise separates the two.
    assert np.abs(w - full).max() < 1e-4


def test_decode_rejects_bad_code_arrays():
    c = codec("codec_roundtrip")
    with pytest.raises(ValueError):
        c.decode(np.zeros((9, 4), dtype=np.int32))
    with pytest.raises(ValueError):
        c.decode(np.zeros((10, 0), dtype=np.int32))
    with pytest.raises(ValueError):
        c.decode(np.zeros((10, 4), dtype=np.float32))


# ---- encode ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def encoded():
    return codec("codec_roundtrip").encode_stages(dump("codec_roundtrip", "ref_audio"))


def test_encoder_latent_and_pre_vq_match_s2cpp(encoded):
    assert max_abs(encoded["codec_enc_latent"], dump("codec_roundtrip", "codec_enc_latent")) <= 2e-2
    assert max_abs(encoded["codec_enc_pre_vq"], dump("codec_roundtrip", "codec_enc_pre_vq")) <= 2e-2


def test_vq_of_golden_pre_vq_reproduces_ref_codes_exactly():
    c = codec("codec_roundtrip")
    codes = c.vq_encode(dump("codec_roundtrip", "codec_enc_pre_vq"))
    assert codes.dtype == np.int32
    np.testing.assert_array_equal(codes, dump("codec_roundtrip", "ref_codes"))


def test_end_to_end_encode_codes(encoded):
    ref = dump("codec_roundtrip", "ref_codes")
    codes = encoded["codes"]
    assert codes.shape == ref.shape and codes.dtype == np.int32
    assert (codes == ref).mean() >= 0.95
    assert (codes[0] == ref[0]).mean() >= 0.95
    np.testing.assert_array_equal(codec("codec_roundtrip").encode(dump("codec_roundtrip", "ref_audio")), codes)


def test_encode_pads_to_frame_length_and_frames_are_ceil_n_over_spf():
    c = codec("codec_roundtrip")
    audio = dump("codec_roundtrip", "ref_audio")[:5000]
    lat = c.encoder(audio)
    assert lat.shape[0] == -(-5000 // c.cfg.frame_length) * c.cfg.frame_length // c.cfg.hop_length
    codes = c.encode(audio)
    assert codes.shape == (10, -(-5000 // c.samples_per_frame))
    sizes = np.array(c.cfg.codebook_sizes())[:, None]
    assert (codes >= 0).all() and (codes < sizes).all()


def test_encode_rejects_bad_audio():
    c = codec("codec_roundtrip")
    with pytest.raises(AudioInputError):
        c.encode(np.zeros(0, dtype=np.float32))
    with pytest.raises(AudioInputError):
        c.encode(np.zeros((2, 100), dtype=np.float32))
    bad = np.zeros(100, dtype=np.float32)
    bad[3] = np.nan
    with pytest.raises(AudioInputError):
        c.encode(bad)


# ---- loading --------------------------------------------------------------------------------

class _Hiding(GGUFFile):
    """The real golden file with one tensor or metadata key made invisible."""

    def __init__(self, path, hide_tensor=None, hide_key=None):
        super().__init__(path)
        self.hide_tensor, self.hide_key = hide_tensor, hide_key

    def has(self, name):
        return name != self.hide_tensor and super().has(name)

    def meta(self, key, default=None):
        return default if key == self.hide_key else super().meta(key, default)


@pytest.mark.parametrize("tensor", [
    "c.decoder.model.3.block.1.conv.weight",
    "c.quantizer.quantizer.quantizers.8.codebook.weight",
    "c.encoder.block.4.block.5.norm.weight",
    "c.quantizer.pre_module.layers.0.attention.wo.weight",
])
def test_missing_tensor_names_it(tensor):
    with pytest.raises(ModelFileError, match=tensor.replace(".", r"\.")):
        Codec.from_gguf(_Hiding(ROUNDTRIP / "model.gguf", hide_tensor=tensor))


@pytest.mark.parametrize("key", [
    "fish_speech.codec.hop_length",
    "fish_speech.codec.quantizer_residual_codebook_size",
    "fish_speech.codec.rvq_transformer.window_size",
])
def test_missing_metadata_key_names_it(key):
    with pytest.raises(ModelFileError, match=key.replace(".", r"\.")):
        Codec.from_gguf(_Hiding(ROUNDTRIP / "model.gguf", hide_key=key))


def test_config_values_and_architecture_prefix():
    with GGUFFile(ROUNDTRIP / "model.gguf") as g:
        cfg = CodecConfig.from_gguf(g)
    assert cfg.prefix == "c." and cfg.num_codebooks == 10 and cfg.samples_per_frame == 2048
    assert cfg.codebook_sizes() == [128] + [32] * 9
    assert cfg.rvq_transformer.window == 8 and cfg.encoder_transformer.window == 512
    assert cfg.streaming_history_frames == 24


def test_wrong_architecture_is_refused():
    class Arch(_Hiding):
        def meta(self, key, default=None):
            return "llama" if key == "general.architecture" else super().meta(key, default)

    with pytest.raises(ModelFileError, match="general.architecture"):
        Codec.from_gguf(Arch(ROUNDTRIP / "model.gguf"))


def test_not_a_gguf_is_a_model_file_error(tmp_path):
    p = tmp_path / "x.gguf"
    p.write_bytes(b"RIFF" + b"\0" * 100)
    with pytest.raises(ModelFileError):
        Codec.from_gguf(p)


def test_codec_only_architecture_has_no_prefix():
    # 'fish-speech-codec' files name tensors without the 'c.' prefix (s2.cpp :815-822).
    class CodecOnly(GGUFFile):
        def meta(self, key, default=None):
            return "fish-speech-codec" if key == "general.architecture" else super().meta(key, default)

        def has(self, name):
            return not name.startswith("c.") and super().has("c." + name)

        def array(self, name):
            assert not name.startswith("c.")
            return super().array("c." + name)

    c = Codec.from_gguf(CodecOnly(ROUNDTRIP / "model.gguf"))
    assert c.cfg.prefix == "" and c.device == torch.device("cpu") and c.dtype == torch.float32
    codes = dump("codec_roundtrip", "codec_dec_codes_in")[:, :8]
    np.testing.assert_array_equal(c.decode(codes), codec("codec_roundtrip").decode(codes))


def test_float16_weights_run_with_reasonable_quality():
    # Half precision is for GPU speed, not parity; it must still run everywhere and be close.
    case = "codec_roundtrip"
    c = Codec.from_gguf(GOLDEN / case / "model.gguf", dtype=torch.float16)
    audio = c.decode(dump(case, "codec_dec_codes_in"))
    gold = dump(case, "audio").astype(np.float64)
    assert audio.dtype == np.float32
    snr = 10 * np.log10(np.mean(gold ** 2) / np.mean((audio - gold) ** 2))
    assert snr > 35
