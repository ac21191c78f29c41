"""analysis.comparison (and the seed aggregates of analysis.variants) on hand-built frames whose
answers are worked out by hand in each test."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from looplab.analysis import comparison, stats, variants

NAN = float("nan")


def run(job_id, recipe, seed, loss, *, size="tiny", budget=1_000_000, mode="sampled", loops=None, **kw):
    row = dict(
        job_id=job_id,
        grid="g",
        recipe=recipe,
        size=size,
        seed=seed,
        status="succeeded",
        budget_tokens=budget,
        budget_time_s=None,
        match_time_of=None,
        loop_mode=mode,
        train_loops=loops,
        tokens=budget,
        train_seconds=100.0,
        tokens_per_s=1000.0,
        final_val_loss=loss,
    )
    row.update(kw)
    return row


def frame(rows, **kw):
    return pd.DataFrame(rows, **kw)


# ---------------------------------------------------------------- seeds


def test_seed_aggregate_mean_std_min_max_count():
    df = frame([run(1, "a", 0, 3.0), run(2, "a", 1, 3.2), run(3, "b", 0, 2.5)])
    out = variants.seed_aggregate(df, "final_val_loss", by=["recipe", "size"]).set_index("recipe")
    assert out.loc["a", "mean"] == pytest.approx(3.1)
    assert out.loc["a", "std"] == pytest.approx(math.sqrt(0.02))  # sample std of 3.0, 3.2
    assert (out.loc["a", "min"], out.loc["a", "max"], out.loc["a", "n_seeds"]) == (3.0, 3.2, 2)
    # one seed: the spread is unknown, not zero
    assert out.loc["b", "n_seeds"] == 1 and math.isnan(out.loc["b", "std"])


def test_seed_aggregate_default_groups_by_config_not_seed():
    df = frame([run(1, "a", 0, 3.0), run(2, "a", 1, 3.4, budget=2_000_000)])
    out = variants.seed_aggregate(df, "final_val_loss")
    assert "seed" not in out.columns and len(out) == 2  # two budgets = two configurations
    with pytest.raises(ValueError, match="seed"):
        variants.seed_aggregate(df, "final_val_loss", by=["seed"])


def test_seed_aggregate_missing_values_are_not_counted():
    df = frame([run(1, "a", 0, 3.0), run(2, "a", 1, NAN)])
    out = variants.seed_aggregate(df, "final_val_loss", by=["recipe"])
    assert out.loc[0, "mean"] == 3.0 and out.loc[0, "n_seeds"] == 1


# ---------------------------------------------------------------- best loop


DEPTH = frame(
    [
        {"train_job_id": 1, "loops": 4, "val_loss": 3.10},
        {"train_job_id": 1, "loops": 8, "val_loss": 3.00},
        {"train_job_id": 1, "loops": 12, "val_loss": 3.00},  # tie with 8: the fewer loops wins
        {"train_job_id": 1, "loops": 16, "val_loss": 3.05},
        {"train_job_id": 2, "loops": 4, "val_loss": 2.90},
        {"train_job_id": 2, "loops": 8, "val_loss": 2.80},  # fixed4 must NOT take this better value
    ]
)


def test_eval_loss_rules():
    runs = frame(
        [
            run(1, "parcae", 0, 3.5),  # sampled, swept
            run(2, "fixed4", 0, 3.6, mode="fixed", loops=4),  # fixed, swept
            run(3, "fixed4", 1, 3.7, mode="fixed", loops=4),  # fixed, no sweep -> final val
            run(4, "parcae", 1, 3.4),  # sampled, no sweep -> missing
            run(5, "plain", 0, 3.9, mode="none"),  # no loop -> final val
        ]
    )
    out = comparison.eval_loss_per_run(runs, DEPTH).set_index("job_id")
    assert (out.loc[1, "eval_loss"], out.loc[1, "eval_loops"], out.loc[1, "loop_rule"]) == (
        3.0,
        8,
        "best of sweep",
    )
    assert (out.loc[2, "eval_loss"], out.loc[2, "eval_loops"]) == (2.9, 4)
    assert (out.loc[3, "eval_loss"], out.loc[3, "loop_rule"]) == (3.7, "final val @ trained")
    assert math.isnan(out.loc[4, "eval_loss"]) and math.isnan(out.loc[4, "eval_loops"])
    assert out.loc[4, "loop_rule"] == "no depth sweep"
    assert out.loc[5, "eval_loss"] == 3.9 and math.isnan(out.loc[5, "eval_loops"])


def test_eval_loss_with_empty_depth_frame():
    runs = frame([run(1, "parcae", 0, 3.5), run(2, "fixed4", 0, 3.6, mode="fixed", loops=4)])
    empty = pd.DataFrame(columns=["train_job_id", "loops", "val_loss"])
    out = comparison.eval_loss_per_run(runs, empty).set_index("job_id")
    assert math.isnan(out.loc[1, "eval_loss"]) and out.loc[2, "eval_loss"] == 3.6


# ---------------------------------------------------------------- iso-data


def _iso_runs():
    rows = [
        run(1, "parcae", 0, 9.0),
        run(2, "parcae", 1, 9.0),
        run(3, "lean", 0, 3.005, mode="fixed", loops=4),
        run(4, "lean", 1, 3.013, mode="fixed", loops=4),
        run(5, "fixed4", 0, 3.030, mode="fixed", loops=4),
        run(6, "fixed4", 1, 2.960, mode="fixed", loops=4),
        run(7, "plain", 0, 3.200, mode="none"),  # one seed only
        run(8, "lean", 0, 2.0, budget=None, match_time_of=1),  # iso-time run: not iso-data
    ]
    depth = frame(
        [
            {"train_job_id": 1, "loops": 8, "val_loss": 3.00},
            {"train_job_id": 1, "loops": 12, "val_loss": 3.02},
            {"train_job_id": 2, "loops": 8, "val_loss": 3.01},
            {"train_job_id": 2, "loops": 12, "val_loss": 3.00},
        ]
    )
    return comparison.eval_loss_per_run(frame(rows), depth)


def test_iso_data_table_per_seed_mean_best_loops_and_intervals():
    t = comparison.iso_data_table(_iso_runs(), reference="parcae").set_index("recipe")
    assert list(t.index) == ["parcae", "fixed4", "lean", "plain"]  # reference first
    assert (t.loc["parcae", "seed 0"], t.loc["parcae", "seed 1"]) == (3.00, 3.00)
    assert t.loc["parcae", "best_loops"] == "8/12"  # seeds peaked at different counts: both shown
    assert t.loc["parcae", "verdict"] == "reference" and t.loc["parcae", "diff"] == 0
    assert math.isnan(t.loc["parcae", "ci_low"]) and math.isnan(t.loc["parcae", "seeds_needed"])
    assert t.loc["lean", "mean"] == pytest.approx(3.009)
    assert t.loc["lean", "best_loops"] == "4"
    # noise floor: parcae (3.00, 3.00), lean (3.005, 3.013), fixed4 (3.030, 2.960) pooled, 3 dof; plain
    # (one seed) adds nothing
    sigma = math.sqrt((0 + 0.008**2 / 2 + 0.07**2 / 2) / 3)
    half = scipy_stats.t.ppf(0.975, 3) * sigma  # √(1/2 + 1/2) = 1
    # two seeds a side: the bootstrap, widened to the noise floor
    lean = t.loc["lean"]
    assert lean["diff"] == pytest.approx(0.009) and lean["method"] == "bootstrap ∪ noise floor"
    assert (lean["ci_low"], lean["ci_high"]) == (pytest.approx(0.009 - half), pytest.approx(0.009 + half))
    assert (lean["n_seeds"], lean["n_ref"], lean["verdict"]) == (2, 2, "not resolved")
    assert t.loc["fixed4", "diff"] == pytest.approx(-0.005) and t.loc["fixed4", "verdict"] == "not resolved"
    # one seed against two: diff ± t·σ·√(1 + 1/2), far from 0
    plain = t.loc["plain"]
    assert plain["method"] == "noise floor" and (plain["n_seeds"], plain["n_ref"]) == (1, 2)
    assert plain["ci_low"] == pytest.approx(0.2 - half * math.sqrt(1.5)) and plain["verdict"] == "worse"
    # seeds per side to resolve 0.01 at this σ: 2·((z.975 + z.8)·σ/0.01)²
    z = scipy_stats.norm.ppf(0.975) + scipy_stats.norm.ppf(0.8)
    assert lean["seeds_needed"] == math.ceil(2 * (z * sigma / 0.01) ** 2)
    assert comparison.iso_data_table(_iso_runs(), delta=0.05).loc[1, "seeds_needed"] == math.ceil(
        2 * (z * sigma / 0.05) ** 2
    )
    assert math.isnan(lean["data_worth_pct"])  # one budget: no L(D) fit


def test_iso_data_threshold_decides_only_without_replicated_seeds():
    ev = _iso_runs()
    for threshold in (0.001, 0.005, 0.02):  # seeds were repeated: the threshold plays no part
        t = comparison.iso_data_table(ev, reference="parcae", threshold=threshold).set_index("recipe")
        assert t.loc["lean", "verdict"] == "not resolved"
    # one seed per variant and no noise floor: no interval ("n too small"), the threshold decides
    single = ev[ev["seed"] == 0]
    t = comparison.iso_data_table(single, reference="parcae", threshold=0.01).set_index("recipe")
    assert (t.loc["lean", "method"], t.loc["lean", "verdict"]) == ("n too small", "noise")  # +0.005
    assert math.isnan(t.loc["lean", "ci_low"]) and math.isnan(t.loc["lean", "seeds_needed"])
    assert t.loc["plain", "verdict"] == "worse"  # +0.2
    t = comparison.iso_data_table(single, reference="parcae", threshold=0.001).set_index("recipe")
    assert t.loc["lean", "verdict"] == "worse"
    # the same single seeds judged by a noise floor measured elsewhere
    floor = stats.noise_floor(ev)
    t = comparison.iso_data_table(single, reference="plain", noise=floor).set_index("recipe")
    half = scipy_stats.t.ppf(0.975, floor.dof) * floor.sigma * math.sqrt(2)
    assert t.loc["lean", "method"] == "noise floor" and t.loc["lean", "diff"] == pytest.approx(-0.195)
    assert t.loc["lean", "ci_high"] == pytest.approx(-0.195 + half) and t.loc["lean", "verdict"] == "better"


def test_iso_data_data_worth_from_the_reference_fit():
    e, b, beta = 2.0, 150.0, 0.32
    rows = [
        run(10 + i, "plain", s, e + b * d**-beta, mode="none", budget=d)
        for i, d in enumerate((1e6, 2e6, 4e6))
        for s in (0, 1)
    ]
    rows += [
        run(20 + s, "lean", s, e + b * 2e6**-beta - 0.02, mode="fixed", loops=4, budget=2e6) for s in (0, 1)
    ]
    ev = comparison.eval_loss_per_run(frame(rows), frame([], columns=["train_job_id", "loops", "val_loss"]))
    t = comparison.iso_data_table(ev, reference="plain")
    lean = t[t["recipe"] == "lean"].iloc[0]
    expected = (1 - 0.02 / (b * 2e6**-beta)) ** (-1 / beta) - 1  # 0.02 lower loss at 2M tokens
    assert lean["diff"] == pytest.approx(-0.02) and lean["data_worth_pct"] == pytest.approx(
        100 * expected, rel=1e-4
    )
    assert t[t["recipe"] == "plain"]["data_worth_pct"].isna().all()  # the reference itself


def test_iso_data_missing_seed_and_missing_sweep_are_nan_not_zero():
    ev = _iso_runs()
    t = comparison.iso_data_table(ev, reference="parcae").set_index("recipe")
    assert math.isnan(t.loc["plain", "seed 1"]) and math.isnan(t.loc["plain", "std"])
    assert t.loc["plain", "n_seeds"] == 1
    # drop parcae seed 1's sweep: that seed is missing, the mean is over the seed that has one
    ev2 = comparison.eval_loss_per_run(
        ev.drop(columns=["eval_loss", "eval_loops", "loop_rule"]),
        frame([{"train_job_id": 1, "loops": 8, "val_loss": 3.0}]),
    )
    t2 = comparison.iso_data_table(ev2, reference="parcae").set_index("recipe")
    assert math.isnan(t2.loc["parcae", "seed 1"]) and t2.loc["parcae", "n_seeds"] == 1
    # no sweep at all for the reference: every difference is missing, never computed against 0
    ev3 = comparison.eval_loss_per_run(
        ev.drop(columns=["eval_loss", "eval_loops", "loop_rule"]),
        frame([], columns=["train_job_id", "loops", "val_loss"]),
    )
    t3 = comparison.iso_data_table(ev3, reference="parcae").set_index("recipe")
    assert math.isnan(t3.loc["parcae", "mean"]) and pd.isna(t3.loc["parcae", "best_loops"])
    assert math.isnan(t3.loc["lean", "diff"]) and t3.loc["lean", "verdict"] == variants.MISSING


def test_iso_data_excludes_iso_time_runs_and_matrix_shape():
    t = comparison.iso_data_table(_iso_runs(), reference="parcae")
    assert len(t) == 4  # run 8 (match_time_of) left out
    m = comparison.iso_data_matrix(t)
    assert list(m.columns) == ["parcae", "fixed4", "lean", "plain"]
    assert m.loc[("tiny", 1_000_000), "lean"] == pytest.approx(3.009)


def test_iso_data_separate_rows_per_size_and_budget():
    ev = comparison.eval_loss_per_run(
        frame(
            [
                run(1, "plain", 0, 3.0, mode="none"),
                run(2, "plain", 0, 2.5, mode="none", budget=2_000_000),
                run(3, "plain", 0, 2.8, mode="none", size="small"),
            ]
        ),
        frame([], columns=["train_job_id", "loops", "val_loss"]),
    )
    t = comparison.iso_data_table(ev)
    assert len(t) == 3 and sorted(t["mean"]) == [2.5, 2.8, 3.0]


def test_iso_data_empty():
    assert comparison.iso_data_table(frame([]).assign(budget_tokens=[], recipe=[])).empty


# ---------------------------------------------------------------- iso-time


def test_iso_time_pairs():
    runs = frame(
        [
            run(1, "parcae", 0, 3.00, tokens=1_000_000, train_seconds=120.0),
            run(
                2,
                "lean",
                0,
                2.95,
                budget=None,
                match_time_of=1,
                tokens=1_600_000,
                train_seconds=119.0,
                budget_time_s=120.0,
            ),
            run(3, "fixed4", 0, 3.005, budget=None, match_time_of=1, tokens=1_100_000, train_seconds=121.0),
            run(
                4, "plain", 0, NAN, budget=None, match_time_of=99, tokens=NAN, train_seconds=NAN
            ),  # ref unknown
        ]
    )
    p = comparison.iso_time_pairs(runs).set_index("job_id")
    assert len(p) == 3
    lean = p.loc[2]
    assert (lean["ref_job_id"], lean["ref_recipe"], lean["train_seconds"], lean["ref_train_seconds"]) == (
        1,
        "parcae",
        119.0,
        120.0,
    )
    assert (lean["tokens"], lean["ref_tokens"]) == (1_600_000, 1_000_000)
    assert lean["diff"] == pytest.approx(-0.05) and lean["verdict"] == "better"
    assert p.loc[3, "verdict"] == "noise"
    assert math.isnan(p.loc[4, "diff"]) and p.loc[4, "verdict"] == variants.MISSING
    assert p.loc[2, "method"] == "n too small" and math.isnan(p.loc[2, "ci_low"])  # no noise floor given
    s = comparison.iso_time_summary(p.reset_index()).set_index("variant_label")
    assert s.loc["lean", "n_pairs"] == 1 and math.isnan(s.loc["lean", "diff_std"])
    assert (s.loc["lean", "n_seeds"], s.loc["lean", "n_ref"], s.loc["lean", "verdict"]) == (1, 1, "better")
    # with a noise floor each pair has an interval: diff ± t·σ·√2
    floor = stats.noise_floor(frame([run(9, "x", 0, 3.0), run(10, "x", 1, 3.1)]).assign(eval_loss=[3.0, 3.1]))
    p = comparison.iso_time_pairs(runs, noise=floor).set_index("job_id")
    half = scipy_stats.t.ppf(0.975, 1) * math.sqrt(0.005) * math.sqrt(2)
    assert p.loc[2, "method"] == "noise floor" and p.loc[2, "ci_high"] == pytest.approx(-0.05 + half)
    assert p.loc[2, "verdict"] == "not resolved"


def test_iso_time_summary_pairs_by_seed():
    # three seeds each, the reference's seed effect shared by the matched run of the same seed
    rows = [run(1 + s, "parcae", s, 3.0 + eff) for s, eff in enumerate((0.0, 0.3, -0.2))]
    rows += [
        run(10 + s, "lean", s, 2.97 + eff + jitter, budget=None, match_time_of=1 + s)
        for s, (eff, jitter) in enumerate(((0.0, 0.001), (0.3, -0.001), (-0.2, 0.0)))
    ]
    s = comparison.iso_time_summary(comparison.iso_time_pairs(frame(rows))).iloc[0]
    per_seed = np.array([-0.029, -0.031, -0.03])
    half = scipy_stats.t.ppf(0.975, 2) * per_seed.std(ddof=1) / math.sqrt(3)
    assert s["method"] == "paired t" and (s["n_seeds"], s["n_ref"], s["n_pairs"]) == (3, 3, 3)
    assert s["diff"] == pytest.approx(-0.03) and s["ci_high"] == pytest.approx(-0.03 + half)
    assert s["verdict"] == "better"


def test_iso_time_pairs_match_device_seconds_across_worker_counts():
    """A 2-worker run matched to a 1-worker reference trained half its wall time: equal device-seconds;
    at equal worker counts the wall seconds are what was matched."""
    runs = frame(
        [
            run(1, "parcae", 0, 3.00, train_seconds=120.0, workers=1),
            run(2, "lean", 0, 2.95, budget=None, match_time_of=1, train_seconds=60.0, workers=2),
            run(3, "fixed4", 0, 3.01, budget=None, match_time_of=1, train_seconds=119.0, workers=1),
            run(
                4, "plain", 0, 3.02, budget=None, match_time_of=1, train_seconds=118.0, workers=None
            ),  # not recorded
            run(
                5, "plain", 1, 3.03, budget=None, match_time_of=99, train_seconds=118.0, workers=2
            ),  # ref not given
        ]
    )
    p = comparison.iso_time_pairs(runs).set_index("job_id")
    assert (p.loc[2, "workers"], p.loc[2, "ref_workers"], p.loc[2, "matched"]) == (2, 1, "device-seconds")
    assert (p.loc[2, "device_seconds"], p.loc[2, "ref_device_seconds"]) == (120.0, 120.0)
    assert p.loc[3, "matched"] == p.loc[4, "matched"] == "wall seconds"
    assert p.loc[4, "device_seconds"] == 118.0
    assert pd.isna(p.loc[5, "matched"]) and pd.isna(p.loc[5, "ref_device_seconds"])
    runs["workers"] = pd.array([1, 2, 1, None, 2], dtype="Int64")  # as orchestrator.frames gives them
    matched = comparison.iso_time_pairs(runs).set_index("job_id")["matched"].sort_index()
    assert matched.iloc[:3].tolist() == ["device-seconds", "wall seconds", "wall seconds"]
    assert pd.isna(matched.iloc[3])


def test_iso_time_pairs_none():
    assert comparison.iso_time_pairs(frame([run(1, "a", 0, 3.0)])).empty


# ---------------------------------------------------------------- decode, throughput


def test_decode_table_ratios():
    rows = []
    for arch, ms, kv in (("parcae", 10.0, 100.0), ("lean", 5.0, 40.0)):
        for ctx in (128, 512):
            rows.append(
                dict(
                    arch=arch,
                    size="tiny",
                    context_len=ctx,
                    batch_size=1,
                    device="cpu",
                    dtype="float32",
                    ms_per_token=ms * ctx / 128,
                    ms_p10=None,
                    ms_p90=None,
                    kv_cache_mb=kv * ctx / 128,
                )
            )
    rows.append(dict(rows[-1], arch="plain", context_len=2048))  # reference never ran at 2048
    t = comparison.decode_table(frame(rows), reference="parcae")
    lean = t[(t["arch"] == "lean") & (t["context_len"] == 512)].iloc[0]
    assert lean["ms_per_token"] == 20.0 and lean["ms_ratio"] == pytest.approx(0.5)
    assert lean["kv_ratio"] == pytest.approx(0.4)
    assert math.isnan(t[t["arch"] == "plain"].iloc[0]["ms_ratio"])


def test_throughput_table():
    runs = frame(
        [
            run(1, "parcae", 0, 3, tokens_per_s=1000.0),
            run(2, "parcae", 1, 3, tokens_per_s=1200.0),
            run(3, "lean", 0, 3, tokens_per_s=1650.0),
            run(4, "lean", 1, 3, tokens_per_s=NAN),
        ]
    )
    t = comparison.throughput_table(runs, reference="parcae").set_index("recipe")
    assert t.loc["parcae", "tokens_per_s"] == 1100.0 and t.loc["parcae", "ratio"] == 1.0
    assert t.loc["lean", "ratio"] == pytest.approx(1.5) and t.loc["lean", "n_runs"] == 1


# ---------------------------------------------------------------- labels and references


def test_budget_labels():
    runs = frame(
        [
            run(1, "a", 0, 3.0, budget=2_500_000),
            run(2, "a", 0, 3.0, budget=None, match_time_of=1),
            run(3, "a", 0, 3.0, budget=None, budget_time_s=60.0),
            run(4, "a", 0, 3.0, budget=None),
        ]
    )
    assert variants.budget_labels(runs) == ["2.5M tokens", "time of #1", "60 s", "—"]


def test_reference_is_found_by_recipe_when_every_label_carries_overrides():
    # a grid that sets seq_len labels every run "recipe · seq_len=64": parcae is still the reference
    labels = ["lean · seq_len=64", "parcae · d_model=96 · seq_len=64", "parcae · seq_len=64"]
    assert comparison._pick_reference(labels, None) == "parcae · seq_len=64"
    assert comparison._pick_reference(labels, "lean") == "lean · seq_len=64"
    assert (
        comparison._pick_reference(labels, "parcae · d_model=96 · seq_len=64")
        == "parcae · d_model=96 · seq_len=64"
    )
    assert comparison._pick_reference(["fixed4", "lean"], None) == "fixed4"
