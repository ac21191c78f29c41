#!/usr/bin/env bash
# The first thing a GPU machine runs: the GPU-marked tests, then model_bench.py on CUDA (the study's
# training-speed ratios at 144m, then the per-recipe table), each under its own time limit so the whole
# check ends within 8 minutes on one H200. Every step runs even if an earlier one failed; results go
# under $OUT (default benchmarks/results/gpu): one log per step, the benchmark's JSON files, and
# summary.json with each step's exit status and seconds (124 = it hit its time limit).
#
#     bash benchmarks/gpu_check.sh            # PYTHON=path/to/python to use another interpreter (CUDA torch)
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-benchmarks/results/gpu}"
PYTHON="${PYTHON:-.venv/bin/python}"
mkdir -p "$OUT"
summary=()

step() {  # step NAME SECONDS COMMAND...: run COMMAND under a time limit, log it, record its status
    local name=$1 limit=$2 start status
    shift 2
    start=$(date +%s)
    timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1
    status=$?
    summary+=("\"$name\": {\"rc\": $status, \"seconds\": $(($(date +%s) - start))}")
    echo "$name: rc $status ($(tail -n 1 "$OUT/$name.log" | cut -c1-200))"
}

"$PYTHON" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name())" \
    >"$OUT/device.log" 2>&1 || { cat "$OUT/device.log"; exit 1; }

step gpu_tests 150 "$PYTHON" -m pytest -m gpu -q -p no:cacheprovider tests
step bench_ratios 150 "$PYTHON" benchmarks/model_bench.py --device cuda --section ratios --out "$OUT"
step bench_table 170 "$PYTHON" benchmarks/model_bench.py --device cuda --section table --out "$OUT"

(IFS=,; echo "{${summary[*]}}") >"$OUT/summary.json"
cat "$OUT/summary.json"
