"""Ouro-1.4B at its published size (tests/fixtures/ouro_1_4b/config.json, the hub's ByteDance/Ouro-1.4B
configuration) through this family's code without allocating it: the layout reads every field it
computes and refuses by name what it cannot; the model built on the meta device has the parameter
count the config's numbers imply (counted here from those numbers alone); the published tensor names
(the tiny fixture's naming rule, made by the public code, scaled to 24 layers) map one to one onto it;
and, in a fresh process whose peak memory stays far below the 5.7 GB of one fp32 copy, the
conformance check runs at the factory's `check_config` and `looplab plan` prices a train job and a
decode bench on an H100 of the device table, the KV cache at loops x layers x 2 x kv_heads x head_dim
x bytes per token. No weights of the real model are here: nothing checks its values."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from looplab.families.ouro import factory, layout
from looplab.model.contract import check_family
from looplab.model.contract.flops import measure_activation_bytes

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
PUBLISHED = FIXTURES / "ouro_1_4b" / "config.json"
TINY = FIXTURES / "ouro_tiny"
RAW = json.loads(PUBLISHED.read_text())
# the parameter count of Ouro-1.4B, as `implied_params` works it out from the config's numbers
OURO_1_4B_PARAMS = 1_434_652_673
# what the layout does not read, and why (everything else in the file is read or checked)
NOT_READ = {
    "architectures": "Hugging Face's class name",
    "early_exit_threshold": "how the public forward exits at inference; looplab's exits are its own rules",
    "sliding_window": "a window's width, which the public code reads only with use_sliding_window (refused)",
}
BF16 = 2


def numbers(raw: dict) -> dict[str, int]:
    return {
        "d": raw["hidden_size"],
        "heads": raw["num_attention_heads"],
        "kv": raw["num_key_value_heads"],
        "hd": raw.get("head_dim", raw["hidden_size"] // raw["num_attention_heads"]),
        "mlp": raw["intermediate_size"],
        "L": raw["num_hidden_layers"],
        "V": raw["vocab_size"],
        "loops": raw["total_ut_steps"],
    }


def implied_params(raw: dict) -> dict[str, int]:
    """Parameters by part, from the config's numbers alone: no module is built."""
    n = numbers(raw)
    d, hd = n["d"], n["hd"]
    attention = d * n["heads"] * hd + 2 * d * n["kv"] * hd + n["heads"] * hd * d  # q, k, v, o; no biases
    layer = attention + 3 * d * n["mlp"] + 4 * d  # gate, up, down; four RMSNorm scales
    head = 0 if raw["tie_word_embeddings"] else n["V"] * d
    return {"embedding": n["V"] * d, "head": head, "layers": n["L"] * layer, "norm": d, "exit_gate": d + 1}


def published_shapes(raw: dict) -> dict[str, tuple[int, ...]]:
    """Each tensor's shape in the public layout, by the name's part after `model.layers.{i}.` (or the
    whole name), from the config's numbers."""
    n = numbers(raw)
    d, q, kv = n["d"], n["heads"] * n["hd"], n["kv"] * n["hd"]
    return {
        "self_attn.q_proj.weight": (q, d),
        "self_attn.k_proj.weight": (kv, d),
        "self_attn.v_proj.weight": (kv, d),
        "self_attn.o_proj.weight": (d, q),
        "mlp.gate_proj.weight": (n["mlp"], d),
        "mlp.up_proj.weight": (n["mlp"], d),
        "mlp.down_proj.weight": (d, n["mlp"]),
        **{f"{norm}.weight": (d,) for norm in layout._NORMS},
        "model.embed_tokens.weight": (n["V"], d),
        "model.norm.weight": (d,),
        "model.early_exit_gate.weight": (1, d),
        "model.early_exit_gate.bias": (1,),
        "lm_head.weight": (n["V"], d),
    }


def naming_rule() -> tuple[set[str], set[str]]:
    """(names outside the layers, the per-layer name parts) of the tiny checkpoint the public code wrote;
    every layer there has the same parts."""
    with safe_open(str(TINY / "model.safetensors"), "pt") as f:
        names = list(f.keys())
    per_layer: dict[str, set[str]] = {}
    for name in names:
        m = re.fullmatch(r"model\.layers\.(\d+)\.(.+)", name)
        if m:
            per_layer.setdefault(m[1], set()).add(m[2])
    parts = set.union(*per_layer.values())
    assert len(per_layer) == json.loads((TINY / "config.json").read_text())["num_hidden_layers"]
    assert all(p == parts for p in per_layer.values())
    return {n for n in names if not n.startswith("model.layers.")}, parts


def test_the_published_config_is_read_field_by_field():
    config, run = layout.config_from_published(RAW)
    assert config == {
        "d_model": 2048,
        "n_heads": 16,
        "mlp": 5632,
        "n_layers": 24,
        "max_loops": 4,
        "rope_base": 1_000_000.0,
        "norm_eps": 1e-6,
        "tie_embeddings": False,
    }
    assert run == {"vocab_size": 49152, "seq_len": 65536, "loops": 4}
    checked = set(layout.FIELDS) | set(layout.DEFAULTS) | {k for k, _ in layout.REQUIRED}
    checked |= {"model_type", "num_key_value_heads", "head_dim"}
    met = [k for k in RAW if k in checked]
    assert set(RAW) - set(met) == set(NOT_READ), "a field of the published config is neither read nor named"
    assert len(met) == 16
    # each field read matters: another value changes what is read, or is refused naming that field
    changed = refused = 0
    for key in met:
        try:
            other = layout.config_from_published({**RAW, key: _another(RAW[key])})
        except ValueError as e:
            assert f"config.{key}" in str(e) or key in ("hidden_size", "num_attention_heads"), (key, e)
            refused += 1
            continue
        assert other != (config, run), key
        changed += 1
    assert (changed, refused) == (8, 8)  # 8 mapped values; 8 fields with the one value this family computes


def _another(value):
    """A value of the same kind that differs from `value`."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value * 2
    if value is None:
        return {"rope_type": "linear", "factor": 2.0}
    return f"{value}_other"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, r"config\.rope_scaling: .*accepted: None"),
        ({"use_sliding_window": True, "sliding_window": 4096}, r"config\.use_sliding_window: True"),
        (
            {"num_key_value_heads": 4},
            r"config\.num_key_value_heads: 4 \(grouped-query attention\); accepted: 16",
        ),
        ({"head_dim": 64}, r"config\.head_dim: 64; accepted: 128"),
        ({"hidden_act": "gelu"}, r"config\.hidden_act: 'gelu' is not computed by this family"),
        ({"model_type": "qwen2"}, r"config\.model_type: expected 'ouro'"),
    ],
)
def test_a_field_the_family_cannot_honour_is_refused_by_name(edit, message):
    with pytest.raises(ValueError, match=message):
        layout.config_from_published({**RAW, **edit})


def _meta_model():
    config, run = layout.config_from_published(RAW)
    with torch.device("meta"):
        return factory({**config, "vocab_size": run["vocab_size"], "seq_len": 4096})


def test_the_meta_model_has_the_parameter_count_the_config_implies():
    model = _meta_model()
    assert all(p.is_meta for p in model.parameters())  # shapes only: nothing was allocated
    parts = implied_params(RAW)
    assert sum(parts.values()) == OURO_1_4B_PARAMS and 1.4e9 < OURO_1_4B_PARAMS < 1.45e9
    count = lambda ps: sum(p.numel() for p in ps)  # noqa: E731
    assert count(model.parameters()) == OURO_1_4B_PARAMS
    split = model.param_split()
    assert count(split["embedding"]) == parts["embedding"] + parts["head"]
    assert count(split["recurrent"]) == parts["layers"]
    assert count(split["once"]) == parts["norm"] + parts["exit_gate"]


def test_the_check_config_keeps_the_layers_loops_vocabulary_and_objective_at_width_32():
    config, run = layout.config_from_published(RAW)
    big = {**config, "vocab_size": run["vocab_size"], "seq_len": 4096, "objective": "gate_tuning"}
    small = factory.check_config({**big, "init_from": "runs/stage1/final.pt"})
    assert small == {**big, "d_model": 32, "n_heads": 2, "mlp": 48, "init_from": ""}
    tiny = {"vocab_size": 320, "seq_len": 16, "d_model": 32, "n_heads": 2, "mlp": 48, "n_layers": 2}
    report = check_family(layout.FAMILY, tiny, loops=2)  # small: checked at its own size
    assert report.checked_config is None and report.n_params == sum(
        p.numel() for p in factory(tiny).parameters()
    )


def test_the_rotation_on_the_meta_device_has_the_real_tables_shapes():
    """What lets the forward run on the meta device (the planner measures its training memory there)."""
    tiny = {"vocab_size": 320, "seq_len": 16, "d_model": 32, "n_heads": 2, "mlp": 48, "n_layers": 2}
    real = factory(tiny)
    with torch.device("meta"):
        meta = factory(tiny)
    pairs = list(zip(real._rot(torch.arange(16)), meta._rot(torch.arange(16, device="meta")), strict=True))
    assert len(pairs) == 2  # cos, sin
    for r, m in pairs:
        assert m.is_meta and (m.shape, m.dtype) == (r.shape, r.dtype) == ((16, 16), torch.float32)
    assert measure_activation_bytes(meta, 16, 2) >= measure_activation_bytes(real, 16, 2) > 0


def test_the_tiny_checkpoints_shapes_follow_the_rule_used_at_full_size():
    tiny = json.loads((TINY / "config.json").read_text())
    shapes = published_shapes(tiny)
    checked = 0
    with safe_open(str(TINY / "model.safetensors"), "pt") as f:
        for name in f.keys():
            part = re.sub(r"^model\.layers\.\d+\.", "", name)
            assert tuple(f.get_slice(name).get_shape()) == shapes[part], name
            checked += 1
    assert checked == 2 * 11 + 5


def test_every_published_tensor_name_maps_onto_the_model_one_to_one():
    outside, parts = naming_rule()
    shapes = published_shapes(RAW)
    assert outside | parts == set(shapes)  # the rule names every tensor the shapes describe, and no other
    n = numbers(RAW)
    names = sorted(outside) + [f"model.layers.{i}.{p}" for i in range(n["L"]) for p in sorted(parts)]
    assert len(names) == len(set(names)) == 24 * 11 + 5
    state = {
        name: torch.empty(shapes[re.sub(r"^model\.layers\.\d+\.", "", name)], device="meta") for name in names
    }
    assert sum(t.numel() for t in state.values()) == OURO_1_4B_PARAMS
    model = _meta_model()
    want = model.state_dict()
    mapped = layout.state_from_published(state, want, layout.config_from_published(RAW)[0])
    assert set(mapped) == set(want) and len(mapped) == len(names)
    assert all(mapped[k].shape == want[k].shape for k in want)


PROBE = """
import json, resource, sys, time
from pathlib import Path
import torch
from looplab import Grid, Queue
from looplab.families.ouro import layout
from looplab.lab.planner.estimates import TimeModel
from looplab.model.contract import check_family, meta_module, resolve_family
from looplab.orchestrator.grid import expand
from looplab.workers import jobs
from looplab.workers.calibrate import for_device
from looplab.workers.evaluate import decode_bench

start = time.time()
config, run = layout.config_from_published(json.loads(Path(sys.argv[1]).read_text()))
report = check_family(layout.FAMILY, {**config, "vocab_size": run["vocab_size"], "seq_len": 4096}, loops=4)
model = meta_module(resolve_family(layout.FAMILY), {**config, "vocab_size": run["vocab_size"], "seq_len": 4096})
cache = model.setup_cache(16, 4096, dtype=torch.bfloat16)
shape = {"loops": run["loops"], "seq_len": 4096, "vocab_size": run["vocab_size"]}
base = {
    "family": layout.FAMILY, "family_config": config, "model": {"loops": run["loops"]}, "seq_len": 4096,
    "batch_size": 8, "tokens": 8 * 4096 * 100, "eval_every": 1000, "eval_tokens": 4096, "ckpt_every": 1000,
    "optimizer": "adamw", "data": {"corpus": "offline", "tokenizer": "bpe", "vocab_size": run["vocab_size"]},
}
bench = {"context_lens": [4096], "batch_sizes": [1, 16], "warmup": 2, "steps": 8, "model": shape}
grid = Grid("ouro_1_4b", base=base, then=["decode_bench"], follow={"decode_bench": bench})
h100 = for_device("h100")
plan = Queue(db=Path(sys.argv[2]) / "plan.db").plan(grid, calibration=h100, elsewhere=True)
train, bench_job = plan.new_jobs()
plans = expand([grid], jobs)
cost = TimeModel(None, h100, "cuda").train_cost("train", plans[0].spec)
forward = decode_bench.cost(decode_bench.Spec.from_dict(dict(plans[1].spec)))
print(json.dumps({
    "n_params": report.n_params, "checked_d": report.checked_config["d_model"],
    "checked_layers": report.checked_config["n_layers"], "kv": list(report.kv_strategies),
    "kv_per_token": model.kv_cache_bytes(1, 1, loops=run["loops"], dtype=torch.bfloat16),
    "cache_bytes": cache.nbytes(), "cache_meta": cache.k.is_meta,
    "train": {"flops": train.estimate.flops, "mem": train.estimate.peak_mem_bytes, "fits": train.fits,
              "seconds": train.estimate.seconds, "steps": cost.steps, "tokens": cost.tokens_per_step,
              "per_token": cost.flops_per_token, "evals": cost.n_evals(cost.steps) * cost.eval_flops,
              "params": cost.params, "memory_at_1": cost.memory_at(1, "cuda")},
    "bench": {"flops": bench_job.estimate.flops, "mem": bench_job.estimate.peak_mem_bytes,
              "seconds": bench_job.estimate.seconds, "cells": forward.cells["cuda"]},
    "text": plan.text(wide=True), "seconds": time.time() - start,
    "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
}))
"""


def forward_flops_per_token(raw: dict, seq_len: int) -> float:
    """One forward's FLOPs per token at the published loop count, from the config's numbers: every
    matmul (2 per multiply-add) of each layer application, dense attention over `seq_len` (4 d T), and
    the head and exit gate read after every loop (the objective reads each step)."""
    n = numbers(raw)
    d = n["d"]
    layer = 2 * (4 * d * d + 3 * d * n["mlp"]) + 4 * d * seq_len
    return n["loops"] * (n["L"] * layer + 2 * d * n["V"] + 2 * d)


def test_ouro_1_4b_is_checked_and_priced_on_an_h100_without_allocating_it(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(PUBLISHED), str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "LOOPLAB_CACHE": str(tmp_path / "cache")},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["peak_mb"] < 2_000, f"peak {got['peak_mb']:.0f} MB: the model was allocated"
    # the conformance check: at width 32 with the published layers, loops and vocabulary
    assert got["n_params"] == OURO_1_4B_PARAMS and got["kv"] == ["full"]
    assert (got["checked_d"], got["checked_layers"]) == (32, 24)
    # the KV cache: a slot per loop and layer, each keys and values of every key/value head
    n = numbers(RAW)
    per_token = n["loops"] * n["L"] * 2 * n["kv"] * n["hd"] * BF16
    assert got["kv_per_token"] == per_token == 786_432
    assert got["cache_meta"] and got["cache_bytes"] == 16 * 4096 * per_token  # 51.5 GB, never allocated
    # the train job: its steps' tokens at the family's FLOPs per token (3 x the forward), plus its evals
    train = got["train"]
    assert (
        train["per_token"] == 3 * forward_flops_per_token(RAW, 4096) and train["params"] == OURO_1_4B_PARAMS
    )
    assert train["steps"] == 100 and train["tokens"] == 8 * 4096
    assert train["flops"] == pytest.approx(
        train["steps"] * train["tokens"] * train["per_token"] + train["evals"]
    )
    assert train["seconds"] > train["flops"] / (989.5e12 * 0.35)  # the table's H100 at the default MFU
    # memory: fp32 weights and gradients and AdamW's two moments (16 bytes a parameter), then activations
    weights_and_state = 16 * OURO_1_4B_PARAMS
    per_sequence = train["memory_at_1"] - weights_and_state
    assert per_sequence > 0 and train["mem"] == pytest.approx(weights_and_state + 8 * per_sequence)
    assert train["fits"] is False and "WILL NOT FIT" in got["text"]
    # the decode bench: a step per token of each row at the trained loop count, reading the bf16 weights
    # and the whole cache, writing the rows' fp32 logits; it holds the largest cell's
    forward = forward_flops_per_token(RAW, 4096)
    held = {b: BF16 * OURO_1_4B_PARAMS + b * 4096 * per_token + b * n["V"] * 4 for b in (1, 16)}
    assert [tuple(c) for c in got["bench"]["cells"]] == [(10, b * forward, held[b]) for b in (1, 16)]
    assert got["bench"]["mem"] == held[16] > 54e9
    assert got["bench"]["flops"] == pytest.approx(10 * 17 * forward)
    print(got["text"])
