"""Secrets stay secret (issue 56): a queue whose database URL carries a password, with a webhook whose
URL path is its secret (as Slack's are) plus a bearer token, and an SMTP channel with a login, runs to
the end (a failing job alerts both channels); then every output a person or a tool reads is scanned
for the three secrets: the driver's output and log records, `looplab status` (plain, --all, --since,
--audit), `looplab alerts`, `looplab sql` over every table and view, `looplab db current`, an export
and a report, every row of the database, every file of the artifacts, and the errors of a wrong
password. The channels must have received the alerts (the secrets were used, not left out)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from looplab.lab.cli import main
from looplab.orchestrator.db import dispose_all
from tests.orchestrator.alert_servers import http_receiver, smtp_receiver
from tests.pg import PgUnavailable, snapshot, start_server

DB_SECRET = "dbpw-Zq81"
HOOK_SECRET = "T0KENPATH-hx55"
BEARER_SECRET = "bearer-Kv20"
SMTP_SECRET = "smtppw-Mm47"
SECRETS = (DB_SECRET, HOOK_SECRET, BEARER_SECRET, SMTP_SECRET)


@pytest.fixture
def pg_with_password():
    try:
        server = start_server(password=DB_SECRET)
    except PgUnavailable as e:
        pytest.skip(f"no PostgreSQL server here: {e}")
    try:
        yield server, server.create_database("secrets")
    finally:
        dispose_all()
        server.stop()


def leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


def test_no_output_of_a_run_shows_a_secret(
    pg_with_password, ray_cluster, tmp_path, monkeypatch, capsys, caplog
):
    server, url = pg_with_password
    assert DB_SECRET in url
    (tmp_path / "alerts.json").write_text("{}")
    grid = tmp_path / "grids.py"
    grid.write_text(
        "from looplab import Grid\n"
        "GRIDS = [Grid('s', base={'tokens': 100, 'steps': 3}, sweep={'seed': [1, 2]}),\n"
        "         Grid('bad', job='boom', base={'message': 'it broke'}, max_attempts=1)]\n"
    )
    scanned: dict[str, str] = {}

    def run(*args: str) -> int:
        capsys.readouterr()
        code = main(["--db", url, *args])
        out = capsys.readouterr()
        scanned[" ".join(args)] = out.out + out.err
        return code

    with http_receiver() as (hook_url, hook), smtp_receiver() as (smtp_port, mails):
        env = {
            "LOOPLAB_ALERTS": str(tmp_path / "alerts.json"),
            "LOOPLAB_JOB_KINDS": "tests.orchestrator.fake_jobs",
            "LOOPLAB_ALERT_WEBHOOK": f"{hook_url}/hooks/{HOOK_SECRET}",
            "LOOPLAB_ALERT_WEBHOOK_TOKEN": BEARER_SECRET,
            "LOOPLAB_ALERT_SMTP": f"127.0.0.1:{smtp_port}",
            "LOOPLAB_ALERT_EMAIL_TO": "lab@example.org",
            "LOOPLAB_ALERT_SMTP_USER": "looplab",
            "LOOPLAB_ALERT_SMTP_PASSWORD": SMTP_SECRET,
        }
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        assert run("submit", str(grid)) == 0, scanned
        run("run", "--until-empty", "--artifacts", str(tmp_path / "art"))
        for args in (
            ["status"],
            ["status", "--all"],
            ["status", "--since", "1h"],
            ["status", "--audit"],
            ["alerts"],
            ["alerts", "test"],
            ["db", "current"],
            ["export", "parquet", "-o", str(tmp_path / "export")],
            ["report", "s", "bad", "-o", str(tmp_path / "report.html")],
        ):
            run(*args)
        eng = sa.create_engine(url, poolclass=sa.pool.NullPool)
        names = sa.inspect(eng).get_table_names() + sa.inspect(eng).get_view_names()
        eng.dispose()
        for name in names:
            run("sql", f"SELECT * FROM {name}")
    assert "it broke" in scanned["status --all"] and "1 failed" in scanned["status --since 1h"]
    assert len(hook.requests) >= 2 and len(mails) >= 2, (hook.requests, mails)  # the secrets were used
    assert all(h.get("Authorization") == f"Bearer {BEARER_SECRET}" for h, _ in hook.requests)
    wrong = url.replace(DB_SECRET, DB_SECRET + "-wrong")
    capsys.readouterr()
    assert main(["--db", wrong, "status"]) == 2
    out = capsys.readouterr()
    scanned["status with a wrong password"] = out.out + out.err
    assert "password authentication failed" in scanned["status with a wrong password"]
    # the driver's log lines reach its stderr (lab/cli.py configures logging), scanned with its output
    ran = scanned[f"run --until-empty --artifacts {tmp_path / 'art'}"]
    assert "looplab run: database" in ran and "job 3" in ran, ran
    print(ran)
    scanned["database rows"] = repr(snapshot(url))
    for path in [*(tmp_path / "art").rglob("*"), *(tmp_path / "export").rglob("*"), tmp_path / "report.html"]:
        if path.is_file():
            scanned[str(path)] = path.read_bytes().decode("utf-8", "replace")
    empty = [where for where, text in scanned.items() if not text]
    assert len(scanned) > 40 and not empty, empty
    found = {where: leaks(text) for where, text in scanned.items() if leaks(text)}
    assert not found, found
