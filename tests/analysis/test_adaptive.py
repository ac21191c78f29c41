"""The adaptive-compute frontier (analysis/adaptive.py) on a hand-built frame with hand-worked answers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from looplab.analysis import adaptive
from looplab.analysis.stats import NoiseFloor

T975_4 = scipy_stats.t.ppf(0.975, 4)  # 2.776: the noise floor below has 4 degrees of freedom
NOISE = NoiseFloor(sigma=0.01, dof=4, low=0.006, high=0.029, n_variants=2, groups=pd.DataFrame())
BAND_2 = T975_4 * 0.01  # two seeds a side: t sigma sqrt(1/2 + 1/2) = 0.0278

# variant a (parcae, 8 rounds, two seeds): the depth sweep; its loss at 8 loops is 1.26 / 1.28 (mean 1.27)
SWEEP = {0: {1: 1.50, 2: 1.40, 4: 1.30, 6: 1.29, 8: 1.26}, 1: {1: 1.52, 2: 1.42, 4: 1.32, 6: 1.29, 8: 1.28}}
# (rule, threshold, strategy) -> per seed (mean rounds, equivalent rounds, loss)
CELLS = {
    ("fixed", None, "per_round"): {0: (8, 8, 1.26), 1: (8, 8, 1.28)},
    ("state", 0.01, "per_round"): {0: (6, 6, 1.265), 1: (5, 5, 1.285)},  # diff +0.005
    ("state", 0.05, "per_round"): {0: (4, 4, 1.285), 1: (4, 4, 1.305)},  # +0.025: inside the floor band only
    ("state", 0.2, "per_round"): {0: (2.5, 2.5, 1.36), 1: (2.5, 2.5, 1.38)},  # +0.10: worse
    ("kl", 0.01, "per_round"): {0: (5, 7, 1.275), 1: (5, 7, 1.285)},  # +0.01, the readouts cost 2 rounds
    ("state", 0.05, "first"): {0: (4, 3.5, 1.33), 1: (4, 3.5, 1.35)},  # +0.07: first changes the function
}


def evals_frame() -> pd.DataFrame:
    rows = []
    for (rule, threshold, strategy), per_seed in CELLS.items():
        for seed, (rounds, eq, loss) in per_seed.items():
            rows.append(
                dict(
                    train_job_id=10 + seed,
                    seed=seed,
                    size="tiny",
                    variant_id="a",
                    variant_label="parcae",
                    config=f"{rule} | {strategy}",
                    rule=rule,
                    threshold=threshold,
                    kv_strategy=strategy,
                    kv_m=None,
                    changes_function=strategy == "first",
                    max_rounds=8,
                    val_loss=loss,
                    mean_rounds=rounds,
                    equivalent_rounds=eq,
                    kv_mib=0.25 if strategy == "first" else 1.0,
                    kv_mib_needed=0.25 if strategy == "first" else 1.0,
                )
            )
    # variant b (one seed, 4 rounds, no depth sweep): its own fixed cell is the reference
    for rule, threshold, rounds, loss in (("fixed", None, 4, 2.0), ("state", 0.1, 3, 2.005)):
        rows.append(
            dict(
                train_job_id=20,
                seed=0,
                size="tiny",
                variant_id="b",
                variant_label="lean",
                config=rule,
                rule=rule,
                threshold=threshold,
                kv_strategy="per_round",
                kv_m=None,
                changes_function=False,
                max_rounds=4,
                val_loss=loss,
                mean_rounds=rounds,
                equivalent_rounds=rounds,
                kv_mib=0.5,
                kv_mib_needed=0.5,
            )
        )
    return pd.DataFrame(rows)


def depth_frame() -> pd.DataFrame:
    return pd.DataFrame(
        [
            dict(
                train_job_id=10 + seed,
                seed=seed,
                size="tiny",
                variant_id="a",
                variant_label="parcae",
                loops=n,
                val_loss=loss,
            )
            for seed, curve in SWEEP.items()
            for n, loss in curve.items()
        ]
    )


def test_the_frontier_is_the_mean_over_seeds_sorted_by_rounds():
    f = adaptive.frontier(evals_frame())
    state = f[(f["variant_id"] == "a") & (f["rule"] == "state") & (f["strategy"] == "per_round")]
    assert state["threshold"].tolist() == [0.2, 0.05, 0.01]  # by mean rounds: 2.5, 4, 5.5
    assert state["mean_rounds"].tolist() == [2.5, 4.0, 5.5]
    assert state["val_loss"].tolist() == pytest.approx([1.37, 1.295, 1.275])
    assert state["n_seeds"].tolist() == [2, 2, 2]
    fixed = f[(f["variant_id"] == "a") & (f["rule"] == "fixed")]
    assert len(fixed) == 1 and math.isnan(fixed["threshold"].iloc[0]) and fixed["val_loss"].iloc[0] == 1.27
    assert f.loc[f["strategy"] == "first", "changes_function"].all()


def test_the_reference_curve_and_its_noise_band():
    ref = adaptive.reference_curve(depth_frame(), NOISE).set_index("loops")
    assert ref.loc[8, "val_loss"] == pytest.approx(1.27) and ref.loc[6, "val_loss"] == pytest.approx(1.29)
    assert ref.loc[8, "band"] == pytest.approx(BAND_2)
    assert ref.loc[4, "low"] == pytest.approx(1.31 - BAND_2) and ref.loc[4, "high"] == pytest.approx(
        1.31 + BAND_2
    )
    assert adaptive.equal_band(None, 2) == (0.01, "threshold 0.01")
    assert adaptive.equal_band(NOISE, 1, 3)[0] == pytest.approx(T975_4 * 0.01 * math.sqrt(1 + 1 / 3))


def test_rounds_saved_at_equal_loss_with_the_noise_floor():
    saved = adaptive.rounds_saved(evals_frame(), depth_frame(), NOISE)
    row = saved.set_index(["variant_id", "rule", "strategy"])
    # state: 0.05 (diff +0.025 <= 0.0278) is the cheapest equal threshold; 0.2 is worse
    state = row.loc[("a", "state", "per_round")]
    assert state["threshold"] == 0.05 and state["mean_rounds"] == 4.0 and state["rounds_saved"] == 4.0
    assert state["diff"] == pytest.approx(0.025) and state["ci_high"] == pytest.approx(0.025 + BAND_2)
    assert state["reference_loss"] == pytest.approx(1.27) and state["method"] == "noise floor"
    # the shallowest equal fixed depth: 6 loops (1.29, +0.02); 4 loops (+0.04) is not
    assert state["fixed_equal_depth"] == 6 and state["vs_fixed"] == pytest.approx(2.0)
    # kl saves 3 rounds of the loop but its readouts cost 2: one round's compute, and it loses to the
    # fixed depth 6 by a round
    kl = row.loc[("a", "kl", "per_round")]
    assert (kl["rounds_saved"], kl["compute_saved"], kl["vs_fixed"]) == (3.0, 1.0, -1.0)
    # first changes the function: +0.07 is no equal loss, so nothing is saved
    first = row.loc[("a", "state", "first")]
    assert bool(first["changes_function"]) and np.isnan(first["rounds_saved"]) and pd.isna(first["threshold"])
    # b has no sweep: its own fixed cell is the reference; one seed a side: t sigma sqrt(2)
    b = row.loc[("b", "state", "per_round")]
    assert b["reference_loss"] == 2.0 and b["rounds_saved"] == 1.0 and np.isnan(b["vs_fixed"])
    assert b["ci_high"] - b["diff"] == pytest.approx(BAND_2 * math.sqrt(2))


def test_rounds_saved_without_a_noise_floor_uses_the_fixed_threshold():
    row = adaptive.rounds_saved(evals_frame(), depth_frame()).set_index(["variant_id", "rule", "strategy"])
    state = row.loc[("a", "state", "per_round")]  # +0.025 > 0.01 now: 0.01 (+0.005, 5.5 rounds) wins
    assert state["threshold"] == 0.01 and state["rounds_saved"] == 2.5 and state["method"] == "threshold 0.01"
    assert state["fixed_equal_depth"] == 8 and state["vs_fixed"] == pytest.approx(2.5)  # 6 loops: +0.02
    assert adaptive.rounds_saved(evals_frame().iloc[:0], depth_frame()).empty


def test_kv_table_per_strategy():
    kv = adaptive.kv_table(evals_frame())
    a = kv[kv["variant_id"] == "a"]
    assert set(a.loc[a["strategy"] == "first", "kv_mib"]) == {0.25}
    assert a.loc[
        (a["strategy"] == "per_round") & (a["threshold"] == 0.05), "val_loss"
    ].item() == pytest.approx(1.295)


def test_exit_histogram_shares_per_bucket():
    hist = pd.DataFrame(
        [
            dict(
                variant_id="a",
                variant_label="parcae",
                size="tiny",
                seed=s,
                config="kl<0.01 | per_round",
                split=split,
                bucket=b,
                bucket_lo=lo,
                bucket_hi=hi,
                round=r,
                count=c,
            )
            for s in (0, 1)
            for split, b, lo, hi, r, c in [
                ("position", 0, 0, 8, 2, 3),
                ("position", 0, 0, 8, 4, 1),
                ("loss", 5, 4.0, math.inf, 8, 2),
                ("position", 1, 8, 16, 8, 5),
            ]
        ]
    )
    by_position = adaptive.exit_histogram(hist, "position")
    first = by_position[by_position["bucket"] == 0]
    assert first["count"].tolist() == [6, 2] and first["share"].tolist() == [0.75, 0.25]
    assert first["mean_round"].tolist() == [2.5, 2.5] and first["bucket_label"].iloc[0] == "[0, 8)"
    by_loss = adaptive.exit_histogram(hist, "loss")
    assert by_loss["bucket_label"].tolist() == ["[4, ∞)"] and by_loss["share"].tolist() == [1.0]


def test_accuracy_frontier_joins_each_cell_with_its_compute():
    evals = evals_frame()
    evals["adaptive_job_id"] = evals["train_job_id"] + 100
    tasks = pd.DataFrame(
        [
            dict(
                adaptive_job_id=110 + seed,
                train_job_id=10 + seed,
                seed=seed,
                size="tiny",
                variant_id="a",
                variant_label="parcae",
                config=config,
                task="deduction",
                subset=subset,
                acc=acc,
            )
            for seed in (0, 1)
            for config, subset, acc in [
                ("state | per_round", "all", 0.5 + 0.1 * seed),
                ("state | per_round", "depth=1", 0.9),
                ("kl | per_round", "all", 0.4),
            ]
        ]
    )
    # the configs of the hand-built frame name every threshold of a rule alike: keep one cell per name
    evals = evals.drop_duplicates(["adaptive_job_id", "config"])
    acc = adaptive.accuracy_frontier(tasks, evals).set_index("rule")
    assert acc.loc["state", "acc"] == pytest.approx(0.55) and acc.loc["state", "n_seeds"] == 2
    assert acc.loc["state", "mean_rounds"] == 5.5 and acc.loc["state", "threshold"] == 0.01
    assert acc.loc["kl", "acc"] == pytest.approx(0.4) and acc.loc["kl", "equivalent_rounds"] == 7
    assert adaptive.accuracy_frontier(tasks.iloc[:0], evals).empty


def test_the_first_rule_cell_prefers_a_shown_strategy():
    """The cell a page shows first: an exit rule's (never the fixed depth) under a shown strategy, read
    from the stored `config` names (`model.exit_names.CellKey`)."""
    configs = ["fixed | last_m2", "fixed | per_round", "kl<0.01 | last_m2", "state<0.1 | per_round"]
    assert adaptive.first_rule_cell(configs, ["per_round"]) == 3
    assert adaptive.first_rule_cell(configs, ["last_m2"]) == 2
    assert adaptive.first_rule_cell(configs, ["first"]) == 2  # none shown: the first rule cell
    assert adaptive.first_rule_cell(configs[:2], ["per_round"]) == 0  # only fixed cells
    with pytest.raises(ValueError, match="config: expected 'rule | kv strategy', got 'kl<0.01'"):
        adaptive.first_rule_cell(["kl<0.01"], ["per_round"])


def test_the_names_reach_the_analysis_without_torch():
    """The analysis (and the dashboard through it) reads the exit-rule and KV-strategy names from a
    torch-free module; so does a train spec's optimizer."""
    import subprocess
    import sys

    code = (
        "import sys; import looplab.analysis.adaptive, looplab.model.exit_names, looplab.workers.train.spec; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_best_at_loss_puts_every_rule_on_one_axis():
    """At level 1.27 (the fixed depth's mean loss) only the fixed cell (8 rounds) is at or below it; at
    1.30 the cheapest under per_round is state<0.05 (4 rounds on both seeds: sd 0, the interval is the
    point; `first`'s 3.5 rounds are another strategy)."""
    table = adaptive.best_at_loss(evals_frame(), levels=[1.27, 1.30])
    first, second = table.iloc[0], table.iloc[1]
    assert (first["rule"], first["equivalent_rounds"]) == ("fixed", 8)
    assert (second["rule"], second["threshold"], second["equivalent_rounds"]) == ("state", 0.05, 4)
    assert second["n_seeds"] == 2 and second["rounds_low"] == second["rounds_high"] == 4
    default = adaptive.best_at_loss(evals_frame())  # at each variant's fixed-depth loss
    assert list(default["level"]) == pytest.approx([1.27, 2.0])
    assert default.iloc[1]["variant_label"] != "" and default.iloc[1]["equivalent_rounds"] <= 4
