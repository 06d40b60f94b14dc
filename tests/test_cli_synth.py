"""``s2studio synth`` in a subprocess, as a user runs it."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

GOLDEN = pathlib.Path(__file__).resolve().parent / "data" / "golden"
TTS = GOLDEN / "tts_f32"
CLONE = GOLDEN / "clone_f32_qknorm"


def synth(*args: str, cwd: pathlib.Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "s2studio", "synth", "--codec-cpu", "--log-level", "error", *args],
                          capture_output=True, text=True, timeout=300, cwd=cwd)


def test_writes_playable_wav_and_codes(tmp_path):
    out, codes = tmp_path / "hello.wav", tmp_path / "codes.npy"
    r = synth("-m", str(TTS / "model.gguf"), "--text", "Hello world, this is a tiny test of the speech system.",
              "--temp", "0", "--max-tokens", "16", "--min-tokens-before-end", "16", "--no-ras",
              "--tokenizer-mode", "s2cpp", "-o", str(out), "--codes-out", str(codes))
    assert r.returncode == 0, r.stderr
    audio, sr = sf.read(out, dtype="float32")
    info = sf.info(out)
    assert sr == 44100 and info.subtype == "FLOAT" and len(audio) == 16 * 2048
    np.testing.assert_array_equal(np.load(codes), np.load(TTS / "dumps" / "codes.npy"))
    assert np.abs(audio - np.load(TTS / "dumps" / "audio.npy")).max() <= 1e-2
    assert "seed" in r.stderr and "real-time factor" in r.stderr
    info = synth("-m", str(TTS / "model.gguf"), "--text", "Metrics please.", "--max-tokens", "3",
                 "--log-level", "info", "-o", str(tmp_path / "m.wav"))
    metrics = [line for line in info.stderr.splitlines() if "[Metrics]" in line]
    assert len(metrics) == 1 and "ms_per_frame=" in metrics[0] and "peak_rss_mb=" in metrics[0], info.stderr
    fields = dict(kv.split("=") for kv in metrics[0].split("] ", 1)[1].split())
    # 3 frames, default stride 4: one codec chunk, and the first audio comes after the prefill.
    assert float(fields["first_audio_ms"]) >= float(fields["prefill_ms"]) > 0
    assert float(fields["chunk_ms"]) == pytest.approx(float(fields["codec_ms"]), abs=1)
    (tmp_path / "m.wav").unlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["codes.npy", "hello.wav"]  # no temp files


def test_clone_with_s2cpp_short_flags_and_stream_file(tmp_path):
    out = tmp_path / "clone.wav"
    r = synth("-m", str(CLONE / "model.gguf"), "-text", "A short test.", "-pa", str(CLONE / "reference.wav"),
              "-pt", "This is the reference voice.", "-max-tokens", "10", "-temp", "0.7", "--seed", "4",
              "--stream-file", "--stream-decode-stride", "3", "-o", str(out))
    assert r.returncode == 0, r.stderr
    info = sf.info(out)
    assert info.samplerate == 44100 and info.subtype == "PCM_16" and info.frames % 2048 == 0 and info.frames > 0


def test_seed_reproduces_the_same_take(tmp_path):
    args = ["-m", str(TTS / "model.gguf"), "--text", "Again and again.", "--max-tokens", "12", "--seed", "99"]
    assert synth(*args, "-o", str(tmp_path / "a.wav"), "--codes-out", str(tmp_path / "a.npy")).returncode == 0
    assert synth(*args, "-o", str(tmp_path / "b.wav"), "--codes-out", str(tmp_path / "b.npy")).returncode == 0
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy"))
    # Multi-threaded float reductions may differ in the last bits between runs.
    np.testing.assert_allclose(sf.read(tmp_path / "a.wav")[0], sf.read(tmp_path / "b.wav")[0], atol=1e-5, rtol=0)


def one_line_error(r: subprocess.CompletedProcess, *fragments: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


def test_bad_inputs_give_one_clear_line_and_no_output(tmp_path):
    out = tmp_path / "out.wav"
    one_line_error(synth("-m", str(tmp_path / "missing.gguf"), "-o", str(out)), "missing.gguf", "does not exist")
    one_line_error(synth("-m", str(TTS / "model.gguf"), "--text", " ", "-o", str(out)), "empty")
    one_line_error(synth("-m", str(TTS / "model.gguf"), "-pa", str(CLONE / "reference.wav"), "-o", str(out)),
                   "--prompt-text")
    bad_audio = tmp_path / "ref.wav"
    bad_audio.write_text("not audio")
    one_line_error(synth("-m", str(CLONE / "model.gguf"), "-pa", str(bad_audio), "-pt", "hi", "-o", str(out)),
                   "ref.wav")
    one_line_error(synth("-m", str(TTS / "model.gguf"), "--vulkan", "0", "-o", str(out)), "not available")
    one_line_error(synth("-m", str(TTS / "model.gguf"), "--device", "cuda:7", "-o", str(out)), "cuda")
    one_line_error(synth("-m", str(TTS / "model.gguf"), "--text", "say <|im_end|>", "-o", str(out)), "<|im_end|>")
    assert not out.exists() and list(tmp_path.iterdir()) == [bad_audio]


def test_segment_sentences_inserts_pauses(tmp_path):
    out, codes = tmp_path / "two.wav", tmp_path / "two.npy"
    r = synth("-m", str(TTS / "model.gguf"), "--text", "First sentence. Second one!", "--segment-sentences",
              "--sentence-pause-ms", "50", "--max-tokens", "4", "--min-tokens-before-end", "4", "--seed", "1",
              "-o", str(out), "--codes-out", str(codes))
    assert r.returncode == 0, r.stderr
    assert "2 segment(s)" in r.stderr
    assert np.load(codes).shape == (10, 8)
    assert sf.info(out).frames == 8 * 2048 + int(0.05 * 44100)


@pytest.mark.parametrize("flag, value, fragment", [
    ("--sentence-pause-ms", "10000000", "0..10000"), ("--max-tokens", "2000000", "1..32768"),
    ("--max-tokens", "1000000000", "1..32768"), ("--temp", "6", "0..5"), ("--top-p", "1.5", "0..1"),
    ("--top-k", "-3", "0..4096"), ("--seed", "-1", "0..18446744073709551615"), ("--threads", "-2", "0..4096"),
    ("--stream-decode-stride", "5000", "1..1024"), ("--segment-max-chars", "-1", "0..100000"),
    ("--temp", "nan", "--temp"), ("--voice-cache-mb", "70000", "0..65536"),
])
def test_out_of_range_flags_are_usage_errors(tmp_path, flag, value, fragment):
    out = tmp_path / "out.wav"
    r = synth("-m", str(TTS / "model.gguf"), flag, value, "-o", str(out))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr  # one line, no usage block
    assert flag in lines[0] and fragment in lines[0] and "s2studio synth --help" in lines[0], lines[0]
    assert not out.exists()


def test_budget_past_the_model_context_is_one_clear_line(tmp_path):
    """The tiny model's context is 4096 positions: 4090 frames plus the prompt do not fit."""
    out = tmp_path / "out.wav"
    one_line_error(synth("-m", str(TTS / "model.gguf"), "--max-tokens", "4090", "-o", str(out)),
                   "max_new_tokens 4090", "context of 4096")
    assert not out.exists()


def test_text_longer_than_the_context_runs_in_linear_memory(tmp_path):
    """12 000 characters are ~5300 prompt tokens, more than the tiny model's 4096-position
    context: the text is split into two segments that fit. Before, one prefill held its H·T²
    attention scores (and copies): ~1.4 GB peak here, 24 GB (OOM) for 50 000 characters."""
    text = ("The quick brown fox jumps over the lazy dog. " * 300)[:12_000]
    out = tmp_path / "long.wav"
    r = synth("-m", str(TTS / "model.gguf"), "--text", text, "--max-tokens", "2", "--log-level", "info",
              "-o", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "2 segment(s)" in r.stderr
    metrics = next(line for line in r.stderr.splitlines() if "[Metrics]" in line)
    peak_mb = float(metrics.split("peak_rss_mb=")[1].split()[0])
    assert peak_mb < 800, metrics


def test_cuda_graphs_on_gives_the_same_take_on_the_cpu(tmp_path):
    """On the CPU ``--cuda-graphs on`` runs the static decode steps eagerly: the same numbers as the
    dynamic steps of the default (tests/engine/test_static_step.py), so the same seeded take. The
    debug line shows the flag reached the take (the outputs alone cannot tell)."""
    args = ["-m", str(TTS / "model.gguf"), "--text", "Again and again.", "--max-tokens", "8",
            "--min-tokens-before-end", "8", "--seed", "5", "--log-level", "debug"]
    on = synth(*args, "--cuda-graphs", "on", "-o", str(tmp_path / "on.wav"),
               "--codes-out", str(tmp_path / "on.npy"))
    default = synth(*args, "-o", str(tmp_path / "d.wav"), "--codes-out", str(tmp_path / "d.npy"))
    assert on.returncode == 0 and default.returncode == 0, on.stderr[-2000:] + default.stderr[-2000:]
    assert "decode steps: static, eager (cuda_graphs=on)" in on.stderr
    assert "decode steps: dynamic (cuda_graphs=auto)" in default.stderr
    codes = np.load(tmp_path / "on.npy")
    assert codes.shape == (10, 8)
    np.testing.assert_array_equal(codes, np.load(tmp_path / "d.npy"))
    # As test_seed_reproduces_the_same_take: multi-threaded codec reductions may differ in the last bits.
    np.testing.assert_allclose(sf.read(tmp_path / "on.wav")[0], sf.read(tmp_path / "d.wav")[0],
                               atol=1e-5, rtol=0)


def test_unknown_cuda_graphs_mode_is_a_usage_error(tmp_path):
    out = tmp_path / "out.wav"
    r = synth("-m", str(TTS / "model.gguf"), "--cuda-graphs", "always", "-o", str(out))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert "--cuda-graphs" in last and "'always'" in last and "auto" in last and "compile" in last, last
    assert not out.exists()


@pytest.mark.parametrize("command", [["synth"], ["serve"], ["voices", "add", "me.wav", "--text", "hi"]])
def test_cuda_graphs_reaches_the_engine_settings(command):
    from s2studio.cli import build_parser
    from s2studio.cli.options import CUDA_GRAPH_MODES, engine_settings
    from s2studio.engine.model.static_step import MODES

    assert CUDA_GRAPH_MODES == MODES  # the parser's choices are the engine's modes
    parser = build_parser()
    command = [*command, "-m", str(TTS / "model.gguf")]  # a file: no lookup in the user's models folder
    assert engine_settings(parser.parse_args(command)).cuda_graphs == "auto"
    assert engine_settings(parser.parse_args([*command, "--cuda-graphs", "eager"])).cuda_graphs == "eager"


def test_a_dialogue_from_the_command_line(tmp_path):
    # --speaker-voice gives a speaker its saved voice: the CLI makes the dialogue takes the app makes.
    voices = tmp_path / "voices"
    save = synth("-m", str(CLONE / "model.gguf"), "--voice-dir", str(voices), "--voice", "alice", "--save-voice",
                 "-pa", str(CLONE / "reference.wav"), "-pt", "This is the reference voice.", "--text", "Hi.",
                 "--max-tokens", "4", "-o", str(tmp_path / "saved.wav"))
    assert save.returncode == 0, save.stderr
    out, codes = tmp_path / "dialogue.wav", tmp_path / "dialogue.npy"
    r = synth("-m", str(CLONE / "model.gguf"), "--voice-dir", str(voices), "--text",
              "<|speaker:0|>Hello there. <|speaker:1|>Good morning!", "--speaker-voice", "1=alice", "--seed", "5",
              "--max-tokens", "6", "--sentence-pause-ms", "100", "-o", str(out), "--codes-out", str(codes))
    assert r.returncode == 0, r.stderr
    audio, _ = sf.read(out, dtype="float32")
    frames = np.load(codes).shape[1]
    assert 0 < frames <= 12 and len(audio) == frames * 2048 + round(0.1 * 44100)
    bad = synth("-m", str(CLONE / "model.gguf"), "--text", "<|speaker:1|>Hi.", "--speaker-voice", "one=alice",
                "-o", str(tmp_path / "bad.wav"))
    assert bad.returncode == 2 and "SPEAKER=VOICE" in bad.stderr
