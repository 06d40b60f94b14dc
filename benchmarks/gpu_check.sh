#!/usr/bin/env bash
# The GPU checks of issue 14 §5 and issue 27 §7, as one script for a machine with a CUDA GPU (~15 minutes):
#   bash benchmarks/gpu_check.sh [OUT_DIR]
# Needs a Python environment with a CUDA build of torch and this project (pip install -e .).
# 1. the tests marked `gpu` (CUDA placement against the CPU, CUDA graphs captured and replayed
#    with the eager codes); 2. the full-size F16 model (built once, ~10 GB) on the GPU with the
#    dynamic steps, the static steps run eagerly, and CUDA graphs, so their ms/frame compare
#    within one run; 3. the codec on the GPU (one-shot and streaming); 4. the voice prefix cache
#    on the GPU (takes of 1, 3 and 10 sentences with a 10 s voice, cache off/cold/warm, checked
#    sample-identical; the tests marked gpu check it alone, with CUDA graphs and batched too);
#    5. batched decoding on the GPU: 1, 4 and 8 takes at once against one alone (row-identical).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-gpu-check}; mkdir -p "$OUT"
PY=${PYTHON:-python}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
$PY -m pytest -q -m gpu tests/engine 2>&1 | tee "$OUT/tests.txt"
for mode in off eager on; do
  $PY benchmarks/bench_engine.py --make full-f16 --cache-dir "${MODELS:-bench-models}" --device cuda \
      --cuda-graphs $mode --frames 48 --prompt-tokens 48 --json 2>>"$OUT/bench.err" | tee -a "$OUT/bench.jsonl"
done
$PY benchmarks/codec_bench.py --model "${MODELS:-bench-models}/s2-full-f16.gguf" --device cuda --seconds 10 \
    --strides 4,16 --json 2>>"$OUT/codec.err" | tee "$OUT/codec.json"
$PY benchmarks/bench_voice_cache.py --model "${MODELS:-bench-models}/s2-full-f16.gguf" \
    --tokenizer "${MODELS:-bench-models}/tokenizer-full.json" --device cuda --repeat 2 \
    --json "$OUT/voice_cache.json" 2>>"$OUT/voice_cache.err" | tee "$OUT/voice_cache.txt"
$PY benchmarks/bench_concurrency.py --model "${MODELS:-bench-models}/s2-full-f16.gguf" --device cuda \
    --concurrency 1,4,8 --frames 32 --json 2>>"$OUT/concurrency.err" | tee "$OUT/concurrency.json"
