"""Model benchmark: the training-speed ratios the study is about, and a per-recipe table of training
throughput, decode latency and KV-cache size, in one run.

Section "ratios" (`--section ratios`, ~2-3 minutes on CPU): training tokens/s (forward + backward +
AdamW step) at sequence 2,048 for fixed4, lean, lean_all64, parcae, parcae_per_batch and plain, with the
recipes interleaved step by step in one process so machine noise hits all of them alike; median step
time after one warm-up step. CPU: `small` width, vocabulary 256, batch 2, `--threads` threads (default
1), timed by the process's CPU time (with one thread that is the wall time of an idle machine, and a
busy shared machine does not inflate it; wall-time ratios are printed beside). GPU: `144m`, batch 8,
bf16 autocast, wall time. Prints the ratios lean/fixed4, lean_all64/fixed4, parcae_per_batch/parcae,
plain/lean and lean/parcae, each beside the ratio a FLOP estimate predicts (see `step_flops`), so a
gap between machine and arithmetic shows; per recipe also the achieved TFLOP/s by model/flops.py's
counts over the median wall time of the steps after the warm-up step: useful (each sequence's own rounds,
causal attention pairs), hardware (the padded rounds too) and dense (every T x T pair, beside), and on a
GPU whose peak workers/device.py knows, MFU (useful / peak) and HFU (hardware / peak).

Section "table": per recipe, training tokens/s (CPU: `small`, 4 x 128 tokens; GPU: `86m`, 8 x 2048,
bf16) as a ratio against `parcae`; decode ms/token (workers.evaluate.decode_bench: static cache, CUDA graph on
GPU) at two contexts x batch sizes (CPU: 256 / 1024 x 1 / 8 at `small`; GPU: 2000 / 16000 x 1 / 8 / 64
at `144m`); KV-cache MB for `144m` at 2,000 and 16,000 tokens, batch 1, bf16 (analytic, exact).

`--size` runs every section at one size instead (benchmarks/gpu_check.sh's dry run: `tiny` on CPU),
`--recipes` limits the table to some recipes (the GPU check's time slot holds two).

Writes <out>/model_bench.json (table) and <out>/model_bench_ratios.json (ratios) and ends with one JSON
line holding every section that ran.

    python benchmarks/model_bench.py [--section ratios|table|all] [--device auto|cpu|cuda]
                                     [--threads 1] [--train-steps 3] [--ratio-steps 5] [--out DIR]
                                     [--size SIZE] [--recipes lean,parcae]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from looplab.families.looped.model import LoopedLM
from looplab.model import fields
from looplab.model.attention import FLEX_BLOCK, cpu_block_size, use_block_local
from looplab.model.config import ModelConfig
from looplab.model.counts import kv_cache_bytes
from looplab.model.errors import ConfigError
from looplab.model.flops import step_flops as model_step_flops
from looplab.model.presets import RECIPES, SIZES, preset
from looplab.model.rounds import loop_counts, plan_rounds
from looplab.workers.device import peak_flops

RESULTS = Path(__file__).parent / "results"
SECTIONS = ("ratios", "table", "all")
RATIO_RECIPES = ("fixed4", "lean", "lean_all64", "parcae", "parcae_per_batch", "plain")
# (numerator, denominator): speed of the first over speed of the second
RATIOS = (
    ("lean", "fixed4"),
    ("lean_all64", "fixed4"),
    ("parcae_per_batch", "parcae"),
    ("plain", "lean"),
    ("lean", "parcae"),
)
FLOP_LABEL = (
    "FLOP estimate (matmuls + attention scores as computed: full causal T², windowed T·W per the backend)"
)


# ---- one training step --------------------------------------------------------------------------


class Trainee:
    """A model, its optimiser and a fixed stream of batches: `step(i)` runs training step i and returns
    its wall time, the process's CPU time over it and the loop counts the recipe's sampler drew."""

    def __init__(self, cfg: ModelConfig, device: torch.device, batch: int, seed: int = 0) -> None:
        torch.manual_seed(seed)
        self.cfg, self.device, self.batch = cfg, device, batch
        self.model = LoopedLM(cfg).to(device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.gen = torch.Generator().manual_seed(seed)

    def step(self, i: int) -> tuple[float, float, list[int]]:
        cfg, dev = self.cfg, self.device
        idx = torch.randint(0, cfg.vocab_size, (self.batch, cfg.seq_len + 1), generator=self.gen).to(dev)
        loops = self.model.sample_loops(self.batch, i, seed=0)  # (B,) on the CPU
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0, cpu0 = time.perf_counter(), time.process_time()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            loss = self.model(idx[:, :-1], targets=idx[:, 1:], loops=loops).loss
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0, time.process_time() - cpu0, loops.tolist()


def train_tokens_per_s(
    recipe: str, size: str, device: torch.device, batch: int, seq_len: int, steps: int
) -> float:
    """Median tokens/s over `steps` training steps after one warm-up step."""
    trainee = Trainee(preset(recipe, size, seq_len=seq_len), device, batch)
    times = [trainee.step(i)[0] for i in range(steps + 1)][1:]
    return batch * seq_len / statistics.median(times)


# ---- FLOP estimate ------------------------------------------------------------------------------

# the counts of one step that the ratio section reports (`counted_flops`)
COUNTS = ("useful", "total", "dense")


def counted_flops(cfg: ModelConfig, loops: list[int], seq_len: int) -> dict[str, float]:
    """model/flops.py's FLOPs per token of a step that ran `loops`: `useful` (each row's own rounds,
    causal attention pairs: what MFU counts), `total` (the padded rounds too, causal: what HFU counts;
    the kernels' tiles past the diagonal and flash attention's backward recompute are not in it) and
    `dense` (total with every T x T pair, the convention older figures used, shown beside)."""
    causal = model_step_flops(cfg, loops, seq_len, attention="causal")
    dense = model_step_flops(cfg, loops, seq_len)
    return {"useful": causal.useful, "total": causal.total, "dense": dense.total}


def keys_per_query(T: int, window: int | None, device: torch.device) -> float:
    """Keys each query is scored against by the backend `model.attention.attention` picks: full causal
    ~T/2 (the fused causal kernels skip key blocks above the diagonal); windowed on CPU 2S for
    block-local (S = max(window, 32)) or T for the dense band; windowed on GPU window + one 128-token
    Flex block (the partly masked blocks at the window's edges are computed in full)."""
    if window is None or window >= T:
        return T / 2
    if device.type == "cuda":
        return min(T, window + FLEX_BLOCK)
    return 2 * cpu_block_size(window) if use_block_local(T, window) else T


def step_flops(cfg: ModelConfig, T: int, batch: int, loops: list[int], device: torch.device) -> float:
    """Forward + backward FLOPs of one training step, counted as 2 x multiply-adds:

    per token and layer application with h heads of head_dim e and `hidden` MLP units,
      projections  2 d (3 h e) for q, k, v (q only for a reuse_kv round) + 2 (h e) d for the output,
      MLP          2 * 2 d hidden,
      attention    2 * 2 kappa h e for the scores Q K^T and for P V, kappa = `keys_per_query`;
    plus the LM head 2 d V and the injection's B and C (2 d^2 each). Backward costs twice the forward
    of what carries gradient: prelude, coda, head, injection, and the recurrent rounds that
    `model.rounds.plan_rounds` runs with autograd (truncated backprop leaves the others forward-only).
    A batch with mixed loop counts runs max(count) rounds for every sequence. Norms, RoPE, softmax,
    value embeddings and the optimiser are left out (elementwise, small next to the matmuls)."""
    d, e = cfg.d_model, cfg.head_dim

    def layer(window: int | None, heads: int, hidden: int, attention: bool, reuse_kv: bool) -> float:
        flops = 2 * 2 * d * hidden
        if attention:
            flops += 2 * d * heads * e * (1 if reuse_kv else 3) + 2 * heads * e * d
            flops += 2 * 2 * keys_per_query(T, window, device) * heads * e
        return flops

    once = (cfg.n_prelude + cfg.n_coda) * layer(None, cfg.n_heads, cfg.mlp_hidden, True, False)
    once += 2 * d * cfg.vocab_size + (4 * d * d if cfg.injection == "diagonal" else 0)
    plan = plan_rounds(
        loop_counts(loops, batch), cfg.grad_rounds, True, rounds_share_settings=len(cfg.rounds) == 1
    )
    forward, backward = once, 2 * once
    for g in range(plan.n_rounds):
        rc = cfg.round(g)
        one_round = cfg.n_recurrent * layer(
            rc.window, cfg.round_heads(g), cfg.round_hidden(g), rc.attention, rc.reuse_kv
        )
        forward += one_round
        backward += 2 * one_round if plan.grad[g] else 0.0
    return batch * T * (forward + backward)


# ---- the ratio section ------------------------------------------------------------------------------


def ratio_section(device: torch.device, steps: int, size: str | None = None) -> dict:
    """Train every RATIO_RECIPES model in turn, one step each per repeat (the order rotates every
    repeat), and compare median step times with the FLOP estimate of the same steps.

    Clock: on a CPU run with one thread the ratios use the process's CPU time per step, which on an idle
    machine equals the wall time but does not count the time spent waiting for a core that another
    process holds (on a shared machine the wall-time ratios swing by 30% from one run to the next);
    the wall-time ratios are printed beside them. With several threads or on a GPU: wall time.
    `size` replaces the default size (144m on a GPU, small on CPU)."""
    gpu = device.type == "cuda"
    default_size, batch, seq_len = ("144m", 8, 2048) if gpu else ("small", 2, 2048)
    size = size or default_size
    overrides = {} if gpu else {"vocab_size": 256}
    threads = None if gpu else torch.get_num_threads()
    clock = "cpu" if threads == 1 else "wall"
    trainees = {
        r: Trainee(preset(r, size, seq_len=seq_len, **overrides), device, batch) for r in RATIO_RECIPES
    }
    wall: dict[str, list[float]] = {r: [] for r in RATIO_RECIPES}
    cpu: dict[str, list[float]] = {r: [] for r in RATIO_RECIPES}
    flops: dict[str, list[float]] = {r: [] for r in RATIO_RECIPES}
    # model/flops.py's count of each step: useful (each row's own rounds, causal pairs: MFU), total
    # (padding included, causal: HFU, what the hardware computed) and total with dense pairs (beside)
    counted: dict[str, dict[str, list[float]]] = {r: {k: [] for k in COUNTS} for r in RATIO_RECIPES}
    rounds: dict[str, list[int]] = {r: [] for r in RATIO_RECIPES}
    for i in range(steps + 1):  # step 0 is the warm-up
        order = RATIO_RECIPES[i % len(RATIO_RECIPES) :] + RATIO_RECIPES[: i % len(RATIO_RECIPES)]
        for r in order:
            wall_s, cpu_s, loops = trainees[r].step(i)
            if i > 0:
                wall[r].append(wall_s)
                cpu[r].append(cpu_s)
                flops[r].append(step_flops(trainees[r].cfg, seq_len, batch, loops, device))
                for key, value in counted_flops(trainees[r].cfg, loops, seq_len).items():
                    counted[r][key].append(value * batch * seq_len)
                rounds[r].append(max(loops))
        done = "  ".join(f"{r} {wall[r][-1]:.2f}s" for r in order) if i > 0 else "warm-up"
        print(f"  step {i}: {done}", flush=True)
    rows = {}
    peak = peak_flops(device)
    for r in RATIO_RECIPES:
        step_s = statistics.median(cpu[r] if clock == "cpu" else wall[r])
        # FLOP/s of each count over the steps' wall time (after the warm-up step), and MFU / HFU on a
        # GPU whose bf16 peak workers/device.py knows
        rate = {
            k: statistics.median(f / t for f, t in zip(v, wall[r], strict=True))
            for k, v in counted[r].items()
        }
        rows[r] = {
            "achieved_tflops": rate["useful"] / 1e12,
            "hardware_tflops": rate["total"] / 1e12,
            "dense_tflops": rate["dense"] / 1e12,
            "mfu": None if peak is None else rate["useful"] / peak,
            "hfu": None if peak is None else rate["total"] / peak,
            "median_step_s": step_s,
            "tokens_per_s": batch * seq_len / step_s,
            "median_wall_s": statistics.median(wall[r]),
            "median_step_gflop": statistics.median(flops[r]) / 1e9,
            "rounds_run": rounds[r],
            "wall_s": wall[r],
            "cpu_s": cpu[r],
        }
    ratios = {
        f"{a}/{b}": {
            "measured": rows[b]["median_step_s"] / rows[a]["median_step_s"],
            "measured_wall": rows[b]["median_wall_s"] / rows[a]["median_wall_s"],
            "predicted": rows[b]["median_step_gflop"] / rows[a]["median_step_gflop"],
        }
        for a, b in RATIOS
    }
    where = f"{torch.cuda.get_device_name(device)}, bf16 autocast" if gpu else f"CPU, {threads} thread(s)"
    print(
        f"\nratios: {size}{'' if gpu else ' (vocab 256)'}, batch {batch} x {seq_len}, AdamW, {where}; "
        f"median of {steps} steps after 1 warm-up, recipes interleaved; clock: {clock} time"
    )
    print("TFLOP/s: useful (own rounds, causal pairs) / hardware (padding too, causal) / dense pairs")
    head = (
        f"{'recipe':<18}{'step s':>8}{'tok/s':>9}{'wall s':>8}{'GFLOP/step':>12}{'useful':>8}{'hw':>8}"
        f"{'dense':>8}{'MFU':>7}{'HFU':>7}"
    )
    print(head + "  rounds run\n" + "-" * len(head))
    for r, row in rows.items():
        mfu, hfu = ("-" if row[k] is None else f"{row[k]:.1%}" for k in ("mfu", "hfu"))
        print(
            f"{r:<18}{row['median_step_s']:>8.3f}{row['tokens_per_s']:>9,.0f}{row['median_wall_s']:>8.3f}"
            f"{row['median_step_gflop']:>12.1f}{row['achieved_tflops']:>8.3f}{row['hardware_tflops']:>8.3f}"
            f"{row['dense_tflops']:>8.3f}{mfu:>7}{hfu:>7}  {row['rounds_run']}"
        )
    print(f"\n{'speed ratio':<26}{'measured':>9}{'(wall)':>8}{'predicted':>10}")
    for name, ratio in ratios.items():
        print(f"{name:<26}{ratio['measured']:>9.2f}{ratio['measured_wall']:>8.2f}{ratio['predicted']:>10.2f}")
    print(f"predicted: {FLOP_LABEL}")
    return {
        "size": size,
        "vocab_size": preset("fixed4", size, **overrides).vocab_size,
        "batch": batch,
        "seq_len": seq_len,
        "steps": steps,
        "threads": threads,
        "clock": clock,
        "predicted_is": FLOP_LABEL,
        "recipes": rows,
        "ratios": ratios,
    }


# ---- the table section ----------------------------------------------------------------------------


def table_section(
    device: torch.device, steps: int, size: str | None = None, recipes: tuple[str, ...] = RECIPES
) -> dict:
    """The per-recipe table for `recipes`; `size` replaces both default sizes (training and decode)."""
    from looplab.workers.evaluate.decode_bench import Spec
    from looplab.workers.evaluate.decode_bench import run as decode_run
    from looplab.workers.reporter import MemoryReporter

    gpu = device.type == "cuda"
    train_size, batch, seq_len = ("86m", 8, 2048) if gpu else ("small", 4, 128)
    dec_size, contexts, batches = (
        ("144m", [2000, 16000], [1, 8, 64]) if gpu else ("small", [256, 1024], [1, 8])
    )
    train_size, dec_size = size or train_size, size or dec_size
    rows = {}
    for recipe in recipes:
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
    base = rows["parcae"]["train_tokens_per_s"] if "parcae" in rows else None  # no ratio without it
    for r in rows.values():
        r["train_ratio_vs_parcae"] = None if base is None else r["train_tokens_per_s"] / base

    cells = list(rows[recipes[0]]["decode_ms"])
    head = f"{'recipe':<17}{'train tok/s':>12}{'x parcae':>9}" + "".join(f"{'ms ' + c:>13}" for c in cells)
    head += f"{'KV MB 2k':>10}{'KV MB 16k':>11}"
    print(
        f"\ntraining: {train_size}, batch {batch} x {seq_len}, AdamW; decode: {dec_size}; KV: 144m bf16 batch 1"
    )
    print(head)
    print("-" * len(head))
    for name, r in rows.items():
        ratio = "-" if r["train_ratio_vs_parcae"] is None else f"{r['train_ratio_vs_parcae']:.2f}"
        line = f"{name:<17}{r['train_tokens_per_s']:>12,.0f}{ratio:>9}"
        line += "".join(f"{r['decode_ms'][c]:>13.2f}" for c in cells)
        line += f"{r['kv_mb_144m']['2000']:>10.1f}{r['kv_mb_144m']['16000']:>11.1f}"
        print(line)
    return {
        "train": {"size": train_size, "batch": batch, "seq_len": seq_len, "steps": steps},
        "decode": {"size": dec_size, "contexts": contexts, "batches": batches},
        "recipes": rows,
    }


# ---- entry point --------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--section", default="all", help=f"one of {', '.join(SECTIONS)}")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    p.add_argument("--train-steps", type=int, default=3, help="measured steps per recipe in the table")
    p.add_argument("--ratio-steps", type=int, default=5, help="measured steps per recipe in the ratios")
    p.add_argument(
        "--threads", type=int, default=1, help="CPU threads (1: stable ratios on a shared machine)"
    )
    p.add_argument("--out", default=str(RESULTS), help="folder for the JSON results")
    p.add_argument("--size", default=None, help="one model size for every section (default: per device)")
    p.add_argument("--recipes", default=",".join(RECIPES), help="comma-separated recipes of the table")
    a = p.parse_args(argv)
    try:
        a.section = fields.choice("section", a.section, SECTIONS)
        if a.size is not None:
            a.size = fields.choice("size", a.size, tuple(SIZES))
        a.recipes = tuple(
            fields.choice("recipes", r.strip(), RECIPES) for r in a.recipes.split(",") if r.strip()
        )
        if not a.recipes:
            raise ConfigError(f"recipes: give at least one of {', '.join(RECIPES)}")
        a.device = fields.device("device", a.device)
        a.train_steps = fields.integer("train-steps", a.train_steps, lo=1)
        a.ratio_steps = fields.integer("ratio-steps", a.ratio_steps, lo=1)
        a.threads = fields.integer("threads", a.threads, lo=1)
    except ConfigError as err:
        p.error(str(err))
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(a.device)
    gpu = device.type == "cuda"
    if not gpu:
        torch.set_num_threads(a.threads)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    result: dict = {
        "device": torch.cuda.get_device_name(device) if gpu else "cpu",
        "torch": torch.__version__,
        "threads": None if gpu else torch.get_num_threads(),
    }
    if a.section in ("ratios", "all"):
        result["ratios"] = ratio_section(device, a.ratio_steps, a.size)
        (out / "model_bench_ratios.json").write_text(json.dumps({**result}, indent=2))
    if a.section in ("table", "all"):
        result["table"] = table_section(device, a.train_steps, a.size, a.recipes)
        (out / "model_bench.json").write_text(
            json.dumps({k: v for k, v in result.items() if k != "ratios"}, indent=2)
        )
    print(json.dumps(result, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
