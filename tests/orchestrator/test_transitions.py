"""Every state transition of a job, and the refusal of every illegal one, made by orchestrator.jobqueue
directly on a real database of each backend (db_url): no Ray, no scheduler, so each case runs in milliseconds.

Legal: queued -> running (claim); running -> succeeded | failed | queued (interrupted, preempted, or a
failure under max_attempts) | cancelled; queued -> cancelled; failed | cancelled -> queued (retry);
queued -> failed (cascade, recording the dependency); running -> queued (stale recovery);
queued -> failed for good (refuse).
"""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa

from looplab.orchestrator import Grid, jobqueue, recovery, variants
from looplab.orchestrator.db import engine
from looplab.orchestrator.states import AttemptOutcome, JobStatus
from looplab.orchestrator.writer import write_events
from looplab.workers.reporter import Event
from tests.orchestrator import fake_jobs


@pytest.fixture
def eng(migrated_db_url):  # db_url, already migrated (a copy of a template: fast on PostgreSQL)
    return engine(migrated_db_url)


def submit(eng, *grids: Grid) -> list[int]:
    ids, _ = jobqueue.submit(eng, list(grids), fake_jobs)
    return ids


def job(eng, job_id: int):
    with eng.connect() as conn:
        return conn.execute(sa.text("SELECT * FROM jobs WHERE id = :j"), {"j": job_id}).one()


def outcomes(eng, job_id: int) -> list[str]:
    with eng.connect() as conn:
        sql = "SELECT outcome FROM attempts WHERE job_id = :j ORDER BY n"
        return [o for (o,) in conn.execute(sa.text(sql), {"j": job_id})]


def age_heartbeat(eng, job_id: int, seconds: float = 120.0) -> None:
    with eng.begin() as conn:
        conn.execute(
            sa.text("UPDATE jobs SET heartbeat_at = :t WHERE id = :j"),
            {"t": time.time() - seconds, "j": job_id},
        )


def run_to(eng, job_id: int, outcome: AttemptOutcome, error: str | None = None) -> JobStatus:
    n = jobqueue.claim(eng, job_id, "driver", f"/tmp/art{job_id}")
    assert n is not None
    return jobqueue.finish(eng, job_id, n, outcome, error)


# ---------------------------------------------------------------- claim


def test_claim_moves_a_queued_job_to_running_once(eng):
    (jid,) = submit(eng, Grid("c", job="noop"))
    assert job(eng, jid).status == JobStatus.QUEUED  # a stored string compares equal to its member
    assert jobqueue.claim(eng, jid, "driver-a", "/tmp/a") == 1
    row = job(eng, jid)
    assert (row.status, row.attempts, row.worker, row.artifact_dir) == ("running", 1, "driver-a", "/tmp/a")
    assert outcomes(eng, jid) == [AttemptOutcome.RUNNING]
    assert jobqueue.claim(eng, jid, "driver-b", "/tmp/b") is None  # not queued any more: refused
    assert jobqueue.claim(eng, 999, "driver-b", "/tmp/b") is None  # no such job
    assert job(eng, jid).worker == "driver-a" and outcomes(eng, jid) == ["running"]


def test_claim_waits_for_dependencies_to_succeed(eng):
    train, sweep = submit(eng, Grid("d", base={"tokens": 100}, then=["depth_sweep"]))
    assert [r.id for r in jobqueue.ready_jobs(eng)] == [train]
    assert run_to(eng, train, AttemptOutcome.SUCCEEDED) == JobStatus.SUCCEEDED
    assert [r.id for r in jobqueue.ready_jobs(eng)] == [sweep]


def test_claim_drops_result_rows_of_an_earlier_unfinished_attempt(eng):
    (jid,) = submit(eng, Grid("r", base={"tokens": 100}))
    n = jobqueue.claim(eng, jid, "driver", "/tmp/a")
    write_events(
        eng,
        [
            (
                jid,
                n,
                [
                    Event(
                        "result",
                        0.0,
                        {"table": "train_results", "row": {"steps": 1, "tokens": 64, "train_seconds": 1.0}},
                    )
                ],
            )
        ],
    )
    assert jobqueue.finish(eng, jid, n, AttemptOutcome.INTERRUPTED) == JobStatus.QUEUED
    jobqueue.claim(eng, jid, "driver", "/tmp/a")
    with eng.connect() as conn:
        assert conn.execute(sa.text("SELECT COUNT(*) FROM train_results")).scalar_one() == 0


# ---------------------------------------------------------------- finish


def test_running_to_succeeded(eng):
    (jid,) = submit(eng, Grid("s", job="noop"))
    status = run_to(eng, jid, AttemptOutcome.SUCCEEDED)
    assert status is JobStatus.SUCCEEDED
    row = job(eng, jid)
    assert row.status == "succeeded" and row.finished_at is not None and row.error is None
    assert outcomes(eng, jid) == ["succeeded"]


def test_running_to_queued_on_failure_under_max_attempts_then_failed(eng):
    (jid,) = submit(eng, Grid("f", job="boom", max_attempts=2))
    assert run_to(eng, jid, AttemptOutcome.FAILED, "Traceback\nRuntimeError: one") == JobStatus.QUEUED
    assert job(eng, jid).error.endswith("RuntimeError: one")
    assert run_to(eng, jid, AttemptOutcome.FAILED, "Traceback\nRuntimeError: two") == JobStatus.FAILED
    row = job(eng, jid)
    assert (row.status, row.attempts) == ("failed", 2) and row.finished_at is not None
    assert outcomes(eng, jid) == ["failed", "failed"]
    with eng.connect() as conn:  # each failure's traceback is in the job's log
        logs = conn.execute(sa.text("SELECT message FROM job_logs WHERE job_id = :j"), {"j": jid}).all()
    assert [m for (m,) in logs] == ["Traceback\nRuntimeError: one", "Traceback\nRuntimeError: two"]


def test_running_to_queued_on_interruption_which_is_not_a_failure(eng):
    (jid,) = submit(eng, Grid("i", job="noop", max_attempts=1))
    assert run_to(eng, jid, AttemptOutcome.INTERRUPTED) == JobStatus.QUEUED
    assert run_to(eng, jid, AttemptOutcome.INTERRUPTED) == JobStatus.QUEUED
    assert run_to(eng, jid, AttemptOutcome.FAILED, "boom") == JobStatus.FAILED  # the one failure allowed
    assert outcomes(eng, jid) == ["interrupted", "interrupted", "failed"]


def test_running_to_queued_on_preemption_which_is_not_a_failure_and_is_dated(eng):
    (jid,) = submit(eng, Grid("p", job="noop", max_attempts=1))
    before = time.time()
    assert run_to(eng, jid, AttemptOutcome.PREEMPTED, "preempted for job 9") == JobStatus.QUEUED
    assert run_to(eng, jid, AttemptOutcome.PREEMPTED) == JobStatus.QUEUED
    assert run_to(eng, jid, AttemptOutcome.SUCCEEDED) == JobStatus.SUCCEEDED
    assert outcomes(eng, jid) == ["preempted", "preempted", "succeeded"]
    with eng.connect() as conn:  # the cool-down reads when the last preemption ended
        assert before <= jobqueue.last_preempted(conn, jid) <= time.time()
        assert jobqueue.last_preempted(conn, jid + 1) is None  # never preempted
    with eng.connect() as conn:  # why, on the attempt that was preempted
        sql = "SELECT error FROM attempts WHERE job_id = :j AND n = 1"
        assert conn.execute(sa.text(sql), {"j": jid}).scalar_one() == "preempted for job 9"


def test_running_to_cancelled_whatever_the_attempt_reports(eng):
    (jid,) = submit(eng, Grid("c", job="noop"))
    n = jobqueue.claim(eng, jid, "driver", "/tmp/a")
    assert jobqueue.cancel(eng, [jid]) == [jid]
    assert job(eng, jid).status == "cancelled"
    assert jobqueue.finish(eng, jid, n, AttemptOutcome.SUCCEEDED) == JobStatus.CANCELLED
    assert job(eng, jid).status == "cancelled" and outcomes(eng, jid) == ["cancelled"]


def test_a_stale_attempt_finishing_after_a_reclaim_does_not_change_the_job(eng):
    (jid,) = submit(eng, Grid("st", job="noop"))
    jobqueue.claim(eng, jid, "old-driver", "/tmp/a")
    age_heartbeat(eng, jid)
    assert recovery.recover_stale(eng, grace_s=60) == [jid]
    assert jobqueue.claim(eng, jid, "new-driver", "/tmp/a") == 2
    for late in (AttemptOutcome.SUCCEEDED, AttemptOutcome.FAILED):  # the old owner reports late
        assert jobqueue.finish(eng, jid, 1, late, "late") == JobStatus.RUNNING
        row = job(eng, jid)
        assert (row.status, row.attempts, row.worker, row.error) == ("running", 2, "new-driver", None)
    assert jobqueue.finish(eng, jid, 2, AttemptOutcome.SUCCEEDED) == JobStatus.SUCCEEDED


# ---------------------------------------------------------------- recovery


def test_recover_stale_puts_silent_running_jobs_back_only(eng):
    stale, fresh, mine = submit(eng, Grid("r", job="noop", sweep={"tag": [1, 2, 3]}))
    for j in (stale, fresh, mine):
        assert jobqueue.claim(eng, j, "driver-x", f"/tmp/a{j}") == 1
    age_heartbeat(eng, stale)
    age_heartbeat(eng, mine)
    assert recovery.recover_stale(eng, grace_s=60, exclude={mine}) == [stale]
    assert [job(eng, j).status for j in (stale, fresh, mine)] == ["queued", "running", "running"]
    assert outcomes(eng, stale) == ["interrupted"] and outcomes(eng, fresh) == ["running"]
    assert recovery.recover_stale(eng, grace_s=60, exclude={mine}) == []  # queued now: not again


def test_heartbeat_of_a_worker_with_a_skewed_clock_is_not_stale(eng):
    """Heartbeats are compared on one clock: a worker node whose clock runs 1000 s behind must not
    make its live job look stale to another driver's recovery."""
    (jid,) = submit(eng, Grid("h", job="noop"))
    n = jobqueue.claim(eng, jid, "driver-x", "/tmp/a")
    write_events(eng, [(jid, n, [Event("heartbeat", time.time() - 1000, {})])])
    assert recovery.recover_stale(eng, grace_s=60) == []
    assert job(eng, jid).status == "running"


def test_touch_keeps_only_running_jobs_alive(eng):
    running, queued = submit(eng, Grid("t", job="noop", sweep={"tag": [1, 2]}))
    n = jobqueue.claim(eng, running, "driver", "/tmp/a")
    age_heartbeat(eng, running)
    recovery.touch(eng, {running: n, queued: 1})
    assert recovery.recover_stale(eng, grace_s=60) == []
    assert job(eng, queued).heartbeat_at is None


# ---------------------------------------------------------------- cancel


def test_queued_to_cancelled_and_finished_jobs_are_left_alone(eng):
    queued, done, failed = submit(eng, Grid("c", job="noop", sweep={"tag": [1, 2, 3]}))
    run_to(eng, done, AttemptOutcome.SUCCEEDED)
    jobqueue.claim(eng, failed, "driver", "/tmp/a")
    with eng.begin() as conn:
        conn.execute(sa.text("UPDATE jobs SET max_attempts = 1 WHERE id = :j"), {"j": failed})
    jobqueue.finish(eng, failed, 1, AttemptOutcome.FAILED, "boom")
    assert jobqueue.cancel(eng, [queued, done, failed, 999]) == [queued]
    assert [job(eng, j).status for j in (queued, done, failed)] == ["cancelled", "succeeded", "failed"]
    assert jobqueue.cancel(eng, [queued]) == []  # already cancelled


# ---------------------------------------------------------------- cascade


def _chain(eng) -> tuple[int, int, int]:
    """train -> iso-time train (match_time_of it) -> the iso run's depth sweep; max_attempts 1."""
    main = Grid("main", base={"recipe": "lean", "tokens": 100}, max_attempts=1)
    iso = Grid(
        "iso",
        base={"recipe": "parcae", "budget": {"match_time_of": {"recipe": "lean"}}},
        then=["depth_sweep"],
        max_attempts=1,
    )
    return tuple(submit(eng, main, iso))


def test_cascade_fails_dependents_transitively_naming_the_dependency(eng):
    train, iso, sweep = _chain(eng)
    assert run_to(eng, train, AttemptOutcome.FAILED, "Traceback\nValueError: loss is NaN") == JobStatus.FAILED
    iso_row, sweep_row = job(eng, iso), job(eng, sweep)
    assert (iso_row.status, iso_row.failed_dependency, iso_row.attempts) == ("failed", train, 0)
    assert (sweep_row.status, sweep_row.failed_dependency) == ("failed", iso)
    assert iso_row.error == f"dependency job {train} failed: ValueError: loss is NaN"
    assert sweep_row.error.startswith(f"dependency job {iso} failed: ")
    assert job(eng, train).failed_dependency is None  # it failed on its own


def test_cascade_from_a_cancelled_dependency(eng):
    train, sweep = submit(eng, Grid("c", base={"tokens": 100}, then=["depth_sweep"]))
    assert jobqueue.cancel(eng, [train]) == [train]
    row = job(eng, sweep)
    assert (row.status, row.failed_dependency) == ("failed", train)
    assert row.error.startswith(f"dependency job {train} cancelled")


def test_cascade_leaves_dependents_of_running_or_succeeded_jobs_queued(eng):
    train, sweep = submit(eng, Grid("q", base={"tokens": 100}, then=["depth_sweep"]))
    jobqueue.claim(eng, train, "driver", "/tmp/a")
    assert jobqueue.cascade(eng) == []
    assert job(eng, sweep).status == "queued"


# ---------------------------------------------------------------- retry


def test_retry_requeues_the_job_and_exactly_the_dependents_it_took_down(eng):
    train, iso, sweep = _chain(eng)
    (other,) = submit(eng, Grid("other", job="boom", max_attempts=1))
    run_to(eng, other, AttemptOutcome.FAILED, "RuntimeError: boom")
    run_to(eng, train, AttemptOutcome.FAILED, "ValueError: loss is NaN")
    assert sorted(jobqueue.retry(eng, [train])) == sorted([train, iso, sweep])
    for j in (train, iso, sweep):
        row = job(eng, j)
        assert (row.status, row.error, row.failed_dependency, row.finished_at) == ("queued", None, None, None)
    assert job(eng, train).max_attempts == 2  # one more failure allowed than it had
    assert job(eng, other).status == "failed"  # failed on its own, not re-queued with the others


def test_retry_of_a_cancelled_job(eng):
    (jid,) = submit(eng, Grid("rc", job="noop"))
    jobqueue.cancel(eng, [jid])
    assert jobqueue.retry(eng, [jid]) == [jid]
    assert job(eng, jid).status == "queued"
    assert jobqueue.claim(eng, jid, "driver", "/tmp/a") == 1


def test_retry_refuses_queued_running_and_succeeded_jobs(eng):
    queued, running, done = submit(eng, Grid("x", job="noop", sweep={"tag": [1, 2, 3]}))
    jobqueue.claim(eng, running, "driver", "/tmp/a")
    run_to(eng, done, AttemptOutcome.SUCCEEDED)
    before = [tuple(job(eng, j)) for j in (queued, running, done)]
    assert jobqueue.retry(eng, [queued, running, done, 999]) == []
    assert [tuple(job(eng, j)) for j in (queued, running, done)] == before


def test_retry_waits_until_a_cancelled_attempt_has_ended(eng):
    """Cancel a running job, then retry it at once: while its attempt still runs (a depth sweep never
    checks the stop flag), a retry would start a second run of the same job on the same artifact dir.
    Once the driver is known lost (stale heartbeat), recovery closes the attempt and retry works."""
    (jid,) = submit(eng, Grid("c", job="noop"))
    jobqueue.claim(eng, jid, "driver-x", "/tmp/a")
    assert jobqueue.cancel(eng, [jid]) == [jid]
    assert jobqueue.retry(eng, [jid]) == []  # its attempt is still running
    assert job(eng, jid).status == "cancelled"
    age_heartbeat(eng, jid)
    assert recovery.recover_stale(eng, grace_s=60) == []  # cancelled stays cancelled ...
    assert outcomes(eng, jid) == ["cancelled"]  # ... and its attempt is closed
    assert jobqueue.retry(eng, [jid]) == [jid]


# ---------------------------------------------------------------- refuse and nothing_left


def test_refused_job_fails_for_good_even_after_an_interruption(eng):
    """A job interrupted once (attempt 1), then too big for the cluster the next driver sees, must
    fail at once, not loop claim -> refuse -> queued forever; a retry still gives it one more try."""
    (jid,) = submit(eng, Grid("big", job="noop", resources={"num_gpus": 4}))
    assert run_to(eng, jid, AttemptOutcome.INTERRUPTED) == JobStatus.QUEUED
    assert jobqueue.refuse(eng, jid, "driver", "needs 4 GPUs but the cluster has 0") == JobStatus.FAILED
    row = job(eng, jid)
    assert row.status == "failed" and "cluster has" in row.error
    assert outcomes(eng, jid) == ["interrupted", "failed"]
    assert jobqueue.refuse(eng, jid, "driver", "again") is None  # not queued: nothing to refuse
    assert jobqueue.retry(eng, [jid]) == [jid]


def test_nothing_left_counts_running_and_ready_jobs(eng):
    train, sweep = submit(eng, Grid("n", base={"tokens": 100}, then=["depth_sweep"]))
    assert not jobqueue.nothing_left(eng)  # the train job is ready
    jobqueue.claim(eng, train, "driver", "/tmp/a")
    assert not jobqueue.nothing_left(eng)  # nothing ready, but a running job may unblock the sweep
    jobqueue.finish(eng, train, 1, AttemptOutcome.FAILED, "boom")
    jobqueue.claim(eng, train, "driver", "/tmp/a")
    with eng.begin() as conn:
        conn.execute(sa.text("UPDATE jobs SET max_attempts = 2 WHERE id = :j"), {"j": train})
    jobqueue.finish(eng, train, 2, AttemptOutcome.FAILED, "boom")
    assert jobqueue.nothing_left(eng)  # the cascade failed the sweep: nothing can run
    assert job(eng, sweep).status == "failed"


def test_statuses_are_enum_members(eng):
    (jid,) = submit(eng, Grid("e", job="noop"))
    assert jobqueue.statuses(eng, [jid, 999]) == {jid: JobStatus.QUEUED}
    assert type(jobqueue.statuses(eng, [jid])[jid]) is JobStatus


# ---------------------------------------------------------------- what submission stores


def test_submission_stores_how_each_run_loops(eng):
    grid = Grid(
        "l", base={"tokens": 100}, sweep={"recipe": ["parcae", "lean", "plain"]}, then=["depth_sweep"]
    )
    over = Grid("o", base={"tokens": 100, "recipe": "fixed4", "model": {"loops": 6}})
    ids = submit(eng, grid, over)
    got = {(job(eng, j).kind, job(eng, j).recipe): (job(eng, j).loop_sampler, job(eng, j).loops) for j in ids}
    assert got == {
        ("train", "parcae"): ("poisson_seq", 8),
        ("depth_sweep", "parcae"): ("poisson_seq", 8),
        ("train", "lean"): ("fixed", 4),
        ("depth_sweep", "lean"): ("fixed", 4),
        ("train", "plain"): ("fixed", 1),
        ("depth_sweep", "plain"): ("fixed", 1),
        ("train", "fixed4"): ("fixed", 6),
    }
    # a spec that names no model the code knows (a plugin's job kind, an unknown recipe) gets no columns
    assert variants.variant_columns("train", {"recipe": "no_such_recipe"}) == {}
    assert variants.resolve("noop", {}) is None


# ---------------------------------------------------------------- retry backoff and aging


def test_retry_delay_doubles_per_failure_up_to_the_cap():
    assert [jobqueue.retry_delay(k, 5.0, 300.0) for k in range(1, 9)] == [5, 10, 20, 40, 80, 160, 300, 300]


def test_a_failed_attempt_is_retried_only_after_a_growing_backoff(eng):
    (jid,) = submit(eng, Grid("b", job="boom", max_attempts=4))
    for failures in (1, 2, 3):
        n = jobqueue.claim(eng, jid, "driver", "/tmp/b")
        before = time.time()
        status = jobqueue.finish(eng, jid, n, AttemptOutcome.FAILED, "boom", backoff_s=2.0, backoff_max_s=6.0)
        after = time.time()
        assert status == JobStatus.QUEUED
        delay = min(6.0, 2.0 * 2 ** (failures - 1))  # 2, 4, 6 (the cap)
        not_before = job(eng, jid).not_before
        assert before + delay <= not_before <= after + delay
        assert [r.id for r in jobqueue.ready_jobs(eng, now=not_before - 0.5)] == []
        assert not jobqueue.nothing_left(eng)  # a job waiting out its backoff is still to be run
        assert [r.id for r in jobqueue.ready_jobs(eng, now=not_before)] == [jid]
    # an interruption is not the job's fault: no backoff
    n = jobqueue.claim(eng, jid, "driver", "/tmp/b")
    jobqueue.finish(eng, jid, n, AttemptOutcome.INTERRUPTED)
    assert [r.id for r in jobqueue.ready_jobs(eng, now=not_before)] == [jid]


def set_created(eng, job_id: int, created_at: float) -> None:
    with eng.begin() as conn:
        conn.execute(sa.text("UPDATE jobs SET created_at = :t WHERE id = :j"), {"t": created_at, "j": job_id})


def test_ready_jobs_are_ordered_by_priority_raised_by_waiting(eng):
    (old,) = submit(eng, Grid("old", job="noop", sweep={"tag": [1]}, priority=0))
    (new,) = submit(eng, Grid("new", job="noop", sweep={"tag": [2]}, priority=2))
    now = time.time()
    set_created(eng, old, now - 100)
    set_created(eng, new, now - 1)

    def order(aging_s):
        return [(r.id, r.effective_priority) for r in jobqueue.ready_jobs(eng, aging_s=aging_s, now=now)]

    assert order(None) == [(new, 2), (old, 0)]  # no aging: the priority alone
    assert order(60.0) == [(new, 2), (old, 1)]
    assert order(40.0) == [(old, 2), (new, 2)]  # a tie: the older first
    assert order(30.0) == [(old, 3), (new, 2)]  # waited long enough to pass the higher priority


def test_ready_jobs_reads_every_ready_job_page_by_page(eng):
    ids = submit(eng, Grid("p", job="noop", sweep={"tag": list(range(7))}))
    for i, job_id in enumerate(ids):  # priorities 0, 1, 2, 0, 1, 2, 0: ties across page boundaries
        with eng.begin() as conn:
            conn.execute(sa.text("UPDATE jobs SET priority = :p WHERE id = :j"), {"p": i % 3, "j": job_id})
    expected = sorted(ids, key=lambda j: (-(ids.index(j) % 3), j))
    for page in (2, 3, 200):
        assert [r.id for r in jobqueue.ready_jobs(eng, aging_s=None, page=page)] == expected
