"""orchestrator.frames against the fixture database (SQLite and PostgreSQL): the frames the pages, the demo
and `looplab fit` read, the SQL downsampling, and that a run and the job listing are each defined once."""

from __future__ import annotations

import pandas as pd
import pytest

from looplab.analysis import curves
from looplab.orchestrator import frames
from tests.dashboard.conftest import EXPECTED, LEAN8_LABEL


def test_runs_frame_has_loop_mode_and_iso_time_reference(fixture_url):
    runs = frames.runs(fixture_url).set_index("job_id")
    assert len(runs) == 11
    parcae = runs[runs["recipe"] == "parcae"].iloc[0]
    lean = runs[(runs["variant_label"] == "lean") & runs["match_time_of"].isna()].iloc[0]
    assert (parcae["loop_mode"], parcae["train_loops"]) == ("sampled", 8)
    assert (lean["loop_mode"], lean["train_loops"]) == ("fixed", 4)
    assert set(runs.loc[runs["recipe"] == "plain", "loop_mode"]) == {"none"}
    iso = runs[runs["match_time_of"].notna()]
    assert len(iso) == 1 and runs.loc[int(iso["match_time_of"].iloc[0]), "recipe"] == "parcae"


def test_runs_frame_has_the_variant_architecture_and_flops(fixture_url):
    runs = frames.runs(fixture_url)
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
    assert {
        "n_prelude",
        "n_recurrent",
        "n_coda",
        "d_model",
        "injection",
        "n_params",
        "n_once",
        "n_rec",
        "mfu",
        "achieved_flops_per_s",
        "padding_waste",
        "budget_flops",
    } <= set(runs.columns)


def test_depth_metric_keys_from_latest_metrics(fixture_url):
    url = fixture_url
    runs = frames.runs(url)
    ids = runs.loc[runs["recipe"].isin(["lean", "plain"]) & (runs["seed"] == 0), "job_id"].tolist()
    keys = frames.depth_metric_keys(url, ids)
    lean = runs.loc[(runs["variant_label"] == "lean") & (runs["seed"] == 0), "job_id"].min()
    plain = runs.loc[(runs["recipe"] == "plain") & (runs["seed"] == 0), "job_id"].iloc[0]
    assert keys.loc[keys["job_id"] == lean, "key"].tolist() == [
        "val_loss@1",
        "val_loss@2",
        "val_loss@4",
        "val_loss@8",
    ]
    assert keys.loc[keys["job_id"] == plain, "key"].tolist() == ["val_loss@1"]
    assert frames.depth_metric_keys(url, []).empty


def test_curves_downsampled_in_sql_like_analysis(fixture_url):
    url = fixture_url
    full = frames.curves(url, [1, 2], ("train_loss", "val_loss"), max_points=10_000)
    assert len(full) == 2 * (50 + 5)  # every point when under the cap
    small = frames.curves(url, [1, 2], ("train_loss", "val_loss"), max_points=7)
    expected = curves.downsample(full, max_points=7)
    cols = ["job_id", "key", "step", "value"]
    pd.testing.assert_frame_equal(small[cols].reset_index(drop=True), expected[cols].reset_index(drop=True))
    first_last = small[small["key"] == "train_loss"].groupby("job_id")["step"].agg(["min", "max"])
    assert (first_last["min"] == 1).all() and (first_last["max"] == 50).all()


def test_latest_and_empty_selections(fixture_url):
    url = fixture_url
    assert frames.curves(url, [], ("val_loss",)).empty and frames.latest(url, []).empty
    jobs = frames.jobs(url)
    running = jobs.loc[jobs["status"] == "running", "job_id"].tolist()
    lat = frames.latest(url, running, ("tokens_per_s",))
    assert lat["value"].tolist() == [1234.0]


def test_depth_and_deltas_are_labelled_with_the_train_job(fixture_url):
    url = fixture_url
    depth = frames.depth(url)
    assert set(depth["recipe"]) == {"parcae", "lean"} and depth["train_job_id"].notna().all()
    assert set(depth["variant_label"]) == {"parcae", "lean"} and set(depth["train_loops"]) == {8, 4}
    deltas = frames.round_deltas(url)
    assert len(deltas) == 4 * 8 and deltas["variant_id"].notna().all()
    decode = frames.decode(url)
    assert len(decode) == 4 * 4
    # a decode bench has the variant id of the train jobs of its architecture
    runs = frames.runs(url)
    lean8 = set(runs.loc[runs["variant_label"] == LEAN8_LABEL, "variant_id"])
    assert set(decode.loc[decode["variant_label"] == LEAN8_LABEL, "variant_id"]) == lean8


def test_dashboard_imports_no_model_code():
    """What a page needs about a run's loops is stored with the job: no dashboard module imports model/."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "dashboard"
    offenders = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n == "model" or n.startswith("model.")]
    assert len(list(root.rglob("*.py"))) > 5 and offenders == []


# ---------------------------------------------------------------- one definition each


def test_the_runs_frame_is_the_runs_view(fixture_url):
    """A run is what the `runs` view says (orchestrator/views.py): the frame has the view's rows and, for
    every column it shares with the view, the view's values."""
    from sqlalchemy import text

    with frames.engine(fixture_url).connect() as conn:
        view = pd.read_sql(text("SELECT * FROM runs ORDER BY job_id"), conn)
    runs = frames.runs(fixture_url)
    assert list(runs["job_id"]) == list(view["job_id"]) and len(runs) == 11
    shared = [c for c in view.columns if c in runs.columns and c != "train_flops"]
    assert len(shared) > 25
    pd.testing.assert_frame_equal(runs[shared], view[shared], check_dtype=False)
    assert list(runs["train_loops"]) == list(view["loops"])
    measured = view["train_flops"].notna()
    assert measured.any() and (~measured).any()  # the fixture has runs of both kinds
    assert runs.loc[measured, "train_flops"].tolist() == view.loc[measured, "train_flops"].tolist()


def test_status_and_the_queue_page_show_one_job_listing(fixture_url):
    """`looplab status` (lab/display.py) and the Queue page (`frames.jobs`) read the same query:
    the same jobs in the same order with the same states; the terminal shows a failed job's last error
    line, the page its whole text, and only for failed jobs."""
    from looplab.lab.display import status_frame
    from looplab.orchestrator.states import JobStatus

    page = frames.jobs(fixture_url)
    terminal = status_frame(frames.engine(fixture_url))
    assert list(page.columns) == frames.JOB_COLUMNS and len(page) > 10
    assert list(terminal["id"]) == list(page["job_id"])
    columns = ["kind", "recipe", "size", "status", "attempts", "progress_done", "progress_total", "eta_s"]
    pd.testing.assert_frame_equal(terminal[columns], page[columns], check_dtype=False)
    failed = page["status"] == JobStatus.FAILED
    assert failed.any() and page.loc[~failed, "error"].isna().all()
    last_lines = [e.strip().splitlines()[-1][:100] for e in page.loc[failed, "error"]]
    assert terminal.loc[failed.to_numpy(), "error"].tolist() == last_lines
    active = status_frame(frames.engine(fixture_url), all_jobs=False)
    assert set(active["status"]) <= {JobStatus.QUEUED, JobStatus.RUNNING} and 0 < len(active) < len(page)
