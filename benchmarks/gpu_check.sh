#!/usr/bin/env bash
# The first thing a GPU box runs. A box as researchers get it has PyTorch preinstalled, no internet and
# a 15-minute slot, so this check uses the box's own python3 (its CUDA torch), installs nothing but the
# carried wheelhouse (benchmarks/gpu_prepare.sh), collects only tests/gpu, and ends within 5 minutes:
# every step below has its own time limit (the limits plus the kill graces sum to at most 300 s), runs
# even if an earlier one failed (except `device`: no CUDA, no check), and writes its figures as it ends.
# Each step passes (its figures hold up), is skipped (with a reason: the box cannot run it) or fails (it
# raised, hit its limit, lacks a field or checkpoint, or a figure is outside its sanity range); the
# summary counts the three and prints every skip's and failure's reason.
# The steps, most valuable first (benchmarks/gpu_steps.py says what each runs):
#   wheels          the wheelhouse into $SCRATCH/site (put on PYTHONPATH)
#   device          GPU, versions, the torch APIs the code uses, the jobs' imports
#   gpu_tests       tests/gpu: compiled bf16 training vs eager, CUDA-graph decoding, FlexAttention, MFU
#   train_compiled  lean 86m --compile, 60 steps of 8 x 2,048 tokens: compile seconds, tokens/s, MFU
#   bench_ratios    model_bench.py at 144m: the study's speed ratios, MFU per recipe
#   bench_table     model_bench.py for lean and parcae: 86m training, decode at 2k/16k x 1/8/64
#   micro_batch     accumulation in micro-batches vs the whole batch at 86m/144m: peak memory, each run fresh
#   loop_buckets    loop-count bucketing off / on: the padding waste the trainer measured
#   exit_rules      the adaptive job on train_compiled's checkpoint: exit rule vs fixed depth, decode
#   ddp             DDP with torch.distributed alone, NCCL (skips on one GPU)
# Figures under $OUT (default benchmarks/results/gpu): STEP.json and STEP.log per step, the jobs'
# events (*.jsonl), model_bench's JSON, and summary.json (each step's outcome, exit status, limit,
# seconds and last log line; rc 124 = it hit its limit; the counts of each outcome), rewritten after
# every step. Exit status 1 when any step failed (a skip is no failure, and no pass).
#
#     bash benchmarks/gpu_check.sh             # the box's python3; PYTHON=path/to/python for another
#     bash benchmarks/gpu_check.sh --venv      # .venv/bin/python instead
#     bash benchmarks/gpu_check.sh --dry-run   # any machine: each step's tiny CPU version, with the
#                                              # packages a box lacks made unimportable, limits x3;
#                                              # python3 without torch: the project's .venv (here or
#                                              # the main checkout's), else $VIRTUAL_ENV's, else it says
#                                              # to pass PYTHON=
set -u
cd "$(dirname "$0")/.."
dry=0
venv=0
which=0
for arg in "$@"; do
    case $arg in
    --dry-run) dry=1 ;;
    --venv) venv=1 ;;
    --which-python) which=1 ;; # print the interpreter the check would use, and stop
    *)
        echo "usage: bash benchmarks/gpu_check.sh [--dry-run] [--venv] [--which-python]" >&2
        exit 2
        ;;
    esac
done
if [ -z "${PYTHON:-}" ]; then
    PYTHON=python3
    [ $venv = 1 ] && PYTHON=.venv/bin/python
    # a dry run works on any machine: when python3 has no torch (a laptop, a CI box), the project's
    # environment: .venv here, else the main checkout's (this may be a git worktree), else $VIRTUAL_ENV's
    if [ $dry = 1 ] && [ $venv = 0 ] && ! python3 -c "import torch" >/dev/null 2>&1; then
        common=$(git rev-parse --path-format=absolute --git-common-dir 2>/dev/null || true)
        for candidate in .venv/bin/python "${common:+${common%/.git}/.venv/bin/python}" \
            "${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python}"; do
            if [ -n "$candidate" ] && [ -x "$candidate" ] && "$candidate" -c "import torch" >/dev/null 2>&1; then
                PYTHON=$candidate
                echo "gpu_check: python3 has no torch; using the project's environment, $PYTHON"
                break
            fi
        done
    fi
fi
if ! "$PYTHON" -c "import torch" >/dev/null 2>&1; then
    echo "gpu_check: $PYTHON ($(command -v "$PYTHON" || echo 'not found')) cannot import torch;" \
        "pass the python of an environment that has it: PYTHON=/path/to/venv/bin/python bash $0 $*" \
        "(or --venv for this checkout's .venv/bin/python)" >&2
    exit 2
fi
if [ $which = 1 ]; then
    echo "$PYTHON"
    exit 0
fi
OUT="${OUT:-benchmarks/results/gpu}"
WHEELS="${WHEELS:-benchmarks/wheelhouse}"
SCRATCH="${SCRATCH:-${TMPDIR:-/tmp}/looplab-gpu-check}" # installed wheels, checkpoints: not in $OUT
GRACE=2 # seconds between a step's TERM at its limit and its KILL
mkdir -p "$OUT" "$SCRATCH"
export PYTHONPATH="$PWD:$SCRATCH/site${PYTHONPATH:+:$PYTHONPATH}"
export LOOPLAB_CACHE="${LOOPLAB_CACHE:-$SCRATCH/cache}" HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
flags=(--out "$OUT" --scratch "$SCRATCH" --wheels "$WHEELS")
scale=1
if [ $dry = 1 ]; then
    flags+=(--dry-run)
    scale=3 # a small shared CPU is slower at the tiny versions than a box's GPU at the real ones
    export LOOPLAB_BOX_IMPORTS=1 PYTHONPATH="$PWD/benchmarks/box_imports:$PYTHONPATH"
    # one torch thread per process: on a few shared cores more threads fight for them, and a tiny
    # model's step times swing tenfold from one run to the next
    export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
fi
echo "gpu_check: $PYTHON ($(command -v "$PYTHON")), out $OUT, dry run $dry"
summary=("\"dry_run\": $([ $dry = 1 ] && echo true || echo false)")

step() { # step NAME SECONDS: run gpu_steps.py NAME under a time limit, log it, record its outcome
    local name=$1 limit=$(($2 * scale)) start status outcome says
    start=$(date +%s)
    timeout --kill-after="$GRACE" "$limit" "$PYTHON" benchmarks/gpu_steps.py "$name" "${flags[@]}" \
        >"$OUT/$name.log" 2>&1
    status=$?
    case $status in # gpu_steps.py's EXIT
    0) outcome=passed ;;
    4) outcome=skipped ;;
    *) outcome=failed ;;
    esac
    if [ $status = 124 ] || [ $status = 137 ]; then
        says="hit its limit of $limit s"
    else # the step's last line says its outcome and why, as JSON text: no control characters, escaped
        says=$(tail -n 1 "$OUT/$name.log" | cut -c1-300 | tr -d '\000-\037')
        says=${says//\\/\\\\}
        says=${says//\"/\\\"}
    fi
    counts[$outcome]=$((counts[$outcome] + 1))
    summary+=("\"$name\": {\"outcome\": \"$outcome\", \"rc\": $status, \"limit\": $limit, \"seconds\": $(($(date +%s) - start)), \"says\": \"$says\"}")
    local tally="\"counts\": {\"passed\": ${counts[passed]}, \"skipped\": ${counts[skipped]}, \"failed\": ${counts[failed]}}"
    (IFS=,; echo "{${summary[*]},$tally}") >"$OUT/summary.json"
    echo "$name: $outcome (rc $status) in $(($(date +%s) - start)) s: $says"
    [ $outcome = skipped ] && skipped+=("$name: $says")
    [ $outcome = failed ] && failed+=("$name: $says")
    [ $outcome != failed ]
}
declare -A counts=([passed]=0 [skipped]=0 [failed]=0)
failed=()
skipped=()

step wheels 8
step device 10 || { cat "$OUT/device.log"; exit 1; }
step gpu_tests 70
step train_compiled 50
step bench_ratios 35
step bench_table 35
step micro_batch 20
step loop_buckets 16
step exit_rules 16
step ddp 20
cat "$OUT/summary.json"
echo
echo "gpu_check: ${counts[passed]} passed, ${counts[skipped]} skipped, ${counts[failed]} failed"
for line in "${skipped[@]}"; do echo "  skipped $line"; done
for line in "${failed[@]}"; do echo "  failed $line" >&2; done
[ ${#failed[@]} = 0 ] || exit 1
