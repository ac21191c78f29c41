"""dashboard.data against the fixture database: the frames the pages read, and the SQL downsampling."""

from __future__ import annotations

import pandas as pd

from dashboard import analysis, data


def test_runs_frame_has_loop_mode_and_iso_time_reference(fixture_db):
    runs = data.runs(fixture_db[0]).set_index("job_id")
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
    full = data.curves(url, [1, 2], ("train_loss", "val_loss"), max_points=10_000)
    assert len(full) == 2 * (50 + 5)  # every point when under the cap
    small = data.curves(url, [1, 2], ("train_loss", "val_loss"), max_points=7)
    expected = analysis.downsample(full, max_points=7)
    cols = ["job_id", "key", "step", "value"]
    pd.testing.assert_frame_equal(small[cols].reset_index(drop=True), expected[cols].reset_index(drop=True))
    first_last = small[small["key"] == "train_loss"].groupby("job_id")["step"].agg(["min", "max"])
    assert (first_last["min"] == 1).all() and (first_last["max"] == 50).all()


def test_latest_and_empty_selections(fixture_db):
    url = fixture_db[0]
    assert data.curves(url, [], ("val_loss",)).empty and data.latest(url, []).empty
    lat = data.latest(url, [13], ("tokens_per_s",))
    assert lat["value"].tolist() == [1234.0]


def test_depth_and_deltas_are_labelled_with_the_train_job(fixture_db):
    url = fixture_db[0]
    depth = data.depth(url)
    assert set(depth["recipe"]) == {"parcae", "lean"} and depth["train_job_id"].notna().all()
    assert len(data.round_deltas(url)) == 4 * 8
    assert len(data.decode(url)) == 12


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
