"""dashboard.data against the fixture database: the frames the pages read, and the SQL downsampling."""

from __future__ import annotations

import pandas as pd

from dashboard import analysis as A
from dashboard import data as D


def test_runs_frame_has_loop_mode_and_iso_time_reference(fixture_db):
    runs = D.runs(fixture_db[0]).set_index("job_id")
    assert len(runs) == 9
    parcae = runs[runs["recipe"] == "parcae"].iloc[0]
    lean = runs[(runs["recipe"] == "lean") & runs["match_time_of"].isna()].iloc[0]
    assert (parcae["loop_mode"], parcae["train_loops"]) == ("sampled", 8)
    assert (lean["loop_mode"], lean["train_loops"]) == ("fixed", 4)
    assert set(runs.loc[runs["recipe"] == "plain", "loop_mode"]) == {"none"}
    iso = runs[runs["match_time_of"].notna()]
    assert len(iso) == 1 and runs.loc[int(iso["match_time_of"].iloc[0]), "recipe"] == "parcae"


def test_curves_downsampled_in_sql_like_analysis(fixture_db):
    url = fixture_db[0]
    full = D.curves(url, [1, 2], ("train_loss", "val_loss"), max_points=10_000)
    assert len(full) == 2 * (50 + 5)  # every point when under the cap
    small = D.curves(url, [1, 2], ("train_loss", "val_loss"), max_points=7)
    expected = A.downsample(full, max_points=7)
    cols = ["job_id", "key", "step", "value"]
    pd.testing.assert_frame_equal(small[cols].reset_index(drop=True), expected[cols].reset_index(drop=True))
    first_last = small[small["key"] == "train_loss"].groupby("job_id")["step"].agg(["min", "max"])
    assert (first_last["min"] == 1).all() and (first_last["max"] == 50).all()


def test_latest_and_empty_selections(fixture_db):
    url = fixture_db[0]
    assert D.curves(url, [], ("val_loss",)).empty and D.latest(url, []).empty
    lat = D.latest(url, [13], ("tokens_per_s",))
    assert lat["value"].tolist() == [1234.0]


def test_depth_and_deltas_are_labelled_with_the_train_job(fixture_db):
    url = fixture_db[0]
    depth = D.depth(url)
    assert set(depth["recipe"]) == {"parcae", "lean"} and depth["train_job_id"].notna().all()
    assert len(D.round_deltas(url)) == 4 * 8
    assert len(D.decode(url)) == 12
