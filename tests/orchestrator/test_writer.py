"""The event writer and the metric spool, directly (no Ray): a kill between a point's spooling and its
commit loses nothing and duplicates nothing, and a bad event or row never costs the rest of its batch.

The reporter's one Ray call (`QueueReporter._ship`) is replaced by a list, or by a drop that stands
for a driver killed before it committed what it had received."""

from __future__ import annotations

import json
import math
import time

import pytest
import sqlalchemy as sa

from looplab.orchestrator import Grid, jobqueue
from looplab.orchestrator.db import engine
from looplab.orchestrator.states import AttemptOutcome
from looplab.orchestrator.task import MetricSpool, QueueReporter
from looplab.orchestrator.writer import write_events
from looplab.workers.reporter import Event, EventKind
from tests.orchestrator import fake_jobs


class LocalReporter(QueueReporter):
    """A QueueReporter whose batches land in `shipped` (deliver=True) or are lost (deliver=False)."""

    def __init__(self, job_id: int, artifact_dir, deliver: bool = True) -> None:
        self.shipped: list[Event] = []
        self.deliver = deliver
        super().__init__(job_id, sink=None, artifact_dir=artifact_dir, flush_s=3600.0)

    def _ship(self, batch: list[Event]) -> bool:
        if self.deliver:
            self.shipped.extend(batch)
        return False

    def take(self) -> list[Event]:
        self.flush()
        out, self.shipped = self.shipped, []
        return out


@pytest.fixture
def eng(migrated_db_url):
    """The queue's database, on SQLite and on PostgreSQL (`db_url`, already migrated)."""
    return engine(migrated_db_url)


@pytest.fixture
def train_job(eng) -> int:
    """A train job claimed by a driver: its attempt 1 owns it (events of other attempts are fenced off)."""
    ids, _ = jobqueue.submit(eng, [Grid("w", base={"tokens": 100})], fake_jobs)
    assert jobqueue.claim(eng, ids[0], "driver", "/tmp/w") == 1
    return ids[0]


def points(eng, job_id: int, key: str = "train_loss") -> list[tuple[int, float]]:
    with eng.connect() as conn:
        sql = "SELECT step, value FROM metrics WHERE job_id = :j AND key = :k ORDER BY step, id"
        return [tuple(r) for r in conn.execute(sa.text(sql), {"j": job_id, "k": key})]


def latest_step(eng, job_id: int, key: str = "train_loss") -> int:
    with eng.connect() as conn:
        sql = "SELECT step FROM latest_metrics WHERE job_id = :j AND key = :k"
        return conn.execute(sa.text(sql), {"j": job_id, "k": key}).scalar_one()


def warnings(eng, job_id: int) -> list[str]:
    with eng.connect() as conn:
        sql = "SELECT message FROM job_logs WHERE job_id = :j AND level = 'WARNING' ORDER BY id"
        return [m for (m,) in conn.execute(sa.text(sql), {"j": job_id})]


def next_attempt(eng, job_id: int, art) -> int:
    """The driver died: recovery ends the open attempt as interrupted and a new driver claims the job."""
    with eng.connect() as conn:
        n = conn.execute(sa.text("SELECT attempts FROM jobs WHERE id = :j"), {"j": job_id}).scalar_one()
    if n:
        jobqueue.finish(eng, job_id, n, AttemptOutcome.INTERRUPTED)
    return jobqueue.claim(eng, job_id, "driver", str(art))


# ---------------------------------------------------------------- spool


def test_kill_between_spool_and_commit_replays_each_point_once(eng, train_job, tmp_path):
    art = tmp_path / "art"
    art.mkdir()
    next_attempt(eng, train_job, art)
    killed = LocalReporter(train_job, art, deliver=False)  # the driver dies before it commits anything
    for step in range(1, 6):
        killed.metric("train_loss", step, 1.0 / step, tokens=step * 64, wall_s=step * 0.1)
    killed.close()
    assert points(eng, train_job) == []

    n = next_attempt(eng, train_job, art)
    for _ in range(2):  # replayed by the next attempt, and by one more after it: still once each
        resumed = LocalReporter(train_job, art)
        assert resumed.take() == []  # nothing is replayed before the attempt has chosen its checkpoint
        resumed.resumed(5)  # it resumes from a checkpoint at step 5 (written after those points)
        write_events(eng, [(train_job, n, resumed.take())])
        resumed.close()
        assert points(eng, train_job) == [(step, 1.0 / step) for step in range(1, 6)]
    assert latest_step(eng, train_job) == 5


def test_resumed_after_a_kill_keeps_each_point_once_and_the_new_attempts_values(eng, train_job, tmp_path):
    """Attempt 1 reports steps 1..8 with a checkpoint at 6; only steps 1..3 reach the database before
    the kill. Attempt 2 resumes from step 6 and reports 7..10 with other values: the database ends
    with steps 1..10 once each, 1..6 from attempt 1 (from the spool) and 7..10 from attempt 2."""
    art = tmp_path / "art"
    art.mkdir()
    n = next_attempt(eng, train_job, art)
    first = LocalReporter(train_job, art)
    for step in range(1, 4):
        first.metric("train_loss", step, 10.0 + step)
    write_events(eng, [(train_job, n, first.take())])
    first.deliver = False  # killed: nothing after this reaches the database
    for step in range(4, 9):
        first.metric("train_loss", step, 10.0 + step)
        if step == 6:
            first.checkpoint("/ckpt", 6)
    first.close()
    assert points(eng, train_job) == [(s, 10.0 + s) for s in range(1, 4)]

    n = next_attempt(eng, train_job, art)
    second = LocalReporter(train_job, art)
    second.resumed(6)
    for step in range(7, 11):
        second.metric("train_loss", step, 20.0 + step)
    write_events(eng, [(train_job, n, second.take())])
    second.close()
    expected = [(s, 10.0 + s) for s in range(1, 7)] + [(s, 20.0 + s) for s in range(7, 11)]
    assert points(eng, train_job) == expected
    assert latest_step(eng, train_job) == 10
    with eng.connect() as conn:
        sql = "SELECT resumed_from_step FROM attempts WHERE job_id = :j AND n = :n"
        assert conn.execute(sa.text(sql), {"j": train_job, "n": n}).scalar_one() == 6


def test_spool_skips_a_torn_last_line(tmp_path):
    spool = MetricSpool(tmp_path)
    spool.append(Event("metric", 1.0, {"key": "lr", "step": 1, "value": 0.5}))
    spool.close()
    with open(spool.path, "a") as f:
        f.write('{"ts": 2.0, "key": "lr", "st')  # the kill landed mid-line
    first = Event("metric", 1.0, {"key": "lr", "step": 1, "value": 0.5})
    assert MetricSpool(tmp_path).replay() == [first]
    assert MetricSpool(tmp_path / "nothing-yet").replay() == []
    # the next attempt's first point starts on a line of its own, not glued to the torn one
    second = Event("metric", 3.0, {"key": "lr", "step": 2, "value": 0.25})
    resumed = MetricSpool(tmp_path)
    resumed.append(second)
    resumed.close()
    assert MetricSpool(tmp_path).replay() == [first, second]


def test_reporter_spools_only_metric_points_and_rewinds(tmp_path):
    rep = LocalReporter(1, tmp_path)
    rep.metric("val_loss", 3, 2.5)
    rep.log("hello")
    rep.progress(3, 10)
    rep.rewound(2, 3, [7, 8], 1)
    rep.close()
    lines = [json.loads(line) for line in (tmp_path / QueueReporter.SPOOL).read_text().splitlines()]
    assert [(p["key"], p["step"], p["value"]) for p in lines[:1]] == [("val_loss", 3, 2.5)]
    assert "kind" not in lines[0]  # a point's line is as it always was
    assert lines[1]["kind"] == "rewound" and lines[1]["rows"] == [7, 8]
    assert [e.kind for e in MetricSpool(tmp_path).replay()] == [EventKind.METRIC, EventKind.REWOUND]


# ---------------------------------------------------------------- bad events


def metric(step: int, value=1.0, **payload) -> Event:
    return Event("metric", time.time(), {"key": "train_loss", "step": step, "value": value, **payload})


def result(table: str, **row) -> Event:
    return Event("result", time.time(), {"table": table, "row": row})


def test_bad_events_are_dropped_with_a_warning_and_the_rest_is_kept(eng, train_job):
    other, _ = jobqueue.submit(eng, [Grid("other", job="noop")], fake_jobs)
    jobqueue.claim(eng, other[0], "driver", "/tmp/o")
    bad = [
        Event("metric", 0.0, {"key": "train_loss", "step": 2}),  # no value
        metric(3, value=math.nan),  # SQLite would store NULL, which the column refuses
        metric(4, value="high"),
        Event("metric", 0.0, {"step": 5, "value": 1.0}),  # no key
        metric(2**70),  # beyond 64 bits: SQLite's driver would raise OverflowError, not a database error
        result("no_such_table", loops=1),
        result("depth_evals", loops=1, val_loss=3.0, colour="red"),  # unknown column
        result("train_results", steps=10),  # missing required columns
        result("depth_evals", loops=3, val_loss={"not": "a number"}),
        Event("telepathy", 0.0, {}),
        Event("started", 0.0, {"gpu_ids": "0"}),  # no worker
    ]
    good = [
        metric(1, 0.5),
        result("depth_evals", loops=2, val_loss=2.5),
        Event("log", 0.0, {"level": "INFO", "message": "still here"}),
        metric(6, 0.25),
        Event("progress", 0.0, {"done": 6, "total": 10, "eta_s": None}),
    ]
    mixed = [good[0], *bad[:5], good[1], *bad[5:], *good[2:]]
    assert write_events(eng, [(train_job, 1, mixed), (other[0], 1, [metric(1, 9.0)])]) == len(mixed) + 1
    assert points(eng, train_job) == [(1, 0.5), (6, 0.25)]
    assert points(eng, other[0]) == [(1, 9.0)]
    with eng.connect() as conn:
        assert conn.execute(sa.text("SELECT loops, val_loss FROM depth_evals")).all() == [(2, 2.5)]
        assert conn.execute(sa.text("SELECT COUNT(*) FROM train_results")).scalar_one() == 0
        assert (
            conn.execute(sa.text("SELECT progress_done FROM jobs WHERE id = :j"), {"j": train_job}).scalar()
            == 6
        )
        logs = conn.execute(sa.text("SELECT message FROM job_logs WHERE level = 'INFO'")).scalars().all()
    assert logs == ["still here"]
    dropped = warnings(eng, train_job)
    assert len(dropped) == len(bad)
    for text in (
        "not a number",
        "without a key",
        "not a 64-bit integer",
        "unknown result table",
        "unknown columns ['colour']",
        "missing columns",
        "neither numbers nor text",
        "unknown event kind 'telepathy'",
        "started needs a worker",
    ):
        assert any(text in line for line in dropped), text


def test_the_writer_reaches_a_jobs_row_only_through_the_queue_and_never_its_state(eng, train_job):
    """Progress, heartbeat and checkpoint events become `jobqueue.record_live`'s columns; anything else
    on the jobs row (its status, its attempt counter) is refused by name."""
    write_events(eng, [(train_job, 1, [Event(EventKind.CHECKPOINT, 0.0, {"path": "/c", "step": 3})])])
    with eng.begin() as conn:
        with pytest.raises(ValueError, match=r"\['status'\] are not live columns; accepted: progress_done"):
            jobqueue.record_live(conn, train_job, 1, {"checkpoint_step": 4, "status": "failed"})
        row = conn.execute(
            sa.text("SELECT status, checkpoint_path, checkpoint_step FROM jobs WHERE id = :j"),
            {"j": train_job},
        ).one()
    assert tuple(row) == ("running", "/c", 3)


def test_a_batch_the_database_refuses_is_written_job_by_job(eng, train_job):
    """An event for a job that does not exist breaks a foreign key: only that job's events are lost."""
    batches = [(999, 1, [metric(1, 1.0)]), (train_job, 1, [metric(1, 0.5), metric(2, 0.4)])]
    write_events(eng, batches)
    assert points(eng, train_job) == [(1, 0.5), (2, 0.4)]
    assert points(eng, 999) == []


def test_an_owned_batch_the_database_refuses_is_written_job_by_job_then_event_by_event(eng, train_job):
    """A metric key longer than its column (64 characters) is refused by PostgreSQL, not by SQLite (which
    does not enforce lengths): on PostgreSQL the batch falls back job by job, then event by event, so only
    that event is lost and a job_logs warning says why; on SQLite all of it is stored."""
    (other,) = jobqueue.submit(eng, [Grid("w2", base={"tokens": 101})], fake_jobs)[0]
    assert jobqueue.claim(eng, other, "driver", "/tmp/w2") == 1
    long_key = "k" * 100
    batches = [
        (
            train_job,
            1,
            [
                metric(1, 0.5),
                Event("metric", time.time(), {"key": long_key, "step": 1, "value": 2.0}),
                metric(2, 0.4),
            ],
        ),
        (other, 1, [metric(1, 0.9)]),
    ]
    write_events(eng, batches)
    assert points(eng, train_job) == [(1, 0.5), (2, 0.4)] and points(eng, other) == [(1, 0.9)]
    if eng.dialect.name == "postgresql":
        assert points(eng, train_job, long_key) == []
        assert any("refused" in w for w in warnings(eng, train_job)), warnings(eng, train_job)
    else:
        assert points(eng, train_job, long_key) == [(1, 2.0)]


def test_token_counts_beyond_32_bits_are_stored_on_every_backend(eng, train_job):
    """3 B tokens (a study's budget) overflow PostgreSQL's INTEGER: the counts are BIGINT (revision 0009)."""
    tokens = 3_000_000_000
    write_events(eng, [(train_job, 1, [metric(1, 0.5, tokens=tokens)])])
    with eng.connect() as conn:
        stored = conn.execute(
            sa.text("SELECT tokens FROM metrics WHERE job_id = :j"), {"j": train_job}
        ).scalar()
        latest = conn.execute(
            sa.text("SELECT tokens FROM latest_metrics WHERE job_id = :j"), {"j": train_job}
        ).scalar()
    assert stored == latest == tokens
    (big,) = jobqueue.submit(eng, [Grid("big", base={"tokens": 5_000_000_000})], fake_jobs)[0]
    with eng.connect() as conn:
        assert (
            conn.execute(sa.text("SELECT budget_tokens FROM jobs WHERE id = :j"), {"j": big}).scalar() == 5e9
        )
