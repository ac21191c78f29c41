"""The steps of benchmarks/gpu_check.sh, one function each: what a GPU box runs, and the tiny CPU
version of each that `--dry-run` starts instead (so a machine without a GPU proves every step runs).

    python benchmarks/gpu_steps.py STEP --out DIR [--dry-run] [--scratch DIR] [--wheels DIR]

A step has three outcomes, written to DIR/STEP.json ({"step", "outcome", "rc", "dry_run", "problems",
...its figures}) and told by the exit status (`EXIT`): **passed** (0) with its figures; **skipped** (4)
with a reason, when the box cannot run it (`ddp` on one GPU, no wheelhouse to install), which the
summary counts and prints, never as a pass; **failed** (1) when it raised, a command it ran failed, or
its figures do not hold up (`CHECKS`): a field it reports is missing (a renamed Spec field or result
column), a checkpoint it needs is missing, or a figure is outside its sanity range (MFU not in (0, 1), a
decode step faster than the device's memory bandwidth lets it read the weights, a micro-batched peak
above the whole batch's, bucketing padding no less than none). Jobs stream their events to
DIR/STEP.jsonl as they go, so a step stopped at its time limit still leaves what it measured. Big
artifacts (installed wheels, checkpoints) go under --scratch, never under DIR, which travels back.

Each measured training run of a slot starts from a fresh state (`measured_train`): on a GPU in this
process after `torch.cuda.reset_peak_memory_stats`, on the CPU in a process of its own (the resident-set
maximum cannot be reset), so one run's peak never includes another's.

Steps, most valuable first (gpu_check.sh runs them in this order, each under its own time limit):
  wheels          install the carried wheelhouse into SCRATCH/site (pip --target; unzip without pip)
  device          the GPU, Python/torch/CUDA/triton versions, its peak FLOP/s and bandwidth from the
                  device table, which torch APIs of USED_TORCH_APIS this build has, the jobs' imports
  gpu_tests       pytest on GPU_TEST_FILES (marked gpu, not slow), a per-test limit where
                  pytest-timeout is installed; each test's outcome in gpu_tests.json as it ends
  train_compiled  `python -m looplab.workers.train` lean 86m --compile, 60 steps of 8 x 2,048 tokens:
                  compile_seconds, tokens/s, MFU
  bench_ratios    model_bench.py ratios at 144m, bf16: the study's speed ratios and MFU per recipe
  bench_table     model_bench.py table for lean and parcae: 86m training tokens/s, decode ms/token at
                  144m for 2,000 / 16,000 tokens x batch 1 / 8 / 64 (CUDA graphs), KV-cache MB
  micro_batch     accumulation in 4 micro-batches against the whole batch, 86m / 144m: peak memory
  loop_buckets    parcae in 4 micro-batches with loop-count bucketing off / on: measured padding waste
  exit_rules      the adaptive job on train_compiled's checkpoint: the `state` exit rule at
                  two thresholds vs the fixed depth, per_round / latest KV, decode ms/token at batch 1 / 8
  ddp             DDP with torch.distributed alone (NCCL) on 2+ GPUs; gloo on CPU in the dry run

The slots run the real jobs with the Spec fields they name (MICRO_BATCH_FIELD, BUCKETING_FIELD), the
dry run too, so a name that changed fails there, on CPU, first.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import json
import math
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STEPS = (
    "wheels",
    "device",
    "gpu_tests",
    "train_compiled",
    "bench_ratios",
    "bench_table",
    "micro_batch",
    "loop_buckets",
    "exit_rules",
    "ddp",
)
# tests/gpu's files in the order they run, most valuable first; tests/gpu/test_gpu_check.py checks
# that this lists every test file of the folder
GPU_TEST_FILES = ("test_model_cuda.py", "test_jobs_cuda.py", "test_gpu_check.py")
TEST_LIMIT_S = 90  # per test, with pytest-timeout: one hang fails that test, not the whole step
# The train Spec fields the slots set: a renamed field fails the slot (the Spec refuses the old name)
MICRO_BATCH_FIELD = "micro_batch_size"
BUCKETING_FIELD = "bucketing"
# What a slot's measured training run reports (the train_results row, and hfu from the returned summary)
RUN_FIGURES = (
    "tokens_per_s",
    "peak_mem_mb",
    "final_train_loss",
    "padding_waste",
    "mfu",
    "hfu",
    "train_seconds",
)
# the steps a measured run (`_train_run`) trains before its steady-state timing starts: the first
# step's allocations, kernel selection and (on a GPU) autotuning are no part of the steady state
WARMUP_STEPS = 1


def steady_tokens_per_s(events: list[dict], warmup: int = WARMUP_STEPS) -> float | None:
    """Tokens per training second after the first `warmup` steps, from the run's `tokens_per_s` metric
    points (every step's: cumulative tokens and training seconds); None with fewer than two points past
    the warm-up."""
    points = sorted(
        (e["step"], e["tokens"], e["wall_s"])
        for e in events
        if e.get("kind") == "metric" and e.get("key") == "tokens_per_s" and e.get("wall_s") is not None
    )
    after = [p for p in points if p[0] >= warmup - 1]
    if len(after) < 2 or after[-1][2] <= after[0][2]:
        return None
    return (after[-1][1] - after[0][1]) / (after[-1][2] - after[0][2])


PASSED, SKIPPED, FAILED = "passed", "skipped", "failed"
EXIT = {PASSED: 0, FAILED: 1, SKIPPED: 4}  # gpu_check.sh reads the outcome back from the exit status
# Memory bandwidth assumed for a device the table (workers/device.py) does not list, the CPU included:
# more than any memory today (B200 HBM3e: 8 TB/s), so a decode step faster than weights / this is wrong
FASTEST_BANDWIDTH = 10e12
JOB_MODULES = (
    "looplab.workers.train.cli",
    "looplab.workers.evaluate.decode_bench",
    "looplab.workers.evaluate.depth_sweep",
    "looplab.workers.evaluate.eval",
)

# The torch APIs the GPU path calls, with the release that brought each (docs/gpu.md lists the same
# names; tests/gpu/test_gpu_check.py keeps the two equal). The device step probes each on the box.
USED_TORCH_APIS = {
    "torch.compile": "2.0",
    "torch.compiler.disable": "2.1",
    "torch.compiler.is_compiling": "2.3",
    "torch.nn.attention.flex_attention.flex_attention": "2.5",
    "torch.nn.attention.flex_attention.create_block_mask": "2.5",
    "torch.nn.functional.scaled_dot_product_attention": "2.0",
    "torch.nn.functional.rms_norm": "2.4",
    "torch.optim.Muon": "2.9",
    "torch.utils.flop_counter.FlopCounterMode": "2.1",
    "torch.autocast": "1.10",
    "torch.cuda.CUDAGraph": "1.10",
    "torch.cuda.graph": "1.10",
    "torch.cuda.set_sync_debug_mode": "1.10",
    "torch.distributed.init_process_group": "1.0",
    "torch.nn.parallel.DistributedDataParallel": "1.0",
    "torch.multiprocessing.spawn": "1.0",
}


# ---- helpers ------------------------------------------------------------------------------------------


class Skipped(Exception):
    """The step cannot run on this box, for the reason given: counted and printed as a skip, not a pass."""


class Failed(Exception):
    """The step cannot measure what it is named for (e.g. the checkpoint it needs is missing)."""


def _spec_fields(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def _resolve(dotted: str) -> Any:
    """The object a dotted name names (longest importable module, then attributes); None if absent."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr, None)
            if obj is None:
                return None
        return obj
    return None


def _run(argv: list[str], env: dict[str, str] | None = None) -> int:
    """Run `python ARGV` from the repository root, its output into this step's log."""
    print("$ python " + " ".join(argv), flush=True)
    return subprocess.call([sys.executable, *argv], cwd=ROOT, env=env)


def _events(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip().startswith("{")]


def _train_run(a, name: str, recipe: str, size: str, batch: int, steps: int, extra: dict) -> dict:
    """One train run through `workers.train.job.run` (as the queue runs it): RUN_FIGURES of its result."""
    from looplab.workers.reporter import make_reporter
    from looplab.workers.train import job as train
    from looplab.workers.train.spec import Spec

    seq = 64 if a.dry_run else 2048
    spec = Spec.from_dict(
        {
            "recipe": recipe,
            "size": size,
            "batch_size": batch,
            "tokens": steps * batch * seq,
            "device": "cpu" if a.dry_run else "cuda",
            "eval_every": 10**6,
            "eval_tokens": 2 * seq,
            "eval_loops": [4],
            "ckpt_every": 10**6,
            "log_every": 1,  # every step's cumulative tokens and seconds: the steady-state timing
            **extra,
        }
    )
    out = Path(a.scratch) / name
    shutil.rmtree(out, ignore_errors=True)
    events = Path(a.out) / f"{name}.jsonl"
    start = len(_events(events))  # the slot's runs share one file: this run's events follow
    reporter = make_reporter(name, str(events), quiet=True)
    try:
        summary = train.run(spec, reporter, out)
    finally:
        reporter.close()
    figures = {k: summary[k] for k in RUN_FIGURES}  # a figure the trainer no longer reports is a KeyError
    figures["warmup_steps"] = WARMUP_STEPS
    figures["steady_tokens_per_s"] = steady_tokens_per_s(_events(events)[start:])
    return figures


def measured_train(a, name: str, recipe: str, size: str, batch: int, steps: int, extra: dict) -> dict:
    """`_train_run` from a fresh state, so its peak memory is its own: on a GPU after freeing what
    earlier runs left and resetting CUDA's peak; on the CPU in a new process (a process's peak
    resident set cannot be reset). A run that fails fails the step, with the child's error."""
    if not a.dry_run:
        import gc

        import torch

        gc.collect()
        torch.cuda.empty_cache()
        left = torch.cuda.memory_allocated() / 2**20  # what earlier runs left allocated: checked below
        torch.cuda.reset_peak_memory_stats()
        return {**_train_run(a, name, recipe, size, batch, steps, extra), "allocated_before_mb": left}
    job = {"out": a.out, "scratch": a.scratch, "dry_run": True}
    job |= {"name": name, "recipe": recipe, "size": size, "batch": batch, "steps": steps, "extra": extra}
    r = subprocess.run(
        [sys.executable, __file__, ONE_RUN, json.dumps(job)], cwd=ROOT, capture_output=True, text=True
    )
    print(r.stderr[-2000:], end="")
    if r.returncode != 0:
        raise Failed(f"{name}: the measured run failed ({r.stderr.strip().splitlines()[-1:]})")
    return json.loads(r.stdout.strip().splitlines()[-1])


ONE_RUN = "_measured_run"  # the argv[1] of the process `measured_train` starts on the CPU


def _one_run(job: dict) -> None:
    """In a process of its own: one `_train_run`, its figures printed as the last line."""
    a = argparse.Namespace(out=job["out"], scratch=job["scratch"], dry_run=job["dry_run"])
    figures = _train_run(a, job["name"], job["recipe"], job["size"], job["batch"], job["steps"], job["extra"])
    print(json.dumps(figures))


# ---- the steps ----------------------------------------------------------------------------------------


def wheels(a) -> dict:
    """Install the wheelhouse (benchmarks/gpu_prepare.sh) into SCRATCH/site, which gpu_check.sh puts on
    PYTHONPATH: pip --target without an index, or, where this Python has no pip, unzip (a pure-Python
    wheel is a zip of its files)."""
    site = Path(a.scratch) / "site"
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir(parents=True)
    found = sorted(Path(a.wheels).glob("*.whl"))
    if not found:
        raise Skipped(f"no wheels in {a.wheels} (benchmarks/gpu_prepare.sh makes them)")
    listed = [{"wheel": w.name, "kib": round(w.stat().st_size / 1024, 1)} for w in found]
    if importlib.util.find_spec("pip") is not None:
        how = "pip"
        rc = _run(
            [
                "-m",
                "pip",
                "install",
                "--no-index",
                "--no-deps",
                "--disable-pip-version-check",
                "--quiet",
                "--target",
                str(site),
                *map(str, found),
            ]
        )
    else:
        how, rc = "unzip", 0
        for w in found:
            if not w.name.endswith("-none-any.whl"):
                print(f"error: {w.name} is not a pure-Python wheel and this Python has no pip")
                rc = 1
                continue
            with zipfile.ZipFile(w) as z:
                z.extractall(site)
    print(f"{how}: {len(found)} wheel(s) into {site}")
    return {"exit_status": rc, "wheels": listed, "installed_with": how, "site": str(site)}


def device(a) -> dict:
    """What this box is: versions, devices, the torch APIs of USED_TORCH_APIS it has, the jobs' imports.
    Without CUDA (and not a dry run) it fails: gpu_check.sh stops there."""
    import torch

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "executable": sys.executable,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "device_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
    }
    try:
        info["triton"] = importlib.import_module("triton").__version__
    except ImportError:
        info["triton"] = None
    info["devices"] = [
        {
            "name": torch.cuda.get_device_name(i),
            "capability": ".".join(map(str, torch.cuda.get_device_capability(i))),
            "memory_gib": round(torch.cuda.get_device_properties(i).total_memory / 2**30, 1),
        }
        for i in range(info["device_count"])
    ]
    info["peaks"] = [_device_table(d["name"]) for d in info["devices"]]
    info["torch_apis"] = {name: _resolve(name) is not None for name in USED_TORCH_APIS}
    jobs = {}
    for name in JOB_MODULES:
        try:
            module = importlib.import_module(name)
            if hasattr(module, "build_parser"):
                module.build_parser()
            jobs[name] = "ok"
        except Exception as e:  # a job that cannot start here: the figure says why
            jobs[name] = f"{type(e).__name__}: {e}"
    info["jobs"] = jobs
    missing = [name for name, ok in info["torch_apis"].items() if not ok]
    broken = {name: why for name, why in jobs.items() if why != "ok"}
    print(json.dumps({k: info[k] for k in ("python", "torch", "cuda", "triton", "devices")}))
    print(f"torch APIs missing: {missing or 'none'}; jobs that do not import: {broken or 'none'}")
    if not a.dry_run and not info["cuda_available"]:
        raise Failed(f"no CUDA device for {sys.executable} (torch {torch.__version__})")
    return info


def _device_table(name: str) -> dict:
    """What workers/device.py's table says of a GPU named `name`: its peak and bandwidth, or None."""
    from looplab.workers.device import spec_of

    spec = spec_of(name)
    return {"name": name, "peak_flops": spec and spec.peak_flops, "bandwidth": spec and spec.bandwidth}


def gpu_tests(a) -> dict:
    """The GPU test files only (collecting them imports nothing a box lacks): on a GPU the `gpu` ones
    that are not `slow`; in the dry run the CPU ones (the GPU ones are collected, then skipped)."""
    files = [f"tests/gpu/{name}" for name in GPU_TEST_FILES]
    args = ["-m", "pytest", *files, "-q", "-p", "no:cacheprovider"]
    args += ["-m", "not slow" if a.dry_run else "gpu and not slow"]
    limited = importlib.util.find_spec("pytest_timeout") is not None
    if limited:
        args += ["--timeout", str(TEST_LIMIT_S)]
    report = Path(a.out) / "gpu_tests.json"
    report.unlink(missing_ok=True)
    rc = _run(args, env={**os.environ, "LOOPLAB_GPU_TESTS_JSON": str(report)})
    tests = json.loads(report.read_text()) if report.is_file() else []
    counts: dict[str, int] = {}
    for t in tests:
        counts[t["outcome"]] = counts.get(t["outcome"], 0) + 1
    return {"exit_status": rc, "per_test_limit_s": TEST_LIMIT_S if limited else None, "counts": counts} | {
        "tests": tests
    }


def train_argv(dry_run: bool, out: Path, scratch: Path) -> list[str]:
    """The compiled training run's command line: lean 86m, 60 steps of 8 x 2,048 tokens, on CUDA; the dry
    run trains lean tiny for 4 steps of 8 x 64 on CPU, uncompiled (inductor's CPU code generation
    would take minutes on a small machine)."""
    size, device, steps, batch, seq = ("tiny", "cpu", 4, 8, 64) if dry_run else ("86m", "cuda", 60, 8, 2048)
    argv = [
        "-m",
        "looplab.workers.train.job",
        "--preset",
        "lean",
        "--size",
        size,
        "--tokens",
        str(steps * batch * seq),
    ]
    argv += ["--batch-size", str(batch), "--device", device] + ([] if dry_run else ["--compile"])
    argv += ["--eval-every", "100000", "--eval-tokens", str(8 * seq), "--eval-loops", "4"]
    argv += ["--ckpt-every", "100000", "--out", str(scratch / "train_compiled")]
    return argv + ["--events-jsonl", str(out / "train_compiled.jsonl")]


def train_compiled(a) -> dict:
    out, scratch = Path(a.out), Path(a.scratch)
    shutil.rmtree(scratch / "train_compiled", ignore_errors=True)  # a fresh run, not a resume
    (out / "train_compiled.jsonl").unlink(missing_ok=True)
    argv = train_argv(a.dry_run, out, scratch)
    rc = _run(argv)
    events = _events(out / "train_compiled.jsonl")
    rows = [e["row"] for e in events if e["kind"] == "result" and e.get("table") == "train_results"]
    compiled = [
        m for e in events if e["kind"] == "log" for m in re.findall(r"compile: ([\d.]+)s", e["message"])
    ]
    figures = {"exit_status": rc, "argv": argv, "row": rows[-1] if rows else None}
    figures["compile_seconds"] = float(compiled[-1]) if compiled else None
    return figures


def _bench(a, section: str, argv: list[str]) -> dict:
    device = ["--device", "cpu", "--size", "tiny"] if a.dry_run else ["--device", "cuda"]
    rc = _run(["benchmarks/model_bench.py", "--section", section, *device, *argv, "--out", a.out])
    name = {"ratios": "model_bench_ratios.json", "table": "model_bench.json"}[section]
    path = Path(a.out) / name
    results = json.loads(path.read_text()) if path.is_file() else None
    return {"exit_status": rc, "results": name if results else None, section: (results or {}).get(section)}


def bench_ratios(a) -> dict:
    return _bench(a, "ratios", ["--ratio-steps", "1" if a.dry_run else "2"])


def bench_table(a) -> dict:
    return _bench(a, "table", ["--train-steps", "1" if a.dry_run else "2", "--recipes", "lean,parcae"])


def micro_batch(a) -> dict:
    """Gradient accumulation: lean with the whole batch at once against 4 micro-batches, at 86m and
    144m (16 x 2,048 tokens, 4 steps each; the dry run: tiny, 8 x 64), each run from a fresh state
    (`measured_train`): tokens/s over the run and over the steps after WARMUP_STEPS
    (`steady_tokens_per_s`), and peak memory of each."""
    batch = 8 if a.dry_run else 16
    runs = {}
    for size in ("tiny",) if a.dry_run else ("86m", "144m"):
        for micro in (batch, batch // 4):
            extra = {MICRO_BATCH_FIELD: micro}
            runs[f"{size} micro {micro}"] = measured_train(a, "micro_batch", "lean", size, batch, 4, extra)
    return {"batch_size": batch, "runs": runs}


def loop_buckets(a) -> dict:
    """Loop-count bucketing: parcae (per-sample loop counts) in 4 micro-batches with bucketing off and
    on, at 86m and 144m, on the same rows (same seed): the padding waste the trainer measured from the
    forwards it ran, MFU against HFU, tokens/s."""
    batch = 8 if a.dry_run else 16
    runs = {}
    for size in ("tiny",) if a.dry_run else ("86m", "144m"):
        for on in (False, True):
            extra = {MICRO_BATCH_FIELD: batch // 4, BUCKETING_FIELD: on}
            runs[f"{size} bucketing {on}"] = measured_train(
                a, "loop_buckets", "parcae", size, batch, 4, extra
            )
    return {"batch_size": batch, "runs": runs}


def exit_rules(a) -> dict:
    """The per-token exit rules, as the `adaptive` job runs them, on train_compiled's checkpoint (lean 86m
    trained 60 steps; lean tiny in the dry run): the `state` rule at two thresholds against the fixed
    depth, per_round and latest KV, decoding at batch 1 and 8 (ms/token, speedup, KV MiB) and the
    validation loss and mean rounds per token of each cell. Without that checkpoint it fails."""
    from looplab.workers.adaptive import job as adaptive
    from looplab.workers.reporter import MemoryReporter

    checkpoint = Path(a.scratch) / "train_compiled"
    if not any(checkpoint.glob("*.pt")):
        raise Failed(f"no checkpoint in {checkpoint}: the train_compiled step did not finish")
    seq = 64 if a.dry_run else 2048
    spec = adaptive.Spec.from_dict(
        {
            "checkpoint": str(checkpoint),
            "rules": {"state": [0.05, 0.2]},
            "kv_strategies": ["per_round", "latest"],
            "eval_tokens": 2 * seq,
            "batch_size": 2,
            "decode_steps": 8 if a.dry_run else 16,
            "decode_batch_sizes": [1, 8],
            "device": "cpu" if a.dry_run else "cuda",
        }
    )
    out = adaptive.run(spec, MemoryReporter(), Path(a.scratch) / "exit_rules")
    keep = ("config", "val_loss", "mean_rounds")
    evals = [{k: r[k] for k in keep} for r in out["adaptive_evals"]]
    keep = ("config", "batch_size", "mode", "ms_per_token", "fixed_ms_per_token", "speedup", "kv_mib")
    keep += ("mean_exit_round", "equal_loss_rounds", "equal_loss_ms_per_token")
    decodes = [{k: r[k] for k in keep} for r in out["adaptive_decodes"]]
    size = "tiny" if a.dry_run else "86m"
    return {"size": size, "max_rounds": out["max_rounds"], "evals": evals, "decodes": decodes}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ddp_train(rank: int, world: int, cuda: bool, size: str, steps: int) -> dict:
    """Train lean at `size` under DDP for `steps` steps, each rank on its own rows; the step times,
    losses and the largest difference of any parameter between ranks after the last step."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from looplab.families.looped.model import LoopedLM
    from looplab.model.presets import preset

    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    torch.manual_seed(0)  # the same initial weights on every rank (DDP broadcasts rank 0's anyway)
    cfg = preset("lean", size)
    model = LoopedLM(cfg).to(device)
    # rounds a step does not run leave their parameters without gradient: DDP must allow that
    ddp = DistributedDataParallel(model, device_ids=[rank] if cuda else None, find_unused_parameters=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch, seq = 8, cfg.seq_len
    gen = torch.Generator().manual_seed(1000 + rank)  # each rank its own rows
    times, losses = [], []
    for step in range(steps):
        tokens = torch.randint(0, cfg.vocab_size, (batch, seq + 1), generator=gen).to(device)
        loops = model.sample_loops(batch, step, seed=0).tolist()  # a list: DDP moves tensors to the GPU
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            loss = ddp(tokens[:, :-1], targets=tokens[:, 1:], loops=loops).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    diff = torch.zeros((), device=device)
    for p in model.parameters():  # |p - max over ranks| is 0 everywhere when the ranks agree
        top = p.detach().clone()
        dist.all_reduce(top, op=dist.ReduceOp.MAX)
        diff = torch.maximum(diff, (top - p.detach()).abs().max())
    dist.all_reduce(diff, op=dist.ReduceOp.MAX)
    timed = times[1:] or times  # the first step includes DDP's first-iteration set-up
    figures = {"world": world, "size": size, "batch_per_rank": batch, "seq_len": seq, "step_s": times}
    figures |= {"losses": losses, "max_param_diff_between_ranks": diff.item()}
    figures["tokens_per_s"] = world * batch * seq / sorted(timed)[len(timed) // 2]
    return figures


def _ddp_rank(rank: int, world: int, backend: str, port: int, size: str, steps: int, out: str) -> None:
    """One rank of the DDP run; rank 0 writes the figures to `out`. The model, DDP and its reducer are
    freed (when `_ddp_train` returns) before the process group is destroyed: a reducer outliving its
    process group can hang the process at exit."""
    import torch
    import torch.distributed as dist

    cuda = backend == "nccl"
    if cuda:
        torch.cuda.set_device(rank)
    else:
        torch.set_num_threads(1)  # ranks sharing a few cores: more threads each would fight for them
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        figures = _ddp_train(rank, world, cuda, size, steps)
    finally:
        dist.destroy_process_group()
    if rank == 0:
        Path(out).write_text(json.dumps({**figures, "backend": backend}))


def ddp(a) -> dict:
    """Data parallel with torch.distributed alone (a GPU box has no Ray): one process per GPU (up to 8),
    NCCL, lean 86m, 4 steps; the dry run: 2 processes, gloo, lean tiny on CPU."""
    import torch
    import torch.multiprocessing as mp

    if a.dry_run:
        world, backend, size = 2, "gloo", "tiny"
    else:
        n = torch.cuda.device_count()
        if n < 2:
            raise Skipped(f"{n} GPU(s) here: the DDP step needs 2 or more")
        world, backend, size = min(n, 8), "nccl", "86m"
    result = Path(a.scratch) / "ddp_rank0.json"
    result.unlink(missing_ok=True)
    mp.spawn(_ddp_rank, args=(world, backend, _free_port(), size, 4, str(result)), nprocs=world, join=True)
    figures = json.loads(result.read_text())
    in_sync = figures["max_param_diff_between_ranks"] == 0.0
    print(f"ddp: {world} x {backend}, {figures['tokens_per_s']:,.0f} tokens/s, ranks in sync: {in_sync}")
    return figures


STEP_FUNCTIONS = {name: globals()[name] for name in STEPS}

# ---- the checks: what a step's figures must hold to pass ------------------------------------------------

_MISSING = object()


def _at(figures: dict, path: str) -> Any:
    """The figure at `path` ("a/b/0/c": nested keys, list indices), or _MISSING."""
    obj: Any = figures
    for key in path.split("/"):
        if isinstance(obj, list) and key.isdigit() and int(key) < len(obj):
            obj = obj[int(key)]
        elif isinstance(obj, dict) and key in obj:
            obj = obj[key]
        else:
            return _MISSING
    return obj


def _number(problems: list[str], figures: dict, path: str, lo: float, hi: float = math.inf) -> float | None:
    """The number at `path`, lo < it < hi (lo <= it when lo is 0); else None, with why in `problems`."""
    v = _at(figures, path)
    if v is _MISSING:
        problems.append(f"{path}: missing")
    elif isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        problems.append(f"{path}: {v!r} is not a finite number")
    elif not ((lo <= v if lo == 0 else lo < v) and v < hi):
        problems.append(f"{path}: {v!r} is outside ({lo:g}, {hi:g})")
    else:
        return float(v)
    return None


def _exited(figures: dict) -> list[str]:
    rc = figures.get("exit_status", _MISSING)
    return [] if rc == 0 else [f"exit_status: the command it ran ended with {rc}"]


def _gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name()


def _mfu(a, problems: list[str], figures: dict, path: str) -> None:
    """MFU is None on the CPU; on a GPU in (0, 1), and a GPU the peak table does not know fails, saying
    how to add it."""
    v = _at(figures, path)
    if a.dry_run:
        if v is _MISSING:
            problems.append(f"{path}: missing")
        return
    if v is None:
        from looplab.workers.device import unknown_peak

        problems.append(f"{path}: {unknown_peak(_gpu_name())}")
        return
    _number(problems, figures, path, 0, 1)


def _decode_floor_ms(recipe: str, size: str, dry_run: bool) -> float:
    """The least time a decode step can take: reading the non-embedding weights once in bf16 at the
    device's memory bandwidth (FASTEST_BANDWIDTH on the CPU and on GPUs the table does not list)."""
    from looplab.model.counts import param_count
    from looplab.model.presets import preset
    from looplab.workers.device import spec_of

    spec = None if dry_run else spec_of(_gpu_name())
    bandwidth = FASTEST_BANDWIDTH if spec is None else spec.bandwidth
    return 2 * param_count(preset(recipe, size))["non_embedding"] / bandwidth * 1e3


def _decodes(problems: list[str], figures: dict, path: str, floor_ms: float) -> None:
    """Every decode time at `path` (a dict or list of ms) a number of at least `floor_ms`: less would
    read the weights faster than the memory can."""
    times = _at(figures, path)
    if not isinstance(times, dict | list) or not times:
        problems.append(f"{path}: missing or empty")
        return
    for key, t in times.items() if isinstance(times, dict) else enumerate(times):
        if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t):
            problems.append(f"{path}/{key}: {t!r} is not a finite number")
        elif t < floor_ms:
            problems.append(
                f"{path}/{key}: {t:.3g} ms, below the {floor_ms:.3g} ms that reading the weights once takes"
            )


def check_device(a, f: dict) -> list[str]:
    broken = {name: why for name, why in f.get("jobs", {}).items() if why != "ok"}
    return [f"jobs: {name} does not import: {why}" for name, why in broken.items()] + (
        [] if set(f.get("jobs", {})) == set(JOB_MODULES) else ["jobs: missing"]
    )


def check_gpu_tests(a, f: dict) -> list[str]:
    problems = _exited(f)
    _number(problems, f, "counts/passed", 0)
    return problems


def check_train_compiled(a, f: dict) -> list[str]:
    problems = _exited(f)
    _number(problems, f, "row/tokens_per_s", 0)
    _number(problems, f, "row/peak_mem_mb", 0)
    _number(problems, f, "row/padding_waste", 0, 1)
    _mfu(a, problems, f, "row/mfu")
    if not a.dry_run:
        _number(problems, f, "compile_seconds", 0)
    return problems


def _utilisation(a, problems: list[str], f: dict, path: str) -> None:
    """MFU and HFU at `path` (each as `_mfu` checks it), and MFU <= HFU: the useful FLOPs are part of
    what the hardware computed."""
    _mfu(a, problems, f, f"{path}/mfu")
    _mfu(a, problems, f, f"{path}/hfu")
    mfu, hfu = _at(f, f"{path}/mfu"), _at(f, f"{path}/hfu")
    if isinstance(mfu, float) and isinstance(hfu, float) and mfu > hfu:
        problems.append(f"{path}/mfu: {mfu:.3f} is above hfu {hfu:.3f}")


def check_bench_ratios(a, f: dict) -> list[str]:
    """Per recipe: tokens/s; the measured useful FLOP/s at most the hardware's (dry run too); on a GPU
    MFU <= HFU, both in (0, 1)."""
    problems = _exited(f)
    recipes = _at(f, "ratios/recipes")
    for r in recipes if isinstance(recipes, dict) else ():
        path = f"ratios/recipes/{r}"
        _number(problems, f, f"{path}/tokens_per_s", 0)
        useful = _number(problems, f, f"{path}/achieved_tflops", 0)
        hardware = _number(problems, f, f"{path}/hardware_tflops", 0)
        if useful is not None and hardware is not None and useful > hardware:
            problems.append(f"{path}/achieved_tflops: {useful:.4g} is above hardware_tflops {hardware:.4g}")
        _utilisation(a, problems, f, path)
    return problems or ([] if isinstance(recipes, dict) and recipes else ["ratios/recipes: missing"])


def check_bench_table(a, f: dict) -> list[str]:
    problems = _exited(f)
    recipes, size = _at(f, "table/recipes"), _at(f, "table/decode/size")
    if not isinstance(recipes, dict) or not recipes or not isinstance(size, str):
        return [*problems, "table/recipes or table/decode/size: missing"]
    for r in recipes:
        _number(problems, f, f"table/recipes/{r}/train_tokens_per_s", 0)
        _decodes(problems, f, f"table/recipes/{r}/decode_ms", _decode_floor_ms(r, size, a.dry_run))
    return problems


def _runs(problems: list[str], f: dict, names: list[str]) -> None:
    for name in names:
        for key in ("tokens_per_s", "steady_tokens_per_s", "peak_mem_mb"):
            _number(problems, f, f"runs/{name}/{key}", 0)


def check_micro_batch(a, f: dict) -> list[str]:
    """Each size's micro-batched peak at most its whole batch's (both measured from a fresh state)."""
    problems: list[str] = []
    batch = f.get("batch_size", 0)
    for size in ("tiny",) if a.dry_run else ("86m", "144m"):
        whole, micro = f"{size} micro {batch}", f"{size} micro {batch // 4}"
        _runs(problems, f, [whole, micro])
        peaks = [_at(f, f"runs/{name}/peak_mem_mb") for name in (whole, micro)]
        if all(isinstance(p, float) for p in peaks) and peaks[1] > peaks[0]:
            problems.append(
                f"runs/{micro}/peak_mem_mb: {peaks[1]:,.0f} MB is above the whole batch's {peaks[0]:,.0f} MB"
            )
        for name, peak in zip((whole, micro), peaks, strict=True):
            _fresh(a, problems, f, name, peak)
    return problems


# the most a GPU run's peak may include of what earlier runs of the step left allocated
LEFT_SHARE = 0.02


def _fresh(a, problems: list[str], f: dict, name: str, peak) -> None:
    """On a GPU, the allocator nearly empty before the run (`allocated_before_mb`, at most LEFT_SHARE of
    its peak): else its peak counts an earlier run's tensors. On the CPU each run is its own process."""
    if a.dry_run:
        return
    left = _number(problems, f, f"runs/{name}/allocated_before_mb", 0)
    if left is not None and isinstance(peak, float) and left > LEFT_SHARE * peak:
        problems.append(
            f"runs/{name}/allocated_before_mb: {left:,.0f} MB left allocated by earlier runs, more than "
            f"{LEFT_SHARE:.0%} of its {peak:,.0f} MB peak"
        )


def check_loop_buckets(a, f: dict) -> list[str]:
    """Each size's measured padding waste in [0, 1), lower with bucketing than without on the same rows;
    on a GPU MFU <= HFU, both in (0, 1)."""
    problems: list[str] = []
    for size in ("tiny",) if a.dry_run else ("86m", "144m"):
        off, on = f"{size} bucketing False", f"{size} bucketing True"
        _runs(problems, f, [off, on])
        wastes = [_number(problems, f, f"runs/{name}/padding_waste", 0, 1) for name in (off, on)]
        if None not in wastes and not wastes[1] < wastes[0]:
            problems.append(
                f"runs/{on}/padding_waste: {wastes[1]:.3f} is not below {wastes[0]:.3f} without bucketing"
            )
        for name in (off, on):
            _utilisation(a, problems, f, f"runs/{name}")
    return problems


def check_exit_rules(a, f: dict) -> list[str]:
    problems: list[str] = []
    for i, _ in enumerate(f.get("evals") or [None]):
        _number(problems, f, f"evals/{i}/val_loss", 0)
    times = {str(i): d.get("ms_per_token") for i, d in enumerate(f.get("decodes") or [])}
    floor = _decode_floor_ms("lean", f.get("size", "tiny"), a.dry_run)
    _decodes(problems, {"decodes": times}, "decodes", floor)
    return problems


def check_ddp(a, f: dict) -> list[str]:
    problems: list[str] = []
    _number(problems, f, "world", 1)
    _number(problems, f, "tokens_per_s", 0)
    if _at(f, "max_param_diff_between_ranks") != 0.0:
        problems.append(
            f"max_param_diff_between_ranks: {f.get('max_param_diff_between_ranks')!r}, not 0: the ranks differ"
        )
    return problems


CHECKS = {
    "wheels": lambda a, f: _exited(f),
    "device": check_device,
    "gpu_tests": check_gpu_tests,
    "train_compiled": check_train_compiled,
    "bench_ratios": check_bench_ratios,
    "bench_table": check_bench_table,
    "micro_batch": check_micro_batch,
    "loop_buckets": check_loop_buckets,
    "exit_rules": check_exit_rules,
    "ddp": check_ddp,
}

# ---- entry point ----------------------------------------------------------------------------------------


def run_step(a) -> tuple[str, list[str], dict]:
    """(outcome, problems, figures) of step `a.step`: skipped on `Skipped`, failed when it raised or
    `CHECKS` found problems in its figures, else passed."""
    try:
        figures = STEP_FUNCTIONS[a.step](a)
        problems = CHECKS[a.step](a, figures)
    except Skipped as e:
        return SKIPPED, [], {"skipped": str(e)}
    except Failed as e:
        return FAILED, [str(e)], {}
    except Exception as e:  # the figures still say what went wrong; the traceback goes to the log
        import traceback

        traceback.print_exc()
        return FAILED, [f"{type(e).__name__}: {e}"], {"error": f"{type(e).__name__}: {e}"}
    return (FAILED if problems else PASSED), problems, figures


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [ONE_RUN]:
        _one_run(json.loads(argv[1]))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("step", choices=STEPS)
    p.add_argument("--out", required=True, help="folder for the figures (it travels back)")
    p.add_argument("--dry-run", action="store_true", help="each step's tiny CPU version")
    p.add_argument("--scratch", default=str(Path(tempfile.gettempdir()) / "looplab-gpu-check"))
    p.add_argument("--wheels", default=str(ROOT / "benchmarks" / "wheelhouse"))
    a = p.parse_args(argv)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    Path(a.scratch).mkdir(parents=True, exist_ok=True)
    outcome, problems, figures = run_step(a)
    record = {"step": a.step, "outcome": outcome, "rc": EXIT[outcome], "dry_run": a.dry_run}
    record |= {"problems": problems, **figures}
    path = Path(a.out) / f"{a.step}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=1, default=str))
    tmp.replace(path)
    for problem in problems:
        print(f"problem: {problem}")
    last = {PASSED: "passed", SKIPPED: f"skipped: {figures.get('skipped')}"}
    print(last.get(outcome, f"failed: {problems[0] if problems else '?'}"), flush=True)  # the summary's line
    return EXIT[outcome]


if __name__ == "__main__":
    raise SystemExit(main())
