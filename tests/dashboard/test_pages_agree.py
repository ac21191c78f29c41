"""Every page agrees with Compare: the same variant at the same budget has the same mean and n.

The database is the page fixture's (tests/dashboard/conftest.py) plus what the demo has and the
fixture lacks: a depth sweep, round deltas and task scores of the iso-time run (lean seed 0 retrained
with the time of parcae seed 0), whose losses are far from the 1M-token runs'. Before one grouping rule
(analysis.variants.GROUP_COLUMNS), Depth and Extrapolation pooled that run with lean's two 1M-token
seeds: n = 3 and a mean pulled toward it.
"""

from __future__ import annotations

import json

import pytest

from looplab.analysis import comparison, curves, extrapolation, tasks, variants
from looplab.orchestrator import frames
from tests.dashboard.conftest import DEPTH, build_fixture_db
from tests.dashboard.test_pages import frame_with, render

ISO_DEPTH = {1: 2.5, 2: 2.4, 4: 2.3, 8: 2.35}  # the iso-time run's sweep: far below lean's 3.1
LEAN_AT_4 = (DEPTH[("lean", 0)][4] + DEPTH[("lean", 1)][4]) / 2  # 3.115 over seeds 0 and 1
TOKENS = "1M tokens"


@pytest.fixture(scope="module")
def agree_url(tmp_path_factory):
    """The fixture database with the iso-time run's follow-ups added."""
    from looplab.orchestrator import schema
    from looplab.orchestrator.db import dispose_all, engine, session

    url = build_fixture_db(tmp_path_factory.mktemp("agree") / "looplab.db")
    eng = engine(url)
    with session(eng) as s:
        jobs = list(s.query(schema.Job))
        iso = next(j for j in jobs if j.budget and "match_time_of" in j.budget)
        lean0 = next(j for j in jobs if j.kind == "train" and j.recipe == "lean" and j.seed == 0)
        sweep = _follow_up(s, schema, "depth_sweep", iso)
        for loops, loss in ISO_DEPTH.items():
            s.add(schema.DepthEval(job_id=sweep, loops=loops, val_loss=loss))
        s.add(schema.RoundDelta(job_id=sweep, loops=8, round=2, rel_change=9.0))
        for train, acc in ((iso, 1.0), (lean0, 0.5)):
            job_id = _follow_up(s, schema, "eval", train)
            s.add(schema.TaskScore(job_id=job_id, task="copy", subset="all", loops=4, n=10, acc=acc))
    eng.dispose()
    dispose_all()
    return url


def _follow_up(s, schema, kind: str, train) -> int:
    """A succeeded follow-up job of `kind` depending on `train`; its id."""
    follow = schema.Job(
        grid_id=1,
        kind=kind,
        config=json.dumps({"kind": kind, "of": train.id}),
        config_hash=f"agree-{kind}-{train.id}",
        status="succeeded",
        created_at=train.created_at,
        priority=0,
        attempts=1,
        max_attempts=1,
    )
    s.add(follow)
    s.flush()
    s.add(schema.JobDep(job_id=follow.id, depends_on=train.id))
    return follow.id


def _row(df, label):
    rows = df[df["variant_label"] == label]
    assert len(rows) == 1, (label, df["variant_label"].tolist())
    return rows.iloc[0]


def test_same_variant_same_budget_same_mean_and_n_everywhere(agree_url):
    runs = variants.with_variants(frames.runs(agree_url))
    done = runs[runs["status"] == "succeeded"]
    depth = frames.depth(agree_url)
    # Compare: lean at 1M tokens, by its sweep at the trained 4 loops
    iso = comparison.iso_data_table(comparison.eval_loss_per_run(done, depth))
    compare = _row(iso, "lean")
    assert compare["mean"] == pytest.approx(LEAN_AT_4) and compare["n_seeds"] == 2
    # Depth: the same mean and n at 4 loops; the iso-time run is its own series
    by_loops = curves.depth_curves(depth)
    at4 = by_loops[by_loops["loops"] == 4]
    depth_row = _row(at4, f"lean · {TOKENS}")
    assert (depth_row["mean"], depth_row["n_seeds"]) == (pytest.approx(compare["mean"]), compare["n_seeds"])
    alone = at4[at4["budget"].str.startswith("time of #")]
    assert alone["mean"].tolist() == [pytest.approx(ISO_DEPTH[4])] and alone["n_seeds"].tolist() == [1]
    # Extrapolation: the loss at the trained depth of the same group
    summary = extrapolation.summary(extrapolation.loss_curves(depth))
    ext = _row(summary, f"lean · {TOKENS}")
    assert ext["loss_at_trained"] == pytest.approx(compare["mean"]) and ext["n_seeds"] == compare["n_seeds"]
    # round deltas and task scores are grouped the same way: the iso-time run's 9.0 and 1.0 stand apart
    rounds = curves.round_delta_curves(frames.round_deltas(agree_url), loops=8)
    lean_r2 = _row(rounds[rounds["round"] == 2], f"lean · {TOKENS}")
    assert lean_r2["n_seeds"] == 2 and lean_r2["mean"] < 1
    acc = tasks.accuracy_curves(frames.task_scores(agree_url))
    assert sorted(acc["acc"]) == [0.5, 1.0] and set(acc["n_seeds"]) == {1}


def test_depth_and_extrapolation_pages_show_the_budgets_apart(monkeypatch, agree_url):
    at = render(monkeypatch, agree_url, "depth")
    wide = frame_with(at, "4 loops", "budget").set_index("variant_label")
    assert wide.loc[f"lean · {TOKENS}", "4 loops"] == pytest.approx(LEAN_AT_4)
    assert any(label.startswith("lean · time of #") for label in wide.index)
    at = render(monkeypatch, agree_url, "extrapolation")
    summary = frame_with(at, "loss_at_trained", "gap_at_deepest").set_index("variant_label")
    assert summary.loc[f"lean · {TOKENS}", "n_seeds"] == 2
