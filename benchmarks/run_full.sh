#!/usr/bin/env bash
# The full benchmark, on an otherwise idle machine (about 25-35 min on 2 cores, ~13 GB RAM peak):
#   1. builds the random-weight checkpoints that are missing (0.6B ~5 min, 1.7B ~10 min);
#   2. runs benchmarks/bench.py: memory bandwidth, then our engine and the official qwen-tts at
#      0.6B and 1.7B, float32 and bfloat16, greedy and sampled, 20 frames, threads = cores,
#      and the decoder modes; writes benchmarks/results/results.{json,md} and BENCHMARKS.md.
# Extra arguments go to bench.py, e.g. `bash benchmarks/run_full.sh --models 0.6B --frames 3`.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="${CHECKPOINT_ROOT:-/tmp}"
MODELS="${MODELS:-0.6B 1.7B}"

for model in $MODELS; do
    out="$ROOT/qwen3-$model-random"
    if [ ! -f "$out/model.safetensors" ]; then
        echo "building $out (random weights, official classes)"
        rm -rf "$out.partial"
        PYTHONPATH=tools/oracle/stubs:tools/oracle nice -n 19 .oracle-venv/bin/python \
            benchmarks/make_random_checkpoint.py --model "$model" --out "$out.partial"
        mv "$out.partial" "$out"
    fi
done

# shellcheck disable=SC2086
exec .venv/bin/python benchmarks/bench.py --checkpoint-root "$ROOT" --models $MODELS "$@"
