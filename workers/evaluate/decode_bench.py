"""The decode benchmark job: per-token generation latency and KV-cache size of an architecture.

Latency depends on the architecture, not on the weights or the cache contents, so the model has random
weights and the cache is *fake-filled*: a static cache of exactly `context_len` slots (ring buffers of
`window` slots for windowed rounds) is marked as holding positions 0..context_len-n-1, then the
n = warmup + steps decode steps run at the last n positions. That makes a 16k-token cell cost seconds,
not a 16k-token prefill, and the cache measured is exactly `kv_cache_bytes(cfg, context_len, ...)`.

`ms_per_token` is the wall time of one decode step (one new token for each of the batch's sequences),
median over `steps`, with p10/p90. On CUDA the timers are synchronised and, when `cuda_graph` is
"auto" or true, the whole step is replayed from a captured CUDA graph (static shapes, no host sync).

    python -m looplab.workers.evaluate.decode_bench --preset lean --size tiny --context-lens 128,512 --batch-sizes 1,8

Decoding with per-token exit rules and KV strategies needs a trained model (the exits depend on the
weights) and real tokens: the adaptive job times it (workers/adaptive/decode.py), with the same timer
(`workers.device.time_steps`).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from looplab.model import fields
from looplab.model.errors import ConfigError
from looplab.model.names import BUILTIN_FAMILY
from looplab.workers.cost import ForwardCost
from looplab.workers.device import time_steps
from looplab.workers.identity import spec_to_dict
from looplab.workers.model_fields import SHAPE_KEYS, ModelFields, model_fields
from looplab.workers.reporter import JobInterrupted, Reporter
from looplab.workers.spec_cli import SpecParser, job_parser, run_standalone

DTYPES = ("auto", "float32", "bfloat16", "float16")
# A family without a KV cache is timed by full recompute, at contexts up to this many tokens, and its
# rows' `arch` says so.
RECOMPUTE_MAX_CONTEXT = 2048
RECOMPUTE = "(full recompute)"


@dataclass(frozen=True)
class Spec(ModelFields):
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
    seq_len: int | None = None
    """another family's context (its factory's seq_len; default 64); looplab's own model's is its
    size's or model.seq_len"""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Spec:
        given = fields.known_keys("decode_bench", d, cls)
        d = {**vars(cls()), **given}
        chosen = model_fields(d, given)
        if chosen["recipe"] is not None and d["seq_len"] is not None:
            raise ConfigError(
                f"seq_len: another family's context, when its spec names no recipe, size or model; looplab's own "
                f"model's is its size's or model.seq_len; got {d['seq_len']!r}"
            )
        cls(**chosen).preset_config()  # validates the overrides, by field
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
            **chosen,
            context_lens=lens,
            batch_sizes=fields.int_list("batch_sizes", d["batch_sizes"], lo=1),
            dtype=fields.choice("dtype", d["dtype"], DTYPES),
            warmup=warmup,
            steps=steps,
            device=fields.device("device", d["device"]),
            cuda_graph=cuda_graph,
        )

    def run_shape(self):
        """The benched model's shape (model/shape.py), at its preset's vocabulary."""
        from looplab.model.shape import RunShape

        return RunShape.of_config(self.preset_config())

    def to_dict(self) -> dict[str, Any]:
        """Every field; the family's only when it is not looplab's own, the shape's only for a shaped
        family (stored benches keep their hash)."""
        return self.family_keys(spec_to_dict(self), optional=SHAPE_KEYS)


def refuse_follow(spec: dict[str, Any], followed: dict[str, Any]) -> None:
    """At submission (workers.jobs `refuse_follow`): a model of another family must take the longest
    context this bench will run it at (`_refuse_context`), its KV cache as the followed run's check found."""
    bench = Spec.from_dict(spec)
    if bench.family != BUILTIN_FAMILY:
        _refuse_context(bench, (followed.get("capabilities") or {}).get("kv_cache", True))


def refuse_alone(spec: dict[str, Any]) -> None:
    """At submission of a bench on its own (workers.jobs `refuse_alone`: a grid of decode benches, following
    no run): another family is checked as a train grid's is (model.contract `check_family`, FamilyError
    naming the family), then held to the longest context the bench will ask of it (`_refuse_context`)."""
    from looplab.model.contract import check_family, family_settings

    bench = Spec.from_dict(spec)
    if bench.family == BUILTIN_FAMILY:
        return
    report = check_family(bench.family, family_settings(bench.run_shape(), bench.family_config))
    _refuse_context(bench, report.capabilities.kv_cache)


def _refuse_context(bench: Spec, cached: bool) -> None:
    """Refuse a family that cannot take the longest context `bench` will run it at (a family without a KV
    cache, `cached` false, is run only up to RECOMPUTE_MAX_CONTEXT), else every attempt fails with the same
    shape error (model.contract `check_context`: its declared `max_context`, or a forward at that length)."""
    from looplab.model.contract import check_context, family_settings

    lens = [c for c in bench.context_lens if cached or c <= RECOMPUTE_MAX_CONTEXT]
    if lens:
        check_context(bench.family, family_settings(bench.run_shape(), bench.family_config), max(lens))


def cost(spec: Spec) -> ForwardCost:
    """Every decode step of every cell (warm-up and timed: `warmup + steps` per context length and batch
    size), each a forward of one token per sequence at the cell's context length; a step also pays a
    fixed cost per layer application. Per cell and device type, the FLOPs and the bytes of one step
    (`model.memory.decode_step_bytes` at the dtype it runs in there). Memory: `model.memory.decode_memory`
    of the largest cell."""
    from looplab.model.flops import step_flops
    from looplab.model.memory import DEVICE_TYPES, decode_memory, decode_step_bytes

    cfg = spec.preset_config()
    if spec.family != BUILTIN_FAMILY:
        return _family_cost(spec, cfg)
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
    return ForwardCost(
        float(flops), memory, cfg.d_model, n_steps, applications, {d: tuple(c) for d, c in cells.items()}
    )


def _family_cost(spec: Spec, cfg) -> ForwardCost:
    """`cost` of a model of another family, from the contract (`model.family_pricing.family_pricing`): a step
    is its forward per token at the trained loop count (measured at the run's length) for one token per
    sequence, or with no KV cache for the whole context (the full recompute the run times, at contexts up
    to RECOMPUTE_MAX_CONTEXT); it reads its weights and its whole static cache (the family's own
    `kv_cache_bytes`) once a step and writes the batch's fp32 logits. Memory: the weights, the largest
    cell's cache and its logits."""
    from looplab.model.contract import family_settings
    from looplab.model.family_pricing import family_pricing
    from looplab.model.memory import DEVICE_TYPES, FLOAT_BYTES

    family = family_pricing(spec.family, family_settings(spec.run_shape(), spec.family_config))
    cached, per_token = family.capabilities.kv_cache, family.forward_flops(cfg.loops)
    contexts = [c for c in spec.context_lens if cached or c <= RECOMPUTE_MAX_CONTEXT] or [0]
    per_cell, flops, n_steps = spec.warmup + spec.steps, 0.0, 0
    cells: dict[str, list[tuple[int, float, float]]] = {d: [] for d in DEVICE_TYPES}

    def held(context: int, batch: int, d: str) -> float:  # weights, cache and logits of one cell
        item = _item_bytes(spec.dtype, d)
        cache = family.kv_cache_bytes(batch, context, item) if cached else 0.0
        return family.n_params * item + cache + batch * cfg.vocab_size * FLOAT_BYTES

    for context in contexts:
        for batch in spec.batch_sizes:
            step = batch * per_token * (1 if cached else context)
            flops, n_steps = flops + per_cell * step, n_steps + per_cell
            for d in DEVICE_TYPES:
                cells[d].append((per_cell, float(step), held(context, batch, d)))
    memory = {d: held(max(spec.context_lens), max(spec.batch_sizes), d) for d in DEVICE_TYPES}
    return ForwardCost(
        float(flops), memory, cfg.d_model, n_steps, cfg.loops, {d: tuple(c) for d, c in cells.items()}
    )


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
        cache.fake_fill(context_len - n)
        graph, static_tokens, _ = model.capture_decode_graph(cache, tokens[0])

        def step(t):
            static_tokens.copy_(t)
            graph.replay()

    else:

        def step(t):
            model.decode_step(t, cache)

    cache.fake_fill(context_len - n)
    with torch.no_grad():
        med, p10, p90 = time_steps(lambda i: step(tokens[i]), n, spec.warmup, sync)
    return med, p10, p90, cache.nbytes()


def _recompute_cell(model, cfg, context_len: int, batch: int, device, spec: Spec):
    """Median/p10/p90 ms per decode step of a model without a KV cache: each step is a forward over the
    whole context (the last `context_len` tokens), at the model's fixed loop count."""
    import torch

    n = spec.warmup + spec.steps
    g = torch.Generator(device="cpu").manual_seed(0)
    tokens = torch.randint(0, cfg.vocab_size, (batch, context_len), generator=g).to(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    with torch.no_grad():
        return time_steps(lambda i: model(tokens, loops=cfg.loops), n, spec.warmup, sync)


def run(spec: Spec, reporter: Reporter, artifact_dir: str | Path | None = None) -> dict[str, Any]:
    import torch

    from looplab.model.contract import build_model
    from looplab.model.counts import kv_cache_bytes
    from looplab.workers.device import resolve_device

    device = resolve_device(spec.device)
    dtype_name = spec.dtype if spec.dtype != "auto" else ("bfloat16" if device.type == "cuda" else "float32")
    dtype = getattr(torch, dtype_name)
    use_graph = device.type == "cuda" and spec.cuda_graph in ("auto", True)
    cfg = spec.preset_config()
    torch.manual_seed(0)
    shape = cfg if spec.family == BUILTIN_FAMILY else spec.run_shape()  # a family is built at its shape
    built = build_model(shape, spec.family, spec.family_config)
    model = built.module.to(device=device, dtype=dtype).eval()
    cached = built.capabilities.kv_cache  # else every step recomputes the whole context, labelled so
    # a CUDA graph of the decode step where the model offers one (looplab's own; a family's module decodes eagerly)
    use_graph = use_graph and callable(getattr(model, "capture_decode_graph", None))
    cells = [(c, b) for c in spec.context_lens for b in spec.batch_sizes]
    if not cached:
        reporter.log(
            f"decode_bench: family {built.family.name!r} has no KV cache: each step is a full forward "
            f"over its context (contexts up to {RECOMPUTE_MAX_CONTEXT} tokens), rows labelled {RECOMPUTE!r}"
        )
        cells = [(c, b) for c, b in cells if c <= RECOMPUTE_MAX_CONTEXT]
    reporter.log(f"decode_bench {spec.model_name} on {device} {dtype_name}, cuda_graph={use_graph}")
    rows = []
    for done, (ctx, batch) in enumerate(cells):
        if reporter.should_stop():
            raise JobInterrupted("decode_bench stopped between cells")
        if cached:
            med, p10, p90, held = _bench_cell(model, cfg, ctx, batch, dtype, device, spec, use_graph)
            # a family's cache is checked against its own count (else reported as it is held)
            own = None if built.builtin else built.module.kv_cache_bytes(batch, ctx, dtype=dtype)
            want = kv_cache_bytes(cfg, ctx, batch, dtype) if built.builtin else (held if own is None else own)
            if held != want:  # the analytic count is what the dashboard shows: it must be the truth
                raise RuntimeError(f"kv cache holds {held} bytes but kv_cache_bytes says {want}")
        else:
            (med, p10, p90), want = _recompute_cell(model, cfg, ctx, batch, device, spec), 0
        row = {
            "arch": spec.arch_name[:64] if cached else f"{spec.arch_name} {RECOMPUTE}"[-64:],
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
    return job_parser(
        Spec, "looplab.workers.evaluate.decode_bench", what, out_help="artifact dir for decode_bench.json"
    )


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
