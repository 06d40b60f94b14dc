"""Codec placement: the pure decision rule, the verdict cache, and the GPU->CPU fallback."""

from __future__ import annotations

import json
import pathlib
import time

import pytest
import torch

from s2studio.engine.codec import Codec
from s2studio.engine.codec import placement as pl
from s2studio.engine.codec.placement import BenchResult, decide

GOLDEN_MODEL = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden" / "codec_roundtrip" / "model.gguf"


# ---- decide ---------------------------------------------------------------------------------

def test_gpu_kept_only_when_clearly_faster():
    cpu = BenchResult(True, 100.0)
    assert decide("auto", "cuda:0", cpu, BenchResult(True, 89.0)).device == "cuda:0"
    assert decide("auto", "cuda:0", cpu, BenchResult(True, 90.0)).device == "cpu"  # not < 0.90x
    assert decide("auto", "cuda:0", cpu, BenchResult(True, 95.0)).device == "cpu"
    assert decide("auto", "mps", cpu, BenchResult(True, 10.0)).device == "mps"


def test_failed_benchmarks():
    p = decide("auto", "cuda:0", BenchResult(True, 100.0), BenchResult(False, error="CUDA out of memory"))
    assert p.device == "cpu" and "out of memory" in p.reason
    p = decide("auto", "cuda:0", BenchResult(False, error="boom"), BenchResult(True, 500.0))
    assert p.device == "cuda:0"


def test_modes_without_benchmark():
    assert decide("cpu", "cuda:0").device == "cpu"
    assert decide("follow", "cuda:1").device == "cuda:1"
    assert decide("follow", "cpu").device == "cpu"
    assert decide("auto", "cpu").device == "cpu"  # engine on CPU: nothing to benchmark
    assert not pl.needs_benchmark("auto", "cpu")
    assert pl.needs_benchmark("auto", "mps")
    assert not pl.needs_benchmark("follow", "cuda:0")
    with pytest.raises(ValueError):
        decide("fastest", "cuda:0")
    with pytest.raises(ValueError):
        decide("auto", "cuda:0")  # auto on a GPU needs the timings


# ---- cache ----------------------------------------------------------------------------------

def test_cache_roundtrip_and_damage(tmp_path):
    path = str(tmp_path / "sub" / "cache.json")
    assert pl.read_cache(path, "k") is None
    p = pl.CodecPlacement("cuda:0", "faster", 10.0, 5.0)
    pl.write_cache(path, "k", p)
    got = pl.read_cache(path, "k")
    assert got == pl.CodecPlacement("cuda:0", "faster", 10.0, 5.0, from_cache=True)
    assert pl.read_cache(path, "other") is None
    pl.write_cache(path, "k2", pl.CodecPlacement("cpu", "slower"))
    assert pl.read_cache(path, "k").device == "cuda:0" and pl.read_cache(path, "k2").device == "cpu"
    pathlib.Path(path).write_text("{not json")
    assert pl.read_cache(path, "k") is None
    pl.write_cache(path, "k", p)  # a damaged cache is replaced, not fatal
    assert json.loads(pathlib.Path(path).read_text())["entries"]["k"]["device"] == "cuda:0"


def test_cache_key_depends_on_model_and_device(tmp_path):
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    a.write_bytes(b"x")
    b.write_bytes(b"xy")
    k = pl.cache_key(str(a), "cuda:0")
    assert k == pl.cache_key(str(a), "cuda:0")
    assert k != pl.cache_key(str(b), "cuda:0")
    assert k != pl.cache_key(str(a), "cuda:1")


def test_default_cache_path_is_user_cache_dir_unless_overridden(monkeypatch, tmp_path):
    import platformdirs

    monkeypatch.delenv("S2STUDIO_CACHE_DIR", raising=False)
    assert pl.default_cache_path().startswith(platformdirs.user_cache_dir("s2studio"))
    monkeypatch.setenv("S2STUDIO_CACHE_DIR", str(tmp_path))
    assert pl.default_cache_path() == str(tmp_path / "codec_placement.json")


# ---- load_placed_codec with fake devices ----------------------------------------------------

class FakeCodec:
    """Quacks like Codec for time_decode: decode takes a fixed time."""

    num_codebooks = 10
    device = torch.device("cpu")

    def __init__(self, name: str, ms: float):
        self.name, self.ms = name, ms

    def decode_tensor(self, codes):
        time.sleep(self.ms / 1e3)
        return torch.zeros(2048 * codes.shape[1])


class Loader:
    def __init__(self, timings: dict, fail: set = frozenset()):
        self.timings, self.fail, self.calls = timings, fail, []

    def __call__(self, device):
        self.calls.append(device)
        if device in self.fail:
            raise RuntimeError(f"{device}: out of memory")
        return FakeCodec(device, self.timings[device])


def test_auto_benchmarks_once_then_uses_the_cache(tmp_path):
    cache = str(tmp_path / "c.json")
    load = Loader({"cpu": 40.0, "cuda:0": 2.0})
    codec, p = pl.load_placed_codec(str(GOLDEN_MODEL), "cuda:0", "auto", cache_path=cache, load=load)
    assert p.device == "cuda:0" and codec.name == "cuda:0" and not p.from_cache
    assert p.gpu_ms < p.cpu_ms
    assert sorted(load.calls) == ["cpu", "cuda:0"]  # both benchmarked, the winner reused
    load2 = Loader({"cpu": 40.0, "cuda:0": 2.0})
    codec, p = pl.load_placed_codec(str(GOLDEN_MODEL), "cuda:0", "auto", cache_path=cache, load=load2)
    assert p.from_cache and p.device == "cuda:0" and load2.calls == ["cuda:0"]  # no benchmark
    # use_cache=False re-measures; now the GPU is slow, so the CPU wins.
    load3 = Loader({"cpu": 5.0, "cuda:0": 40.0})
    codec, p = pl.load_placed_codec(str(GOLDEN_MODEL), "cuda:0", "auto", cache_path=cache, load=load3,
                                    use_cache=False)
    assert p.device == "cpu" and codec.name == "cpu"


def test_gpu_failure_in_benchmark_picks_cpu(tmp_path):
    load = Loader({"cpu": 5.0}, fail={"cuda:0"})
    codec, p = pl.load_placed_codec(str(GOLDEN_MODEL), "cuda:0", "auto", cache_path=str(tmp_path / "c.json"),
                                    load=load)
    assert p.device == "cpu" and codec.name == "cpu" and "out of memory" in p.reason


def test_follow_falls_back_to_cpu_when_gpu_load_fails(tmp_path, caplog):
    load = Loader({"cpu": 1.0}, fail={"cuda:0"})
    with caplog.at_level("WARNING"):
        codec, p = pl.load_placed_codec(str(GOLDEN_MODEL), "cuda:0", "follow", load=load)
    assert codec.name == "cpu" and p.device == "cpu" and "failed" in p.reason
    assert any("falling back to the CPU" in r.getMessage() for r in caplog.records)


def test_cpu_mode_never_touches_the_gpu():
    load = Loader({"cpu": 1.0}, fail={"cuda:0"})
    codec, p = pl.load_placed_codec(str(GOLDEN_MODEL), "cuda:0", "cpu", load=load)
    assert load.calls == ["cpu"] and p.device == "cpu"


def test_real_codec_timing_and_default_loader():
    codec, p = pl.load_placed_codec(str(GOLDEN_MODEL), "cpu", "auto")
    assert isinstance(codec, Codec) and p.device == "cpu" and codec.device.type == "cpu"
    assert pl.time_decode(codec, frames=2, repeats=1) > 0
