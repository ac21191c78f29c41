"""The steps of benchmarks/gpu_check.sh, one function each: what a GPU box runs, and the tiny CPU
version of each that `--dry-run` starts instead (so a machine without a GPU proves every step starts).

    python benchmarks/gpu_steps.py STEP --out DIR [--dry-run] [--scratch DIR] [--wheels DIR]

Every step ends by writing its figures to DIR/STEP.json ({"step", "rc", "dry_run", ...}); a slot
whose feature has not landed writes {"skipped": why} and exits 0. Jobs stream their events to
DIR/STEP.jsonl as they go, so a step stopped at its time limit still leaves what it measured. Big
artifacts (installed wheels, checkpoints) go under --scratch, never under DIR, which travels back.

Steps, most valuable first (gpu_check.sh runs them in this order, each under its own time limit):
  wheels          install the carried wheelhouse into SCRATCH/site (pip --target; unzip without pip)
  device          the GPU, Python/torch/CUDA/triton versions, which torch APIs of USED_TORCH_APIS this
                  build has, and whether every job module imports
  gpu_tests       pytest on GPU_TEST_FILES (marked gpu, not slow), a per-test limit where
                  pytest-timeout is installed; each test's outcome in gpu_tests.json as it ends
  train_compiled  `python -m workers.train` lean 86m --compile, 60 steps of 8 x 2,048 tokens:
                  compile_seconds, tokens/s, MFU
  bench_ratios    model_bench.py ratios at 144m, bf16: the study's speed ratios and MFU per recipe
  bench_table     model_bench.py table for lean and parcae: 86m training tokens/s, decode ms/token at
                  144m for 2,000 / 16,000 tokens x batch 1 / 8 / 64 (CUDA graphs), KV-cache MB
  micro_batch     slot: accumulation in 4 micro-batches against the whole batch, 86m / 144m
  loop_buckets    slot: parcae in 4 micro-batches with loop-count bucketing off / on
  exit_rules      the adaptive job on train_compiled's checkpoint: the `state` exit rule at
                  two thresholds vs the fixed depth, per_round / latest KV, decode ms/token at batch 1 / 8
  ddp             slot (>= 2 GPUs): DDP with torch.distributed alone (NCCL); gloo on CPU in the dry run

A slot lights up by itself when its feature lands: it looks for the Spec field named in
MICRO_BATCH_FIELD or a train Spec field containing "bucket", and
then runs the real job with it (the dry run too, so a name that changed fails there, on CPU, first).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import json
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
# The name the slots look for: the train spec's micro-batch field
MICRO_BATCH_FIELD = "micro_batch_size"
JOB_MODULES = ("workers.train_cli", "workers.decode_bench", "workers.depth_sweep", "workers.eval")

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


def _skip(why: str) -> tuple[int, dict]:
    print(f"skipped: {why}")
    return 0, {"skipped": why}


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


def _train_in_process(a, name: str, recipe: str, size: str, batch: int, steps: int, extra: dict) -> dict:
    """One train run through `workers.train.run` (as the queue runs it): the result row's figures."""
    from workers import train
    from workers.reporter import make_reporter
    from workers.train_spec import Spec

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
            **extra,
        }
    )
    out = Path(a.scratch) / name
    shutil.rmtree(out, ignore_errors=True)
    reporter = make_reporter(name, str(Path(a.out) / f"{name}.jsonl"), quiet=True)
    try:
        row = train.run(spec, reporter, out)
    finally:
        reporter.close()
    keys = ("tokens_per_s", "peak_mem_mb", "final_train_loss", "padding_waste", "mfu", "train_seconds")
    return {k: row.get(k) for k in keys}


# ---- the steps ----------------------------------------------------------------------------------------


def wheels(a) -> tuple[int, dict]:
    """Install the wheelhouse (benchmarks/gpu_prepare.sh) into SCRATCH/site, which gpu_check.sh puts on
    PYTHONPATH: pip --target without an index, or, where this Python has no pip, unzip (a pure-Python
    wheel is a zip of its files)."""
    site = Path(a.scratch) / "site"
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir(parents=True)
    found = sorted(Path(a.wheels).glob("*.whl"))
    if not found:
        return _skip(f"no wheels in {a.wheels} (benchmarks/gpu_prepare.sh makes them)")
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
    return rc, {"wheels": listed, "installed_with": how, "site": str(site)}


def device(a) -> tuple[int, dict]:
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
        print(f"error: no CUDA device for {sys.executable} (torch {torch.__version__})")
        return 3, info
    return (1 if broken else 0), info


def gpu_tests(a) -> tuple[int, dict]:
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
    return rc, {"per_test_limit_s": TEST_LIMIT_S if limited else None, "counts": counts, "tests": tests}


def train_argv(dry_run: bool, out: Path, scratch: Path) -> list[str]:
    """The compiled training run's command line: lean 86m, 60 steps of 8 x 2,048 tokens, on CUDA; the dry
    run trains lean tiny for 4 steps of 8 x 64 on CPU, uncompiled (inductor's CPU code generation
    would take minutes on a small machine)."""
    size, device, steps, batch, seq = ("tiny", "cpu", 4, 8, 64) if dry_run else ("86m", "cuda", 60, 8, 2048)
    argv = ["-m", "workers.train", "--preset", "lean", "--size", size, "--tokens", str(steps * batch * seq)]
    argv += ["--batch-size", str(batch), "--device", device] + ([] if dry_run else ["--compile"])
    argv += ["--eval-every", "100000", "--eval-tokens", str(8 * seq), "--eval-loops", "4"]
    argv += ["--ckpt-every", "100000", "--out", str(scratch / "train_compiled")]
    return argv + ["--events-jsonl", str(out / "train_compiled.jsonl")]


def train_compiled(a) -> tuple[int, dict]:
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
    figures = {"argv": argv, "row": rows[-1] if rows else None}
    figures["compile_seconds"] = float(compiled[-1]) if compiled else None
    return rc, figures


def _bench(a, section: str, argv: list[str]) -> tuple[int, dict]:
    device = ["--device", "cpu", "--size", "tiny"] if a.dry_run else ["--device", "cuda"]
    rc = _run(["benchmarks/model_bench.py", "--section", section, *device, *argv, "--out", a.out])
    name = {"ratios": "model_bench_ratios.json", "table": "model_bench.json"}[section]
    path = Path(a.out) / name
    return rc, {"results": name if path.is_file() else None}


def bench_ratios(a) -> tuple[int, dict]:
    return _bench(a, "ratios", ["--ratio-steps", "1" if a.dry_run else "2"])


def bench_table(a) -> tuple[int, dict]:
    return _bench(a, "table", ["--train-steps", "1" if a.dry_run else "2", "--recipes", "lean,parcae"])


def micro_batch(a) -> tuple[int, dict]:
    """Gradient accumulation: lean with the whole batch at once against 4 micro-batches, at 86m and
    144m (16 x 2,048 tokens, 3 steps each): tokens/s and peak memory of each."""
    from workers.train_spec import Spec

    if MICRO_BATCH_FIELD not in _spec_fields(Spec):
        return _skip(f"workers.train_spec.Spec has no {MICRO_BATCH_FIELD!r} field (no micro-batching here)")
    batch = 8 if a.dry_run else 16
    runs = {}
    for size in ("tiny",) if a.dry_run else ("86m", "144m"):
        for micro in (batch, batch // 4):
            extra = {MICRO_BATCH_FIELD: micro}
            runs[f"{size} micro {micro}"] = _train_in_process(a, "micro_batch", "lean", size, batch, 3, extra)
    return 0, {"batch_size": batch, "runs": runs}


def loop_buckets(a) -> tuple[int, dict]:
    """Loop-count bucketing: parcae (per-sample loop counts) in 4 micro-batches with bucketing
    off and on, at 86m and 144m: padding_waste and tokens/s of each."""
    from workers.train_spec import Spec

    names = _spec_fields(Spec)
    bucket = [n for n in names if "bucket" in n]
    if MICRO_BATCH_FIELD not in names or len(bucket) != 1:
        return _skip(
            f"workers.train_spec.Spec has no {MICRO_BATCH_FIELD!r} and bucketing field (no bucketing here)"
        )
    batch = 8 if a.dry_run else 16
    runs = {}
    for size in ("tiny",) if a.dry_run else ("86m", "144m"):
        for on in (False, True):
            extra = {MICRO_BATCH_FIELD: batch // 4, bucket[0]: on}
            runs[f"{size} {bucket[0]}={on}"] = _train_in_process(
                a, "loop_buckets", "parcae", size, batch, 3, extra
            )
    return 0, {"field": bucket[0], "batch_size": batch, "runs": runs}


def exit_rules(a) -> tuple[int, dict]:
    """The per-token exit rules, as the `adaptive` job runs them, on train_compiled's checkpoint (lean 86m
    trained 60 steps; lean tiny in the dry run): the `state` rule at two thresholds against the fixed
    depth, per_round and latest KV, decoding at batch 1 and 8 (ms/token, speedup, KV MiB) and the
    validation loss and mean rounds per token of each cell. Needs train_compiled to have run first."""
    from workers import adaptive
    from workers.reporter import MemoryReporter

    checkpoint = Path(a.scratch) / "train_compiled"
    if not any(checkpoint.glob("*.pt")):
        return _skip(f"no checkpoint in {checkpoint}: the train_compiled step did not finish")
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
    evals = [{k: r.get(k) for k in keep} for r in out["adaptive_evals"]]
    keep = ("config", "batch_size", "mode", "ms_per_token", "fixed_ms_per_token", "speedup", "kv_mib")
    decodes = [{k: r.get(k) for k in keep} for r in out["adaptive_decodes"]]
    return 0, {"max_rounds": out["max_rounds"], "evals": evals, "decodes": decodes}


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

    from model.looped import LoopedLM
    from model.presets import preset

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


def ddp(a) -> tuple[int, dict]:
    """Data parallel with torch.distributed alone (a GPU box has no Ray): one process per GPU (up to 8),
    NCCL, lean 86m, 4 steps; the dry run: 2 processes, gloo, lean tiny on CPU."""
    import torch
    import torch.multiprocessing as mp

    if a.dry_run:
        world, backend, size = 2, "gloo", "tiny"
    else:
        n = torch.cuda.device_count()
        if n < 2:
            return _skip(f"{n} GPU(s) here: the DDP step needs 2 or more")
        world, backend, size = min(n, 8), "nccl", "86m"
    result = Path(a.scratch) / "ddp_rank0.json"
    result.unlink(missing_ok=True)
    mp.spawn(_ddp_rank, args=(world, backend, _free_port(), size, 4, str(result)), nprocs=world, join=True)
    figures = json.loads(result.read_text())
    in_sync = figures["max_param_diff_between_ranks"] == 0.0
    print(f"ddp: {world} x {backend}, {figures['tokens_per_s']:,.0f} tokens/s, ranks in sync: {in_sync}")
    return (0 if in_sync else 1), figures


STEP_FUNCTIONS = {name: globals()[name] for name in STEPS}

# ---- entry point ----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("step", choices=STEPS)
    p.add_argument("--out", required=True, help="folder for the figures (it travels back)")
    p.add_argument("--dry-run", action="store_true", help="each step's tiny CPU version")
    p.add_argument("--scratch", default=str(Path(tempfile.gettempdir()) / "looplab-gpu-check"))
    p.add_argument("--wheels", default=str(ROOT / "benchmarks" / "wheelhouse"))
    a = p.parse_args(argv)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    Path(a.scratch).mkdir(parents=True, exist_ok=True)
    try:
        rc, figures = STEP_FUNCTIONS[a.step](a)
    except Exception as e:  # the figures still say what went wrong; the traceback goes to the log
        import traceback

        traceback.print_exc()
        rc, figures = 1, {"error": f"{type(e).__name__}: {e}"}
    record = {"step": a.step, "rc": rc, "dry_run": a.dry_run, **figures}
    path = Path(a.out) / f"{a.step}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=1, default=str))
    tmp.replace(path)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
