"""A full disk and an unreachable server are states, not crashes.

The queue on the session's local Ray with the fake job kinds: a SQLite database filled mid-run (its
driver's connections get `PRAGMA max_page_count` at the current size) and freed later, and a PostgreSQL
server stopped mid-run and started again: the driver pauses claiming and writing, says so, resumes by
itself, and every point is stored once. The one-line messages of the CLI name the database; the spool
on a full disk loses no line it says it wrote and never yields a torn one."""

from __future__ import annotations

import errno
import json
import logging
import os
import signal
import subprocess
import threading
import time

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from looplab import Grid, Queue
from looplab.lab import cli
from looplab.lab.display import status_frame, table
from looplab.orchestrator import recovery
from looplab.orchestrator.db import (
    FULL,
    UNREACHABLE,
    describe_error,
    dispose_all,
    engine,
    outage,
    resolve_url,
)
from looplab.orchestrator.scheduler import Scheduler
from looplab.orchestrator.task import MetricSpool, QueueReporter
from looplab.workers.reporter import Event
from tests.db_rows import rows
from tests.orchestrator import fake_jobs

STEPS = 60
SPEC = {"tokens": 100, "steps": STEPS, "step_s": 0.05, "ckpt_every": 5}


def sqlite_pages(path) -> int:
    with sqlite3_connect(path) as conn:
        return conn.execute("PRAGMA page_count").fetchone()[0]


def sqlite3_connect(path):
    import sqlite3

    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


class PageLimit:
    """`PRAGMA max_page_count` on every connection the engine hands out: None = as large as SQLite
    allows, else the file may not grow past that many pages ("database or disk is full")."""

    def __init__(self, eng) -> None:
        self.pages: int | None = None
        event.listen(eng, "checkout", self._apply)

    def _apply(self, dbapi_conn, _record, _proxy) -> None:
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA max_page_count = {self.pages or 2**31 - 2}")
        cur.close()


def start(sched: Scheduler) -> threading.Thread:
    t = threading.Thread(target=sched.run, daemon=True)
    t.start()
    return t


def wait_for(predicate, timeout: float = 90.0, what: str = "") -> None:
    end = time.time() + timeout
    while not predicate():
        assert time.time() < end, f"timed out waiting for {what}"
        time.sleep(0.1)


def assert_every_point_once(q: Queue, job_ids: list[int]) -> None:
    """Each train job succeeded with the steps 1..STEPS, each stored once (and its train_results row)."""
    for job_id in job_ids:
        assert rows(q, "SELECT status FROM jobs WHERE id = :j", j=job_id) == [("succeeded",)]
        per_step = rows(
            q,
            "SELECT step, COUNT(*) FROM metrics WHERE job_id = :j AND key = 'train_loss' "
            "GROUP BY step ORDER BY step",
            j=job_id,
        )
        assert per_step == [(s, 1) for s in range(1, STEPS + 1)], job_id
        assert rows(q, "SELECT points, step FROM latest_metrics WHERE job_id = :j", j=job_id) == [
            (STEPS, STEPS)
        ]
        assert rows(q, "SELECT steps FROM train_results WHERE job_id = :j", j=job_id) == [(STEPS,)]
        assert rows(q, "SELECT progress_done FROM jobs WHERE id = :j", j=job_id) == [(STEPS,)]


def test_a_full_sqlite_database_pauses_the_queue_which_resumes_by_itself(tmp_path, ray_cluster, caplog):
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art", kinds=fake_jobs)
    ids = q.submit(Grid("full", base=SPEC, sweep={"seed": [0, 1, 2]}))
    limit = PageLimit(q.eng)
    sched = Scheduler(
        q.eng,
        q.artifacts,
        fake_jobs,
        until_empty=True,
        progress=False,
        poll_s=0.1,
        db_retry_s=0.2,
        db_retry_max_s=0.5,
    )
    caplog.set_level(logging.WARNING, logger="looplab.scheduler")
    t = start(sched)
    wait_for(lambda: rows(q, "SELECT COUNT(*) FROM metrics")[0][0] >= 10, what="the first points")
    limit.pages = sqlite_pages(tmp_path / "q.db")  # the volume is full: not one page more
    wait_for(lambda: sched.held.paused is not None, what="the pause")
    paused_at = rows(q, "SELECT COUNT(*) FROM metrics")[0][0]
    # the jobs keep training: their points pile up in the driver, none reaches the full database
    wait_for(lambda: sum(len(b) for *_, b in sched.held.events) > 40, what="points held by the driver")
    wait_for(
        lambda: sched.held.outcomes, what="a job that finished during the pause"
    )  # its outcome waits too
    assert sched.held.paused is not None and sched.held.paused.outage.kind == FULL
    assert rows(q, "SELECT COUNT(*) FROM metrics")[0][0] == paused_at
    held = [kind for *_, kind in sched.held.live]
    assert "progress" in held and set(held) <= {"heartbeat", "progress"}  # only their last is held
    # `looplab status` (which can still read) notes the running jobs' silence
    assert "no heartbeat for 0m" in table(status_frame(q.eng), stale_s=0.5)
    limit.pages = None  # space freed
    t.join(180)
    assert not t.is_alive()
    assert_every_point_once(q, ids)
    said = [r.getMessage() for r in caplog.records if r.name == "looplab.scheduler"]
    assert any("is full (database or disk is full): claiming and writing paused" in m for m in said), said
    assert any(m.startswith("database back after") for m in said), said
    notes = rows(
        q,
        "SELECT job_id, message FROM job_logs WHERE level = 'WARNING' AND message LIKE "
        "'the database is full%'",
    )
    noted = [j for j, _ in notes]
    assert noted and set(noted) <= set(ids) and len(noted) == len(set(noted))  # one line per held job
    assert all("this job kept running and its events waited in the driver" in m for _, m in notes)


# ---------------------------------------------------------------- a PostgreSQL server that goes away


def _pg_ctl(server, action: str) -> None:
    from tests.pg import SERVER_SETTINGS, _as_server_user

    argv = [server.pg_ctl, action, "-D", str(server.data_dir), "-w"]
    if action == "stop":
        argv += ["-m", "fast"]
    else:
        options = " ".join(
            [
                f"-p {server.port}",
                f"-k {server.socket_dir}",
                *(f"-c {k}={v}" for k, v in SERVER_SETTINGS.items()),
            ]
        )
        argv += ["-l", str(server.base / "server.log"), "-o", options]
    subprocess.run(_as_server_user(argv), check=True, capture_output=True, timeout=120)


@pytest.fixture
def own_pg_server():
    """A PostgreSQL server of the test's own, to stop and start (skipped where none can start)."""
    from tests.pg import PgUnavailable, start_server

    try:
        server = start_server()
    except PgUnavailable as e:
        if os.environ.get("LOOPLAB_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"LOOPLAB_REQUIRE_POSTGRES=1 but no PostgreSQL server: {e}")
        pytest.skip(f"no PostgreSQL server here: {e}")
    yield server
    dispose_all()
    server.stop()


def test_a_lost_postgresql_server_pauses_the_queue_which_resumes_by_itself(
    own_pg_server, tmp_path, ray_cluster
):
    url = own_pg_server.create_database("outage")
    q = Queue(db=url, artifacts=tmp_path / "art", kinds=fake_jobs)
    ids = q.submit(Grid("lost", base=SPEC, sweep={"seed": [0, 1]}))
    sched = Scheduler(
        q.eng,
        q.artifacts,
        fake_jobs,
        until_empty=True,
        progress=False,
        poll_s=0.1,
        db_retry_s=0.2,
        db_retry_max_s=0.5,
    )
    t = start(sched)
    wait_for(lambda: rows(q, "SELECT COUNT(*) FROM metrics")[0][0] >= 10, what="the first points")
    _pg_ctl(own_pg_server, "stop")
    wait_for(lambda: sched.held.paused is not None, what="the pause")
    assert sched.held.paused.outage.kind == UNREACHABLE
    wait_for(lambda: sum(len(b) for *_, b in sched.held.events) > 20, what="points held by the driver")
    _pg_ctl(own_pg_server, "start")
    t.join(180)
    assert not t.is_alive()
    assert_every_point_once(q, ids)
    assert (
        rows(q, "SELECT COUNT(*) FROM job_logs WHERE message LIKE 'the database cannot be reached%'")[0][0]
        >= 1
    )


def test_an_idle_driver_says_paused_once_and_back_once_with_a_growing_backoff(
    own_pg_server, tmp_path, ray_cluster, caplog
):
    """With nothing held, no write would tell the driver the server is back: it tries a real round
    trip (`db.ping`) before it says so. Without it the driver said "back" at every retry and paused
    again at its next query, its backoff never growing."""
    url = own_pg_server.create_database("idle")
    q = Queue(db=url, artifacts=tmp_path / "art", kinds=fake_jobs)
    sched = Scheduler(
        q.eng, q.artifacts, fake_jobs, progress=False, poll_s=0.1, db_retry_s=0.2, db_retry_max_s=1.6
    )
    caplog.set_level(logging.INFO, logger="looplab.scheduler")
    t = start(sched)
    try:
        wait_for(lambda: getattr(sched, "last_touch", 0) > 0, what="the driver's first pass")
        _pg_ctl(own_pg_server, "stop")
        wait_for(lambda: sched.held.paused is not None and sched.held.paused.tries >= 5, what="five tries")
        _pg_ctl(own_pg_server, "start")
        wait_for(lambda: sched.held.paused is None, what="the driver back")
        time.sleep(1.5)  # a flapping driver would pause again at its next pass
        assert sched.held.paused is None
    finally:
        sched.stopping = 1
        t.join(60)
    assert not t.is_alive()
    # this driver's own lines (its thread's): a driver another test left running logs to the same logger
    said = [
        (r.levelno, r.getMessage())
        for r in caplog.records
        if r.name == "looplab.scheduler" and r.thread == t.ident
    ]
    warned = [m for level, m in said if level == logging.WARNING]
    assert sum("claiming and writing paused" in m for m in warned) == 1, warned
    assert sum(m.startswith("database back after") for m in warned) == 1, warned
    delays = [float(m.rsplit("retrying in ", 1)[1].split()[0]) for _, m in said if "retrying in" in m]
    assert delays[:5] == [0.2, 0.4, 0.8, 1.6, 1.6], delays  # grows while the server is down, to its cap


def test_a_stop_during_a_pause_exits_at_once_and_leaves_its_job_to_a_takeover(
    own_pg_server, tmp_path, ray_cluster
):
    """SIGTERM to a driver paused for the database: it cannot record anything before the server returns,
    so it kills its tasks and exits within seconds (it used to wait for the database); its job stays
    running in the database, for another driver to take over once its heartbeat is stale."""
    url = own_pg_server.create_database("stop")
    q = Queue(db=url, artifacts=tmp_path / "art", kinds=fake_jobs)
    (jid,) = q.submit(Grid("s", base={"tokens": 100, "steps": 2000, "step_s": 0.02, "ckpt_every": 5}))
    # retries far apart: a driver that waited for the database would not see the stop for seconds
    sched = Scheduler(
        q.eng, q.artifacts, fake_jobs, progress=False, poll_s=0.1, db_retry_s=5, db_retry_max_s=30
    )
    t = start(sched)
    wait_for(lambda: rows(q, "SELECT COUNT(*) FROM metrics")[0][0] >= 5, what="the first points")
    _pg_ctl(own_pg_server, "stop")
    try:
        wait_for(lambda: sched.held.paused is not None, what="the pause")
        asked = time.time()
        sched._on_signal(signal.SIGTERM, None)
        t.join(10)
        assert not t.is_alive(), "the paused driver did not stop"
        assert time.time() - asked < 10
    finally:
        _pg_ctl(own_pg_server, "start")
    assert rows(q, "SELECT status, attempts FROM jobs")[0] == ("running", 1)
    assert recovery.recover_stale(q.eng, grace_s=0) == [jid]  # another driver's recovery
    assert rows(q, "SELECT outcome FROM attempts")[0][0] == "interrupted"


# ---------------------------------------------------------------- one line, naming the database


def closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the block ends: nothing listens there


def test_an_unreachable_server_is_one_line_naming_the_database(capsys):
    url = f"postgresql://looplab:secret@127.0.0.1:{closed_port()}/study"
    assert cli.main(["--db", url, "status"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(
        f"looplab status: error: database postgresql+psycopg://looplab:***@127.0.0.1:{url.split(':')[3]}"
    )
    assert "cannot be reached" in err and "Connection refused" in err and "start the server" in err
    assert "secret" not in err


def test_a_full_sqlite_database_is_one_line_naming_it(tmp_path, capsys):
    path = tmp_path / "full.db"
    grids = tmp_path / "grids.py"
    grids.write_text(
        "from looplab import Grid\n"
        "g = Grid('g', base={'recipe': 'lean', 'size': 'tiny', 'tokens': 1000}, sweep={'seed': list(range(60))})\n"
    )
    eng = engine(resolve_url(str(path)))
    PageLimit(eng).pages = sqlite_pages(path)
    assert cli.main(["--db", str(path), "submit", str(grids)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err == (
        f"looplab submit: error: database sqlite:///{path} is full (database or disk is full): free space "
        f"on the volume of {tmp_path} (or raise its quota), then run the command again; a running "
        "`looplab run` pauses and resumes by itself"
    )
    dispose_all()


def test_outages_are_told_from_errors_that_waiting_would_not_cure(tmp_path):
    eng = engine(resolve_url(str(tmp_path / "q.db")))
    with pytest.raises(sa.exc.OperationalError) as no_table, eng.connect() as conn:
        conn.execute(sa.text("SELECT * FROM no_such_table"))
    assert outage(no_table.value) is None
    assert describe_error(no_table.value, str(eng.url)).startswith(
        f"database {eng.url} refused the command: "
    )
    assert outage(ValueError("not a database error")) is None
    dispose_all()


# ---------------------------------------------------------------- the spool on a full disk


def test_the_spool_on_a_full_disk_skips_what_it_could_not_write_whole(tmp_path, monkeypatch):
    """A write that stops half-way (ENOSPC after part of the line) and one that fails at once: append says
    False, the file's torn tail is never replayed, and the first point written after space came back
    starts on a line of its own."""
    spool = MetricSpool(tmp_path)
    points = [Event("metric", float(s), {"key": "lr", "step": s, "value": s / 10}) for s in range(1, 6)]
    assert spool.append(points[0])
    real_write = os.write
    calls = {"n": 0}

    def full_disk(fd, data):
        calls["n"] += 1
        if calls["n"] == 1:
            return real_write(fd, data[: len(data) // 2])  # the disk takes half the line...
        raise OSError(errno.ENOSPC, "No space left on device")  # ...and then nothing

    monkeypatch.setattr(os, "write", full_disk)
    assert spool.append(points[1]) is False and spool.append(points[2]) is False
    monkeypatch.setattr(os, "write", real_write)
    assert spool.append(points[3]) and spool.append(points[4])
    spool.close()
    lines = spool.path.read_text().splitlines()
    assert len(lines) == 4 and lines[1].startswith('{"ts": 2.0') and not lines[1].endswith("}")
    assert MetricSpool(tmp_path).replay() == [points[0], points[3], points[4]]
    assert [json.loads(line)["step"] for line in (lines[0], lines[2], lines[3])] == [1, 4, 5]


def test_the_reporter_ships_every_point_and_says_once_when_the_spool_is_full_and_again_free(
    tmp_path, monkeypatch
):
    shipped: list[Event] = []

    class Local(QueueReporter):
        def _ship(self, batch: list[Event]) -> bool:
            shipped.extend(batch)
            return False

    rep = Local(1, sink=None, artifact_dir=tmp_path, flush_s=3600.0)
    monkeypatch.setattr(MetricSpool, "append", lambda self, e: e.payload["step"] not in (2, 3))  # full at 2-3
    for step in range(1, 6):
        rep.metric("lr", step, 0.1)
    rep.close()
    assert [e.payload["step"] for e in shipped if e.kind == "metric"] == [1, 2, 3, 4, 5]
    said = [(e.payload["level"], e.payload["message"]) for e in shipped if e.kind == "log"]
    assert [level for level, _ in said] == ["WARNING", "INFO"]
    assert said[0][1].startswith(
        f"no space left for the spool {tmp_path / MetricSpool.NAME}: points still go"
    )


def test_a_job_stopped_by_a_full_disk_is_told_apart(tmp_path):
    """The checkpoint's NoSpaceError (also when torch's zip writer is what failed), a plain ENOSPC or
    EDQUOT, and what they caused count as a full disk: the job's error then opens with what to do."""
    from looplab.orchestrator.task import DISK_FULL_ADVICE, _disk_full
    from looplab.workers.checkpoint import NoSpaceError

    try:
        try:
            raise RuntimeError("PytorchStreamWriter failed writing file data/0: unexpected pos 64 vs 0")
        except RuntimeError as e:
            raise NoSpaceError("no space left writing the checkpoint at /x/checkpoint.pt") from e
    except NoSpaceError as e:
        checkpoint = e
    try:
        try:
            raise OSError(errno.EDQUOT, "Disk quota exceeded")
        except OSError as e:
            raise ValueError("could not save") from e
    except ValueError as e:
        caused = e
    assert _disk_full(checkpoint) and _disk_full(OSError(errno.ENOSPC, "full")) and _disk_full(caused)
    assert not _disk_full(OSError(errno.ENOENT, "no such file")) and not _disk_full(RuntimeError("x"))
    assert DISK_FULL_ADVICE.format(job=7).startswith("No space left on device: the job stopped.")
    assert "`looplab retry 7`" in DISK_FULL_ADVICE.format(job=7)
