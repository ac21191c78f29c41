#!/usr/bin/env bash
# The first thing a GPU machine runs, in this order, each step under its own time limit so the whole
# check ends within 8 minutes on one H200 (the limits below plus the kill grace sum to 470 s):
#   gpu_tests        the GPU-marked tests (compiled bf16 training vs eager, CUDA-graph decoding, Flex,
#                    MFU, the decode-benchmark smoke run); the `slow` ones are left to the steps below
#   train_compiled   `--compile` training of lean at 86m (8 x 2048 tokens a step, 120 steps; its summary has mfu): the
#                    compiled parts on a real GPU, compile_seconds and tokens/s in its log
#   bench_ratios     model_bench.py on CUDA: the study's training-speed ratios and MFU at 144m
#   bench_table      model_bench.py on CUDA: the per-recipe table
# Every step runs even if an earlier one failed; results go under $OUT (default benchmarks/results/gpu):
# one log per step, the benchmarks' JSON files, the training run's artifacts, and summary.json with each
# step's exit status and seconds (124 = it hit its time limit).
#
#     bash benchmarks/gpu_check.sh            # PYTHON=path/to/python to use another interpreter (CUDA torch)
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-benchmarks/results/gpu}"
PYTHON="${PYTHON:-.venv/bin/python}"
GRACE=5 # seconds between a step's TERM at its limit and its KILL
mkdir -p "$OUT"
summary=()

step() { # step NAME SECONDS COMMAND...: run COMMAND under a time limit, log it, record its status
    local name=$1 limit=$2 start status
    shift 2
    start=$(date +%s)
    timeout --kill-after="$GRACE" "$limit" "$@" >"$OUT/$name.log" 2>&1
    status=$?
    summary+=("\"$name\": {\"rc\": $status, \"seconds\": $(($(date +%s) - start))}")
    echo "$name: rc $status ($(tail -n 1 "$OUT/$name.log" | cut -c1-200))"
}

timeout 30 "$PYTHON" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name())" \
    >"$OUT/device.log" 2>&1 || { cat "$OUT/device.log"; exit 1; }

step gpu_tests 140 "$PYTHON" -m pytest -m "gpu and not slow" -q -p no:cacheprovider tests
rm -rf "$OUT/train_compiled" # a fresh run, not a resume of the last check's
step train_compiled 105 "$PYTHON" -m workers.train --preset lean --size 86m --batch-size 8 --tokens $((120 * 8 * 2048)) \
    --compile --device cuda --eval-every 100000 --eval-tokens 16384 --eval-loops 4 --ckpt-every 100000 \
    --out "$OUT/train_compiled"
step bench_ratios 75 "$PYTHON" benchmarks/model_bench.py --device cuda --section ratios --ratio-steps 3 --out "$OUT"
step bench_table 100 "$PYTHON" benchmarks/model_bench.py --device cuda --section table --train-steps 2 --out "$OUT"

(IFS=,; echo "{${summary[*]}}") >"$OUT/summary.json"
cat "$OUT/summary.json"
