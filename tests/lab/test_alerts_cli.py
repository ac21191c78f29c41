"""`looplab status --since` and `looplab alerts` (list, test) on a queue state made directly in the
database (no Ray): the morning view's counts, findings and deliveries, and a test message that reaches a
local webhook."""

from __future__ import annotations

import time

import pytest

from looplab.lab.cli import main
from looplab.model.errors import ConfigError
from looplab.orchestrator import Grid, Queue, alerts
from looplab.orchestrator.health import Finding, Level, Rule, store
from looplab.orchestrator.health_view import happened_since, parse_since
from looplab.orchestrator.jobqueue import claim, finish
from looplab.orchestrator.states import AttemptOutcome
from tests.orchestrator import fake_jobs
from tests.orchestrator.alert_servers import free_port, http_receiver, late_receiver


@pytest.fixture
def queue(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOPLAB_ALERTS", str(tmp_path / "alerts.json"))
    (tmp_path / "alerts.json").write_text("{}")
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art", kinds=fake_jobs)
    ok, bad, stalled = q.submit(Grid("m", base={"tokens": 100}, sweep={"seed": [0, 1, 2]}, max_attempts=1))
    for job in (ok, bad, stalled):
        claim(q.eng, job, "driver", str(tmp_path / f"a{job}"))
    finish(q.eng, ok, 1, AttemptOutcome.SUCCEEDED)
    finish(q.eng, bad, 1, AttemptOutcome.FAILED, "train_loss is nan at step 3: the run diverged\nTraceback")
    with q.eng.begin() as conn:
        store(conn, stalled, 1, Finding(Rule.STALL, Level.WARNING, 7, "step", 950.0, "no step after step 7"))
        store(conn, bad, 1, Finding(Rule.NON_FINITE, Level.ERROR, 3, "train_loss", float("nan"), "nan"))
    return q, (ok, bad, stalled), tmp_path


def test_status_since_prints_the_morning_view(queue, capsys):
    q, (ok, bad, stalled), _ = queue
    assert main(["--db", q.url, "status", "--since", "1h"]) == 0
    out = capsys.readouterr().out
    assert "1 succeeded, 1 failed, 1 stalled, 1 warned, 0 alerts delivered, 0 alerts pending" in out
    assert "train_loss is nan at step 3: the run diverged" in out and "Traceback" not in out
    assert "no step after step 7" in out
    main(["--db", q.url, "status", "--since", "2030-01-01 00:00"])
    assert "0 succeeded, 0 failed" in capsys.readouterr().out  # nothing after a future time


def test_alerts_test_reaches_every_channel_and_the_list_shows_the_delivery(queue, capsys, monkeypatch):
    q, _, tmp_path = queue
    assert main(["--db", q.url, "alerts", "test"]) == 1
    assert "no alert channels configured" in capsys.readouterr().out
    with http_receiver() as (url, hook):
        monkeypatch.setenv("LOOPLAB_ALERT_WEBHOOK", url)
        assert main(["--db", q.url, "alerts", "test"]) == 0
    assert capsys.readouterr().out.strip() == "webhook: delivered"
    ((headers, body),) = hook.requests
    assert body["topic"] == "test" and headers["X-Looplab-Alert-Id"] == body["id"]
    assert main(["--db", q.url, "alerts"]) == 0
    out = capsys.readouterr().out
    assert "1 alerts delivered" in out and body["id"] in out and "test alert" in out
    # a channel that refuses: the test says so and fails
    monkeypatch.setenv("LOOPLAB_ALERT_WEBHOOK", "http://127.0.0.1:9/nothing")
    assert main(["--db", q.url, "alerts", "test"]) == 1
    assert "webhook: pending (URLError" in capsys.readouterr().out


def test_alerts_send_delivers_what_is_pending_without_a_queue(queue, capsys, monkeypatch, tmp_path):
    """Alerts left pending by a driver (its webhook refused them) go with `looplab alerts --send`, each
    once, through a receiver that refuses connections for its first seconds; what cannot go is listed."""
    q, (ok, bad, _), _ = queue
    with late_receiver(after_s=2.5) as (url, hook):
        monkeypatch.setenv("LOOPLAB_ALERT_WEBHOOK", url)
        cfg = alerts.load()
        ids = [
            alerts.notify(q.eng, cfg, "job_failed", f"job {j} failed", "boom", group=f"f:{j}")
            for j in (ok, bad)
        ]
        assert alerts.deliver_due(q.eng, cfg) == {"delivered": 0, "failed": 1}  # refused: both pending
        assert main(["--db", q.url, "alerts", "--send", "--wait", "20"]) == 0
        out = capsys.readouterr().out
        assert out.startswith("2 of 2 pending alert(s) delivered") and "undelivered" not in out
        assert main(["--db", q.url, "alerts", "--send"]) == 0  # nothing twice
        assert capsys.readouterr().out.startswith("0 of 0 pending")
    assert sorted(hook.ids()) == sorted(ids)
    # a channel that stays down: bounded, and what is left is named
    monkeypatch.setenv("LOOPLAB_ALERT_WEBHOOK", f"http://127.0.0.1:{free_port()}/down")
    alerts.notify(q.eng, alerts.load(), "job_failed", "job 9 failed", "boom", group="f:9")
    t0 = time.perf_counter()
    assert main(["--db", q.url, "alerts", "--send", "--wait", "1.5"]) == 1
    assert time.perf_counter() - t0 < 10
    out = capsys.readouterr().out
    assert "0 of 1 pending" in out and "undelivered: job 9 failed" in out and "Connection refused" in out
    with pytest.raises(SystemExit):
        main(["--db", q.url, "alerts", "--send", "--wait", "soon"])
    assert "--wait" in capsys.readouterr().err


def test_the_morning_view_shows_pending_alerts_first_a_delivery_not_its_old_failure_and_zoned_times(
    queue, capsys, monkeypatch
):
    q, (ok, bad, _), _ = queue
    with late_receiver(after_s=0.5) as (url, hook):
        monkeypatch.setenv("LOOPLAB_ALERT_WEBHOOK", url)
        cfg = alerts.load()
        went = alerts.notify(q.eng, cfg, "job_failed", f"job {bad} failed", "nan", group="a", job_id=bad)
        assert alerts.deliver_due(q.eng, cfg)["failed"] == 1  # refused first: a last error recorded
        assert alerts.flush(q.eng, cfg, 10)["left"] == 0
    assert hook.ids() == [went]
    monkeypatch.setenv("LOOPLAB_ALERT_WEBHOOK", f"http://127.0.0.1:{free_port()}/down")
    cfg = alerts.load()
    waits = alerts.notify(q.eng, cfg, "queue_done", "queue empty", "this run: 1 failed", group="b")
    alerts.deliver_due(q.eng, cfg)
    seen = happened_since(q.eng, time.time() - 3600)
    sent = seen["alerts"]
    assert list(sent["msg_id"]) == [waits, went]  # pending first
    assert (
        sent["delivery"][0].startswith("pending after 1 try: URLError")
        and "Connection refused" in sent["delivery"][0]
    )
    delivered = list(sent["delivery"])[1]  # not its old "Connection refused"
    assert (
        delivered.startswith("delivered after ")
        and delivered.endswith(" tries")
        and "refused" not in delivered
    )
    assert str(sent["job"].dtype) == "Int64" and sent["job"].tolist()[1] == bad
    assert all(str(df["job"].dtype) in ("int64", "Int64") for df in (seen["finished"], seen["health"]))
    assert main(["--db", q.url, "alerts"]) == 0
    out = capsys.readouterr().out
    assert out.index("1 alert(s) pending: `looplab alerts --send` delivers them now") < out.index(waits)
    assert (
        " UTC" in out and out.index(waits) < out.index(went) and f" {bad} " in out and f"{bad}.0" not in out
    )
    assert main(["--db", q.url, "alerts", "--local"]) == 0
    assert time.strftime("%Z") in capsys.readouterr().out


def test_since_reads_durations_clock_times_and_iso_dates():
    now = time.mktime((2026, 12, 3, 9, 0, 0, 0, 0, -1))
    assert parse_since("8h", now) == now - 8 * 3600 and parse_since("90m", now) == now - 5400
    assert parse_since("07:30", now) == now - 5400
    assert parse_since("10:00", now) == now - 23 * 3600  # still to come today: yesterday's
    assert parse_since("2026-12-03 08:00", now) == now - 3600
    with pytest.raises(ConfigError, match=r"since: cannot read 'last night'; accepted: a duration"):
        parse_since("last night", now)
