"""Alerts (orchestrator/alerts.py) against real local receivers: a webhook in the generic and the Slack
shape, e-mail over SMTP, a command; the outbox's stable ids, grouping, at-least-once delivery across a
webhook that refuses connections, failures recorded without secrets, and the channel configuration
(secrets from the environment or an owner-only file, refused otherwise naming the file and its mode)."""

from __future__ import annotations

import base64
import json
import sys
import time

import pytest
import sqlalchemy as sa

from looplab.model.errors import ConfigError
from looplab.orchestrator import Grid, alerts, jobqueue
from looplab.orchestrator.db import engine
from looplab.orchestrator.health import HealthSettings, HealthWatch, Rule
from looplab.orchestrator.writer import write_events
from looplab.workers.reporter import Event, EventKind
from tests.orchestrator import fake_jobs
from tests.orchestrator.alert_servers import free_port, http_receiver, smtp_receiver

TOKEN = "s3cret-token-value"


@pytest.fixture
def eng(tmp_path):
    return engine(f"sqlite:///{tmp_path / 'q.db'}")


@pytest.fixture
def job(eng) -> int:
    ids, _ = jobqueue.submit(eng, [Grid("a", base={"tokens": 100})], fake_jobs)
    assert jobqueue.claim(eng, ids[0], "driver", "/tmp/a") == 1
    return ids[0]


def config(*specs, **kw) -> alerts.AlertConfig:
    return alerts.AlertConfig(tuple(alerts.channel(f"test[{i}]", s) for i, s in enumerate(specs)), **kw)


def outbox(eng) -> list[tuple]:
    with eng.connect() as conn:
        return [
            tuple(r)
            for r in conn.execute(
                sa.text(
                    "SELECT msg_id, channel, status, tries, repeats, last_error FROM alert_outbox ORDER BY id"
                )
            )
        ]


def spikes(eng, job: int, watch: HealthWatch, steps: range) -> None:
    """Loss spikes of `job` at `steps` (each after a normal point, so each is an episode of its own)."""
    events = [Event(EventKind.METRIC, 1.0, {"key": "train_loss", "step": s, "value": 1.0}) for s in (0, 1)]
    for s in steps:
        events += [
            Event(EventKind.METRIC, 1.0, {"key": "train_loss", "step": 2 * s, "value": 1.0}),
            Event(EventKind.METRIC, 1.0, {"key": "train_loss", "step": 2 * s + 1, "value": 50.0}),
        ]
    write_events(eng, [(job, 1, events)], watch)


def test_a_finding_reaches_a_webhook_and_slack_once_grouped_by_job_rule_and_window(eng, job, monkeypatch):
    monkeypatch.setenv("HOOK_TOKEN", TOKEN)
    with http_receiver() as (url, hook), http_receiver() as (slack_url, slack):
        cfg = config(
            {"name": "hook", "type": "webhook", "url": url, "token_env": "HOOK_TOKEN"},
            {"name": "slack", "type": "slack", "url": slack_url},
        )
        watch = HealthWatch(HealthSettings(spike_window=2), alerts.finding_alert(cfg))
        spikes(eng, job, watch, range(2, 5))  # three spike episodes in one window: one message
        assert alerts.deliver_due(eng, cfg) == {"delivered": 2, "failed": 0}
        assert alerts.deliver_due(eng, cfg) == {"delivered": 0, "failed": 0}  # nothing twice
    ((headers, body),) = hook.requests
    assert headers["Authorization"] == f"Bearer {TOKEN}" and headers["X-Looplab-Alert-Id"] == body["id"]
    assert (body["topic"], body["job_id"], body["rule"], body["repeats"]) == ("health", job, "loss_spike", 3)
    assert body["level"] == "warning" and "running median" in body["text"]
    ((_, slack_body),) = slack.requests
    assert set(slack_body) == {"text"} and slack_body["text"].endswith(f"(id {body['id']})")
    with eng.connect() as conn:  # the token is never stored
        dump = json.dumps([list(r) for r in conn.execute(sa.text("SELECT * FROM alert_outbox"))])
    assert TOKEN not in dump and url not in dump


def test_a_refusing_webhook_loses_nothing_and_each_id_arrives_once(eng, job):
    port = free_port()  # nothing listens there yet: connections are refused
    url = f"http://127.0.0.1:{port}/hook"
    cfg = config(
        {"name": "hook", "type": "webhook", "url": url, "token": TOKEN}, retry_s=0.01, retry_max_s=0.05
    )
    ids = [alerts.notify(eng, cfg, "job_failed", f"job {i} failed", "boom", group=f"f:{i}") for i in range(5)]
    t0 = time.perf_counter()
    for _ in range(3):
        assert alerts.deliver_due(eng, cfg, now=time.time() + 60)["delivered"] == 0
    assert time.perf_counter() - t0 < 3  # a refusing channel costs a round little: one try, then skipped
    rows = outbox(eng)
    assert {r[2] for r in rows} == {"pending"} and rows[0][3] == 3 and rows[1][3] == 0  # one try per round
    assert "Connection refused" in rows[0][5] and url not in rows[0][5] and TOKEN not in rows[0][5]
    with http_receiver(port) as (_, hook):
        delivered = 0
        for _ in range(5):
            delivered += alerts.deliver_due(eng, cfg, now=time.time() + 60)["delivered"]
        assert delivered == 5
        alerts.deliver_due(eng, cfg, now=time.time() + 3600)
    assert sorted(hook.ids()) == sorted(ids) and len(set(ids)) == 5  # each id delivered once
    assert {r[2] for r in outbox(eng)} == {"delivered"}


def test_an_error_answer_and_a_failing_command_are_recorded_and_retried(eng, tmp_path):
    out = tmp_path / "got.json"
    script = f"import sys, json; open({str(out)!r}, 'a').write(sys.stdin.read() + chr(10))"
    with http_receiver(status=500) as (url, hook):
        cfg = config(
            {"name": "hook", "type": "webhook", "url": url},
            {"name": "cmd", "type": "command", "command": [sys.executable, "-c", script]},
            {"name": "bad", "type": "command", "command": [sys.executable, "-c", "raise SystemExit(3)"]},
            retry_s=100.0,
        )
        msg = alerts.notify(eng, cfg, "test", "a test", "hello", group="t")
        assert alerts.deliver_due(eng, cfg) == {"delivered": 1, "failed": 2}
        assert len(hook.requests) == 1
    rows = {r[1]: r for r in outbox(eng)}
    assert rows["cmd"][2] == "delivered" and json.loads(out.read_text())["id"] == msg
    assert rows["hook"][2] == "pending" and "HTTP Error 500" in rows["hook"][5]
    assert rows["bad"][2] == "pending" and "exit status 3" in rows["bad"][5]
    assert alerts.deliver_due(eng, cfg) == {"delivered": 0, "failed": 0}  # backoff: not before 100 s


def test_email_over_smtp_with_login(eng, monkeypatch):
    monkeypatch.setenv("SMTP_PW", TOKEN)
    with smtp_receiver() as (port, mails):
        cfg = config(
            {
                "name": "mail",
                "type": "smtp",
                "host": "127.0.0.1",
                "port": port,
                "to": ["me@example.org"],
                "user": "me",
                "password_env": "SMTP_PW",
            }
        )
        msg = alerts.notify(eng, cfg, "job_failed", "job 3 failed", "boom", group="m", level="error")
        assert alerts.deliver_due(eng, cfg) == {"delivered": 1, "failed": 0}
    (mail,) = mails
    assert mail["to"] == ["<me@example.org>"] and f"Message-ID: <{msg}@looplab>" in mail["data"]
    assert "Subject: [looplab] job 3 failed" in mail["data"]
    assert base64.b64decode(mail["auth"]).split(b"\0")[1:] == [b"me", TOKEN.encode()]


def test_channel_filters_by_topic_and_level(eng):
    cfg = config(
        {"name": "errors", "type": "command", "command": "true", "min_level": "error"},
        {"name": "health", "type": "command", "command": "true", "topics": ["health"]},
    )
    alerts.notify(eng, cfg, "health", "warn", "x", group="1", level="warning")
    alerts.notify(eng, cfg, "job_failed", "fail", "x", group="2", level="error")
    assert [r[1] for r in outbox(eng)] == ["health", "errors"]


def test_configuration_from_a_file_and_the_environment_and_secret_files(tmp_path, monkeypatch):
    secret = tmp_path / "token"
    secret.write_text(TOKEN + "\n")
    secret.chmod(0o644)
    file = tmp_path / "alerts.json"
    spec = {
        "window_s": 600,
        "channels": [{"name": "ops", "type": "webhook", "url": "http://x/", "token_file": str(secret)}],
    }
    file.write_text(json.dumps(spec))
    env = {"LOOPLAB_ALERTS": str(file), "LOOPLAB_ALERT_SLACK": "https://hooks.example/T/B/x"}
    with pytest.raises(ConfigError, match=rf"token_file: {secret} has mode 0644, readable by others"):
        alerts.load(env)
    secret.chmod(0o600)
    cfg = alerts.load(env)
    assert [(c.name, c.type) for c in cfg.channels] == [("ops", "webhook"), ("slack", "slack")]
    assert cfg.channels[0].secret == TOKEN and cfg.window_s == 600 and TOKEN not in repr(cfg)
    # a token written into the config file itself needs the file to be owner-only
    spec["channels"][0] = {"name": "ops", "type": "webhook", "url": "http://x/", "token": TOKEN}
    file.write_text(json.dumps(spec))
    file.chmod(0o640)
    with pytest.raises(ConfigError, match=rf"token: {file} has mode 0640"):
        alerts.load(env)
    file.write_text(json.dumps({"channels": [{"type": "pager"}]}))
    with pytest.raises(
        ConfigError, match=r"channels\[0\].type: unknown 'pager'; accepted: webhook, slack, smtp"
    ):
        alerts.load(env)
    assert alerts.load({"HOME": str(tmp_path)}).channels == ()  # nothing configured: no alerts


def test_grouping_by_window(eng):
    cfg = config({"name": "c", "type": "command", "command": "true"}, window_s=100.0)
    a = alerts.notify(eng, cfg, "health", "s", "x", group="health:1:stall", now=1000.0)
    b = alerts.notify(eng, cfg, "health", "s", "x", group="health:1:stall", now=1099.0)
    c = alerts.notify(eng, cfg, "health", "s", "x", group="health:1:stall", now=1100.0)
    d = alerts.notify(eng, cfg, "health", "s", "x", group="health:2:stall", now=1000.0)
    assert a == b and len({a, c, d}) == 3
    assert [r[4] for r in outbox(eng)] == [2, 1, 1]
    assert Rule.STALL == "stall"
