"""The decode benchmark job: per-token generation latency and KV-cache size of an architecture.

Latency depends on the architecture, not on the weights or the cache contents, so the model has random
weights and the cache is *fake-filled*: a static cache of exactly `context_len` slots (ring buffers of
`window` slots for windowed rounds) is marked as holding positions 0..context_len-n-1, then the
n = warmup + steps decode steps run at the last n positions. That makes a 16k-token cell cost seconds,
not a 16k-token prefill, and the cache measured is exactly `kv_cache_bytes(cfg, context_len, ...)`.

`ms_per_token` is the wall time of one decode step (one new token for each of the batch's sequences),
median over `steps`, with p10/p90. On CUDA the timers are synchronised and, when `cuda_graph` is
"auto" or true, the whole step is replayed from a captured CUDA graph (static shapes, no host sync).

    python -m workers.decode_bench --preset lean --size tiny --context-lens 128,512 --batch-sizes 1,8
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from model import fields
from model.errors import ConfigError
from workers.cost import ForwardCost
from workers.reporter import JobInterrupted, Reporter
from workers.spec_cli import SpecParser, job_parser, run_standalone

DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass(frozen=True)
class Spec:
    recipe: str = "lean"
    """recipe name, one of model.presets.RECIPES"""
    size: str = "tiny"
    """model size, one of model.presets.SIZES"""
    model: dict[str, Any] = field(default_factory=dict)
    """ModelConfig field overrides, e.g. d_model=32"""
    context_lens: list[int] = field(default_factory=lambda: [128, 512])
    """context lengths (tokens in the cache) to time a decode step at"""
    batch_sizes: list[int] = field(default_factory=lambda: [1, 8])
    """batch sizes (sequences decoded together) to time"""
    dtype: str = "auto"
    """auto (bfloat16 on CUDA, float32 on CPU), float32, bfloat16 or float16"""
    warmup: int = 3
    """untimed decode steps before the timed ones"""
    steps: int = 20
    """timed decode steps per cell"""
    device: str = "auto"
    """auto, cpu, cuda or cuda:N"""
    cuda_graph: str | bool = "auto"
    """replay each step from a captured CUDA graph: auto (= on CUDA), true or false"""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Spec:
        from model.presets import RECIPES, SIZES, preset

        d = fields.with_defaults("decode_bench", d, cls)
        recipe = fields.choice("recipe", d["recipe"], RECIPES)
        size = fields.choice("size", d["size"], tuple(SIZES))
        model = fields.mapping("model", d["model"], "a mapping of ModelConfig overrides")
        preset(recipe, size, **model)  # validates the overrides (ConfigError names the field)
        warmup = fields.integer("warmup", d["warmup"], lo=0)
        steps = fields.integer("steps", d["steps"], lo=1)
        lens = fields.int_list("context_lens", d["context_lens"], lo=1)
        if min(lens) <= warmup + steps:
            raise ConfigError(
                f"context_lens: each must exceed warmup + steps = {warmup + steps} (the steps run at the "
                f"last positions of the context); got {lens}"
            )
        cuda_graph = d["cuda_graph"]
        if cuda_graph not in ("auto", True, False):
            raise ConfigError(f"cuda_graph: unknown {cuda_graph!r}; accepted: auto, true, false")
        return cls(
            recipe=recipe,
            size=size,
            model=model,
            context_lens=lens,
            batch_sizes=fields.int_list("batch_sizes", d["batch_sizes"], lo=1),
            dtype=fields.choice("dtype", d["dtype"], DTYPES),
            warmup=warmup,
            steps=steps,
            device=fields.device("device", d["device"]),
            cuda_graph=cuda_graph,
        )

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def cost(spec: Spec) -> ForwardCost:
    """Every decode step of every cell (warm-up and timed: `warmup + steps` per context length and batch
    size), each a forward of one token per sequence at the cell's context length; a step also pays a
    fixed cost per layer application. Per cell and device type, the FLOPs and the bytes of one step
    (`model.memory.decode_step_bytes` at the dtype it runs in there). Memory: `model.memory.decode_memory`
    of the largest cell."""
    from model.flops import step_flops
    from model.memory import DEVICE_TYPES, decode_memory, decode_step_bytes
    from model.presets import preset

    cfg = preset(spec.recipe, spec.size, **spec.model)
    per_cell = spec.warmup + spec.steps
    flops, n_steps = 0.0, 0
    cells: dict[str, list[tuple[int, float, float]]] = {d: [] for d in DEVICE_TYPES}
    for context in spec.context_lens:
        per_token = step_flops(cfg, cfg.loops, seq_len=context).forward
        for batch in spec.batch_sizes:
            flops += per_cell * batch * per_token
            n_steps += per_cell
            for d in DEVICE_TYPES:
                read = decode_step_bytes(cfg, context, batch, _item_bytes(spec.dtype, d))
                cells[d].append((per_cell, float(batch * per_token), read))
    biggest = max(spec.context_lens), max(spec.batch_sizes)
    memory = {d: decode_memory(cfg, *biggest, d) for d in DEVICE_TYPES}
    applications = cfg.n_prelude + cfg.n_recurrent * cfg.loops + cfg.n_coda
    return ForwardCost(float(flops), memory, cfg.d_model, n_steps, applications,
                       {d: tuple(c) for d, c in cells.items()})  # fmt: skip


def _item_bytes(dtype: str, device_type: str) -> int:
    """Bytes per weight and cache element of `dtype` on `device_type` ("auto": bfloat16 on CUDA)."""
    if dtype == "auto":
        dtype = "bfloat16" if device_type == "cuda" else "float32"
    return 4 if dtype == "float32" else 2


def _bench_cell(model, cfg, context_len: int, batch: int, dtype, device, spec: Spec, use_graph: bool):
    """Median/p10/p90 ms per decode step at `context_len` and the cache's real size in bytes."""
    import torch

    n = spec.warmup + spec.steps
    cache = model.setup_cache(batch, context_len, dtype=dtype, device=device)
    g = torch.Generator(device="cpu").manual_seed(0)
    tokens = torch.randint(0, cfg.vocab_size, (n, batch), generator=g).to(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    step = None
    if use_graph:
        from model.decode import capture_decode_graph

        cache.fake_fill(context_len - n)
        graph, static_tokens, _ = capture_decode_graph(model, cache, tokens[0])

        def step(t):
            static_tokens.copy_(t)
            graph.replay()

    else:

        def step(t):
            model.decode_step(t, cache)

    cache.fake_fill(context_len - n)
    times = []
    with torch.no_grad():
        for i in range(n):
            sync()
            t0 = time.perf_counter()
            step(tokens[i])
            sync()
            if i >= spec.warmup:
                times.append((time.perf_counter() - t0) * 1e3)
    q = statistics.quantiles(times, n=10, method="inclusive") if len(times) > 1 else [times[0]] * 9
    return statistics.median(times), q[0], q[-1], cache.nbytes()


def run(spec: Spec, reporter: Reporter, artifact_dir: str | Path | None = None) -> dict[str, Any]:
    import torch

    from model.counts import kv_cache_bytes
    from model.looped import LoopedLM
    from model.presets import preset
    from workers.device import resolve_device

    device = resolve_device(spec.device)
    dtype_name = spec.dtype if spec.dtype != "auto" else ("bfloat16" if device.type == "cuda" else "float32")
    dtype = getattr(torch, dtype_name)
    use_graph = device.type == "cuda" and spec.cuda_graph in ("auto", True)
    cfg = preset(spec.recipe, spec.size, **spec.model)
    torch.manual_seed(0)
    model = LoopedLM(cfg).to(device=device, dtype=dtype).eval()
    cells = [(c, b) for c in spec.context_lens for b in spec.batch_sizes]
    reporter.log(f"decode_bench {spec.recipe}/{spec.size} on {device} {dtype_name}, cuda_graph={use_graph}")
    rows = []
    for done, (ctx, batch) in enumerate(cells):
        if reporter.should_stop():
            raise JobInterrupted("decode_bench stopped between cells")
        med, p10, p90, held = _bench_cell(model, cfg, ctx, batch, dtype, device, spec, use_graph)
        want = kv_cache_bytes(cfg, ctx, batch, dtype)
        if held != want:  # the analytic count is what the dashboard shows: it must be the truth
            raise RuntimeError(f"kv cache holds {held} bytes but kv_cache_bytes says {want}")
        row = {
            "arch": spec.recipe,
            "size": spec.size,
            "context_len": ctx,
            "batch_size": batch,
            "ms_per_token": med,
            "ms_p10": p10,
            "ms_p90": p90,
            "kv_cache_mb": want / 2**20,
            "device": device.type,
            "dtype": dtype_name,
            "cuda_graph": use_graph,
        }
        reporter.result("decode_benches", row)
        reporter.heartbeat()
        reporter.progress(done + 1, len(cells))
        rows.append(row)
    summary = {"spec": spec.to_dict(), "rows": rows}
    if artifact_dir is not None:
        Path(artifact_dir).mkdir(parents=True, exist_ok=True)
        (Path(artifact_dir) / "decode_bench.json").write_text(json.dumps(summary, indent=2))
    return summary


def format_table(rows: list[dict[str, Any]]) -> str:
    head = f"{'arch':<16}{'size':<6}{'ctx':>7}{'batch':>6}{'ms/tok':>9}{'p10':>8}{'p90':>8}{'KV MB':>10}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['arch']:<16}{r['size']:<6}{r['context_len']:>7}{r['batch_size']:>6}{r['ms_per_token']:>9.3f}"
            f"{r['ms_p10']:>8.3f}{r['ms_p90']:>8.3f}{r['kv_cache_mb']:>10.2f}"
        )
    return "\n".join(lines)


def build_parser() -> SpecParser:
    what = "Per-token decode latency and KV-cache size of an architecture."
    return job_parser(Spec, "workers.decode_bench", what, out_help="artifact dir for decode_bench.json")


def main(argv: list[str] | None = None) -> int:
    return run_standalone(
        build_parser(),
        Spec,
        run,
        lambda spec, summary, args: print(format_table(summary["rows"])),
        desc="decode_bench",
        argv=argv,
    )


if __name__ == "__main__":
    sys.exit(main())
