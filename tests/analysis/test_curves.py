"""analysis.curves on hand-built frames: loss against wall time, depth curves and round deltas,
downsampling, bands over seeds and labels."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from looplab.analysis import curves
from tests.analysis.test_comparison import frame, run


def test_wall_time_curves_label_not_decayed():
    runs = frame([run(1, "a", 0, 3.0), run(2, "b", 0, 3.0, status="running")])
    points = frame(
        [
            {
                "job_id": 1,
                "key": "val_loss",
                "step": s,
                "tokens": s * 10,
                "wall_s": float(s),
                "value": 4.0 - s / 10,
            }
            for s in (1, 2, 3)
        ]
        + [
            {"job_id": 2, "key": "val_loss", "step": 1, "tokens": 10, "wall_s": 1.0, "value": 3.9},
            {"job_id": 1, "key": "train_loss", "step": 1, "tokens": 10, "wall_s": 1.0, "value": 9.9},
        ]
    )
    finished = runs.loc[runs["status"] == "succeeded", "job_id"]  # the caller knows the job states
    w = curves.wall_time_curves(points, runs, finished)
    assert len(w) == 4
    j1 = w[w["job_id"] == 1]
    assert list(j1["point"]) == ["not decayed", "not decayed", "final (decayed)"]
    # a running job's last point is not a decayed result
    assert list(w[w["job_id"] == 2]["point"]) == ["not decayed"]
    assert j1["series"].iloc[0] == "a · tiny · seed 0 · #1"


# ---------------------------------------------------------------- depth


def test_depth_curves_and_round_deltas():
    depth = frame(
        [
            {"recipe": "p", "size": "t", "loops": 4, "val_loss": 3.0, "train_job_id": 1, "seed": 0},
            {"recipe": "p", "size": "t", "loops": 4, "val_loss": 3.2, "train_job_id": 2, "seed": 1},
            {"recipe": "p", "size": "t", "loops": 8, "val_loss": 2.9, "train_job_id": 1, "seed": 0},
        ]
    )
    d = curves.depth_curves(depth).set_index("loops")
    assert d.loc[4, "mean"] == pytest.approx(3.1) and (d.loc[4, "min"], d.loc[4, "max"]) == (3.0, 3.2)
    assert d.loc[8, "n_seeds"] == 1 and math.isnan(d.loc[8, "std"])
    deltas = frame(
        [
            {"recipe": "p", "size": "t", "loops": 4, "round": r, "rel_change": v, "train_job_id": j}
            for j, (r, v) in [(1, (1, 0.5)), (1, (2, 0.1)), (2, (1, 0.7)), (1, (1, 0.9))]
        ]
    )
    deltas.loc[3, "loops"] = 8
    rd = curves.round_delta_curves(deltas, loops=4).set_index("round")
    assert rd.loc[1, "mean"] == pytest.approx(0.6) and rd.loc[2, "n_seeds"] == 1
    assert len(curves.round_delta_curves(deltas)) == 3


def test_depth_curves_of_a_family_with_no_recipe_or_size():
    """A family stating its own shape (model/shape.py) has no recipe and no size: the NULL size must key
    its series as any size does (it read as float on one side of the label join and as text on the other)."""
    depth = frame(
        [
            {"recipe": None, "size": None, "variant_id": "v1", "variant_label": "ut", "loops": n,
             "val_loss": 3.0 - n / 10 + seed / 10, "train_job_id": 1 + seed, "seed": seed}
            for n in (1, 2)
            for seed in (0, 1)
        ]
    )  # fmt: skip
    d = curves.depth_curves(depth).set_index("loops")
    assert list(d["variant_label"]) == ["ut", "ut"] and d.loc[2, "n_seeds"] == 2
    assert d.loc[1, "mean"] == pytest.approx(2.95)


# ---------------------------------------------------------------- curves


@pytest.mark.parametrize("n", [1, 2, 499, 500, 501, 1000, 2000, 2001])
def test_downsample_keeps_first_last_and_at_most_max(n):
    df = frame({"job_id": 1, "key": "val_loss", "step": np.arange(n), "value": np.arange(n, dtype=float)})
    out = curves.downsample(df, max_points=500)
    assert len(out) <= 500 and out["step"].iloc[0] == 0 and out["step"].iloc[-1] == n - 1
    if n <= 500:
        assert len(out) == n
    assert out["step"].is_monotonic_increasing


def test_downsample_per_series():
    a = frame({"job_id": 1, "key": "k", "step": np.arange(1000), "value": 0.0})
    b = frame({"job_id": 2, "key": "k", "step": np.arange(10), "value": 0.0})
    out = curves.downsample(pd.concat([a, b]), max_points=100)
    assert (out["job_id"] == 2).sum() == 10 and (out["job_id"] == 1).sum() <= 100


def test_curve_bands_mean_and_spread():
    c = frame(
        [
            {"job_id": j, "recipe": "p", "tokens": t, "value": v}
            for j, vals in ((1, (4.0, 3.0)), (2, (4.2, 3.4)))
            for t, v in zip((100, 200), vals)
        ]
    )
    b = curves.curve_bands(c, by=["recipe"], x="tokens").set_index("tokens")
    assert b.loc[200, "mean"] == pytest.approx(3.2) and (b.loc[200, "min"], b.loc[200, "max"]) == (3.0, 3.4)
    assert b.loc[100, "n_seeds"] == 2


def test_join_labels():
    df = frame({"recipe": ["a", "b"], "seed": [0, None]})
    assert list(curves.join_labels(df, ["recipe", "seed"])) == ["a · 0", "b · —"]
