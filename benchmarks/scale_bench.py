"""What a global batch in micro-batches costs, and what loop-count bucketing saves.

On `small` at batch 32 (seq_len 64 by default, so it runs on a CPU in a minute or two):

1. accumulation: fixed4 steps of 32 sequences in 4 micro-batches of 8 against the 32 in one forward
   (target: under 3 % slower). Same weights, same step indices; repeats interleaved (A B A B ...), each
   repeat timing `--steps` whole optimizer steps; medians.
2. bucketing: parcae (Poisson(8) loop counts per sequence) in 4 micro-batches of 8, rows in order vs
   sorted by count. The FLOP model's padding (`model.flops`: the expectation over the sampler, and the
   exact count of the timed steps' splits), the padded row-rounds of those splits, and the measured
   step time beside it, with one forward of 32 for reference (target: bucketing removes at least half
   of the padding of the unbucketed micro-batches).
3. workers: fixed4 steps of 32 sequences on 2 data-parallel workers (workers/train/distributed.py: two
   processes of a gloo process group, `--threads` torch threads each, 16 sequences per worker, the
   gradient all-reduced) against one process doing the 32 (ideal: 2x the throughput, when the machine
   has two free cores). The processes are spawned without Ray: the ratio is DDP's, not the queue's
   start-up. The load average is printed beside it: on a shared VM it decides the result.

    PYTHONPATH=. .venv/bin/python benchmarks/scale_bench.py [--seq-len 64] [--repeats 5] [--steps 2] [--device cpu]

Prints a table and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BATCH, MICRO = 32, 8


def trainer(recipe: str, seq_len: int, micro: int | None, bucketing: bool, out: Path, device: str, gang=None):
    from looplab.workers.reporter import SilentReporter
    from looplab.workers.train.spec import Spec
    from looplab.workers.train.trainer import SOLO, Trainer

    spec = Spec.from_dict(
        {
            "recipe": recipe,
            "size": "small",
            "seq_len": seq_len,
            "batch_size": BATCH,
            "tokens": 10**9,
            "micro_batch_size": micro,
            "bucketing": bucketing,
            "device": device,
        }
    )
    t = Trainer(spec, SilentReporter(), out, gang or SOLO)
    t.state.total_steps = 10**6
    return t


def time_steps(t, first: int, steps: int) -> float:
    """Seconds per optimizer step over steps first..first+steps-1 (the schedule does not matter)."""
    t0 = time.perf_counter()
    for step in range(first, first + steps):
        t._train_step(t.model, t.forward_model, t.opts, step, 1.0, 0.0)
    return (time.perf_counter() - t0) / steps


def interleaved(trainers: dict, repeats: int, steps: int) -> dict[str, float]:
    """Median seconds per step of each trainer, repeats interleaved, each repeat on the same steps."""
    for t in trainers.values():  # warm-up: allocation, first-touch
        time_steps(t, 10**5, 1)
    times: dict[str, list[float]] = {name: [] for name in trainers}
    for r in range(repeats):
        for name, t in trainers.items():
            times[name].append(time_steps(t, r * steps, steps))
    return {name: statistics.median(v) for name, v in times.items()}


def worker_rank(
    rank: int, world: int, tmp: str, seq_len: int, repeats: int, steps: int, threads: int
) -> None:
    """One rank of the workers section (spawned): its seconds per step of each repeat, to rank0.json."""
    import torch
    import torch.distributed as dist

    from looplab.workers.train.distributed import Ranks

    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/pg", rank=rank, world_size=world)
    try:
        t = trainer("fixed4", seq_len, None, True, Path(tmp) / f"w{rank}", "cpu", gang=Ranks(rank, world))
        time_steps(t, 10**5, 1)  # warm-up
        times = [time_steps(t, r * steps, steps) for r in range(repeats)]
        if rank == 0:
            (Path(tmp) / "rank0.json").write_text(json.dumps(times))
        del t  # DDP and its reducer before the process group
        gc.collect()
    finally:
        dist.destroy_process_group()


def data_parallel(seq_len: int, repeats: int, steps: int, threads: int, tmp: Path) -> dict:
    """Seconds per step of one process against 2 workers on the same steps, with the load average."""
    import torch.multiprocessing as mp

    load_before = os.getloadavg()
    one = trainer("fixed4", seq_len, None, True, tmp / "w_one", "cpu")
    time_steps(one, 10**5, 1)
    one_s = statistics.median(time_steps(one, r * steps, steps) for r in range(repeats))
    del one
    mp.spawn(worker_rank, args=(2, str(tmp), seq_len, repeats, steps, threads), nprocs=2, join=True)
    two_s = statistics.median(json.loads((tmp / "rank0.json").read_text()))
    return {
        "recipe": "fixed4",
        "one_worker_s": one_s,
        "two_workers_s": two_s,
        "speedup": one_s / two_s,
        "ideal": 2.0,
        "threads_per_worker": threads,
        "load_avg_1m": [load_before[0], os.getloadavg()[0]],
        "cpus": os.cpu_count(),
    }


def padding_of_timed_steps(t, repeats: int, steps: int) -> dict[str, float]:
    """Over the steps the timing ran: the FLOP model's exact padding of their splits and padded rounds."""
    from looplab.model.flops import step_flops
    from looplab.workers.train.batching import padded_rounds, split_step

    spec, waste, padded, rounds = t.spec, [], 0, 0
    for step in range(repeats * steps):
        counts = t.model.sample_loops(spec.batch_size, step, spec.seed).tolist()
        (forwards,) = split_step(counts, spec.micro_batch_size, spec.bucketing)
        waste.append(step_flops(t.cfg, counts, forwards=forwards).padding_waste)
        padded += padded_rounds(counts, forwards)
        rounds += sum(counts)
    return {
        "padding_waste": statistics.mean(waste),
        "padded_row_rounds_per_step": padded / (repeats * steps),
        "own_row_rounds_per_step": rounds / (repeats * steps),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=2, help="optimizer steps per timed repeat")
    p.add_argument(
        "--threads", type=int, default=1, help="torch intra-op threads (the VM's cores are shared)"
    )
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (each step ends in a host sync)")
    args = p.parse_args()

    import torch

    from looplab.model.flops import training_flops

    torch.set_num_threads(args.threads)
    tmp = Path(tempfile.mkdtemp(prefix="scale_bench_"))
    out: dict = {
        "bench": "scale",
        "size": "small",
        "batch": BATCH,
        "micro_batch": MICRO,
        "seq_len": args.seq_len,
        "device": args.device,
        "threads": args.threads,
        "repeats": args.repeats,
        "steps": args.steps,
    }

    # 1. accumulation overhead, fixed loop counts (nothing to bucket)
    acc = interleaved(
        {
            "whole": trainer("fixed4", args.seq_len, None, True, tmp / "a1", args.device),
            "micro": trainer("fixed4", args.seq_len, MICRO, True, tmp / "a2", args.device),
        },
        args.repeats,
        args.steps,
    )
    slowdown = acc["micro"] / acc["whole"] - 1
    out["accumulation"] = {
        "recipe": "fixed4",
        "whole_s": acc["whole"],
        "micro_s": acc["micro"],
        "slowdown": slowdown,
        "target": 0.03,
        "ok": slowdown < 0.03,
    }
    print(
        f"accumulation (fixed4, small, {BATCH} x {args.seq_len}): one forward {acc['whole'] * 1e3:.0f} ms/step, "
        f"{BATCH // MICRO} x {MICRO} {acc['micro'] * 1e3:.0f} ms/step: {slowdown:+.1%} (target < +3%)"
    )

    # 2. bucketing, parcae's per-sequence counts
    configs = {"whole": (None, False), "micro": (MICRO, False), "bucketed": (MICRO, True)}
    parcae = {
        name: trainer("parcae", args.seq_len, m, b, tmp / f"b_{name}", args.device)
        for name, (m, b) in configs.items()
    }
    step_s = interleaved(parcae, args.repeats, args.steps)
    cfg = parcae["whole"].cfg
    rows = {}
    print(f"\nbucketing (parcae, small, {BATCH} x {args.seq_len}, Poisson(8) per sequence):")
    print(
        f"  {'split':26s} {'model padding':>13s} {'timed steps':>11s} {'padded/own row-rounds':>22s} {'ms/step':>8s}"
    )
    for name, (m, b) in configs.items():
        expected = training_flops(cfg, BATCH, micro_batch_size=m, bucketing=b).padding_waste
        timed = padding_of_timed_steps(parcae[name], args.repeats, args.steps)
        rows[name] = {"expected_padding_waste": expected, **timed, "step_s": step_s[name]}
        label = "one forward of 32" if m is None else f"4 x {m}, {'bucketed' if b else 'rows in order'}"
        print(
            f"  {label:26s} {expected:13.1%} {timed['padding_waste']:11.1%} "
            f"{timed['padded_row_rounds_per_step']:10.1f} / {timed['own_row_rounds_per_step']:<9.1f} "
            f"{step_s[name] * 1e3:8.0f}"
        )
    removed = 1 - rows["bucketed"]["expected_padding_waste"] / rows["micro"]["expected_padding_waste"]
    out["bucketing"] = {
        "recipe": "parcae",
        **rows,
        "padding_removed": removed,
        "target": 0.5,
        "ok": removed >= 0.5,
    }
    print(
        f"  bucketing removes {removed:.0%} of the micro-batches' padding by the FLOP model (target >= 50%); "
        f"step time {step_s['bucketed'] / step_s['micro'] - 1:+.1%} against rows in order"
    )

    # 3. data-parallel workers: one process against 2 (gloo), the same steps
    if args.device == "cpu":
        dp = data_parallel(args.seq_len, args.repeats, args.steps, args.threads, tmp)
        out["workers"] = dp
        tokens = BATCH * args.seq_len
        print(
            f"\nworkers (fixed4, small, {BATCH} x {args.seq_len}, gloo, {args.threads} thread(s) each): one "
            f"{tokens / dp['one_worker_s']:,.0f} tokens/s, two {tokens / dp['two_workers_s']:,.0f} tokens/s: "
            f"{dp['speedup']:.2f}x (ideal 2x on 2 free cores; {dp['cpus']} CPUs, load average "
            f"{dp['load_avg_1m'][0]:.1f} before, {dp['load_avg_1m'][1]:.1f} after)"
        )
    else:
        out["workers"] = None  # a GPU box runs its DDP step in benchmarks/gpu_check.sh (torch.distributed)
    shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
