"""The planner prices a model of another family from the contract (workers/train/cost.py,
model.family_pricing.family_pricing): its train job at its own FLOPs per token, the submission's figure, and
its depth sweep and eval at its own forwards, so a wider model costs more; looplab's own grids price
exactly as before (the numbers pinned from the code before families were priced)."""

from __future__ import annotations

import pytest

from looplab import Grid
from looplab.lab.planner import Calibration
from looplab.lab.planner.estimates import TimeModel, estimate_plans
from looplab.orchestrator.grid import expand
from looplab.workers import jobs
from tests.workers.conftest import tiny_spec

CAL = Calibration(device="cpu", flops_per_s=1e9, decode_layer_s=1e-4, save_bytes_per_s=1e12, startup_s=2.0)
UT = "examples.universal_transformer:factory"
FOLLOW = {
    "eval": {"tasks": ["deduction"], "n_per_subset": 2},
    "decode_bench": {"context_lens": [64], "batch_sizes": [1, 2], "steps": 3},
}
# (seconds, FLOPs) per kind of tiny_spec()'s grid with a depth sweep and an eval, before this change
BEFORE = {
    "train": (9.041254380288, 7041253376.0),
    "depth_sweep": (514.282487808, 514282487808.0),
    "eval": (1.615454208, 1615454208.0),
    "decode_bench": (0.021853440000000002, 7453440.0),
}


def _priced(base: dict) -> tuple[list, dict]:
    plans = expand([Grid("g", base=base, then=["depth_sweep", "eval", "decode_bench"], follow=FOLLOW)], jobs)
    estimates = estimate_plans(TimeModel(None, CAL, "cpu"), plans)
    return plans, {p.kind: e for p, e in zip(plans, estimates, strict=True)}


def _family(d_model: int) -> dict:
    return tiny_spec(family=UT, family_config={"d_model": d_model, "n_heads": 2}, optimizer="adamw")


def test_looplab_s_own_grids_price_as_before():
    _, est = _priced(tiny_spec())
    assert {k: (e.seconds, e.flops) for k, e in est.items()} == BEFORE


def test_a_family_is_priced_from_its_own_flops():
    plans, narrow = _priced(_family(32))
    train = plans[0]
    cost = TimeModel(None, CAL, "cpu").train_cost("train", train.spec)
    # the train job at the FLOPs per token the submission's conformance check found for it
    assert cost.flops_per_token == train.family_facts["flops_per_token"]
    assert cost.params == train.family_facts["n_params"] and cost.grad_flops_per_token == cost.flops_per_token
    steps = 20  # tiny_spec: 8 x 32 tokens per step, 20 steps
    evals = cost.n_evals(steps) * cost.eval_flops
    assert narrow["train"].flops == pytest.approx(steps * 8 * 32 * cost.flops_per_token + evals)
    assert all(narrow[k].flops != BEFORE[k][1] for k in BEFORE)  # not the recipe and size's FLOPs
    _, wide = _priced(_family(64))
    for kind in BEFORE:  # twice the width: more FLOPs and more time for every job of the grid
        assert wide[kind].flops > narrow[kind].flops and wide[kind].seconds > narrow[kind].seconds, kind
    # the depth sweep: the loss and state forwards of its eval tokens at each of its loop counts
    sweep = next(p for p in plans if p.kind == "depth_sweep").spec
    forwards = sum(2 * cost.forward_flops(n) for n in sweep["loops"])
    inter = sum(n * cost.forward_flops(n) for n in sweep["interaction_loops"])
    tokens = max(1, sweep["eval_tokens"] // 32) * 32
    inter_tokens = min(tokens, max(32, sweep["interaction_tokens"] // 32 * 32))
    assert narrow["depth_sweep"].flops == pytest.approx(tokens * forwards + inter_tokens * inter)
    # the decode bench: no KV cache, so each step is a forward over the whole context of each row
    bench = next(p for p in plans if p.kind == "decode_bench").spec
    steps = bench["warmup"] + bench["steps"]
    recompute = steps * (1 + 2) * 64 * cost.forward_flops(4)
    assert narrow["decode_bench"].flops == pytest.approx(recompute)


def test_a_family_s_flop_budget_is_planned_in_its_own_whole_steps():
    spec = {**_family(32), "tokens": None, "flops": 2.0e9}
    (plan,) = expand([Grid("g", base=spec)], jobs)
    cost = TimeModel(None, CAL, "cpu").train_cost("train", plan.spec)
    assert cost.steps == int(2.0e9 / plan.family_facts["flops_per_token"]) // 256 > 1
