"""The Tasks page's numbers (analysis/tasks.py): pooled accuracy with Wilson intervals worked out by hand.
The read query and the page: tests/dashboard/test_tasks_page.py."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis import tasks


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
