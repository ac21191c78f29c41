"""Curve smoothing (analysis/smoothing.py): per run, in step order, the raw value kept; budgets in a human unit."""

from __future__ import annotations

import pandas as pd
import pytest

from looplab.analysis.smoothing import smooth


def test_ema_and_window_smooth_each_run_on_its_own_and_keep_the_raw_value():
    c = pd.DataFrame(
        {"job_id": [1, 1, 1, 2, 2, 2], "step": [2, 0, 1, 0, 1, 2], "value": [0.0, 0.0, 3.0, 9.0, 9.0, 9.0]}
    )
    ema = smooth(c, "EMA 0.6", min_points=1)
    run1 = ema[ema["job_id"] == 1]
    assert list(run1["raw"]) == [0.0, 3.0, 0.0] and list(run1["step"]) == [0, 1, 2]
    # debiased: (0.4*3 + 0.6*0.4*0) / (0.4 + 0.24) at step 1
    assert run1["value"].iloc[0] == 0.0 and run1["value"].iloc[1] == pytest.approx(1.2 / 0.64)
    assert list(ema.loc[ema["job_id"] == 2, "value"]) == [9.0, 9.0, 9.0]  # run 2 never sees run 1
    win = smooth(c, "window 5", min_points=1)
    assert list(win.loc[win["job_id"] == 1, "value"]) == [0.0, 1.5, 1.0]
    assert list(smooth(c, "none")["value"]) == list(smooth(c, "none")["raw"])
    with pytest.raises(ValueError, match="smoothing: unknown 'gauss'; accepted: none, EMA 0.6"):
        smooth(c, "gauss")


def test_a_curve_shorter_than_min_points_is_drawn_raw_and_a_longer_one_smoothed():
    from looplab.analysis.smoothing import MIN_POINTS, describe

    short = [2.5, 2.3, 2.2, 2.1, 2.0, 1.91]  # the demo's plain: EMA 0.6 would end near 2.07
    long = [3.0 - 0.01 * i + 0.2 * (i % 2) for i in range(MIN_POINTS)]
    c = pd.DataFrame(
        {
            "job_id": [1] * len(short) + [2] * len(long),
            "step": [*range(len(short)), *range(len(long))],
            "value": short + long,
        }
    )
    out = smooth(c, "EMA 0.6")
    assert list(out.loc[out["job_id"] == 1, "value"]) == short  # the final value 1.91, not 2.07
    assert list(out.loc[out["job_id"] == 2, "value"]) != long
    assert "1 run(s) with fewer than 20 points are not smoothed" in describe("EMA 0.6", c)
    assert describe("none", c).startswith("Raw values; smoothing is off")


def test_budgets_read_in_a_human_unit_and_stay_distinct():
    from looplab.analysis.variants import budget_labels, human_count

    assert [human_count(n) for n in (512, 61_440, 1e6, 2.5e6, 1e9, 3e12)] == [
        "512",
        "61.44k",
        "1M",
        "2.5M",
        "1B",
        "3T",
    ]
    runs = pd.DataFrame({"budget_tokens": [61_440, 1_048_576, 1_048_000]})
    assert budget_labels(runs) == ["61.44k tokens", "1.04858M tokens", "1.048M tokens"]
