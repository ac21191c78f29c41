"""MoR's per-token recursion depths on the Adaptive page's frontier (workers/adaptive/routed.py): the
adaptive job on a trained MoR run gives a `router | per_round` cell beside the exit rules, whose loss
is the model's own forward (the fixed cell's) and whose mean rounds are the recursions its router ran
per token, counted here independently from `token_depths` over the same validation chunks; the
analysis the page draws (analysis.adaptive.frontier, best_at_loss) carries it as a point."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from looplab.analysis import adaptive as analysis
from looplab.model.exit_names import ROUTER, CellKey
from looplab.workers import jobs
from looplab.workers.adaptive.routed import routes
from looplab.workers.reporter import MemoryReporter
from tests.workers.conftest import tiny_spec

NAME = "families.mor:factory"


@pytest.mark.parametrize("router", ["expert", "token"])
def test_a_mor_runs_router_depths_reach_the_frontier_beside_the_exit_rules(router, tmp_path, looplab_cache):
    from looplab.workers.inputs import eval_inputs

    family = {"family": NAME, "family_config": {"d_model": 32, "n_heads": 2, "mlp": 48, "router": router}}
    spec = tiny_spec(**family, optimizer="adamw", model={"loops": 3}, tokens=8 * 32 * 16, log_every=4)
    jobs.run("train", jobs.validate("train", spec), MemoryReporter(), tmp_path / "train")
    adaptive = {
        "checkpoint": str(tmp_path / "train"),
        "rules": {"entropy": [0.5, 2.0]},
        "kv_strategies": ["per_round"],
        **{"eval_tokens": 512, "batch_size": 8, "device": "cpu"},
    }
    out = jobs.run("adaptive", jobs.validate("adaptive", adaptive), MemoryReporter(), tmp_path / "adaptive")
    rows = {CellKey.parse(r["config"]).rule: r for r in out["adaptive_evals"]}
    routed = rows[ROUTER]
    assert (
        routed["config"] == "router | per_round" and routed["rule"] == ROUTER and routed["threshold"] is None
    )
    assert any(k.startswith("entropy") for k in rows) and "fixed" in rows  # the exit rules beside it

    # its loss is the model's own forward at R; its rounds are the depths the router gave each token
    ev = eval_inputs(str(tmp_path / "train"), 512, torch.device("cpu"))
    assert routes(ev.model)
    with torch.no_grad():
        depths = torch.cat([ev.model.inner.token_depths(c[None, :-1], 3) for c in ev.chunks])
    assert depths.numel() == routed["tokens"] > 0
    assert routed["mean_rounds"] == pytest.approx(depths.float().mean().item(), rel=1e-9)
    assert 1 <= routed["mean_rounds"] <= 3
    assert routed["val_loss"] == pytest.approx(rows["fixed"]["val_loss"], rel=1e-6)
    assert rows["fixed"]["mean_rounds"] == 3
    share = {int(d): (depths == d).float().mean().item() for d in depths.unique()}
    # a token of depth d is charged the forward at d: below the fixed depth's unless every token ran 3
    below = routed["mean_rounds"] < 3
    assert (routed["forward_flops_per_token"] < routed["fixed_flops_per_token"]) == below
    assert (routed["equivalent_rounds"] < 3) == below and rows["fixed"]["equivalent_rounds"] == 3
    hist = [
        h for h in out["adaptive_exit_rounds"] if h["config"] == routed["config"] and h["split"] == "position"
    ]
    assert {h["round"] for h in hist} == set(share) and sum(h["count"] for h in hist) == depths.numel()

    # the page's frontier (per variant, rule, strategy) and best rule at each loss carry the router
    evals = pd.DataFrame(out["adaptive_evals"]).assign(recipe="mor", size="tiny")
    points = analysis.frontier(evals)
    point = points[points["rule"] == ROUTER]
    assert len(point) == 1 and point["strategy"].iloc[0] == "per_round"
    assert point["mean_rounds"].iloc[0] == pytest.approx(routed["mean_rounds"])
    assert set(points["rule"]) >= {"fixed", "entropy", ROUTER}
    best = analysis.best_at_loss(evals, "per_round")
    assert len(best) == 1  # one level (the fixed depth's loss): the router's loss is at it, its compute below
    if routed["equivalent_rounds"] < min(r["equivalent_rounds"] for k, r in rows.items() if k != ROUTER):
        assert best["rule"].iloc[0] == ROUTER
