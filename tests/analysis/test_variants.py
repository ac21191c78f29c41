"""Grouping by variant, architecture filters and charts, iso-FLOP matching and train-time depth curves,
on hand-built frames whose answers are worked out by hand in each test."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from looplab.analysis import comparison, curves, stats, variants

NAN = float("nan")
# two variants of the recipe fixed4 (4 and 8 loops) and one of lean; the architecture as stored per job
FIXED4 = dict(
    variant_id="aaaaaaaaaaaa",
    variant_label="fixed4",
    n_prelude=2,
    n_recurrent=2,
    n_coda=2,
    train_loops=4,
    effective_depth=12.0,
    d_model=64,
    injection="add",
    n_params=100,
    n_once=40,
    n_rec=30,
)
FIXED4_L8 = dict(
    FIXED4, variant_id="bbbbbbbbbbbb", variant_label="fixed4 · loops=8", train_loops=8, effective_depth=20.0
)
LEAN_W = dict(FIXED4, variant_id="cccccccccccc", variant_label="lean · d_model=96", d_model=96, n_params=200)


def run(job_id, recipe, seed, loss, arch, *, budget=1_000_000, flops=None, **kw):
    row = dict(
        job_id=job_id,
        grid="g",
        recipe=recipe,
        size="tiny",
        seed=seed,
        status="succeeded",
        budget_tokens=budget,
        budget_time_s=None,
        match_time_of=None,
        loop_mode="fixed",
        tokens=budget,
        train_seconds=100.0,
        tokens_per_s=1000.0,
        final_val_loss=loss,
        train_flops=flops,
        **arch,
    )
    row.update(kw)
    return row


def runs_two_variants_of_one_recipe() -> pd.DataFrame:
    """fixed4 seeds 0/1 = 3.00/3.02; fixed4 · loops=8 seeds 0/1 = 2.90/2.94; lean · d_model=96 = 3.10."""
    return pd.DataFrame(
        [
            run(1, "fixed4", 0, 3.00, FIXED4, tokens_per_s=1000.0),
            run(2, "fixed4", 1, 3.02, FIXED4, tokens_per_s=1200.0),
            run(3, "fixed4", 0, 2.90, FIXED4_L8, tokens_per_s=600.0),
            run(4, "fixed4", 1, 2.94, FIXED4_L8, tokens_per_s=500.0),
            run(5, "lean", 0, 3.10, LEAN_W),
        ]
    )


def evals(runs: pd.DataFrame) -> pd.DataFrame:
    return comparison.eval_loss_per_run(runs, pd.DataFrame(columns=["train_job_id", "loops", "val_loss"]))


# ---------------------------------------------------------------- variant identity


def test_with_variants_falls_back_to_the_recipe_and_keeps_labels_unique_per_size():
    df = pd.DataFrame(
        {
            "recipe": ["a", "a", "b", "b"],
            "size": ["tiny", "tiny", "tiny", "small"],
            "variant_id": [None, None, "111111111111", "222222222222"],
            "variant_label": [None, None, "b", "b"],
        }
    )
    out = variants.with_variants(df)
    assert list(out["variant_id"][:2]) == ["a", "a"] and list(out["variant_label"][:2]) == ["a", "a"]
    assert list(out["variant_label"][2:]) == ["b", "b"]  # same label at two sizes: no clash
    clash = pd.DataFrame(
        {
            "recipe": ["b", "b"],
            "size": ["tiny", "tiny"],
            "variant_id": ["111111111111", "222222222222"],
            "variant_label": ["mine", "mine"],
        }
    )
    assert list(variants.with_variants(clash)["variant_label"]) == ["mine (111111)", "mine (222222)"]


def test_iso_data_two_variants_of_one_recipe_are_two_rows_and_seeds_are_averaged():
    t = comparison.iso_data_table(evals(runs_two_variants_of_one_recipe()), reference="fixed4")
    assert list(t["variant_label"]) == ["fixed4", "fixed4 · loops=8", "lean · d_model=96"]
    assert list(t["recipe"]) == ["fixed4", "fixed4", "lean"]
    t = t.set_index("variant_label")
    assert t.loc["fixed4", "mean"] == pytest.approx(3.01) and t.loc["fixed4", "n_seeds"] == 2
    assert t.loc["fixed4 · loops=8", "mean"] == pytest.approx(2.92)
    assert t.loc["fixed4 · loops=8", "diff"] == pytest.approx(-0.09)
    # two seeds a side, noise floor σ² = (0.0002 + 0.0008) / 2 on 2 dof: -0.09 ± 4.30·0.0224 reaches 0
    assert t.loc["fixed4 · loops=8", "verdict"] == "not resolved"
    assert t.loc["fixed4 · loops=8", "ci_high"] == pytest.approx(
        -0.09 + scipy_stats.t.ppf(0.975, 2) * 0.0005**0.5
    )
    assert (t.loc["fixed4 · loops=8", "seed 0"], t.loc["fixed4 · loops=8", "seed 1"]) == (2.90, 2.94)
    m = comparison.iso_data_matrix(t.reset_index())
    assert list(m.columns) == ["fixed4", "fixed4 · loops=8", "lean · d_model=96"]


def test_seed_aggregate_default_keeps_variants_apart():
    out = variants.seed_aggregate(runs_two_variants_of_one_recipe(), "final_val_loss")
    assert len(out) == 3 and sorted(out["n_seeds"]) == [1, 2, 2]


def test_throughput_per_variant_with_ratio_to_the_reference_variant():
    t = comparison.throughput_table(runs_two_variants_of_one_recipe(), reference="fixed4").set_index(
        "variant_label"
    )
    assert t.loc["fixed4", "tokens_per_s"] == 1100.0 and t.loc["fixed4", "n_runs"] == 2
    assert t.loc["fixed4 · loops=8", "tokens_per_s"] == 550.0
    assert t.loc["fixed4 · loops=8", "ratio"] == pytest.approx(0.5)
    assert math.isnan(t.loc["fixed4", "mfu"])  # not recorded (CPU): missing, not 0


def test_depth_curves_and_round_deltas_per_variant():
    rows = []
    for job, arch, seed, losses in (
        (1, FIXED4, 0, (3.2, 3.0)),
        (2, FIXED4, 1, (3.4, 3.1)),
        (3, FIXED4_L8, 0, (3.3, 2.9)),
    ):
        for loops, loss in zip((4, 8), losses):
            rows.append(
                dict(
                    train_job_id=job,
                    recipe="fixed4",
                    size="tiny",
                    seed=seed,
                    loops=loops,
                    val_loss=loss,
                    **{k: v for k, v in arch.items() if k != "train_loops"},
                )
            )
    d = curves.depth_curves(pd.DataFrame(rows))
    assert len(d) == 4  # 2 variants x 2 loop counts
    at8 = d[d["loops"] == 8].set_index("variant_label")
    assert at8.loc["fixed4", "mean"] == pytest.approx(3.05) and at8.loc["fixed4", "n_seeds"] == 2
    assert at8.loc["fixed4 · loops=8", "mean"] == 2.9 and at8.loc["fixed4 · loops=8", "n_seeds"] == 1
    assert at8.loc["fixed4", "inference_depth"] == 2 + 2 * 8 + 2  # prelude + recurrent x loops + coda
    wide = curves.depth_wide(d).set_index("variant_label")
    assert wide.loc["fixed4", "4 loops"] == pytest.approx(3.3)
    deltas = pd.DataFrame(
        [
            dict(train_job_id=j, recipe="fixed4", size="tiny", seed=s, loops=4, round=r, rel_change=v, **a)
            for j, a, s in ((1, FIXED4, 0), (2, FIXED4, 1), (3, FIXED4_L8, 0))
            for r, v in ((1, 2.0 + j), (2, 0.1 * j))
        ]
    )
    rd = curves.round_delta_curves(deltas, loops=4)
    assert len(rd) == 4
    second = rd[rd["round"] == 2].set_index("variant_label")["mean"]
    assert second["fixed4"] == pytest.approx(0.15) and second["fixed4 · loops=8"] == pytest.approx(0.3)
    first, rest = curves.split_first_round(rd)
    assert set(first["round"]) == {1} and set(rest["round"]) == {2} and len(first) == len(rest) == 2
    assert first.set_index("variant_label").loc["fixed4", "mean"] == pytest.approx(3.5)


def test_decode_table_per_variant():
    rows = [
        dict(
            arch="fixed4",
            size="tiny",
            context_len=128,
            batch_size=1,
            device="cpu",
            dtype="float32",
            ms_per_token=ms,
            ms_p10=ms,
            ms_p90=ms,
            kv_cache_mb=kv,
            variant_id=vid,
            variant_label=label,
        )
        for vid, label, ms, kv in (
            ("aaaaaaaaaaaa", "fixed4", 2.0, 10.0),
            ("bbbbbbbbbbbb", "fixed4 · loops=8", 3.0, 10.0),
            ("aaaaaaaaaaaa", "fixed4", 2.2, 10.0),
        )
    ]
    t = comparison.decode_table(pd.DataFrame(rows), reference="fixed4").set_index("variant_label")
    assert len(t) == 2 and t.loc["fixed4", "ms_per_token"] == pytest.approx(2.1)
    assert t.loc["fixed4 · loops=8", "ms_ratio"] == pytest.approx(3.0 / 2.1)


def test_iso_time_summary_per_variant():
    runs = pd.DataFrame(
        [
            run(1, "fixed4", 0, 3.00, FIXED4),
            run(2, "fixed4", 0, 2.95, FIXED4_L8, budget=None, match_time_of=1),
            run(3, "fixed4", 1, 2.97, FIXED4_L8, budget=None, match_time_of=1),
            run(4, "lean", 0, 3.05, LEAN_W, budget=None, match_time_of=1),
        ]
    )
    s = comparison.iso_time_summary(comparison.iso_time_pairs(runs)).set_index("variant_label")
    assert list(s["ref_variant_label"]) == ["fixed4", "fixed4"]
    assert s.loc["fixed4 · loops=8", "n_pairs"] == 2 and s.loc["fixed4 · loops=8", "diff"] == pytest.approx(
        -0.04
    )
    assert s.loc["lean · d_model=96", "verdict"] == "worse"


# ---------------------------------------------------------------- architecture filters and charts


def test_arch_options_and_filter():
    runs = runs_two_variants_of_one_recipe()
    opts = variants.arch_options(runs)
    # only columns with two or more values; whole numbers as int
    assert opts == {
        "train_loops": [4, 8],
        "effective_depth": [12, 20],
        "d_model": [64, 96],
        "n_params": [100, 200],
    }
    assert list(variants.filter_arch(runs, {"train_loops": [8]})["job_id"]) == [3, 4]
    assert list(variants.filter_arch(runs, {"train_loops": [4], "d_model": [96]})["job_id"]) == [5]
    assert len(variants.filter_arch(runs, {"d_model": []})) == 5  # an empty choice keeps all
    with pytest.raises(ValueError, match="'seed'.*accepted: n_prelude"):
        variants.filter_arch(runs, {"seed": [0]})


def test_by_architecture_one_point_per_variant():
    out = comparison.by_architecture(
        evals(runs_two_variants_of_one_recipe()), x="train_loops", color="d_model"
    )
    assert list(zip(out["d_model"], out["train_loops"])) == [(64, 4), (64, 8), (96, 4)]
    assert list(out["mean"]) == pytest.approx([3.01, 2.92, 3.10]) and list(out["n_seeds"]) == [2, 2, 1]
    assert math.isnan(out.loc[2, "std"])
    with pytest.raises(ValueError, match="x = 'width'"):
        comparison.by_architecture(evals(runs_two_variants_of_one_recipe()), x="width", color="d_model")


def test_plot_columns_only_those_with_values():
    runs = runs_two_variants_of_one_recipe().assign(n_once=None)
    cols = variants.plot_columns(runs, extra=("train_flops",))
    assert cols[:3] == ["variant_label", "recipe", "size"] and "n_once" not in cols
    assert "d_model" in cols and "train_flops" not in cols  # every train_flops is missing here


# ---------------------------------------------------------------- iso-FLOP


def iso_flop_runs() -> pd.DataFrame:
    """At size tiny: fixed4 (1.00e15, 1.02e15) and fixed4 · loops=8 (1.04e15) are within 5 % of
    1.00e15; lean · d_model=96 at 1.06e15 is not (6 %) and starts the next class with fixed4 seed 2
    (1.10e15, 3.8 % above it). A run without FLOPs is left out; a small-size run is its own block."""
    return pd.DataFrame(
        [
            run(1, "fixed4", 0, 3.00, FIXED4, flops=1.00e15),
            run(2, "fixed4", 1, 3.04, FIXED4, flops=1.02e15),
            run(3, "fixed4", 0, 2.98, FIXED4_L8, flops=1.04e15, tokens=600_000),
            run(4, "lean", 0, 2.90, LEAN_W, flops=1.06e15),
            run(5, "fixed4", 2, 2.80, FIXED4, flops=1.10e15),
            run(6, "fixed4", 3, 2.50, FIXED4, flops=None),
            run(7, "fixed4", 0, 2.70, FIXED4, flops=1.00e15, size="small"),
        ]
    )


def test_flop_classes_never_span_more_than_the_tolerance():
    classes = comparison.flop_classes(iso_flop_runs(), tolerance=0.05)
    c = dict(zip(iso_flop_runs()["job_id"], classes))
    assert c[1] == c[2] == c[3] and c[4] == c[5] and c[1] != c[4]
    assert math.isnan(c[6]) and c[7] not in (c[1], c[4])
    wide = comparison.flop_classes(iso_flop_runs(), tolerance=0.2)
    assert len(set(wide.dropna())) == 2  # one class per size


def test_iso_flop_table_matches_runs_at_equal_compute():
    # no noise floor: with one seed on a side there is no interval, the fixed threshold decides
    unmeasured = stats.noise_floor(pd.DataFrame())
    t = comparison.iso_flop_table(
        evals(iso_flop_runs()), reference="fixed4", tolerance=0.05, noise=unmeasured
    )
    first = t[(t["size"] == "tiny") & np.isclose(t["flops"], 1.02e15)].set_index("variant_label")
    assert list(first.index) == ["fixed4", "fixed4 · loops=8"]  # reference first
    assert (
        first.loc["fixed4", "mean"] == pytest.approx(3.02) and first.loc["fixed4", "verdict"] == "reference"
    )
    assert (first.loc["fixed4", "seed 0"], first.loc["fixed4", "seed 1"]) == (3.00, 3.04)
    assert first.loc["fixed4", "train_flops"] == pytest.approx(1.01e15)
    # 2.98 - 3.02 = -0.04 -> better; it trained fewer tokens for the same FLOPs
    assert first.loc["fixed4 · loops=8", "diff"] == pytest.approx(-0.04)
    assert (
        first.loc["fixed4 · loops=8", "verdict"] == "better"
        and first.loc["fixed4 · loops=8", "tokens"] == 600_000
    )
    second = t[np.isclose(t["flops"], 1.08e15)].set_index("variant_label")
    assert second.loc["lean · d_model=96", "diff"] == pytest.approx(0.10)  # 2.90 vs fixed4 seed 2's 2.80
    assert second.loc["lean · d_model=96", "verdict"] == "worse"
    # the small size's block holds one variant: nothing to compare, so it is not listed
    assert t[t["size"] == "small"].empty
    assert 6 not in set(t["n_seeds"]) and len(t) == 4  # run 6 (no FLOPs) left out
    assert first.loc["fixed4 · loops=8", "method"] == "n too small"
    loose = comparison.iso_flop_table(
        evals(iso_flop_runs()), reference="fixed4", threshold=0.05, noise=unmeasured
    ).set_index("variant_label")
    assert loose.loc["fixed4 · loops=8", "verdict"] == "noise"  # |-0.04| < 0.05
    # the noise floor measured from these runs (fixed4's four seeds spread widely) resolves neither
    measured = comparison.iso_flop_table(evals(iso_flop_runs()), reference="fixed4").set_index(
        "variant_label"
    )
    assert set(measured.loc[["fixed4 · loops=8", "lean · d_model=96"], "verdict"]) == {"not resolved"}


def test_iso_flop_curve_points_per_variant_and_budget():
    c = comparison.iso_flop_curve(evals(iso_flop_runs()), tolerance=0.05)
    fixed4 = c[(c["variant_label"] == "fixed4") & (c["size"] == "tiny")]
    assert list(fixed4["train_flops"]) == pytest.approx([1.01e15, 1.10e15])  # two budgets: a curve
    assert list(fixed4["mean"]) == pytest.approx([3.02, 2.80]) and list(fixed4["n_seeds"]) == [2, 1]
    assert (fixed4["min"].iloc[0], fixed4["max"].iloc[0]) == (3.00, 3.04)


def test_iso_flop_without_flops_is_empty():
    no_flops = runs_two_variants_of_one_recipe()
    assert (
        comparison.iso_flop_table(evals(no_flops)).empty and comparison.iso_flop_curve(evals(no_flops)).empty
    )
    assert comparison.iso_flop_table(evals(no_flops.drop(columns=["train_flops"]))).empty


def test_budget_label_of_a_flop_budget():
    runs = pd.DataFrame([run(1, "fixed4", 0, 3.0, FIXED4, budget_flops=3e15, budget=1_234_567)])
    assert variants.budget_labels(runs) == ["3e+15 FLOPs"]


# ---------------------------------------------------------------- curves


@pytest.mark.parametrize(
    ("n_runs", "points"), [(0, 500), (1, 500), (120, 500), (121, 495), (1000, 60), (10_000, 20)]
)
def test_points_per_curve_shares_a_total(n_runs, points):
    assert curves.points_per_curve(n_runs, total=60_000, most=500, least=20) == points


def test_train_depth_curves_parse_the_loop_count():
    runs = runs_two_variants_of_one_recipe()
    points = pd.DataFrame(
        [
            {"job_id": 3, "key": k, "step": s, "tokens": s * 100, "wall_s": float(s), "value": v}
            for s, base in ((10, 3.5), (20, 3.0))
            for k, v in (
                ("val_loss", base),
                ("val_loss@1", base + 1.0),
                ("val_loss@8", base),
                ("val_loss@16", base + 0.1),
                ("train_loss", 9.0),
                ("val_loss@x", 0.0),
            )
        ]
    )
    d = curves.train_depth_curves(points, runs)
    assert sorted(set(d["eval_loops"])) == [1, 8, 16] and len(d) == 6
    assert set(d["run"]) == {"fixed4 · loops=8 · seed 0 · #3"}
    last = curves.train_depth_last(d).iloc[0]
    assert (last["val_loss@1"], last["val_loss@8"], last["val_loss@16"]) == (4.0, 3.0, pytest.approx(3.1))
    assert last["tokens"] == 2000
    assert list(curves.train_depth_last(d).columns) == [
        "job_id",
        "run",
        "tokens",
        "val_loss@1",
        "val_loss@8",
        "val_loss@16",
    ]
    assert curves.train_depth_curves(points[points["key"] == "val_loss"], runs).empty
