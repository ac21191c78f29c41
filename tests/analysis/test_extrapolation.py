"""The Extrapolation page's numbers (analysis/extrapolation.py) on hand-built frames; the page itself:
tests/dashboard/test_extrapolation_page.py."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from looplab.analysis import extrapolation

# two variants of one effective depth 8: a 2-layer block x 4 loops and a 4-layer block x 2 loops
VARIANTS = {
    "base_loop 2x4": dict(variant_id="v2x4", n_prelude=0, n_recurrent=2, n_coda=0, train_loops=4),
    "base_loop 4x2": dict(variant_id="v4x2", n_prelude=0, n_recurrent=4, n_coda=0, train_loops=2),
}


def _row(label: str, seed: int, **kw) -> dict:
    v = VARIANTS[label]
    depth = v["n_prelude"] + v["n_recurrent"] * v["train_loops"] + v["n_coda"]
    return dict(
        recipe="fixed4",
        size="tiny",
        seed=seed,
        train_job_id=10 * seed + len(label),
        variant_label=label,
        effective_depth=float(depth),
        **v,
        **kw,
    )


def depth_frame() -> pd.DataFrame:
    # 2x4: loss at loops 1..8 is 4 - 0.25 * min(loops, 4) + 0.1 * max(0, loops - 4) (+0.02 on seed 1)
    rows = []
    for seed in (0, 1):
        for loops in (1, 2, 4, 6, 8):
            loss = 4 - 0.25 * min(loops, 4) + 0.1 * max(0, loops - 4) + 0.02 * seed
            rows.append(_row("base_loop 2x4", seed, loops=loops, val_loss=loss))
    for loops, loss in ((1, 3.6), (2, 3.1), (3, 3.2), (4, 3.5)):  # one seed; 4x2 at loops 3 = depth 12
        rows.append(_row("base_loop 4x2", 0, loops=loops, val_loss=loss))
    return pd.DataFrame(rows)


def test_loss_curves_put_every_variant_on_the_effective_depth_axis():
    curves = extrapolation.loss_curves(depth_frame())
    a = curves[curves["variant_label"] == "base_loop 2x4"].set_index("loops")
    assert a["inference_depth"].tolist() == [2, 4, 8, 12, 16]
    assert a.loc[4, "mean"] == pytest.approx(3.01) and a.loc[4, "n_seeds"] == 2
    assert (a.loc[4, "min"], a.loc[4, "max"]) == pytest.approx((3.0, 3.02))
    assert a["at_trained"].tolist() == [False, False, True, False, False]
    b = curves[curves["variant_label"] == "base_loop 4x2"].set_index("loops")
    assert b["inference_depth"].tolist() == [4, 8, 12, 16] and b.loc[2, "at_trained"]
    assert set(curves["trained_depth"]) == {8.0}
    marks = extrapolation.trained_marks(curves)
    assert marks.to_dict("records") == [
        {"variant_label": "base_loop 2x4", "trained_depth": 8.0},
        {"variant_label": "base_loop 4x2", "trained_depth": 8.0},
    ]


def test_summary_reports_the_gap_beyond_the_trained_depth():
    table = extrapolation.summary(extrapolation.loss_curves(depth_frame())).set_index("variant_label")
    a = table.loc["base_loop 2x4"]
    assert a["loss_at_trained"] == pytest.approx(3.01) and a["best_depth"] == 8
    assert a["deepest"] == 16 and a["loss_at_deepest"] == pytest.approx(3.41)
    assert a["gap_at_deepest"] == pytest.approx(0.4) and a["n_seeds"] == 2
    b = table.loc["base_loop 4x2"]
    assert b["gap_at_deepest"] == pytest.approx(0.4) and b["n_seeds"] == 1 and b["best_loss"] == 3.1


def test_a_sweep_that_skipped_the_trained_depth_has_no_loss_there():
    df = depth_frame()
    df = df[~((df["variant_label"] == "base_loop 4x2") & (df["loops"] == 2))]
    table = extrapolation.summary(extrapolation.loss_curves(df)).set_index("variant_label")
    assert math.isnan(table.loc["base_loop 4x2", "loss_at_trained"])
    assert math.isnan(table.loc["base_loop 4x2", "gap_at_deepest"])


def test_empty_frames_give_empty_results_with_their_columns():
    empty = extrapolation.loss_curves(pd.DataFrame())
    assert empty.empty and "inference_depth" in empty.columns
    assert extrapolation.summary(empty).columns.tolist() == extrapolation.SUMMARY_COLUMNS
    assert extrapolation.trained_marks(empty).empty
    assert extrapolation.geometry_depths(pd.DataFrame(), "angle") == []
    assert extrapolation.interaction_options(pd.DataFrame()).empty
    assert extrapolation.interaction_matrix(pd.DataFrame(), "x", 4).empty
    assert extrapolation.accuracy_curves(pd.DataFrame()).empty


def deltas_frame() -> pd.DataFrame:
    rows = []
    for seed in (0, 1):
        for r in range(1, 5):
            rows.append(
                _row(
                    "base_loop 2x4",
                    seed,
                    loops=4,
                    round=r,
                    rel_change=1.0 / r,
                    angle=0.1 * r + 0.02 * seed,
                    state_var=float(r),
                )
            )
        # an older sweep: angle and state_var not measured
        rows.append(_row("base_loop 2x4", seed, loops=2, round=1, rel_change=0.5, angle=None, state_var=None))
    return pd.DataFrame(rows)


def test_geometry_curves_average_seeds_per_round_and_skip_unmeasured_rows():
    deltas = deltas_frame()
    assert extrapolation.geometry_depths(deltas, "angle") == [4]
    assert extrapolation.geometry_depths(deltas, "rel_change") == [2, 4]
    curves = extrapolation.geometry_curves(deltas, "angle", 4)
    assert curves["round"].tolist() == [1, 2, 3, 4]
    assert curves["mean"].tolist() == pytest.approx([0.11, 0.21, 0.31, 0.41])
    assert set(curves["n_seeds"]) == {2} and set(curves["variant_label"]) == {"base_loop 2x4"}
    assert extrapolation.geometry_curves(deltas, "state_var", 2).empty
    with pytest.raises(ValueError, match="metric: unknown 'norm'; accepted: rel_change, angle, state_var"):
        extrapolation.geometry_curves(deltas, "norm", 4)


def test_interaction_matrix_is_the_seed_mean_per_pair():
    rows = []
    for seed in (0, 1):
        for i in range(1, 4):
            for j in range(i + 1, 5):
                rows.append(
                    _row("base_loop 2x4", seed, loops=4, skipped=i, round=j, interaction=i + j / 10 + seed)
                )
        rows.append(_row("base_loop 4x2", seed, loops=2, skipped=1, round=2, interaction=0.5))
    frame = pd.DataFrame(rows)
    options = extrapolation.interaction_options(frame)
    assert list(options.itertuples(index=False, name=None)) == [("base_loop 2x4", 4), ("base_loop 4x2", 2)]
    matrix = extrapolation.interaction_matrix(frame, "base_loop 2x4", 4)
    assert len(matrix) == 6 and set(matrix["n_seeds"]) == {2}
    pair = matrix[(matrix["skipped"] == 2) & (matrix["round"] == 4)].iloc[0]
    assert pair["mean"] == pytest.approx(2.4 + 0.5)
    assert extrapolation.interaction_matrix(frame, "base_loop 2x4", 8).empty


def test_accuracy_curves_on_the_depth_axis():
    rows = []
    for loops, correct in ((2, 5), (4, 8), (8, 6)):
        rows.append(
            _row(
                "base_loop 2x4",
                0,
                eval_job_id=99,
                task="deduction",
                category="reasoning",
                subset="all",
                loops=loops,
                n=10,
                acc=correct / 10,
                acc_norm=None,
                stderr=0.1,
                chance=0.25,
            )
        )
        rows.append(
            _row(
                "base_loop 2x4",
                0,
                eval_job_id=99,
                task="deduction",
                category="reasoning",
                subset="depth=2",
                loops=loops,
                n=5,
                acc=0.2,
                acc_norm=None,
                stderr=0.1,
                chance=0.25,
            )
        )
    curves = extrapolation.accuracy_curves(pd.DataFrame(rows))
    assert curves["inference_depth"].tolist() == [4, 8, 16] and set(curves["subset"]) == {"all"}
    assert curves["acc"].tolist() == pytest.approx([0.5, 0.8, 0.6]) and set(curves["trained_depth"]) == {8.0}
