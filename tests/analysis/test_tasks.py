"""The Tasks page's numbers (analysis/tasks.py): pooled accuracy with Wilson intervals worked out by hand.
The read query and the page: tests/dashboard/test_tasks_page.py."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from looplab.analysis import tasks


def test_wilson_interval_by_hand():
    low, high = tasks.wilson(8, 10)  # p = 0.8, z = 1.96: centre 0.7167, half-width 0.2266
    assert (round(low, 4), round(high, 4)) == (0.4902, 0.9433)
    low, high = tasks.wilson(0, 20)
    assert low == 0.0 and high == pytest.approx(0.1611, abs=1e-4)  # z^2 / (n + z^2)
    assert all(math.isnan(v) for v in tasks.wilson(0, 0))


def test_curves_pool_seeds_and_carry_chance_and_trained_loops():
    base = dict(
        variant_id="v1",
        variant_label="lean",
        task="deduction",
        category="reasoning",
        loops=4,
        acc_norm=0.5,
        chance=1 / 3,
        train_loops=4,
        eval_job_id=None,
    )
    scores = pd.DataFrame(
        [
            {**base, "train_job_id": 1, "subset": "all", "acc": 0.5, "n": 10},
            {**base, "train_job_id": 2, "subset": "all", "acc": 0.7, "n": 10},
            {**base, "train_job_id": 1, "subset": "depth=10", "acc": 1.0, "n": 4},
            {**base, "train_job_id": 1, "subset": "depth=2", "acc": 0.25, "n": 4},
            {
                **base,
                "train_job_id": 1,
                "subset": "all",
                "acc": 0.9,
                "n": 10,
                "loops": 1,
                "task": "sciq",
                "category": None,
                "chance": 0.25,
            },
        ]
    )
    curves = tasks.accuracy_curves(scores)
    pooled = curves[(curves["task"] == "deduction") & (curves["subset"] == "all")].iloc[0]
    assert (pooled["acc"], pooled["n"], pooled["n_seeds"]) == (0.6, 20, 2)  # (5 + 7) / 20
    assert (pooled["ci_low"], pooled["ci_high"]) == tasks.wilson(12, 20)
    assert pooled["chance"] == pytest.approx(1 / 3) and pooled["train_loops"] == 4
    assert list(curves[curves["task"] == "deduction"]["subset"]) == ["all", "depth=2", "depth=10"]
    assert tasks.task_groups(scores) == {"reasoning": ["deduction"], "other": ["sciq"]}
    assert tasks.subset_order(["length=10", "all", "length=2", "b", "a"]) == [
        "all",
        "length=2",
        "length=10",
        "a",
        "b",
    ]
    wide = tasks.accuracy_wide(curves[curves["task"] == "deduction"])
    assert list(wide.columns) == ["task", "variant_label", "acc@4", "train_loops", "best_loops"]
    assert wide.iloc[0]["acc@4"] == 0.6 and wide.iloc[0]["best_loops"] == 4


def _score(run, variant, task, category, loops, acc, n=100, train_loops=4):
    return dict(
        eval_job_id=10 + run,
        train_job_id=run,
        variant_id=variant,
        variant_label=variant,
        task=task,
        category=category,
        subset="all",
        loops=loops,
        acc=acc,
        acc_norm=None,
        n=n,
        chance=0.25,
        train_loops=train_loops,
    )


def test_category_scores_average_tasks_once_each_and_give_a_total():
    scores = pd.DataFrame(
        [
            _score(1, "lean", "sciq", "knowledge", 4, 0.6, n=1000),
            _score(1, "lean", "arc_easy", "knowledge", 4, 0.4, n=10),
            _score(1, "lean", "deduction", "reasoning", 4, 0.9),
            _score(1, "lean", "kinship", None, 4, 0.3),  # no stored category: "other"
            {
                **_score(1, "lean", "deduction", "reasoning", 4, 0.0),
                "subset": "depth=2",
            },  # not the whole task
        ]
    )
    table = tasks.category_scores(scores).set_index("category")
    assert list(table.index) == ["reasoning", "knowledge", "other", "total"]
    assert table.loc["knowledge", "acc"] == pytest.approx(0.5)  # (0.6 + 0.4) / 2, not item-weighted
    assert table.loc["knowledge", "n_tasks"] == 2 and table.loc["knowledge", "tasks"] == "arc_easy, sciq"
    assert table.loc["total", "acc"] == pytest.approx((0.6 + 0.4 + 0.9 + 0.3) / 4)
    assert tasks.category_scores(scores.iloc[0:0]).empty


def test_loss_proxy_is_a_rank_correlation_with_a_bootstrap_interval():
    losses = {1: 3.0, 2: 3.1, 3: 3.2, 4: 3.3, 5: 3.4}
    knowledge = {1: 0.50, 2: 0.45, 3: 0.40, 4: 0.35, 5: 0.30}  # falls with loss: rho = -1
    reasoning = {1: 0.30, 2: 0.50, 3: 0.20, 4: 0.40, 5: 0.10}
    scores = pd.DataFrame(
        [_score(r, "v", "sciq", "knowledge", 4, knowledge[r]) for r in losses]
        + [_score(r, "v", "deduction", "reasoning", 4, reasoning[r]) for r in losses]
        + [_score(r, "v", "sciq", "knowledge", 1, 0.9) for r in losses]  # not the trained loop count
    )
    runs = pd.DataFrame({"job_id": list(losses), "final_val_loss": list(losses.values())})
    table = tasks.loss_proxy(scores, runs).set_index("category")
    assert table.loc["knowledge", "rho"] == pytest.approx(-1.0) and table.loc["knowledge", "n_runs"] == 5
    assert table.loc["knowledge", "ci_high"] == pytest.approx(-1.0)  # every resample is monotone
    # reasoning: accuracy ranks (3, 5, 2, 4, 1) against loss ranks 1..5, Spearman 1 − 6 Σd² / (n(n² − 1))
    d2 = sum((a - b) ** 2 for a, b in zip([3, 5, 2, 4, 1], [1, 2, 3, 4, 5]))
    assert table.loc["reasoning", "rho"] == pytest.approx(1 - 6 * d2 / (5 * 24))
    low, high = table.loc["reasoning", ["ci_low", "ci_high"]]
    assert -1 <= low < table.loc["reasoning", "rho"] < high <= 1
    assert table.loc["total", "n_runs"] == 5
    few = tasks.loss_proxy(scores[scores["train_job_id"] <= 2], runs)
    assert few["rho"].isna().all() and (few["n_runs"] == 2).all()
