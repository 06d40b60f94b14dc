"""The benchmark scripts measure the engine as users run it.

A benchmark that imports torch before s2studio runs torch's OpenMP pool with spinning idle
workers (s2studio sets OMP_WAIT_POLICY=PASSIVE, but only before torch loads): its busy-machine
figures then measured the spinning, not the app (bench_engine.py did this until 2026-12-02).
"""

from __future__ import annotations

import ast
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "benchmarks").glob("*.py"))


def _first_line_importing(tree: ast.Module, module: str) -> int | None:
    for node in tree.body:  # module level only: what runs at import
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        if any(n == module or n.startswith(module + ".") for n in names):
            return node.lineno
    return None


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_s2studio_is_imported_before_torch(script):
    tree = ast.parse(script.read_text())
    torch_line = _first_line_importing(tree, "torch")
    if torch_line is None:
        return
    s2_line = _first_line_importing(tree, "s2studio")
    assert s2_line is not None and s2_line < torch_line, \
        f"{script.name} imports torch (line {torch_line}) before s2studio ({s2_line})"


def test_the_checker_finds_a_late_import():
    bad = ast.parse("import torch\nimport s2studio\n")
    assert _first_line_importing(bad, "torch") == 1 and _first_line_importing(bad, "s2studio") == 2


def test_bench_engine_runs_on_a_tiny_model_with_sleeping_threads(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_engine.py"), "--make", "tiny",
                        "--cache-dir", str(tmp_path), "--frames", "3", "--prompt-tokens", "8", "--no-codec",
                        "--bandwidth-gb", "0.05", "--json"],
                       capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "imported before s2studio" not in r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["frames"] == 3 and out["ms_per_frame"] > 0 and out["busy_competitors"] == 0


def test_bench_book_runs_on_the_tiny_model_and_measures_memory(tmp_path):
    tiny = ROOT / "tests" / "data" / "golden" / "tts_f32" / "model.gguf"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_book.py"), "--model", str(tiny), "--codec-cpu",
                        "--parallel", "1,2", "--sentences", "3", "--frames", "3", "--json"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert [row["parallel"] for row in out["rows"]] == [1, 2] and out["rows"][0]["ratio"] == 1.0
    assert out["rows"][0]["audio_s"] == out["rows"][1]["audio_s"] > 0  # the same audio at every N
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_book.py"), "--memory-chars", "20000",
                        "--json"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["chars"] >= 20000 and out["sentences"] > 200 and out["python_peak_mb"] > 0

def test_profile_frame_accounts_for_the_whole_frame(tmp_path):
    out = tmp_path / "profile.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "profile_frame.py"), "--make", "tiny",
                        "--cache-dir", str(tmp_path), "--frames", "4", "--prompt-tokens", "20",
                        "--bandwidth-gb", "0.05", "--json", str(out)],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(out.read_text())
    ops = {(row["phase"], row["op"]) for row in doc["rows"]}
    for phase in ("slow step", "fast calls"):
        assert {(phase, "matmul wqkv"), (phase, "attention (+ KV store)"), (phase, "sampling"),
                (phase, "glue (untimed)")} <= ops
    assert ("slow step", "head (sampled rows)") in ops and ("fast calls", "head (fast output)") in ops
    # The timed ops and the glue add up to the frame; the glue is never negative.
    total = sum(row["ms"] for row in doc["rows"])
    assert abs(total - doc["frame_ms"]) <= 1e-4 * doc["frame_ms"]
    assert all(row["ms"] >= 0 for row in doc["rows"]) and doc["floor_ms"] > 0


def test_profile_frame_batch_profiles_a_step_of_every_take(tmp_path):
    """--batch 3: after the frame alone, a step of 3 takes decoded together by the FrameBatcher;
    only steps with all 3 in them are profiled, and their rows add up to the step (a tiny run:
    the accounting, not the times)."""
    out = tmp_path / "profile.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "profile_frame.py"), "--make", "tiny",
                        "--cache-dir", str(tmp_path), "--frames", "7", "--prompt-tokens", "20",
                        "--bandwidth-gb", "0.05", "--batch", "3", "--json", str(out)],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(out.read_text())
    batch = doc["batch"]
    assert batch["takes"] == 3 and batch["step_ms"] > 0 and batch["throughput_x"] > 0
    ops = {(row["phase"], row["op"]) for row in batch["rows"]}
    assert {("slow step x3", "matmul w1 (gate)"), ("fast calls x3", "sampling"),
            ("fast calls x3", "attention (+ KV store)"), ("slow step x3", "glue (untimed)")} <= ops
    assert abs(sum(row["ms"] for row in batch["rows"]) - batch["step_ms_profiled"]) <= 1e-4 * batch["step_ms_profiled"]
    # steps 3..6 of 7 frames: every take in each
    assert "3 takes at once: 4 steps profiled" in r.stdout
    # the frame alone is still reported as before
    assert abs(sum(row["ms"] for row in doc["rows"]) - doc["frame_ms"]) <= 1e-4 * doc["frame_ms"]


def test_bench_voice_cache_checks_the_cache_is_sample_identical(tmp_path):
    out = tmp_path / "voice.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_voice_cache.py"), "--make", "tiny",
                        "--cache-dir", str(tmp_path), "--frames", "2", "--repeat", "1", "--sizes", "1,3",
                        "--json", str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["identical"] is True
    assert set(doc["medians"]) == {f"{m}/{n}" for m in ("off", "cold", "warm") for n in (1, 3)}
    assert "prefill of 3 sentences / 1 sentence, cache warm" in r.stdout


def test_bench_attention_compares_both_paths():
    """bench_attention.py runs every case on torch's path and the C kernel's (a tiny run: the
    table's shape, not its times)."""
    pytest.importorskip("s2studio.engine.kernels._qdot")
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_attention.py"), "--rounds", "1",
                        "--positions", "3", "--batch", "2"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [line for line in r.stdout.splitlines() if line.startswith("| ") and "case" not in line]
    assert [row.split("|")[1].strip() for row in rows] == ["slow@3", "fast", "batch 2 slow@3"]
    assert all(row.rstrip(" |").endswith("x") for row in rows)


def test_profile_frame_glue_ab_reports_each_setting(tmp_path):
    """--glue-ab: the profiled frames alternate the C glue and torch's; each setting's rows add up
    to its own frame time (a tiny run: the accounting, not the times)."""
    pytest.importorskip("s2studio.engine.kernels._qdot")
    out = tmp_path / "profile.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "profile_frame.py"), "--make", "tiny",
                        "--cache-dir", str(tmp_path), "--frames", "5", "--prompt-tokens", "20",
                        "--bandwidth-gb", "0.05", "--glue-ab", "--json", str(out)],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert set(doc["frame_ms_by_glue"]) == {"c", "torch"}
    for g, frame_ms in doc["frame_ms_by_glue"].items():
        rows = [row for row in doc["rows"] if row["phase"].endswith(f"[{g}]")]
        assert {(f"slow step [{g}]", "qkv split+norm+rope"), (f"fast calls [{g}]", "glue (untimed)")} \
            <= {(row["phase"], row["op"]) for row in rows}
        assert abs(sum(row["ms"] for row in rows) - frame_ms) <= 1e-4 * frame_ms
    assert "C glue / torch glue, profiled frames:" in r.stdout


def test_bench_glue_compares_both_settings():
    """bench_glue.py times every case with torch's ops and the C glue (a tiny run: the table's
    shape, not its times)."""
    pytest.importorskip("s2studio.engine.kernels._qdot")
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_glue.py"), "--rounds", "1", "--calls", "2",
                        "--rows", "1,2"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [line.rsplit(None, 3) for line in r.stdout.splitlines()[2:]]
    assert [row[0] for row in rows] == ["layer glue (1 rows)", "rms_norm (1x2560)", "qkv split+norm+rope (1 rows)",
                                        "layer glue (2 rows)", "rms_norm (2x2560)", "qkv split+norm+rope (2 rows)"]
    assert all(float(row[1]) > 0 and float(row[2]) > 0 for row in rows)


def test_bench_int_rows_cold_gives_x_floor_and_checks_the_untiled_rows():
    """--cold cycles copies of the matrix and gives the time over the read floor; --compare
    checks the untiled rows' outputs against the tiled ones in the same rounds."""
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_int_rows.py"), "--cold", "--cold-mb", "40",
                        "--bandwidth-gb", "0.05", "--shapes", "wo", "--m", "1,3", "--modes", "i16", "--rounds", "1",
                        "--compare", "--threads", "1"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "weights cold (copies cycled), read bandwidth" in r.stdout and "x floor" in r.stdout
    rows = [line.split() for line in r.stdout.splitlines() if line.split()[:1] in (["1"], ["3"])]
    assert len(rows) == 2 and all(row[-1] == "yes" for row in rows), r.stdout


def test_bench_prefill_times_each_path_on_a_q8_0_model(tmp_path):
    """bench_prefill.py on a tiny Q8_0 file: a row per prompt length with the integer (tiled,
    untiled) and exact paths' seconds."""
    from s2studio.devtools.requantize import requantize_gguf

    model = tmp_path / "q8_0.gguf"
    requantize_gguf(ROOT / "tests" / "data" / "golden" / "tts_f32" / "model.gguf", model, "q8_0")
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_prefill.py"), "--model", str(model),
                        "--tokens", "20,40", "--rounds", "1", "--threads", "1"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines()[1].split() == ["tokens", "int", "int", "untiled", "exact"], r.stdout
    rows = [line.split() for line in r.stdout.splitlines()[2:]]
    # seconds with two decimals (a tiny model's prefill may print 0.00)
    assert [row[0] for row in rows] == ["20", "40"] and all(0 <= float(v) < 60 for row in rows for v in row[1:])


def test_bench_schedule_compares_schedules_on_a_q8_0_model(tmp_path):
    """bench_schedule.py on a tiny Q8_0 file, beside one competitor: every schedule (the pool
    with a spin given too) gives the same codes, its row has a time, and the pool did the work."""
    from s2studio.devtools.requantize import requantize_gguf
    from s2studio.engine.kernels import intdot

    model = tmp_path / "q8_0.gguf"
    requantize_gguf(ROOT / "tests" / "data" / "golden" / "tts_f32" / "model.gguf", model, "q8_0")
    schedules = "static,dynamic" + (",pool,pool@0" if intdot.pool_available() else "")
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_schedule.py"), "--model", str(model),
                        "--schedules", schedules, "--rounds", "2", "--frames", "3", "--busy", "1", "--threads", "2",
                        "--json"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["codes_identical"] is True and out["busy"] == 1 and out["bandwidth_GBps"] > 0
    assert [row["schedule"] for row in out["rows"]] == schedules.split(",")
    assert all(row["median_ms"] > 0 for row in out["rows"])
    if intdot.pool_available():
        assert out["pool"]["jobs"] > 0 and out["pool"]["workers"] == 1
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_schedule.py"), "--model", str(model),
                          "--schedules", "dynamic@5"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert bad.returncode == 2 and "a spin is given to the pool only" in bad.stderr
