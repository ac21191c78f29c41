"""The persistent queue: the one module that changes a job's state or writes job and attempt rows.

Every state change is one small transaction on the database, which is the source of truth: the
scheduler keeps no state it cannot rebuild from here, and issues no SQL on jobs or attempts itself.
The legal transitions (states in orchestrator/states.py), and the function that makes each:

    submit         (new)              -> queued
    claim          queued             -> running      a conditional UPDATE ... WHERE status='queued'
                                                      whose row count says whether this driver won;
                                                      on PostgreSQL the row is first taken with
                                                      SELECT ... FOR UPDATE SKIP LOCKED, so drivers
                                                      racing for one job do not queue on its lock
    finish         running            -> succeeded | failed | queued (an interruption, or a failure
                                                      under max_attempts, after a backoff: see
                                                      retry_delay); a cancelled job stays so
    refuse         queued             -> failed       for good, without running (too big to ever fit)
    cascade        queued             -> failed       a dependency failed or was cancelled; the job
                                                      records which one (`failed_dependency`)
    recover_stale  running            -> queued       the heartbeat is older than a grace period
    recover_dead   running            -> queued       its driver ran on this host and is dead
                                                      (these two and the heartbeat `touch`: the queue's
                                                      half for lost drivers, orchestrator/recovery.py)
    cancel         queued | running   -> cancelled
    retry          failed | cancelled -> queued       and the dependents the job took down with it

Anything else is refused: a claim of a job that is not queued returns None, a cancel or retry of a
job in another state leaves it as it is.

Fencing: the token of an attempt is its number `n`. `jobs.attempts` counts the claims of a job, so it
only grows and each claim gets a new one; an attempt owns its job while `jobs.attempts == n` and its
attempts row is still open (outcome `running`; recovery closes it in the transaction that re-queues
the job). Every write on behalf of an attempt, here (`finish`, `touch`, and `record_*`, which the
event writer orchestrator/writer.py calls for progress, checkpoints, heartbeats and where the attempt
runs) and in the writer (metrics, results, logs), first takes the job row with `hold`, a
conditional UPDATE on that ownership, and writes nothing when it fails: a stalled driver whose job
was recovered and claimed again cannot write results, metrics or a status for it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy import Connection, Engine

from looplab.orchestrator import drivers, jobkinds, pairing, retention
from looplab.orchestrator.canonical import canonical_json
from looplab.orchestrator.db import server_epoch
from looplab.orchestrator.grid import Grid
from looplab.orchestrator.jobkinds import CHECKPOINT
from looplab.orchestrator.schema import RESULT_TABLES, Attempt, GridRow, JobDep, JobLog, TrainResult
from looplab.orchestrator.schema import Job as JobRow
from looplab.orchestrator.states import ACTIVE, DEAD_ENDS, REQUEUED, AttemptOutcome, JobStatus
from looplab.orchestrator.submission import (
    PlanEstimates,
    deps_first,
    job_row,
    jobs_by_hash,
    model_columns,
    plan_ids_and_hashes,
    planned,
)

if TYPE_CHECKING:
    from looplab.workers.jobs import JobRegistry

log = logging.getLogger("looplab.jobqueue")
JOBS = JobRow.__table__
DEPS = JobDep.__table__
ATTEMPTS = Attempt.__table__
DEFAULT_GRACE_S = 60.0
# retry backoff after a failed attempt: base * 2^(failures - 1) seconds, at most the cap
DEFAULT_BACKOFF_S = 5.0
DEFAULT_BACKOFF_MAX_S = 300.0
# priority aging: each this many seconds of waiting add one to a ready job's effective priority
DEFAULT_AGING_S = 300.0
READY_PAGE = 200
# the states of a job whose latest attempt may still run: a cancel lets the attempt stop on its own
HELD = (JobStatus.RUNNING, JobStatus.CANCELLED)


def open_engine(db: str | None = None) -> Engine:
    from looplab.orchestrator.db import engine

    return engine(db)


# ---------------------------------------------------------------- submission


def submit(
    eng: Engine, grids: list[Grid], kinds: JobRegistry, estimate: PlanEstimates | None = None
) -> tuple[list[int], list[int]]:
    """Validate and insert; returns (job ids in plan order, ids that were newly added).

    `estimate` (the API passes `lab.planner.submission_estimates`; this module knows nothing
    of planning) gives each new job the wall time it is expected to take (`planned_seconds`,
    `planned_source`); an estimator that fails costs only the estimates. The train jobs of an iso-time
    pair (orchestrator.pairing: a match-time budget and the job it names, while that one is still
    queued) are made exclusive unless their grid said otherwise. A plan that others only wait for (a
    preparation, `JobPlan.waits`) is added only when a job that waits for it is new."""
    plans, _ = plan_ids_and_hashes(eng, grids, kinds)
    # derived from live model code, before the write transaction opens (the first call imports torch)
    columns = model_columns(plans)
    estimates = planned(eng, plans, estimate)
    now = time.time()
    added: list[int] = []
    with eng.begin() as conn:
        grid_ids = [_grid_id(conn, g, now) for g in grids]
        existing = jobs_by_hash(conn, [p.config_hash for p in plans])
        plan_ids: dict[int, int] = {}  # plan index -> job id
        waited_by_new = {w for p in plans if p.config_hash not in existing for w in p.waits}
        waited = {w for p in plans for w in p.waits}
        for i in deps_first(plans):  # a match-time budget may name a train job of a later grid
            plan = plans[i]
            if plan.config_hash in existing:
                plan_ids[i] = existing[plan.config_hash]
                continue
            if i in waited and i not in waited_by_new:
                continue  # every job that would wait for it is in the database already
            row = job_row(plans, i, plan_ids, columns[i], estimates[i])
            job_id = conn.execute(
                JOBS.insert().values(grid_id=grid_ids[plan.grid_index], created_at=now, **row)
            ).inserted_primary_key[0]
            dep_ids = [plan_ids[d] for d in (*plan.deps, *plan.waits)] + plan.dep_ids
            for dep in dict.fromkeys(dep_ids):
                conn.execute(DEPS.insert().values(job_id=job_id, depends_on=dep))
            existing[plan.config_hash] = job_id
            plan_ids[i] = job_id
            added.append(job_id)
        ids = list(dict.fromkeys(plan_ids[i] for i in range(len(plans)) if i in plan_ids))
        _make_exclusive(conn, pairing.member_ids(plans, plan_ids))
    return ids, added


def _make_exclusive(conn: Connection, job_ids: list[int]) -> None:
    """Queued train jobs of an iso-time pair run with the node to themselves (their timings are
    compared), unless their resources say `exclusive: false`."""
    rows = conn.execute(
        sa.select(JOBS.c.id, JOBS.c.resources).where(
            JOBS.c.id.in_(job_ids), JOBS.c.kind.in_(jobkinds.trainers()), JOBS.c.status == JobStatus.QUEUED
        )
    ).all()
    for job_id, resources in rows:
        res = json.loads(resources) if resources else {}
        if "exclusive" not in res:
            conn.execute(
                JOBS.update()
                .where(JOBS.c.id == job_id)
                .values(resources=canonical_json({**res, "exclusive": True}))
            )


def _grid_id(conn: Connection, grid: Grid, now: float) -> int:
    spec_hash = grid.spec_hash()
    grid_id = conn.execute(sa.select(GridRow.id).where(GridRow.spec_hash == spec_hash)).scalar()
    if grid_id is None:
        grid_id = conn.execute(
            GridRow.__table__.insert().values(
                name=grid.name, spec=canonical_json(grid.to_dict()), spec_hash=spec_hash, created_at=now
            )
        ).inserted_primary_key[0]
    return grid_id


# ---------------------------------------------------------------- claiming


def _blocked() -> sa.ColumnElement[bool]:
    """The job (of the outer query) has a dependency that has not succeeded."""
    dep = sa.alias(JOBS, "dep")
    return (
        sa.select(DEPS.c.job_id)
        .join(dep, dep.c.id == DEPS.c.depends_on)
        .where(DEPS.c.job_id == JOBS.c.id, dep.c.status != JobStatus.SUCCEEDED)
        .exists()
    )


def effective_priority(eng: Engine, now: float, aging_s: float | None) -> sa.ColumnElement[int]:
    """priority + floor(waiting seconds / aging_s), the waiting counted from `not_before` (the end of a
    retry backoff, or a user's retry) or else from submission; just the priority when aging_s is None."""
    if aging_s is None:
        return JOBS.c.priority
    waited = (now - sa.func.coalesce(JOBS.c.not_before, JOBS.c.created_at)) / float(aging_s)
    if eng.dialect.name == "postgresql":  # its CAST rounds to the nearest integer
        waited = sa.func.floor(waited)
    # SQLite's CAST truncates, which is floor for the non-negative waits of ready jobs
    return JOBS.c.priority + sa.cast(waited, sa.Integer)


def ready_jobs(
    eng: Engine, aging_s: float | None = None, now: float | None = None, page: int = READY_PAGE
) -> Iterator[Any]:
    """Every queued job whose dependencies all succeeded and whose backoff is over, highest effective
    priority first (see `effective_priority`; its value is the row's `effective_priority`), then
    oldest. Read lazily, `page` rows per query (keyset paging on that order, with one `now` for the
    whole scan): a caller that stops early reads no more, one that goes on sees every ready job."""
    now = time.time() if now is None else now
    effective = effective_priority(eng, now, aging_s).label("effective_priority")
    ready = (JOBS.c.status == JobStatus.QUEUED) & ~_blocked()
    ready &= sa.or_(JOBS.c.not_before.is_(None), JOBS.c.not_before <= now)
    after: tuple[int, int] | None = None
    while True:
        query = sa.select(JOBS, effective).where(ready)
        if after is not None:
            query = query.where(
                sa.or_(effective < after[0], sa.and_(effective == after[0], JOBS.c.id > after[1]))
            )
        with eng.connect() as conn:
            rows = conn.execute(query.order_by(effective.desc(), JOBS.c.id).limit(page)).all()
        yield from rows
        if len(rows) < page:
            return
        after = (rows[-1].effective_priority, rows[-1].id)


def nothing_left(eng: Engine) -> bool:
    """True when no job can start now or later without a user acting: none is ready (a job waiting
    out a retry backoff counts as ready), and none runs (a running job, of this or of another,
    possibly dead, driver, may still unblock queued ones)."""
    cascade(eng)
    with eng.connect() as conn:
        ready = sa.select(JOBS.c.id).where(JOBS.c.status == JobStatus.QUEUED, ~_blocked()).limit(1)
        if conn.execute(ready).first() is not None:
            return False
        running = sa.select(JOBS.c.id).where(JOBS.c.status == JobStatus.RUNNING).limit(1)
        return conn.execute(running).first() is None


def claim(
    eng: Engine, job_id: int, worker: str, artifact_dir: str, driver: drivers.DriverId | None = None
) -> int | None:
    """Atomically move one queued job to running; returns the attempt number (the attempt's fencing
    token), or None if lost. `driver` (host, pid, start time) is recorded on the job and the attempt."""
    who = {"driver_host": driver and driver.host, "driver_pid": driver and driver.pid}
    with eng.begin() as conn:
        # PostgreSQL: a row another driver is claiming right now is skipped, not waited for
        free = sa.select(JOBS.c.id).where(JOBS.c.id == job_id, JOBS.c.status == JobStatus.QUEUED)
        if conn.execute(free.with_for_update(skip_locked=True)).first() is None:
            return None
        # stamped once the row is ours, so after the commit that queued it again: stamped before the lock
        # (a loaded driver waiting 36 ms for it), attempt 3 of a job started before attempt 2, which
        # another driver had claimed and failed meanwhile, and the soak's checker saw two live attempts
        now = time.time()
        won = conn.execute(
            JOBS.update()
            .where(JOBS.c.id == job_id, JOBS.c.status == JobStatus.QUEUED)
            .values(
                status=JobStatus.RUNNING,
                attempts=JOBS.c.attempts + 1,
                started_at=now,
                heartbeat_at=server_epoch(),
                finished_at=None,
                error=None,
                worker=worker,
                artifact_dir=artifact_dir,
                driver_started=None if driver is None else driver.started,
                **who,
            )
        ).rowcount
        if won != 1:
            return None
        n = conn.execute(sa.select(JOBS.c.attempts).where(JOBS.c.id == job_id)).scalar_one()
        conn.execute(
            ATTEMPTS.insert().values(
                job_id=job_id, n=n, started_at=now, outcome=AttemptOutcome.RUNNING, worker=worker, **who
            )
        )
        # result rows of an earlier, unfinished attempt would be duplicated by this one
        for model in RESULT_TABLES.values():
            conn.execute(model.__table__.delete().where(model.__table__.c.job_id == job_id))
    return n


def owns(job_id: int, n: int) -> sa.ColumnElement[bool]:
    """Attempt `n` owns job `job_id` (a condition on the jobs table): it is the job's latest claim and
    is still open. The fencing condition of every write on behalf of an attempt."""
    open_attempt = (
        sa.select(ATTEMPTS.c.id)
        .where(ATTEMPTS.c.job_id == job_id, ATTEMPTS.c.n == n, ATTEMPTS.c.outcome == AttemptOutcome.RUNNING)
        .exists()
    )
    return (JOBS.c.id == job_id) & (JOBS.c.attempts == n) & JOBS.c.status.in_(HELD) & open_attempt


def hold(conn: Connection, job_id: int, n: int) -> bool:
    """In the caller's transaction, take job `job_id`'s row for attempt `n` if that attempt owns it
    (a no-op conditional UPDATE: the row stays locked until the transaction ends, so no recovery or
    claim can slip in between this check and the caller's writes). False: write nothing for it."""
    held = conn.execute(JOBS.update().where(owns(job_id, n)).values(attempts=JOBS.c.attempts)).rowcount
    return held == 1


def refuse(
    eng: Engine, job_id: int, worker: str, reason: str, driver: drivers.DriverId | None = None
) -> JobStatus | None:
    """Fail a queued job for good without running it (it needs more than the cluster has: not the
    job's fault, and no retry would help). None when another driver claimed it first."""
    n = claim(eng, job_id, worker, "", driver)
    if n is None:
        return None
    failed = sa.select(sa.func.count()).where(
        ATTEMPTS.c.job_id == job_id, ATTEMPTS.c.outcome == AttemptOutcome.FAILED
    )
    with eng.begin() as conn:
        # this attempt's failure must reach max_attempts, whatever interruptions came before
        conn.execute(
            JOBS.update().where(JOBS.c.id == job_id).values(max_attempts=failed.scalar_subquery() + 1)
        )
    return finish(eng, job_id, n, AttemptOutcome.FAILED, reason)


def launch_spec(eng: Engine, job: Any, kinds: JobRegistry | None = None) -> dict[str, Any]:
    """The spec the worker receives: stored config plus what only exists at launch time: a checkpoint
    follow-up's `checkpoint` (the artifact dir of the job it follows; its kind's declaration in
    registry `kinds`, default jobkinds.registry()), a match-time job's time budget."""
    spec = json.loads(job.config)
    declared = jobkinds.declared(job.kind, kinds)
    ref = pairing.stored_reference(job.budget)
    with eng.connect() as conn:
        if declared.about == CHECKPOINT and "checkpoint" not in spec:
            dirs = (
                conn.execute(
                    sa.select(JOBS.c.artifact_dir)
                    .join(DEPS, DEPS.c.depends_on == JOBS.c.id)
                    .where(DEPS.c.job_id == job.id, JOBS.c.kind.in_(declared.follows))
                )
                .scalars()
                .all()
            )
            if dirs:
                spec["checkpoint"] = dirs[0]
        seconds = None
        if ref is not None:
            seconds = conn.execute(sa.select(JOBS.c.budget_time_s).where(JOBS.c.id == job.id)).scalar()
    if ref is not None:
        if seconds is None:  # the reference had succeeded before this job was submitted
            seconds = _resolve_budget_of(eng, job.id, ref)
        if seconds is None:
            raise RuntimeError(f"derived budget of job {job.id} not resolved (job {ref})")
        spec["time_s"], spec["tokens"] = float(seconds), None
    return spec


# ---------------------------------------------------------------- outcomes


def _resolve_budget_of(eng: Engine, job_id: int, ref_id: int) -> float | None:
    """Resolve one derived budget from its succeeded reference's measured training time."""
    with eng.begin() as conn:
        seconds = conn.execute(
            sa.select(TrainResult.train_seconds)
            .join(JOBS, JOBS.c.id == TrainResult.job_id)
            .where(TrainResult.job_id == ref_id, JOBS.c.status == JobStatus.SUCCEEDED)
        ).scalar()
        if seconds is not None:
            conn.execute(JOBS.update().where(JOBS.c.id == job_id).values(budget_time_s=float(seconds)))
    return None if seconds is None else float(seconds)


def retry_delay(
    failures: int, base_s: float = DEFAULT_BACKOFF_S, max_s: float = DEFAULT_BACKOFF_MAX_S
) -> float:
    """Seconds a job waits before its next attempt after its `failures`-th failed one:
    base_s * 2^(failures - 1), at most max_s."""
    return min(max_s, base_s * 2.0 ** max(0, failures - 1))


def last_preempted(conn: Connection, job_id: int) -> float | None:
    """When job `job_id`'s last preempted attempt ended (None: never preempted). The scheduler reads it once
    as an attempt starts: while that attempt runs no other attempt of the job can end, so the answer holds
    until the attempt ends, and the no-thrashing rule costs no query per scheduling pass."""
    was = (ATTEMPTS.c.job_id == job_id) & (ATTEMPTS.c.outcome == AttemptOutcome.PREEMPTED)
    return conn.execute(sa.select(sa.func.max(ATTEMPTS.c.ended_at)).where(was)).scalar_one()


def _failures(conn: Connection, job_id: int) -> int:
    """How many attempts of job `job_id` failed (interruptions and cancels are not the job's fault)."""
    failed = (ATTEMPTS.c.job_id == job_id) & (ATTEMPTS.c.outcome == AttemptOutcome.FAILED)
    return conn.execute(sa.select(sa.func.count()).where(failed)).scalar_one()


def finish(
    eng: Engine,
    job_id: int,
    n: int,
    outcome: AttemptOutcome,
    error: str | None = None,
    *,
    backoff_s: float = DEFAULT_BACKOFF_S,
    backoff_max_s: float = DEFAULT_BACKOFF_MAX_S,
    retry: bool = True,
) -> JobStatus:
    """Record attempt `n`'s outcome (succeeded | failed | interrupted | preempted); returns the job's new
    status. A success makes the attempt's final weights the job's (`retention.promote_final`).
    `retry=False`: a failure is final whatever attempts are left (a deterministic run's non-finite loss
    would only repeat).

    failed: back to queued while the failed attempts are fewer than max_attempts (interruptions do not
    count: a kill -9 is not the job's fault), not to be claimed before `retry_delay(failures,
    backoff_s, backoff_max_s)` seconds have passed; else failed for good and the dependents with it.
    A job cancelled while it ran stays cancelled whatever the attempt's outcome.
    An attempt that no longer owns its job (see `owns`: recovered, and maybe claimed again) changes
    nothing, neither the job nor its attempt row; the job's status as it is is returned.
    """
    outcome = AttemptOutcome(outcome)
    now = time.time()
    this_attempt = (ATTEMPTS.c.job_id == job_id) & (ATTEMPTS.c.n == n)
    with eng.begin() as conn:
        if not hold(conn, job_id, n):  # fenced off: a newer attempt, or a recovery, owns the job
            status = conn.execute(sa.select(JOBS.c.status).where(JOBS.c.id == job_id)).scalar_one()
            log.warning(
                "job %s: attempt %s no longer owns the job; its %s is not recorded", job_id, n, outcome
            )
            return JobStatus(status)
        job = conn.execute(sa.select(JOBS).where(JOBS.c.id == job_id)).one()
        if outcome == AttemptOutcome.SUCCEEDED and job.status != JobStatus.CANCELLED:
            refused = retention.promote_final(job.artifact_dir, n)  # under the fence: see there
            outcome, error = (AttemptOutcome.FAILED, refused) if refused else (outcome, error)
        conn.execute(ATTEMPTS.update().where(this_attempt).values(ended_at=now, outcome=outcome, error=error))
        values: dict[str, Any] = {"heartbeat_at": server_epoch()}
        if job.status == JobStatus.CANCELLED:
            conn.execute(ATTEMPTS.update().where(this_attempt).values(outcome=AttemptOutcome.CANCELLED))
            status = JobStatus.CANCELLED
        elif outcome == AttemptOutcome.SUCCEEDED:
            status = JobStatus.SUCCEEDED
        elif outcome in REQUEUED:
            status = JobStatus.QUEUED
        else:
            failures = _failures(conn, job_id)
            status = JobStatus.QUEUED if retry and failures < job.max_attempts else JobStatus.FAILED
            if status == JobStatus.QUEUED:
                values["not_before"] = now + retry_delay(failures, backoff_s, backoff_max_s)
        values["status"] = status
        if status in (JobStatus.SUCCEEDED, JobStatus.FAILED):
            values.update(finished_at=now, eta_s=None)
        if error is not None:
            values["error"] = error
            conn.execute(
                JobLog.__table__.insert().values(
                    job_id=job_id, attempt=n, ts=now, level="ERROR", message=error
                )
            )
        conn.execute(
            JOBS.update().where(JOBS.c.id == job_id, JOBS.c.status != JobStatus.CANCELLED).values(**values)
        )
        if status == JobStatus.SUCCEEDED:
            _resolve_budgets(conn, job_id)
    if status in DEAD_ENDS:
        cascade(eng)
    return status


def _resolve_budgets(conn: Connection, job_id: int) -> None:
    """Jobs whose budget copies this job's time (orchestrator.pairing) get its measured training time
    as their budget (its device-seconds across worker counts, `pairing.time_budget`)."""
    found = conn.execute(
        sa.select(TrainResult.train_seconds, TrainResult.workers).where(TrainResult.job_id == job_id)
    ).one_or_none()
    if found is None or found.train_seconds is None:
        return
    budgets = pairing.matched_budgets(conn, job_id, found.train_seconds, found.workers)
    for other_id, budget_s in budgets.items():
        conn.execute(JOBS.update().where(JOBS.c.id == other_id).values(budget_time_s=budget_s))


def cascade(eng: Engine) -> list[int]:
    """Fail every queued job with a failed or cancelled dependency, transitively; each records the
    dependency that took it down in `failed_dependency`. Returns their ids."""
    failed_all: list[int] = []
    dep = sa.alias(JOBS, "dep")
    while True:
        with eng.begin() as conn:
            rows = conn.execute(
                sa.select(JOBS.c.id, dep.c.id.label("dep_id"), dep.c.status, dep.c.error)
                .join(DEPS, DEPS.c.job_id == JOBS.c.id)
                .join(dep, dep.c.id == DEPS.c.depends_on)
                .where(JOBS.c.status == JobStatus.QUEUED, dep.c.status.in_(DEAD_ENDS))
            ).all()
            if not rows:
                return failed_all
            now = time.time()
            for r in {r.id: r for r in rows}.values():
                reason = (r.error or r.status).strip().splitlines()
                msg = f"dependency job {r.dep_id} {r.status}: {reason[-1] if reason else ''}"
                conn.execute(
                    JOBS.update()
                    .where(JOBS.c.id == r.id, JOBS.c.status == JobStatus.QUEUED)
                    .values(status=JobStatus.FAILED, error=msg, finished_at=now, failed_dependency=r.dep_id)
                )
                failed_all.append(r.id)


# What a running attempt reports about its job: the writer's (orchestrator/writer.py) row writes, in
# its transaction, after `hold(conn, job_id, n)` took the row. They never touch a job's state.

# jobs columns set from progress, heartbeat and checkpoint events
LIVE_COLUMNS = (
    "progress_done",
    "progress_total",
    "eta_s",
    "heartbeat_at",
    "checkpoint_path",
    "checkpoint_step",
)


def record_live(conn: Connection, job_id: int, n: int, values: dict[str, Any]) -> None:
    """Set the LIVE_COLUMNS in `values` on job `job_id` for attempt `n` (one UPDATE per batch)."""
    unknown = sorted(set(values) - set(LIVE_COLUMNS))
    if unknown:
        raise ValueError(f"record_live: {unknown} are not live columns; accepted: {', '.join(LIVE_COLUMNS)}")
    if values:
        conn.execute(JOBS.update().where(JOBS.c.id == job_id, JOBS.c.attempts == n).values(**values))


def record_started(conn: Connection, job_id: int, n: int, worker: str, gpu_ids: str | None) -> None:
    """Attempt `n` runs on `worker` ("node:pid") with GPUs `gpu_ids`: on its attempts row and its job."""
    conn.execute(
        ATTEMPTS.update().where(ATTEMPTS.c.job_id == job_id, ATTEMPTS.c.n == n).values(worker=worker)
    )
    conn.execute(
        JOBS.update().where(JOBS.c.id == job_id, JOBS.c.attempts == n).values(worker=worker, gpu_ids=gpu_ids)
    )


def record_resumed(conn: Connection, job_id: int, n: int, step: int) -> None:
    """Attempt `n` resumed from the checkpoint at `step` (its attempts row keeps it)."""
    conn.execute(
        ATTEMPTS.update().where(ATTEMPTS.c.job_id == job_id, ATTEMPTS.c.n == n).values(resumed_from_step=step)
    )


# ---------------------------------------------------------------- user actions


def cancel(eng: Engine, job_ids: list[int]) -> list[int]:
    """Queued or running jobs become cancelled (a running one is asked to stop by its driver)."""
    with eng.begin() as conn:
        hit = (
            conn.execute(sa.select(JOBS.c.id).where(JOBS.c.id.in_(job_ids), JOBS.c.status.in_(ACTIVE)))
            .scalars()
            .all()
        )
        conn.execute(
            JOBS.update()
            .where(JOBS.c.id.in_(hit))
            .values(status=JobStatus.CANCELLED, finished_at=time.time())
        )
    cascade(eng)
    return list(hit)


def retry(eng: Engine, job_ids: list[int]) -> list[int]:
    """Failed or cancelled jobs go back to queued with one more allowed failure, and so do their
    dependents that failed only because of them (`failed_dependency`)."""
    requeued: list[int] = []
    now = time.time()
    with eng.begin() as conn:
        todo = list(job_ids)
        while todo:
            job_id = todo.pop()
            job = conn.execute(sa.select(JOBS).where(JOBS.c.id == job_id)).first()
            if job is None or job.status not in DEAD_ENDS:
                continue
            still_running = sa.select(ATTEMPTS.c.n).where(
                ATTEMPTS.c.job_id == job_id, ATTEMPTS.c.outcome == AttemptOutcome.RUNNING
            )
            if conn.execute(still_running).first():
                continue  # cancelled but its attempt still runs until it stops: a retry now would run it twice
            failures = _failures(conn, job_id)
            conn.execute(
                JOBS.update()
                .where(JOBS.c.id == job_id)
                .values(
                    status=JobStatus.QUEUED,
                    error=None,
                    finished_at=None,
                    failed_dependency=None,
                    max_attempts=max(job.max_attempts, failures + 1),
                    not_before=now,  # no backoff; its waiting (priority aging) counts from now
                )
            )
            requeued.append(job_id)
            dependents = (
                conn.execute(
                    sa.select(JOBS.c.id).where(
                        JOBS.c.status == JobStatus.FAILED, JOBS.c.failed_dependency == job_id
                    )
                )
                .scalars()
                .all()
            )
            todo.extend(dependents)
    return requeued


def statuses(eng: Engine, job_ids: list[int]) -> dict[int, JobStatus]:
    """The current status of each of `job_ids` that exists."""
    with eng.connect() as conn:
        rows = conn.execute(sa.select(JOBS.c.id, JOBS.c.status).where(JOBS.c.id.in_(job_ids))).all()
    return {job_id: JobStatus(status) for job_id, status in rows}
