"""Model benchmark: training throughput, decode latency and KV-cache size per recipe, in one run.

- training tokens/s (forward + backward + AdamW step, CPU: `small`, 4 x 128 tokens, one thread; the recipe's own loop-count sampler, bf16
  autocast on GPU), reported as a ratio against `parcae` measured in the same process;
- decode ms/token per recipe (workers.decode_bench: static cache, CUDA graph on GPU) at two contexts
  x batch sizes (CPU: 256 / 1024 x 1 / 8 at `small`; GPU: 2000 / 16000 x 1 / 8 / 64 at `144m`);
- KV-cache MB per recipe for `144m` at 2,000 and 16,000 tokens, batch 1, bf16 (analytic, exact).

Prints a table, writes benchmarks/results/model_bench.json and ends with one JSON line.

    python benchmarks/model_bench.py [--device auto|cpu|cuda] [--train-steps 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from model.counts import kv_cache_bytes
from model.looped import LoopedLM
from model.presets import RECIPES, preset
from workers.decode_bench import Spec
from workers.decode_bench import run as decode_run
from workers.reporter import MemoryReporter

RESULTS = Path(__file__).parent / "results" / "model_bench.json"


def train_tokens_per_s(
    recipe: str, size: str, device: torch.device, batch: int, seq_len: int, steps: int
) -> float:
    """Median tokens/s over `steps` training steps after one warm-up step."""
    torch.manual_seed(0)
    cfg = preset(recipe, size, seq_len=seq_len)
    model = LoopedLM(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    times = []
    for step in range(steps + 1):
        idx = torch.randint(0, cfg.vocab_size, (batch, seq_len + 1), generator=g).to(device)
        loops = model.sample_loops(batch, step, seed=0)
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = model(idx[:, :-1], targets=idx[:, 1:], loops=loops).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        if step > 0:
            times.append(time.perf_counter() - t0)
    return batch * seq_len / statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="auto")
    p.add_argument("--train-steps", type=int, default=3)
    p.add_argument(
        "--threads", type=int, default=1, help="CPU threads (1: stable ratios on a shared machine)"
    )
    a = p.parse_args(argv)
    device = torch.device(
        ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
    )
    gpu = device.type == "cuda"
    if not gpu:
        torch.set_num_threads(a.threads)
    train_size, batch, seq_len = ("86m", 8, 2048) if gpu else ("small", 4, 128)
    dec_size, contexts, batches = (
        ("144m", [2000, 16000], [1, 8, 64]) if gpu else ("small", [256, 1024], [1, 8])
    )
    steps = a.train_steps

    rows = {}
    for recipe in RECIPES:
        tps = train_tokens_per_s(recipe, train_size, device, batch, seq_len, steps)
        spec = Spec.from_dict(
            {
                "recipe": recipe,
                "size": dec_size,
                "context_lens": contexts,
                "batch_sizes": batches,
                "warmup": 2,
                "steps": 10 if gpu else 5,
                "device": device.type,
            }
        )
        dec = decode_run(spec, MemoryReporter())["rows"]
        cfg144 = preset(recipe, "144m")
        rows[recipe] = {
            "train_tokens_per_s": tps,
            "decode_ms": {f"{r['context_len']}x{r['batch_size']}": r["ms_per_token"] for r in dec},
            "kv_mb_144m": {
                str(n): kv_cache_bytes(cfg144, n, 1, torch.bfloat16) / 2**20 for n in (2000, 16000)
            },
        }
        print(f"  {recipe}: {tps:,.0f} tok/s", flush=True)
    base = rows["parcae"]["train_tokens_per_s"]
    for r in rows.values():
        r["train_ratio_vs_parcae"] = r["train_tokens_per_s"] / base

    cells = list(rows["parcae"]["decode_ms"])
    head = f"{'recipe':<17}{'train tok/s':>12}{'x parcae':>9}" + "".join(f"{'ms ' + c:>13}" for c in cells)
    head += f"{'KV MB 2k':>10}{'KV MB 16k':>11}"
    print(
        f"\ntraining: {train_size}, batch {batch} x {seq_len}, AdamW; decode: {dec_size}; KV: 144m bf16 batch 1"
    )
    print(head)
    print("-" * len(head))
    for name, r in rows.items():
        line = f"{name:<17}{r['train_tokens_per_s']:>12,.0f}{r['train_ratio_vs_parcae']:>9.2f}"
        line += "".join(f"{r['decode_ms'][c]:>13.2f}" for c in cells)
        line += f"{r['kv_mb_144m']['2000']:>10.1f}{r['kv_mb_144m']['16000']:>11.1f}"
        print(line)
    result = {
        "device": torch.cuda.get_device_name() if gpu else "cpu",
        "torch": torch.__version__,
        "train": {"size": train_size, "batch": batch, "seq_len": seq_len, "steps": steps},
        "threads": torch.get_num_threads(),
        "decode": {"size": dec_size, "contexts": contexts, "batches": batches},
        "recipes": rows,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
