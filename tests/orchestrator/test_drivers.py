"""Many drivers on one queue, on both backends (db_url): fencing of a stalled driver's writes, the
liveness of a driver on this host (pid and process start time), two real `looplab run` processes
sharing a queue, and a driver restarted after `kill -9` re-queueing its predecessor's job at once.

The fencing and liveness rules run on orchestrator.jobqueue and orchestrator.writer directly (no
Ray); the last two tests start real drivers as subprocesses on the fake job kinds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from looplab.orchestrator import Grid, drivers, jobqueue, recovery
from looplab.orchestrator.db import engine
from looplab.orchestrator.drivers import DriverId
from looplab.orchestrator.states import AttemptOutcome, JobStatus
from looplab.orchestrator.writer import record_concurrency, write_events
from looplab.workers.reporter import Event, EventKind, MemoryReporter
from tests.orchestrator import fake_jobs

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def eng(db_url):
    return engine(db_url)


def rows(eng, sql: str, **params) -> list:
    with eng.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.text(sql), params).all()]


def age_heartbeat(eng, job_id: int, seconds: float = 120.0) -> None:
    with eng.begin() as conn:
        conn.execute(
            sa.text("UPDATE jobs SET heartbeat_at = :t WHERE id = :j"),
            {"t": time.time() - seconds, "j": job_id},
        )


def events(step: int, value: float) -> list[Event]:
    """One of each kind of write an attempt makes on behalf of its job, made as a job makes them."""
    rep = MemoryReporter()
    rep.started(f"node-{value}:1", str(step))
    rep.resumed(step - 1)
    rep.rewound(step - 1, step, [int(value)], 1)  # before the point, so the point is not superseded
    rep.metric("train_loss", step, value)
    rep.progress(step, 10, eta_s=1.0)
    rep.checkpoint(f"/ckpt/{value}", step)
    rep.log(f"from value {value}")
    rep.result("train_results", {"steps": step, "tokens": step, "train_seconds": value})
    rep.heartbeat()
    assert {e.kind for e in rep.events} == set(EventKind)
    return rep.events


def snapshot(eng, job_id: int) -> tuple:
    """Everything a job's attempt may write, as it is now."""
    return (
        rows(
            eng,
            "SELECT status, attempts, heartbeat_at, progress_done, checkpoint_path, error, worker, gpu_ids "
            "FROM jobs WHERE id = :j",
            j=job_id,
        ),
        rows(
            eng,
            "SELECT n, outcome, ended_at, error, worker, resumed_from_step FROM attempts WHERE job_id = :j "
            "ORDER BY n",
            j=job_id,
        ),
        rows(eng, "SELECT key, step, value FROM metrics WHERE job_id = :j ORDER BY step", j=job_id),
        rows(eng, "SELECT message FROM job_logs WHERE job_id = :j ORDER BY id", j=job_id),
        rows(
            eng,
            "SELECT n, attempt, step, spiked_step, rows FROM rewinds WHERE job_id = :j ORDER BY n",
            j=job_id,
        ),
        rows(
            eng, "SELECT steps, train_seconds, concurrent_jobs FROM train_results WHERE job_id = :j", j=job_id
        ),
    )


# ---------------------------------------------------------------- fencing


def test_a_stalled_driver_writes_nothing_once_its_job_was_claimed_again(eng):
    (jid,) = jobqueue.submit(eng, [Grid("f", base={"tokens": 100})], fake_jobs)[0]
    a = jobqueue.claim(eng, jid, "driver-a", "/tmp/a")
    write_events(eng, [(jid, a, events(1, 1.0))])  # A owns the job: its writes land
    assert rows(eng, "SELECT step, value FROM metrics WHERE job_id = :j", j=jid) == [(1, 1.0)]

    age_heartbeat(eng, jid)  # A stalls; driver B recovers the job and claims it again
    assert recovery.recover_stale(eng, grace_s=60) == [jid]
    b = jobqueue.claim(eng, jid, "driver-b", "/tmp/a")
    assert (a, b) == (1, 2)
    before = snapshot(eng, jid)

    # A wakes up: every write it makes for the job is refused, and it cannot finish or fail it
    write_events(eng, [(jid, a, events(2, 99.0))])
    recovery.touch(eng, {jid: a})
    record_concurrency(eng, jid, a, 7)
    assert jobqueue.finish(eng, jid, a, AttemptOutcome.SUCCEEDED) == JobStatus.RUNNING
    assert jobqueue.finish(eng, jid, a, AttemptOutcome.FAILED, "late failure") == JobStatus.RUNNING
    assert snapshot(eng, jid) == before
    assert rows(eng, "SELECT outcome FROM attempts WHERE job_id = :j ORDER BY n", j=jid) == [
        ("interrupted",),
        ("running",),
    ]

    # B's writes land and B finishes the job
    write_events(eng, [(jid, b, events(2, 2.0))])
    record_concurrency(eng, jid, b, 0)
    assert jobqueue.finish(eng, jid, b, AttemptOutcome.SUCCEEDED) == JobStatus.SUCCEEDED
    assert rows(eng, "SELECT step, value FROM metrics WHERE job_id = :j ORDER BY step", j=jid) == [
        (1, 1.0),
        (2, 2.0),
    ]
    assert rows(
        eng, "SELECT steps, train_seconds, concurrent_jobs FROM train_results WHERE job_id = :j", j=jid
    ) == [(2, 2.0, 0)]
    assert rows(
        eng, "SELECT checkpoint_path, progress_done, worker, gpu_ids FROM jobs WHERE id = :j", j=jid
    ) == [("/ckpt/2.0", 2, "node-2.0:1", "2")]
    assert rows(
        eng, "SELECT n, worker, resumed_from_step FROM attempts WHERE job_id = :j ORDER BY n", j=jid
    ) == [(1, "node-1.0:1", 0), (2, "node-2.0:1", 1)]
    assert [m for (m,) in rows(eng, "SELECT message FROM job_logs WHERE job_id = :j", j=jid)] == [
        "from value 1.0",
        "from value 2.0",
    ]


def test_a_recovered_attempt_cannot_finish_its_job_before_another_driver_claims_it(eng):
    (jid,) = jobqueue.submit(eng, [Grid("f", job="noop")], fake_jobs)[0]
    n = jobqueue.claim(eng, jid, "driver-a", "/tmp/a")
    age_heartbeat(eng, jid)
    assert recovery.recover_stale(eng, grace_s=60) == [jid]
    write_events(eng, [(jid, n, events(1, 1.0))])
    assert jobqueue.finish(eng, jid, n, AttemptOutcome.SUCCEEDED) == JobStatus.QUEUED
    assert rows(eng, "SELECT status, progress_done FROM jobs WHERE id = :j", j=jid) == [("queued", None)]
    assert rows(eng, "SELECT COUNT(*) FROM metrics WHERE job_id = :j", j=jid) == [(0,)]
    assert rows(eng, "SELECT outcome FROM attempts WHERE job_id = :j", j=jid) == [("interrupted",)]


def test_claim_records_the_driver_on_the_job_and_the_attempt(eng):
    (jid,) = jobqueue.submit(eng, [Grid("f", job="noop")], fake_jobs)[0]
    me = drivers.this_driver()
    jobqueue.claim(eng, jid, "driver", "/tmp/a", me)
    ((host, pid, started),) = rows(eng, "SELECT driver_host, driver_pid, driver_started FROM jobs")
    assert (host, pid) == (me.host, os.getpid()) and started == pytest.approx(me.started)
    assert rows(eng, "SELECT driver_host, driver_pid FROM attempts") == [(me.host, os.getpid())]


# ---------------------------------------------------------------- liveness


@pytest.fixture
def dead_process() -> DriverId:
    """A process of this host that ran and is gone (killed and reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    who = DriverId(os.uname().nodename, proc.pid, drivers.process_start_time(proc.pid))
    proc.kill()
    proc.wait()
    return who


def test_alive_tells_a_live_process_from_a_dead_or_reused_pid(dead_process):
    me = drivers.this_driver()
    assert me.started is not None and me.started <= time.time()  # Linux: read from /proc
    assert drivers.alive(me.pid, me.started)
    assert not drivers.alive(me.pid, me.started - 3600)  # this pid, but another process's start: reused
    assert not drivers.alive(dead_process.pid, dead_process.started)


def test_a_killed_but_unreaped_process_is_dead():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    started = drivers.process_start_time(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    while drivers._stat(proc.pid)[0] != "Z":  # a zombie until its parent (this test) reaps it
        time.sleep(0.01)
    try:
        assert drivers.pid_exists(proc.pid) and not drivers.alive(proc.pid, started)
    finally:
        proc.wait()


def test_recover_dead_requeues_exactly_the_jobs_of_dead_drivers_of_this_host(eng, dead_process):
    me = drivers.this_driver()
    live_other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = DriverId(me.host, live_other.pid, drivers.process_start_time(live_other.pid))
        reused = DriverId(me.host, live_other.pid, live.started - 3600)  # the pid now belongs to another
        elsewhere = DriverId("another-host", dead_process.pid, dead_process.started)
        owners = {"dead": dead_process, "live": live, "reused": reused, "elsewhere": elsewhere, "me": me}
        ids = jobqueue.submit(
            eng, [Grid("l", job="noop", sweep={"tag": list(range(len(owners)))})], fake_jobs
        )[0]
        job_of = dict(zip(owners, ids, strict=True))
        for name, who in owners.items():
            assert jobqueue.claim(eng, job_of[name], f"driver-{name}", "/tmp/a", who) == 1
        assert sorted(recovery.recover_dead(eng, me)) == sorted([job_of["dead"], job_of["reused"]])
        status = dict(rows(eng, "SELECT id, status FROM jobs"))
        assert {name: status[j] for name, j in job_of.items()} == {
            "dead": "queued",
            "live": "running",
            "reused": "queued",
            "elsewhere": "running",
            "me": "running",
        }
        ((error,),) = rows(eng, "SELECT error FROM attempts WHERE job_id = :j", j=job_of["dead"])
        assert f"pid {dead_process.pid}" in error
        assert recovery.recover_dead(eng, me) == []  # queued now: not again
    finally:
        live_other.kill()
        live_other.wait()


# ---------------------------------------------------------------- real drivers


def driver_env(**extra: str) -> dict[str, str]:
    """Each driver starts its own local Ray (no RAY_ADDRESS) and runs the fake job kinds."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return {
        **env,
        "LOOPLAB_JOB_KINDS": "tests.orchestrator.fake_jobs",
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        **extra,
    }


def start_driver(db_url: str, art: Path, env: dict[str, str]) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "looplab",
        "--db",
        db_url,
        "run",
        "--until-empty",
        "--num-cpus",
        "1",
        "--artifacts",
        str(art),
    ]
    return subprocess.Popen(
        cmd,
        cwd=art.parent,
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_for(eng, sql: str, driver: subprocess.Popen, timeout_s: float = 240.0) -> list:
    end = time.time() + timeout_s
    while not (found := rows(eng, sql)):
        assert driver.poll() is None, driver.stdout.read()
        assert time.time() < end, f"nothing for {sql!r} within {timeout_s} s"
        time.sleep(0.2)
    return found


@pytest.mark.slow
@pytest.mark.ray  # each `looplab run` driver starts its own local Ray
def test_two_drivers_on_one_queue_run_every_job_exactly_once(eng, db_url, tmp_path):
    """Two `looplab run` processes, each with its own local Ray, drain one queue of 20 train jobs."""
    ids = jobqueue.submit(
        eng,
        [Grid("two", base={"tokens": 100, "steps": 4, "step_s": 0.25}, sweep={"seed": list(range(20))})],
        fake_jobs,
    )[0]
    env = driver_env(LOOPLAB_HEARTBEAT_GRACE_S="600")
    both = [start_driver(db_url, tmp_path / "art", env) for _ in range(2)]
    try:
        outs = [driver.communicate(timeout=600)[0] for driver in both]
    finally:
        for driver in both:
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)
    first, second = both
    assert first.returncode == 0 and second.returncode == 0, outs
    assert rows(eng, "SELECT DISTINCT status, attempts FROM jobs") == [("succeeded", 1)]
    per_job = rows(eng, "SELECT job_id, COUNT(*) FROM attempts WHERE outcome = 'succeeded' GROUP BY job_id")
    assert sorted(per_job) == [(j, 1) for j in sorted(ids)]
    assert rows(eng, "SELECT COUNT(*) FROM attempts") == [(len(ids),)]
    assert sorted(rows(eng, "SELECT job_id, steps FROM train_results")) == [(j, 4) for j in sorted(ids)]
    assert rows(eng, "SELECT COUNT(*), COUNT(DISTINCT job_id || '-' || step) FROM metrics") == [(80, 80)]
    # both drivers took part (one alone needs 20 s and more: longer than the other needs to start)
    assert {pid for (pid,) in rows(eng, "SELECT driver_pid FROM attempts")} == {first.pid, second.pid}


@pytest.mark.slow
@pytest.mark.ray  # each `looplab run` driver starts its own local Ray
def test_a_driver_restarted_after_kill_9_requeues_its_predecessors_job_at_once(eng, db_url, tmp_path):
    """The heartbeat grace is 10 minutes: only the dead driver's pid lets the new one take the job."""
    (jid,) = jobqueue.submit(
        eng, [Grid("k", base={"tokens": 100, "steps": 30, "step_s": 0.1, "ckpt_every": 2})], fake_jobs
    )[0]
    env = driver_env(LOOPLAB_HEARTBEAT_GRACE_S="600")
    first = start_driver(db_url, tmp_path / "art", env)
    try:
        ((ckpt,),) = wait_for(eng, "SELECT checkpoint_step FROM jobs WHERE checkpoint_step >= 4", first)
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the driver, its Ray and the worker
        first.wait()
    assert rows(eng, "SELECT status, driver_pid FROM jobs") == [("running", first.pid)]

    second = start_driver(db_url, tmp_path / "art", env)
    try:
        out = second.communicate(timeout=300)[0]
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
    assert second.returncode == 0, out
    assert "recovered 1 interrupted job(s)" in out
    attempts = rows(eng, "SELECT n, outcome, resumed_from_step, error FROM attempts ORDER BY n")
    assert [(n, o) for n, o, *_ in attempts] == [(1, "interrupted"), (2, "succeeded")]
    assert f"pid {first.pid}" in attempts[0][3]
    assert attempts[1][2] is not None and attempts[1][2] >= ckpt  # resumed from its checkpoint
    steps = rows(eng, "SELECT step FROM metrics WHERE job_id = :j ORDER BY step", j=jid)
    assert steps == [(s,) for s in range(1, 31)]  # every point once
