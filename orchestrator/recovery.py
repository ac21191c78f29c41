"""The queue's half for lost drivers: the heartbeat a driver gives the jobs it owns (`touch`), and the two
ways their jobs come back when it is gone (`recover_stale`: a heartbeat older than the grace period, judged
by the database server's clock; `recover_dead`: its process on this host is dead). Part of the persistent
queue (orchestrator/jobqueue.py, whose docstring has the transitions and the fencing): these too change a
job's state only through conditional updates on its row, so a driver racing a recovery loses cleanly.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy import Connection, Engine

from looplab.orchestrator import drivers
from looplab.orchestrator.db import server_epoch
from looplab.orchestrator.jobqueue import ATTEMPTS, HELD, JOBS, owns
from looplab.orchestrator.states import AttemptOutcome, JobStatus


def _requeue(conn: Connection, job_id: int, n: int, reason: str) -> bool:
    """Running attempt `n` of job `job_id` is lost: the job goes back to queued and the attempt is
    closed as interrupted, in the caller's transaction. False when the job moved on meanwhile."""
    won = conn.execute(
        JOBS.update()
        .where(JOBS.c.id == job_id, JOBS.c.status == JobStatus.RUNNING, JOBS.c.attempts == n)
        .values(status=JobStatus.QUEUED)
    ).rowcount
    if won:
        conn.execute(
            ATTEMPTS.update()
            .where(
                ATTEMPTS.c.job_id == job_id, ATTEMPTS.c.n == n, ATTEMPTS.c.outcome == AttemptOutcome.RUNNING
            )
            .values(outcome=AttemptOutcome.INTERRUPTED, ended_at=time.time(), error=reason)
        )
    return bool(won)


def _close_cancelled(conn: Connection, lost: sa.Select, reason: str) -> None:
    """Close the still-open attempts of the cancelled jobs `lost` selects, whose driver is gone (else
    they stay `running` for ever and the job can never be retried)."""
    conn.execute(
        ATTEMPTS.update()
        .where(ATTEMPTS.c.outcome == AttemptOutcome.RUNNING, ATTEMPTS.c.job_id.in_(lost))
        .values(outcome=AttemptOutcome.CANCELLED, ended_at=time.time(), error=reason)
    )


def recover_stale(eng: Engine, grace_s: float, exclude: set[int] = frozenset()) -> list[int]:
    """`running` jobs with a heartbeat older than `grace_s` seconds (epoch floats, one clock: the
    database server's) go back to `queued`; their open attempt is recorded as interrupted. They resume
    from their checkpoint."""
    cutoff = server_epoch() - grace_s
    silent = sa.or_(JOBS.c.heartbeat_at.is_(None), JOBS.c.heartbeat_at < cutoff)
    with eng.begin() as conn:
        stale = conn.execute(
            sa.select(JOBS.c.id, JOBS.c.attempts)
            .where(JOBS.c.status == JobStatus.RUNNING, silent)
            .order_by(JOBS.c.id)  # rows are taken in id order, as the writer takes them
        ).all()
        recovered = [
            job_id
            for job_id, n in stale
            if job_id not in exclude and _requeue(conn, job_id, n, "driver lost (stale heartbeat)")
        ]
        lost = sa.select(JOBS.c.id).where(
            JOBS.c.status == JobStatus.CANCELLED, silent, JOBS.c.id.not_in(list(exclude))
        )
        _close_cancelled(conn, lost, "driver lost after the job was cancelled")
    return recovered


def recover_dead(
    eng: Engine, me: drivers.DriverId, alive: Callable[[int, float | None], bool] = drivers.alive
) -> list[int]:
    """`running` jobs whose driver ran on this host (`me.host`) and is dead go back to `queued` at
    once, without waiting for their heartbeat to go stale; returns their ids. `alive(pid, started)`
    judges a driver (see orchestrator.drivers: a pid that is gone, or now belongs to a process that
    started at another time, is dead). The calling driver's own jobs are never touched."""
    on_host = (JOBS.c.driver_host == me.host) & JOBS.c.driver_pid.is_not(None)
    with eng.begin() as conn:
        rows = conn.execute(
            sa.select(JOBS.c.id, JOBS.c.attempts, JOBS.c.status, JOBS.c.driver_pid, JOBS.c.driver_started)
            .where(on_host, JOBS.c.status.in_(HELD))
            .order_by(JOBS.c.id)
        ).all()
        dead = [r for r in rows if r.driver_pid != me.pid and not alive(r.driver_pid, r.driver_started)]
        reason = "driver lost (its process on {host} is gone: pid {pid})"
        recovered = [
            r.id
            for r in dead
            if r.status == JobStatus.RUNNING
            and _requeue(conn, r.id, r.attempts, reason.format(host=me.host, pid=r.driver_pid))
        ]
        cancelled = [r.id for r in dead if r.status == JobStatus.CANCELLED]
        if cancelled:
            lost = sa.select(JOBS.c.id).where(JOBS.c.id.in_(cancelled))
            _close_cancelled(conn, lost, "driver lost after the job was cancelled")
    return recovered


def touch(eng: Engine, attempts: dict[int, int]) -> list[int]:
    """The driver's heartbeat for the jobs it owns ({job id: attempt n}): proves the owner is alive
    even between events. Only running jobs the attempt still owns (see `owns`) are touched. Returns the
    jobs whose attempt no longer owns them (taken over, or recovered): their driver stops them."""
    lost = []
    beat = sa.case((JOBS.c.status == JobStatus.RUNNING, server_epoch()), else_=JOBS.c.heartbeat_at)
    with eng.begin() as conn:
        for job_id, n in sorted(attempts.items()):
            if conn.execute(JOBS.update().where(owns(job_id, n)).values(heartbeat_at=beat)).rowcount != 1:
                lost.append(job_id)
    return lost
