"""dashboard.data against the fixture database (SQLite and PostgreSQL): the frames the pages read, and the SQL
downsampling."""

from __future__ import annotations

import pandas as pd
import pytest

from dashboard import analysis, data
from tests.dashboard.conftest import EXPECTED, LEAN8_LABEL


def test_runs_frame_has_loop_mode_and_iso_time_reference(fixture_url):
    runs = data.runs(fixture_url).set_index("job_id")
    assert len(runs) == 11
    parcae = runs[runs["recipe"] == "parcae"].iloc[0]
    lean = runs[(runs["variant_label"] == "lean") & runs["match_time_of"].isna()].iloc[0]
    assert (parcae["loop_mode"], parcae["train_loops"]) == ("sampled", 8)
    assert (lean["loop_mode"], lean["train_loops"]) == ("fixed", 4)
    assert set(runs.loc[runs["recipe"] == "plain", "loop_mode"]) == {"none"}
    iso = runs[runs["match_time_of"].notna()]
    assert len(iso) == 1 and runs.loc[int(iso["match_time_of"].iloc[0]), "recipe"] == "parcae"


def test_runs_frame_has_the_variant_architecture_and_flops(fixture_url):
    runs = data.runs(fixture_url)
    lean = runs[runs["recipe"] == "lean"]
    # two variants of one recipe: two ids; the seeds of one variant share theirs
    assert set(lean["variant_label"]) == {"lean", LEAN8_LABEL} and lean["variant_id"].nunique() == 2
    lean8 = lean[lean["variant_label"] == LEAN8_LABEL]
    assert len(lean8) == 2 and set(lean8["train_loops"]) == {8} and set(lean8["effective_depth"]) == {20.0}
    assert lean8["train_flops"].tolist() == pytest.approx([1.96e12] * 2) and set(lean8["loop_mode"]) == {
        "fixed"
    }
    # no stored total: FLOPs per token (the job's) x tokens trained
    plain = runs[runs["recipe"] == "plain"]
    assert plain["train_flops"].tolist() == pytest.approx([EXPECTED["plain_train_flops"]] * 2)
    assert {"n_prelude", "n_recurrent", "n_coda", "d_model", "injection", "n_params", "n_once", "n_rec", "mfu",
            "achieved_flops_per_s", "padding_waste", "budget_flops"} <= set(runs.columns)  # fmt: skip


def test_depth_metric_keys_from_latest_metrics(fixture_url):
    url = fixture_url
    runs = data.runs(url)
    ids = runs.loc[runs["recipe"].isin(["lean", "plain"]) & (runs["seed"] == 0), "job_id"].tolist()
    keys = data.depth_metric_keys(url, ids)
    lean = runs.loc[(runs["variant_label"] == "lean") & (runs["seed"] == 0), "job_id"].min()
    plain = runs.loc[(runs["recipe"] == "plain") & (runs["seed"] == 0), "job_id"].iloc[0]
    assert keys.loc[keys["job_id"] == lean, "key"].tolist() == [
        "val_loss@1",
        "val_loss@2",
        "val_loss@4",
        "val_loss@8",
    ]
    assert keys.loc[keys["job_id"] == plain, "key"].tolist() == ["val_loss@1"]
    assert data.depth_metric_keys(url, []).empty


def test_curves_downsampled_in_sql_like_analysis(fixture_url):
    url = fixture_url
    full = data.curves(url, [1, 2], ("train_loss", "val_loss"), max_points=10_000)
    assert len(full) == 2 * (50 + 5)  # every point when under the cap
    small = data.curves(url, [1, 2], ("train_loss", "val_loss"), max_points=7)
    expected = analysis.downsample(full, max_points=7)
    cols = ["job_id", "key", "step", "value"]
    pd.testing.assert_frame_equal(small[cols].reset_index(drop=True), expected[cols].reset_index(drop=True))
    first_last = small[small["key"] == "train_loss"].groupby("job_id")["step"].agg(["min", "max"])
    assert (first_last["min"] == 1).all() and (first_last["max"] == 50).all()


def test_latest_and_empty_selections(fixture_url):
    url = fixture_url
    assert data.curves(url, [], ("val_loss",)).empty and data.latest(url, []).empty
    jobs = data.jobs(url)
    running = jobs.loc[jobs["status"] == "running", "job_id"].tolist()
    lat = data.latest(url, running, ("tokens_per_s",))
    assert lat["value"].tolist() == [1234.0]


def test_depth_and_deltas_are_labelled_with_the_train_job(fixture_url):
    url = fixture_url
    depth = data.depth(url)
    assert set(depth["recipe"]) == {"parcae", "lean"} and depth["train_job_id"].notna().all()
    assert set(depth["variant_label"]) == {"parcae", "lean"} and set(depth["train_loops"]) == {8, 4}
    deltas = data.round_deltas(url)
    assert len(deltas) == 4 * 8 and deltas["variant_id"].notna().all()
    decode = data.decode(url)
    assert len(decode) == 4 * 4
    # a decode bench has the variant id of the train jobs of its architecture
    runs = data.runs(url)
    lean8 = set(runs.loc[runs["variant_label"] == LEAN8_LABEL, "variant_id"])
    assert set(decode.loc[decode["variant_label"] == LEAN8_LABEL, "variant_id"]) == lean8


def test_dashboard_imports_no_model_code():
    """What a page needs about a run's loops is stored with the job: no dashboard module imports model/."""
    import ast
    from pathlib import Path

    root = Path(data.__file__).parent
    offenders = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n == "model" or n.startswith("model.")]
    assert len(list(root.rglob("*.py"))) > 5 and offenders == []
