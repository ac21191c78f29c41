"""The paired far-copy comparison reads only rows of the current definition at one distance."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from looplab.analysis import far_copy


def _rows(label, seed, far, near, definition=2, distance=500, loops=4):
    return {
        "variant_label": label,
        "seed": seed,
        "loops": loops,
        "far_copy_loss": far,
        "near_loss": near,
        "val_loss": 0.05 * far + 0.95 * near,
        "far_share": 0.05,
        "far_distance": distance,
        "far_definition": definition,
    }


def test_old_definition_and_other_distances_are_left_out():
    depth = pd.DataFrame(
        [_rows("lean", s, 4.0 + 0.02 + 0.001 * s, 3.0 - 0.01) for s in range(3)]
        + [_rows("parcae", s, 4.0 + 0.002 * s, 3.0) for s in range(3)]
        # a window-mask row (definition 1, no distance) and a row at another distance: not comparable
        + [_rows("lean", 9, 99.0, 0.0, definition=1, distance=None), _rows("lean", 8, 99.0, 0.0, distance=64)]
    )
    table = far_copy.paired_difference(depth, "lean", "parcae")
    far = table[table["metric"] == "far_copy_loss"].iloc[0]
    # per seed 0.02 + 0.001 s − 0.002 s = 0.02 − 0.001 s: mean 0.019
    assert far["diff"] == pytest.approx(0.019) and far["n"] == 3 and far["method"] == "paired t"
    assert far["low"] < 0.019 < far["high"] and far["far_share"] == pytest.approx(0.05)
    near = table[table["metric"] == "near_loss"].iloc[0]
    assert near["diff"] == pytest.approx(-0.01) and near["low"] == near["high"] == pytest.approx(-0.01)
    assert far_copy.far_share(depth)["sweeps"].tolist() == [3, 3]


def test_one_seed_per_side_has_no_interval_and_no_rows_give_an_empty_table():
    depth = pd.DataFrame([_rows("lean", 0, 4.1, 3.0), _rows("parcae", 0, 4.0, 3.0)])
    far = far_copy.paired_difference(depth, "lean", "parcae").iloc[0]
    assert far["diff"] == pytest.approx(0.1) and math.isnan(far["low"]) and far["method"] == "n too small"
    old = depth.assign(far_definition=1)
    assert far_copy.paired_difference(old, "lean", "parcae").empty
    assert list(far_copy.paired_difference(old, "lean", "parcae").columns) == far_copy.COLUMNS
