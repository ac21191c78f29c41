"""A rewound loss spike in the database: the points it superseded leave the curve for
`superseded_points` (kept, never a curve), the rewind is listed with its skipped rows and shows as a
health event; replayed through the spool after a kill, the same holds. On SQLite and PostgreSQL."""

from __future__ import annotations

import json

import sqlalchemy as sa

from looplab.orchestrator.health import HealthWatch
from looplab.orchestrator.writer import write_events
from looplab.workers.reporter import Event, EventKind
from tests.orchestrator.test_writer import LocalReporter, eng, latest_step, next_attempt, points, train_job

__all__ = ["eng", "train_job"]  # fixtures used by name below


def superseded(eng, job_id: int, key: str = "train_loss") -> list[tuple[int, int, float]]:
    with eng.connect() as conn:
        sql = "SELECT rewind, step, value FROM superseded_points WHERE job_id = :j AND key = :k ORDER BY step"
        return [tuple(r) for r in conn.execute(sa.text(sql), {"j": job_id, "k": key})]


def rewinds(eng, job_id: int) -> list[tuple]:
    with eng.connect() as conn:
        sql = "SELECT n, step, spiked_step, rows FROM rewinds WHERE job_id = :j ORDER BY n"
        return [(n, s, sp, json.loads(rows)) for n, s, sp, rows in conn.execute(sa.text(sql), {"j": job_id})]


def health_rules(eng, job_id: int) -> list[tuple[str, int, str]]:
    with eng.connect() as conn:
        sql = "SELECT rule, step, message FROM health_events WHERE job_id = :j ORDER BY id"
        return [tuple(r) for r in conn.execute(sa.text(sql), {"j": job_id})]


def first_run(rep: LocalReporter) -> None:
    """Steps 1..10 (step 10 spikes), a rewind to the checkpoint at 6 skipping rows 40 and 41, then the
    steps 7..12 trained again without them."""
    for step in range(1, 11):
        rep.metric("train_loss", step, 50.0 if step == 10 else 3.0 - 0.1 * step)
    rep.rewound(6, 10, [40, 41], 1)
    for step in range(7, 13):
        rep.metric("train_loss", step, 2.0 - 0.01 * step)


def test_a_rewind_moves_the_spiked_points_out_of_the_curve_and_keeps_them(eng, train_job, tmp_path):
    n = next_attempt(eng, train_job, tmp_path)
    rep = LocalReporter(train_job, tmp_path)
    first_run(rep)
    write_events(eng, [(train_job, n, rep.take())], health=HealthWatch())
    rep.close()
    live = points(eng, train_job)
    assert [s for s, _ in live] == list(range(1, 13))  # one live point per step
    assert live[6:] == [(s, 2.0 - 0.01 * s) for s in range(7, 13)]  # the retrained values, not the spike
    assert superseded(eng, train_job) == [
        (1, 7, 3.0 - 0.7),
        (1, 8, 3.0 - 0.8),
        (1, 9, 3.0 - 0.9),
        (1, 10, 50.0),
    ]
    assert latest_step(eng, train_job) == 12
    assert rewinds(eng, train_job) == [(1, 6, 10, [40, 41])]
    rule, step, message = health_rules(eng, train_job)[-1]
    assert (rule, step) == ("rewind", 10) and "40, 41" in message and "step 6" in message


def test_a_rewind_lost_in_a_kill_comes_back_from_the_spool(eng, train_job, tmp_path):
    """Only steps 1..5 reach the database before the kill; the next attempt resumes from a checkpoint at
    step 9 written after the rewind: the replay stores the rewind and leaves each step one live point."""
    n = next_attempt(eng, train_job, tmp_path)
    killed = LocalReporter(train_job, tmp_path)
    for step in range(1, 6):
        killed.metric("train_loss", step, 3.0 - 0.1 * step)
    write_events(eng, [(train_job, n, killed.take())])
    killed.deliver = False
    for step in range(6, 11):
        killed.metric("train_loss", step, 50.0 if step == 10 else 3.0 - 0.1 * step)
    killed.rewound(6, 10, [40, 41], 1)
    for step in range(7, 10):
        killed.metric("train_loss", step, 2.0 - 0.01 * step)
    killed.close()

    n = next_attempt(eng, train_job, tmp_path)
    resumed = LocalReporter(train_job, tmp_path)
    resumed.resumed(9)
    for step in range(10, 13):
        resumed.metric("train_loss", step, 2.0 - 0.01 * step)
    write_events(eng, [(train_job, n, resumed.take())])
    resumed.close()
    live = points(eng, train_job)
    assert [s for s, _ in live] == list(range(1, 13))
    assert live[6:] == [(s, 2.0 - 0.01 * s) for s in range(7, 13)]
    assert [(r, s) for r, s, _ in superseded(eng, train_job)] == [(1, 7), (1, 8), (1, 9), (1, 10)]
    assert rewinds(eng, train_job) == [(1, 6, 10, [40, 41])]


def test_a_bad_rewind_is_dropped_with_the_reason(eng, train_job, tmp_path):
    n = next_attempt(eng, train_job, tmp_path)
    rep = LocalReporter(train_job, tmp_path)
    rep.metric("train_loss", 1, 3.0)
    rep.emit(Event(EventKind.REWOUND, 1.0, {"step": 0, "spiked_step": 1, "n": 1, "rows": "40"}))
    write_events(eng, [(train_job, n, rep.take())])
    rep.close()
    assert points(eng, train_job) == [(1, 3.0)] and rewinds(eng, train_job) == []
    with eng.connect() as conn:
        sql = "SELECT message FROM job_logs WHERE job_id = :j AND level = 'WARNING'"
        assert any("rewound needs" in m for (m,) in conn.execute(sa.text(sql), {"j": train_job}))


def test_the_trainers_own_rewind_leaves_one_live_point_per_step(eng, train_job, tmp_path, monkeypatch):
    """The events of a real (tiny) run whose step 6 spikes (the test-only hook) and is rewound to its
    checkpoint at step 4, written as the queue writes them: one live point per step, the first pass's
    steps 5 and 6 superseded, the rewind listed with the rows the trainer skipped."""
    from looplab.workers.reporter import MemoryReporter
    from looplab.workers.train import job as train
    from looplab.workers.train import trainer
    from tests.workers.conftest import tiny_spec

    monkeypatch.setattr(trainer, "TEST_SPIKE", (6.0, 50.0))
    spec = tiny_spec(tokens=8 * 32 * 12, ckpt_every=2, spike_rewind={"k": 3, "window": 4})
    rep = MemoryReporter()
    train.run(train.Spec.from_dict(spec), rep, tmp_path)
    write_events(eng, [(train_job, 1, rep.events)], health=HealthWatch())
    live = points(eng, train_job)
    assert [s for s, _ in live] == list(range(12))
    assert live == sorted({s: v for s, v in rep.curve("train_loss")}.items())
    first_pass = dict(rep.curve("train_loss")[:7])
    assert [(n, s, v) for n, s, v in superseded(eng, train_job)] == [
        (1, 5, first_pass[5]),
        (1, 6, first_pass[6]),
    ]
    assert rewinds(eng, train_job) == [(1, 4, 6, list(range(48, 56)))]
    assert "rewind" in [rule for rule, _, _ in health_rules(eng, train_job)]
