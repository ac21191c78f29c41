"""The winner's artifacts only (docs/guarantees.md, promise 11): final weights are written under the
attempt's name and become the job's final.pt only through the attempt whose success is recorded
(`jobqueue.finish`, under the fence), so a replaced attempt that trains on to its end changes nothing
a follow-up reads; and a driver that learns its attempt was replaced kills it at once.

The first tests run orchestrator.jobqueue directly on each backend (milliseconds); the last runs the
driver on the session's Ray with the fake job kinds."""

from __future__ import annotations

import os
import threading
import time

import pytest
import sqlalchemy as sa
import torch

from looplab.orchestrator import Grid, jobqueue, recovery
from looplab.orchestrator.db import engine
from looplab.orchestrator.scheduler import Scheduler
from looplab.orchestrator.states import AttemptOutcome, JobStatus
from looplab.workers import artifacts
from looplab.workers import checkpoint as ckpt
from looplab.workers.artifacts import FINAL, final_name
from tests.orchestrator import fake_jobs


@pytest.fixture
def eng(migrated_db_url):
    return engine(migrated_db_url)


def weights(attempt: int) -> dict:
    """A loadable final state whose one weight tells the attempts apart (not only the stored id)."""
    return {"model": {"w": torch.full((2,), float(attempt))}, "model_config": {}}


def take_over(eng, job_id: int, art) -> int:
    """Another driver takes the job over: its heartbeat went stale, it is requeued and claimed again."""
    with eng.begin() as conn:
        conn.execute(
            sa.text("UPDATE jobs SET heartbeat_at = heartbeat_at - 1000 WHERE id = :j"), {"j": job_id}
        )
    assert recovery.recover_stale(eng, grace_s=60) == [job_id]
    return jobqueue.claim(eng, job_id, "driver-b", str(art))


def read_by_follow_up(eng, sweep: int) -> dict:
    """What the follow-up of the train job loads: its launch spec's checkpoint dir, through `find`."""
    (row,) = [j for j in jobqueue.ready_jobs(eng, 300.0) if j.id == sweep]
    spec = jobqueue.launch_spec(eng, row, fake_jobs)
    return ckpt.load(ckpt.find(spec["checkpoint"]))


def test_a_replaced_attempt_finishing_after_its_successor_never_changes_the_final_weights(eng, tmp_path):
    train, sweep = jobqueue.submit(eng, [Grid("f", base={"tokens": 100}, then=["depth_sweep"])], fake_jobs)[0]
    art = tmp_path / "art"
    art.mkdir()
    assert jobqueue.claim(eng, train, "driver-a", str(art)) == 1
    assert take_over(eng, train, art) == 2  # driver A was paused past the grace
    assert ckpt.save_final(art, weights(2), 2, queued=True) == art / final_name(2)
    assert not (art / FINAL).exists()  # written, not yet the job's: its success is not recorded
    assert jobqueue.finish(eng, train, 2, AttemptOutcome.SUCCEEDED) == JobStatus.SUCCEEDED
    assert ckpt.load(art / FINAL)["attempt"] == 2
    # driver A resumes: its attempt trains on to the end, writes its final weights, reports success
    ckpt.save_final(art, weights(1), 1, queued=True)
    assert jobqueue.finish(eng, train, 1, AttemptOutcome.SUCCEEDED) == JobStatus.SUCCEEDED  # refused
    with eng.connect() as conn:
        got = conn.execute(
            sa.text("SELECT n, outcome FROM attempts WHERE job_id = :j ORDER BY n"), {"j": train}
        )
        assert [tuple(r) for r in got] == [(1, "interrupted"), (2, "succeeded")]
    seen = read_by_follow_up(eng, sweep)
    assert seen["attempt"] == 2 and torch.equal(seen["model"]["w"], weights(2)["model"]["w"])
    # the test can fail: had attempt 1 written final.pt itself (the layout before), the follow-up
    # would read the replaced attempt's weights
    ckpt.save(art / FINAL, {**weights(1), "attempt": 1})
    assert read_by_follow_up(eng, sweep)["attempt"] == 1


def test_a_job_finished_before_attempt_named_finals_keeps_its_final_pt(eng, tmp_path):
    train, sweep = jobqueue.submit(eng, [Grid("o", base={"tokens": 100}, then=["depth_sweep"])], fake_jobs)[0]
    art = tmp_path / "art"
    art.mkdir()
    n = jobqueue.claim(eng, train, "driver-a", str(art))
    ckpt.save(art / FINAL, weights(7))  # the old trainer wrote final.pt in place; no attempt inside
    assert jobqueue.finish(eng, train, n, AttemptOutcome.SUCCEEDED) == JobStatus.SUCCEEDED
    assert torch.equal(read_by_follow_up(eng, sweep)["model"]["w"], weights(7)["model"]["w"])
    assert artifacts.attempt_finals(art) == []


def test_outside_the_queue_the_trainer_promotes_its_own_final_weights(tmp_path):
    assert ckpt.save_final(tmp_path, weights(3), 3, queued=False) == tmp_path / FINAL
    assert ckpt.load(tmp_path / FINAL)["attempt"] == 3
    # a promotion renames: one copy on disk; a replaced attempt's own is left to gc once final.pt is there
    assert not (tmp_path / final_name(3)).exists()
    ckpt.save_final(tmp_path, weights(2), 2, queued=True)
    assert artifacts.resume_only(tmp_path) == [tmp_path / final_name(2)]


def test_a_success_recorded_again_after_its_commit_failed_keeps_the_attempts_weights(eng, tmp_path):
    (train,) = jobqueue.submit(eng, [Grid("c", base={"tokens": 100})], fake_jobs)[0]
    art = tmp_path / "art"
    art.mkdir()
    n = jobqueue.claim(eng, train, "driver-a", str(art))
    ckpt.save_final(art, weights(n), n, queued=True)
    assert artifacts.promote(art, n)  # the first try renamed, then its commit failed (the database away)
    assert jobqueue.finish(eng, train, n, AttemptOutcome.SUCCEEDED) == JobStatus.SUCCEEDED  # the retry
    assert ckpt.load(art / FINAL)["attempt"] == n


def test_a_promotion_the_file_system_refuses_fails_the_attempt(eng, tmp_path, monkeypatch):
    (train,) = jobqueue.submit(eng, [Grid("r", base={"tokens": 100})], fake_jobs)[0]
    art = tmp_path / "art"
    art.mkdir()
    n = jobqueue.claim(eng, train, "driver-a", str(art))
    ckpt.save_final(art, weights(n), n, queued=True)

    def refuse(*_a, **_k):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "replace", refuse)
    assert jobqueue.finish(eng, train, n, AttemptOutcome.SUCCEEDED) == JobStatus.QUEUED  # retried
    with eng.connect() as conn:
        error = conn.execute(
            sa.text("SELECT error FROM attempts WHERE job_id = :j"), {"j": train}
        ).scalar_one()
    assert error.startswith(f"could not make attempt {n}'s final weights the job's final.pt")
    assert not (art / FINAL).exists()


def test_touch_names_the_jobs_an_attempt_lost(eng):
    a, b = jobqueue.submit(eng, [Grid("t", job="noop", sweep={"tag": [1, 2]})], fake_jobs)[0]
    na, nb = (jobqueue.claim(eng, j, "driver-a", "") for j in (a, b))
    assert recovery.touch(eng, {a: na, b: nb}) == []
    assert take_over(eng, b, "") == nb + 1
    assert recovery.touch(eng, {a: na, b: nb}) == [b]
    jobqueue.cancel(eng, [a])  # cancelled while it runs: still its attempt's, told to stop otherwise
    assert recovery.touch(eng, {a: na}) == []


def test_heartbeats_are_stamped_and_judged_by_the_database_servers_clock(eng, monkeypatch):
    """A driver whose clock is 10 minutes off changes nothing: heartbeats carry the server's time and
    the grace is measured on it. By the drivers' clocks, a driver 10 minutes ahead took live jobs over."""
    a, b = jobqueue.submit(eng, [Grid("k", job="noop", sweep={"tag": [1, 2]})], fake_jobs)[0]
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() - 600)  # driver A's clock: 10 minutes behind
    na, nb = (jobqueue.claim(eng, j, "driver-a", "") for j in (a, b))
    assert recovery.touch(eng, {a: na, b: nb}) == []
    monkeypatch.setattr(time, "time", lambda: real() + 600)  # driver B's: 10 minutes ahead
    assert recovery.recover_stale(eng, grace_s=60) == []  # the jobs are live: B leaves them
    with eng.begin() as conn:  # a minute and a half of silence, by the server's clock
        conn.execute(sa.text("UPDATE jobs SET heartbeat_at = heartbeat_at - 90 WHERE id = :j"), {"j": b})
    monkeypatch.setattr(time, "time", lambda: real() - 600)  # a recoverer behind sees it stale all the same
    assert recovery.recover_stale(eng, grace_s=60) == [b]


# ---------------------------------------------------------------- the driver kills a replaced attempt

STOP_BOUND_S = 5.0  # the driver's heartbeat pass (1 s) + a poll + Ray's forced cancel, loaded machine


@pytest.mark.ray
def test_a_driver_kills_its_attempt_once_it_learns_the_job_was_taken_over(tmp_path, ray_cluster):
    from looplab import Queue

    q = Queue(db=f"sqlite:///{tmp_path}/q.db", artifacts=tmp_path / "art", kinds=fake_jobs)
    (jid,) = q.submit(Grid("long", base={"tokens": 100, "steps": 2000, "step_s": 0.02, "ckpt_every": 1}))
    sched = Scheduler(q.eng, q.artifacts, fake_jobs, progress=False, poll_s=0.1, max_concurrent=1)
    t = threading.Thread(target=sched.run, daemon=True)
    t.start()
    try:
        end = time.time() + 90
        while not (worker := _worker(q.eng, jid)) or not _checkpoint(q.eng, jid):
            assert time.time() < end, "the job never started"
            time.sleep(0.1)
        pid = int(worker.rsplit(":", 1)[1])
        art = _art(q.eng, jid)
        # max_concurrent=1 keeps this driver from claiming the job back while its task still runs
        taken = time.time()
        assert take_over(q.eng, jid, art) == 2
        while sched.running:
            assert time.time() - taken < STOP_BOUND_S, "the replaced attempt still runs"
            time.sleep(0.05)
        stopped = time.time() - taken
        end = time.time() + STOP_BOUND_S
        while _alive(pid):
            assert time.time() < end, f"its process {pid} outlived the cancel"
            time.sleep(0.05)
        written = (art / "checkpoint.json").stat().st_mtime_ns
        time.sleep(1.0)  # it writes every 20 ms while alive
        assert (art / "checkpoint.json").stat().st_mtime_ns == written and not (art / "final.json").exists()
        assert stopped < STOP_BOUND_S
    finally:
        sched.stopping = 1
        t.join(60)
    assert not t.is_alive()
    with q.eng.connect() as conn:
        got = conn.execute(
            sa.text("SELECT n, outcome FROM attempts WHERE job_id = :j ORDER BY n"), {"j": jid}
        )
        assert [tuple(r) for r in got] == [(1, "interrupted"), (2, "running")]  # attempt 2 is the test's


def _worker(eng, jid: int) -> str | None:
    with eng.connect() as conn:
        return conn.execute(
            sa.text("SELECT worker FROM attempts WHERE job_id = :j AND n = 1"), {"j": jid}
        ).scalar()


def _checkpoint(eng, jid: int) -> int | None:
    with eng.connect() as conn:
        return conn.execute(sa.text("SELECT checkpoint_step FROM jobs WHERE id = :j"), {"j": jid}).scalar()


def _art(eng, jid: int):
    from pathlib import Path

    with eng.connect() as conn:
        return Path(
            conn.execute(sa.text("SELECT artifact_dir FROM jobs WHERE id = :j"), {"j": jid}).scalar_one()
        )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_claim_stamps_its_start_once_the_job_row_is_its_own(eng, tmp_path, monkeypatch):
    """The attempt's start is stamped after the claim's SELECT of the queued row (FOR UPDATE on
    PostgreSQL), so after the commit that queued the job again: stamped before it, a loaded driver's
    attempt 3 started before attempt 2, which another driver had claimed and failed meanwhile, and the
    soak's checker saw two live attempts. Shown able to fail: with the stamp before the SELECT, the
    order read here is the other."""
    (train,) = jobqueue.submit(eng, [Grid("s", base={"tokens": 100})], fake_jobs)[0]
    order: list[str] = []

    def seen(conn, cursor, statement, *args) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "jobs.status" in statement:
            order.append("select")

    real = time.time
    monkeypatch.setattr(jobqueue.time, "time", lambda: order.append("stamp") or real())
    sa.event.listen(eng, "before_cursor_execute", seen)
    try:
        assert jobqueue.claim(eng, train, "driver-a", str(tmp_path / "art")) == 1
    finally:
        sa.event.remove(eng, "before_cursor_execute", seen)
    assert order[:2] == ["select", "stamp"], order
