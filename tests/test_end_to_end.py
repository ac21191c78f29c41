"""The whole flow as a user runs it: `looplab demo --fast` in a fresh directory (a real local Ray,
a real SQLite file, real training on the offline corpus), then the results read back through
`looplab sql` and the dashboard's Compare page (AppTest) against the database the queue wrote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.demo, pytest.mark.ray]  # `looplab demo` runs the queue on a local Ray

ROOT = Path(__file__).resolve().parents[1]
LOOPLAB = [sys.executable, "-m", "looplab"]


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory, looplab_cache):
    work = tmp_path_factory.mktemp("demo")
    db = work / "looplab.db"
    env = {**os.environ, "LOOPLAB_CACHE": str(looplab_cache), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [*LOOPLAB, "--db", str(db), "demo", "--fast"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return db, out.stdout, env


def sql(demo_db, query: str) -> list[dict]:
    db, _, env = demo_db
    out = subprocess.run(
        [*LOOPLAB, "--db", str(db), "sql", "--json", query],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def test_demo_prints_both_comparisons(demo_db):
    _, stdout, _ = demo_db
    assert "== iso-data" in stdout and "== iso-time" in stdout
    iso_data = stdout.split("== iso-data")[1].split("== iso-time")[0]
    assert "parcae" in iso_data and "lean" in iso_data and "reference" in iso_data
    assert "(no finished iso-time pair)" not in stdout
    assert "open the dashboard:" in stdout and " dashboard" in stdout.split("open the dashboard:")[1]


def test_every_job_succeeded_and_results_are_in_the_views(demo_db):
    states = sql(demo_db, "SELECT kind, status, COUNT(*) AS n FROM jobs GROUP BY kind, status")
    assert {r["status"] for r in states} == {"succeeded"}
    kinds = {r["kind"]: r["n"] for r in states}
    assert kinds["train"] == 3  # lean, parcae, and parcae at lean's training time
    assert kinds["depth_sweep"] == 3 and kinds["decode_bench"] == 2

    runs = sql(demo_db, "SELECT recipe, seed, final_val_loss, best_loops, train_seconds FROM runs")
    assert len(runs) == 3
    for r in runs:  # a trained byte-level model: below the uniform loss ln(256) = 5.55, above 0
        assert 0 < r["final_val_loss"] < 5.55 and r["train_seconds"] > 0 and r["best_loops"] >= 1

    # how each run loops is stored with it at submission (the dashboard reads it; no model code)
    looping = sql(
        demo_db, "SELECT DISTINCT recipe, loop_sampler, loops FROM jobs WHERE kind != 'decode_bench'"
    )
    assert {(r["recipe"], r["loop_sampler"], r["loops"]) for r in looping} == {
        ("lean", "fixed", 4),
        ("parcae", "poisson_seq", 8),
    }

    depth = sql(demo_db, "SELECT recipe, loops, val_loss FROM depth ORDER BY recipe, loops")
    assert {r["loops"] for r in depth} == {1, 2, 4, 8}
    decode = sql(demo_db, "SELECT arch, kv_cache_mb, ms_per_token FROM decode")
    assert {r["arch"] for r in decode} == {"lean", "parcae"}
    assert all(r["kv_cache_mb"] > 0 and r["ms_per_token"] > 0 for r in decode)
    # a windowed recipe keeps a ring buffer: less KV cache than parcae's full-context rounds
    kv = {r["arch"]: r["kv_cache_mb"] for r in decode}
    assert kv["lean"] < kv["parcae"]


def test_iso_time_budget_resolved_from_the_reference_run(demo_db):
    rows = sql(
        demo_db,
        "SELECT j.id, j.budget_time_s, t.train_seconds, t.time_budget_s "
        "FROM jobs j JOIN train_results t ON t.job_id = j.id "
        "WHERE j.budget_time_s IS NOT NULL",
    )
    assert len(rows) == 1
    ref = sql(demo_db, "SELECT train_seconds FROM runs WHERE recipe = 'lean' AND seed = 0")[0]
    assert rows[0]["budget_time_s"] == pytest.approx(ref["train_seconds"])
    assert rows[0]["time_budget_s"] == pytest.approx(ref["train_seconds"])


def test_dashboard_compare_page_on_the_queue_database(demo_db, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("LOOPLAB_DB", f"sqlite:///{demo_db[0]}")
    at = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=60)
    at.run()
    at.switch_page("views/compare.py").run()
    assert not at.exception, [e.message for e in at.exception]
    tables = [d.value for d in at.dataframe]
    per_seed = next(df for df in tables if "verdict" in df.columns and "recipe" in df.columns)
    assert set(per_seed["recipe"]) == {"lean", "parcae"}
    assert per_seed.loc[per_seed["recipe"] == "parcae", "verdict"].iloc[0] == "reference"


def test_labels_leave_out_what_every_run_shares_and_every_job_carries_a_plan_estimate(demo_db, monkeypatch):
    from streamlit.testing.v1 import AppTest

    # every run of the demo sets seq_len=32: the labels say only what tells the variants apart
    labels = sql(demo_db, "SELECT DISTINCT kind, recipe, variant_label, variant_id FROM jobs ORDER BY recipe")
    assert {(r["recipe"], r["variant_label"]) for r in labels} == {("lean", "lean"), ("parcae", "parcae")}
    # one run variant per recipe (its follow-ups carry it); a decode bench trains nothing and keeps the
    # architecture's id, which differs from the run's (the run's adds batch and vocabulary)
    runs = {r["recipe"]: r["variant_id"] for r in labels if r["kind"] == "train"}
    assert len(set(runs.values())) == 2
    assert {r["variant_id"] for r in labels if r["kind"] == "depth_sweep"} == set(runs.values())
    # the demo calibrates this machine before it submits, so every job stored an estimate
    planned = sql(demo_db, "SELECT id, planned_seconds, planned_source FROM jobs")
    assert all(r["planned_seconds"] > 0 and r["planned_source"] != "unknown" for r in planned), planned

    monkeypatch.setenv("LOOPLAB_DB", f"sqlite:///{demo_db[0]}")
    at = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=60)
    at.run()
    at.switch_page("views/plan.py").run()
    assert not at.exception, [e.message for e in at.exception]
    jobs = next(
        d.value
        for d in at.dataframe
        if {"planned_seconds", "actual_seconds", "job_id"} <= set(d.value.columns)
    )
    assert sorted(jobs["job_id"]) == sorted(r["id"] for r in planned)
    assert (jobs["actual_seconds"] > 0).all() and (jobs["ratio"] > 0).all()
