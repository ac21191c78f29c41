"""analysis.findings on hand-built depth sweeps whose answers are worked out by hand in each test."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from scipy import stats as scipy_stats

from analysis import comparison, findings

# (recipe, seed) -> depth-sweep loss per loop count
SWEEPS = {
    # shares (L1 - L4) / (L1 - L8): 0.78 / 0.8 = 0.975 and 0.79 / 0.8 = 0.9875; best at 12 on the mean
    ("parcae", 0): {1: 3.0, 2: 2.6, 4: 2.22, 8: 2.20, 12: 2.19, 16: 2.195},
    ("parcae", 1): {1: 3.1, 2: 2.7, 4: 2.31, 8: 2.30, 12: 2.295, 16: 2.30},
    # best at 4, 8 worse by 0.15 and 0.11
    ("fixed4", 0): {1: 3.2, 2: 2.6, 4: 2.20, 6: 2.28, 8: 2.35},
    ("fixed4", 1): {1: 3.2, 2: 2.6, 4: 2.22, 6: 2.30, 8: 2.33},
    # best at 6 (mean 2.235 < 2.25): the finding does not hold
    ("lean", 0): {1: 3.3, 2: 2.7, 4: 2.25, 6: 2.23, 8: 2.30},
    ("lean", 1): {1: 3.3, 2: 2.7, 4: 2.25, 6: 2.24, 8: 2.31},
}
MODES = {"parcae": ("sampled", 8), "fixed4": ("fixed", 4), "lean": ("fixed", 4)}


def frames(sweeps: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the depth frame, the runs with comparison.eval_loss_per_run's loss), as the report builds them."""
    runs, depth = [], []
    for job_id, ((recipe, seed), losses) in enumerate(sweeps.items(), start=1):
        mode, loops = MODES[recipe]
        runs.append(
            dict(
                job_id=job_id,
                grid="g",
                recipe=recipe,
                size="tiny",
                seed=seed,
                status="succeeded",
                budget_tokens=2**20,
                budget_time_s=None,
                match_time_of=None,
                loop_mode=mode,
                train_loops=loops,
                final_val_loss=min(losses.values()),
            )
        )
        depth += [
            dict(train_job_id=job_id, recipe=recipe, size="tiny", seed=seed, loops=n, val_loss=v)
            for n, v in losses.items()
        ]
    depth_df = pd.DataFrame(depth)
    return depth_df, comparison.eval_loss_per_run(pd.DataFrame(runs), depth_df)


def t_half(values: list[float]) -> float:
    s = pd.Series(values).std(ddof=1)
    return scipy_stats.t.ppf(0.975, len(values) - 1) * s / math.sqrt(len(values))


def test_each_finding_beside_this_runs_figure_with_intervals_from_two_seeds():
    depth, evals = frames(SWEEPS)
    out = findings.lean_study_findings(depth, evals).set_index("key")
    assert list(out.index) == ["parcae_share", "parcae_best", "fixed4_best", "lean_best", "equal_data"]

    share = out.loc["parcae_share"]
    assert share["value"] == pytest.approx((0.975 + 0.9875) / 2)
    half = t_half([0.975, 0.9875])
    assert (share["ci_low"], share["ci_high"]) == pytest.approx((0.98125 - half, 0.98125 + half))
    assert share["ci_low"] > findings.SHARE_HOLDS and share["holds"] == "yes" and share["n_seeds"] == 2
    assert share["this_run"].startswith("98.1 % (per seed 97.5 % / 98.")

    best = out.loc["parcae_best"]  # means at 8, 12, 16: 2.25, 2.2425, 2.2475
    assert (
        best["value"] == 12
        and best["holds"] == "yes"
        and "per seed 12 / 12; 8-12 loops +0.0000" in best["this_run"]
    )

    fixed4 = out.loc["fixed4_best"]  # closest count above 4 is 6: +0.08 on both seeds
    assert fixed4["holds"] == "yes" and fixed4["value"] == pytest.approx(0.08)
    assert "best at 4 loops" in fixed4["this_run"] and "6 loops, +0.0800" in fixed4["this_run"]
    assert fixed4["ci_low"] == pytest.approx(0.08) and fixed4["ci_high"] == pytest.approx(0.08)  # no spread

    lean = out.loc["lean_best"]  # 6 loops beat the trained 4 by 0.02 and 0.01, but two seeds cannot say so
    assert lean["value"] == pytest.approx(-0.015)
    half = t_half([-0.02, -0.01])
    assert (lean["ci_low"], lean["ci_high"]) == pytest.approx((-0.015 - half, -0.015 + half))
    assert lean["ci_low"] < 0 < lean["ci_high"] and lean["holds"] == "not resolved"

    # equal data: parcae at its best loop count (2.19, 2.295), fixed4 and lean at 4 (2.20/2.22, 2.25/2.25)
    equal = out.loc["equal_data"]
    assert equal["value"] == pytest.approx(2.25 - 2.21)
    table = comparison.iso_data_table(evals, reference="parcae").set_index("variant_label")
    for label in ("fixed4", "lean"):
        assert f"{label} {table.loc[label, 'diff']:+.4f}" in equal["this_run"]
        assert table.loc[label, "verdict"] in equal["this_run"]
    resolved = set(table.loc[["fixed4", "lean"], "verdict"]) - set(findings.UNRESOLVED)
    assert equal["holds"] == ("no" if resolved else "yes")


def test_one_seed_gives_figures_without_intervals_and_the_threshold_judges_equal_data():
    close = {
        ("parcae", 0): {1: 3.0, 4: 2.21, 8: 2.20, 12: 2.205},
        ("fixed4", 0): {1: 3.0, 4: 2.201, 8: 2.30},
        ("lean", 0): {1: 3.0, 4: 2.199, 8: 2.30},
    }
    out = findings.lean_study_findings(*frames(close)).set_index("key")
    share = out.loc["parcae_share"]
    assert share["value"] == pytest.approx(0.79 / 0.8) and math.isnan(share["ci_low"])
    assert "no interval: one seed" in share["this_run"]
    assert out.loc["parcae_best", "value"] == 8 and out.loc["parcae_best", "holds"] == "yes"
    flat = findings.lean_study_findings(
        *frames({**close, ("parcae", 0): {1: 3.0, 4: 2.21, 6: 2.1995, 8: 2.20}})
    )
    row = flat.set_index("key").loc["parcae_best"]  # best at 6, 8 a near tie: said, not hidden
    assert (
        row["value"] == 6 and row["holds"] == "no" and "8-12 loops +0.0005 from the best" in row["this_run"]
    )
    assert list(out.loc[["fixed4_best", "lean_best"], "holds"]) == ["yes", "yes"]
    # one seed a side, no noise floor: the fixed 0.01 threshold calls both differences noise
    equal = out.loc["equal_data"]
    assert equal["value"] == pytest.approx(0.002) and equal["holds"] == "yes"
    assert equal["this_run"].count("noise") == 2
    # a stricter threshold resolves them: the shape no longer holds
    strict = findings.lean_study_findings(*frames(close), threshold=0.0005).set_index("key")
    assert strict.loc["equal_data", "holds"] == "no"


def test_a_missing_recipe_or_loop_count_is_named_not_guessed():
    partial = {("parcae", 0): {1: 3.0, 2: 2.5, 16: 2.2}, ("lean", 0): {1: 3.0, 4: 2.2, 8: 2.3}}
    out = findings.lean_study_findings(*frames(partial)).set_index("key")
    assert out.loc["parcae_share", "holds"] == "—" and "1, 4 and 8" in out.loc["parcae_share", "this_run"]
    assert (
        out.loc["fixed4_best", "holds"] == "—"
        and "no depth sweep of fixed4" in out.loc["fixed4_best", "this_run"]
    )
    assert out.loc["lean_best", "holds"] == "yes"
    assert out.loc["equal_data", "this_run"] == "needs finished runs of all three"
    assert findings.applies(pd.DataFrame({"recipe": ["parcae", "fixed4", "lean", "plain"]}))
    assert not findings.applies(pd.DataFrame({"recipe": ["parcae", "lean"]}))


def test_judged_by_the_interval_where_there_is_one():
    assert findings.judged(True, 0.001, 0.01, 0.0) == "yes"
    assert findings.judged(True, -0.001, 0.01, 0.0) == "not resolved"
    assert findings.judged(False, -0.01, -0.001, 0.0) == "no"
    assert findings.judged(True, float("nan"), float("nan"), 0.0) == "yes"  # one seed: the estimate decides
    assert findings.judged(True, 0.85, 0.99, findings.SHARE_HOLDS) == "not resolved"
