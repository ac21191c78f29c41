"""Deep links (AppTest): each job of the morning view links to its run on the Runs page
(`?job=`, orchestrator.health_view.run_link), and the Runs page opens on exactly the linked runs, a
failed one included; a link it cannot read is named as such."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from looplab import Grid, Queue
from looplab.orchestrator.health import HealthWatch
from looplab.orchestrator.health_view import happened_since, run_link, with_links
from looplab.orchestrator.jobqueue import claim, finish
from looplab.orchestrator.states import AttemptOutcome
from looplab.orchestrator.writer import write_events
from looplab.workers.reporter import Event, EventKind
from tests.dashboard.test_curve_smoothing import datasets
from tests.orchestrator import fake_jobs

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")


def night(tmp_path) -> tuple[Queue, list[int]]:
    """Three runs with curves: two succeeded, one failed (as a run a health rule stopped)."""
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art", kinds=fake_jobs)
    jobs = q.submit(Grid("n", base={"tokens": 100}, sweep={"seed": [0, 1, 2]}, max_attempts=1))
    for n, job in enumerate(jobs):
        claim(q.eng, job, "driver", str(tmp_path / f"a{job}"))
        points = [
            Event(
                EventKind.METRIC,
                1.0,
                {"key": "train_loss", "step": s, "value": 4.0 - 0.01 * s - n, "tokens": 64 * s},
            )
            for s in range(20)
        ]
        write_events(q.eng, [(job, 1, points)], HealthWatch())
        outcome = AttemptOutcome.FAILED if n == 1 else AttemptOutcome.SUCCEEDED
        finish(q.eng, job, 1, outcome, "stopped by a health rule" if n == 1 else None)
    return q, jobs


def test_the_morning_view_links_each_job_to_its_run(tmp_path, monkeypatch):
    q, jobs = night(tmp_path)
    monkeypatch.setenv("LOOPLAB_DB", q.url)
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    finished = next(d.value for d in at.dataframe if "finished_at" in d.value.columns)
    links = dict(zip(finished["job"], finished["run"], strict=True))
    assert sorted(links) == jobs
    for job, link in links.items():
        assert link.endswith(f"/runs?job={job}") and link.startswith("http")
    # the CLI's links: $LOOPLAB_DASHBOARD_URL, else `looplab dashboard`'s address; a page opened on
    # another database keeps it
    monkeypatch.setenv("LOOPLAB_DASHBOARD_URL", "http://lab:8600/")
    seen = with_links(happened_since(q.eng, 0.0))
    assert list(seen["finished"]["run"]) == [f"http://lab:8600/runs?job={j}" for j in jobs]
    assert (
        run_link(7, "http://h", db="sqlite:////tmp/a b.db")
        == "http://h/runs?job=7&db=sqlite%3A%2F%2F%2F%2Ftmp%2Fa%20b.db"
    )


def test_the_runs_page_opens_on_the_linked_job_failed_or_not(tmp_path, monkeypatch):
    q, jobs = night(tmp_path)
    ok, failed, other = jobs
    monkeypatch.setenv("LOOPLAB_DB", q.url)
    for linked in ([failed], [ok, other]):
        at = AppTest.from_file(APP, default_timeout=60)
        at.query_params["job"] = ",".join(map(str, linked))
        at.run()
        at.switch_page("views/runs.py").run()
        assert not at.exception, [e.message for e in at.exception]
        assert drawn(at) == {4.0 - jobs.index(j) for j in linked}  # only the linked runs are drawn
        assert list(table(at)["job_id"]) == linked  # and listed
        assert any("from the link (`?job=`)" in c.value for c in at.caption)
    # without the link every run that succeeded is drawn; a link it cannot read is named, not obeyed
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["job"] = "seven"
    at.run()
    at.switch_page("views/runs.py").run()
    assert [e.value for e in at.error] == [
        "job: cannot read 'seven'; accepted: job ids, comma-separated (?job=12,13)"
    ]
    assert drawn(at) == {4.0, 2.0} and sorted(table(at)["job_id"]) == [ok, failed, other]


def drawn(at: AppTest) -> set[float]:
    """The first train-loss points of the curves the Runs page draws (against steps; run n of `night`
    starts at 4 - n, and the band over seeds spans them)."""
    at.selectbox(key="runs_metric").set_value("train_loss").run()
    at.selectbox(key="runs_x").set_value("step").run()
    rows = [r for d in datasets(at.get("vega_lite_chart")[0]).values() for r in d if r.get("step") == 0]
    (first,) = rows
    return {first["min"], first["max"]} if first["n_seeds"] > 1 else {first["mean"]}


def table(at: AppTest):
    return next(d.value for d in at.dataframe if "status" in d.value.columns and "job_id" in d.value.columns)
