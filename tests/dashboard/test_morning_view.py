"""The Queue page's morning view (AppTest): what finished, failed, stalled and warned since the time
typed on the page, and the alerts with their delivery; a time it cannot read is named as such."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from looplab.orchestrator import Grid, Queue, alerts
from looplab.orchestrator.health import Finding, Level, Rule, store
from looplab.orchestrator.jobqueue import claim, finish
from looplab.orchestrator.states import AttemptOutcome
from tests.orchestrator import fake_jobs

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")


def test_the_queue_page_opens_with_what_happened_since_a_chosen_time(tmp_path, monkeypatch):
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art", kinds=fake_jobs)
    ok, bad, stalled = q.submit(Grid("m", base={"tokens": 100}, sweep={"seed": [0, 1, 2]}, max_attempts=1))
    for job in (ok, bad, stalled):
        claim(q.eng, job, "driver", str(tmp_path / f"a{job}"))
    finish(q.eng, ok, 1, AttemptOutcome.SUCCEEDED)
    finish(q.eng, bad, 1, AttemptOutcome.FAILED, "train_loss is nan at step 3: the run diverged\nTraceback")
    cfg = alerts.AlertConfig((alerts.channel("c", {"name": "hook", "type": "webhook", "url": "http://x/"}),))
    with q.eng.begin() as conn:
        store(conn, stalled, 1, Finding(Rule.STALL, Level.WARNING, 7, "step", 950.0, "no step after step 7"))
        alerts.enqueue(conn, cfg, "job_failed", f"job {bad} failed", {"text": "nan"}, group="g", job_id=bad)
    monkeypatch.setenv("LOOPLAB_DB", q.url)
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    counts = {m.label: m.value for m in at.metric}
    assert (counts["finished"], counts["failed since"], counts["stalled"], counts["warned"]) == (
        "1",
        "1",
        "1",
        "1",
    )
    assert (counts["alerts delivered"], counts["alerts pending"]) == ("0", "1")
    assert [e.value for e in at.error] == [
        "1 alert(s) not delivered yet: `looplab alerts --send` delivers them now"
    ]
    tables = [d.value for d in at.dataframe]
    finished = next(df for df in tables if "finished_at" in df.columns)
    assert sorted(finished["job"]) == [ok, bad]
    assert list(finished.loc[finished["job"] == bad, "error"]) == [
        "train_loss is nan at step 3: the run diverged"
    ]
    health = next(df for df in tables if "rule" in df.columns and "message" in df.columns)
    assert list(health["rule"]) == ["stall"] and list(health["job"]) == [stalled]
    sent = next(df for df in tables if "msg_id" in df.columns)
    assert list(sent["status"]) == ["pending"] and list(sent["channel"]) == ["hook"]
    assert list(sent["job"]) == [bad] and str(sent["job"].dtype) == "Int64"  # an id, not 2.000
    # a later time: nothing happened since
    at.text_input(key="since").set_value("2099-01-01 00:00").run()
    counts = {m.label: m.value for m in at.metric}
    assert counts["finished"] == "0" and counts["stalled"] == "0"
    at.text_input(key="since").set_value("last night").run()
    assert any("since: cannot read 'last night'" in e.value for e in at.error)
