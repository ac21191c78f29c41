"""Change ratios and the first round below bf16 resolution, per variant over seeds."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from looplab.analysis import convergence


def _sweep(label, sweep, rel, resolution=0.01, loops=4):
    ratios = [None] + [b / a for a, b in zip(rel, rel[1:])]
    return [
        {
            "variant_label": label,
            "sweep_job_id": sweep,
            "loops": loops,
            "round": r,
            "rel_change": x,
            "change_ratio": q,
            "bf16_resolution": resolution,
        }
        for r, (x, q) in enumerate(zip(rel, ratios), start=1)
    ]


def test_first_round_below_resolution_per_variant_and_sweeps_never_below_counted():
    deltas = pd.DataFrame(
        _sweep("lean", 1, [0.5, 0.02, 0.005, 0.001])  # below 0.01 from round 3
        + _sweep("lean", 2, [0.5, 0.008, 0.004, 0.001])  # from round 2
        + _sweep("parcae", 3, [0.5, 0.25, 0.125, 0.0625])  # never
        # a sweep stored before the resolution was measured: left out, not counted as "never"
        + [dict(r, bf16_resolution=None, change_ratio=None) for r in _sweep("parcae", 4, [0.5, 0.001])]
    )
    table = convergence.bf16_rounds(deltas).set_index("variant_label")
    assert table.loc["lean", "bf16_round"] == 2.5 and table.loc["lean", "earliest"] == 2
    assert table.loc["lean", "latest"] == 3 and table.loc["lean", "never"] == 0
    assert math.isnan(table.loc["parcae", "bf16_round"]) and table.loc["parcae", "never"] == 1
    assert table.loc["parcae", "n_seeds"] == 1
    curves = convergence.round_curves(deltas, loops=4)
    ratio = curves[(curves["metric"] == "change_ratio") & (curves["variant_label"] == "parcae")]
    assert ratio["round"].tolist() == [2, 3, 4] and ratio["mean"].tolist() == pytest.approx([0.5] * 3)
    assert convergence.round_curves(deltas, loops=8).empty
    assert convergence.bf16_rounds(deltas.assign(bf16_resolution=None)).empty
