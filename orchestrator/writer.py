"""The one database writer of worker events: persists batches of them (see workers/reporter.py) in
one transaction per batch.

Workers never open the database; their events reach the scheduler process, which calls
`write_events` every half second or so with everything that arrived. Batching is what makes the
queue cheap: one transaction for hundreds of metric points instead of one per point.

Per `EventKind` (workers/reporter.py); the `jobs` and `attempts` columns are written through
orchestrator/jobqueue.py (the one module that writes those rows), in this writer's transaction:
- metric     -> metrics upsert on (job_id, key, step) + latest_metrics upsert (dialect's ON CONFLICT)
- progress   -> jobs.progress_done/progress_total/eta_s
- heartbeat  -> jobs.heartbeat_at (time of writing: one clock, whatever the worker node's clock says)
- checkpoint -> jobs.checkpoint_path/checkpoint_step
                (these three: `record_live`, one UPDATE per batch, the last value of the batch winning)
- result     -> a row of RESULT_TABLES[table] with job_id added
- log        -> job_logs
- resumed    -> attempts.resumed_from_step (`record_resumed`), and the job's metric points after that
                step are deleted: the resumed attempt reports them again, so every point is stored once
- started    -> attempts.worker, jobs.worker/gpu_ids (`record_started`; sent by the task wrapper)
A kind that is no `EventKind` is a bad event (below).
Events are applied in order per job, so a `resumed` deletes only points reported before it.

Fencing: a batch is written for the attempt `n` it was reported under, and only while that attempt
owns its job (`jobqueue.hold`, in the same transaction, before anything is written; see
orchestrator/jobqueue.py). The events of an attempt that was recovered (and maybe claimed again by
another driver) are dropped whole, with a WARNING on the driver's log: they would overwrite the
rows of the attempt that owns the job now.
`record_concurrency` is the driver's own addition to a job's timing rows: how many other jobs ran
beside it (`concurrent_jobs` of train_results and decode_benches).

One bad event never costs the others: an event that does not fit (a metric without a value, a
result row for an unknown table or with unknown columns, a NaN that SQLite would store as NULL) is
dropped with a WARNING line in the job's log, before anything is written. Should the database still
refuse a batch, it is written again job by job, then event by event, so only the bad event is lost.
"""

from __future__ import annotations

import logging
import math
import time
from numbers import Real
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DataError, IntegrityError, InterfaceError, ProgrammingError

from orchestrator import jobqueue
from orchestrator.schema import RESULT_TABLES, JobLog, LatestMetric, Metric
from workers.reporter import Event, EventKind

log = logging.getLogger("looplab.writer")
METRICS = Metric.__table__
LATEST = LatestMetric.__table__
LOGS = JobLog.__table__
# what the database raises for a row it will not take; a locked or lost database is not a bad row
BAD_ROW_ERRORS = (IntegrityError, DataError, ProgrammingError, InterfaceError)


def write_events(eng: Engine, batches: list[tuple[int, int, list[Event]]]) -> int:
    """Persist `(job_id, attempt_n, events)` batches in one transaction; returns the event count
    (of those given: the batches of an attempt that does not own its job are dropped)."""
    # job rows are taken in id order (as recovery takes them), so two writers never wait on each other
    # in a cycle; the sort is stable: each job's batches keep their order
    batches = sorted(batches, key=lambda batch: batch[0])
    try:
        with eng.begin() as conn:
            for job_id, attempt_n, events in batches:
                _write_job(eng, conn, job_id, attempt_n, events)
    except BAD_ROW_ERRORS:
        log.warning("the database refused a batch of events: writing it again job by job", exc_info=True)
        for job_id, attempt_n, events in batches:
            _write_job_alone(eng, job_id, attempt_n, events)
    return sum(len(events) for _, _, events in batches)


def _write_job_alone(eng: Engine, job_id: int, attempt_n: int, events: list[Event]) -> None:
    """One job's events in their own transaction; if refused, one event per transaction (in order)."""
    try:
        with eng.begin() as conn:
            _write_job(eng, conn, job_id, attempt_n, events)
        return
    except BAD_ROW_ERRORS:
        pass
    for event in events:
        try:
            with eng.begin() as conn:
                _write_job(eng, conn, job_id, attempt_n, [event])
        except BAD_ROW_ERRORS as e:
            reason = f"the database refused it: {type(e).__name__}: {getattr(e, 'orig', e)}"
            log.warning("job %s: %s event dropped (%s)", job_id, event.kind, reason)
            try:
                with eng.begin() as conn:
                    if jobqueue.hold(conn, job_id, attempt_n):
                        _log_dropped(conn, job_id, attempt_n, event, reason)
            except BAD_ROW_ERRORS:  # no such job: nowhere to say it but here
                log.warning("job %s: could not record the dropped event in job_logs", job_id)


# ---------------------------------------------------------------- checks


def _number(value: Any, optional: bool = False) -> bool:
    if value is None:
        return optional
    return isinstance(value, Real) and not isinstance(value, bool) and not math.isnan(value)


def _integer(value: Any, optional: bool = False) -> bool:
    """A 64-bit integer: SQLite's driver raises OverflowError (no database error) on a larger one."""
    if value is None:
        return optional
    return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63


def _kind(event: Event) -> EventKind | None:
    """The event's kind as an `EventKind`, None when it is none (a plain string of no member)."""
    try:
        return EventKind(event.kind)
    except ValueError:
        return None


def _problem(event: Event, kind: EventKind | None) -> str | None:
    """Why `event` (of `kind`, from `_kind`) cannot be stored, or None when it can (result rows are
    checked by _result_problem)."""
    p = event.payload if isinstance(event.payload, dict) else None
    if p is None:
        return f"payload is {type(event.payload).__name__}, not a dict"
    match kind:
        case EventKind.METRIC:
            if not isinstance(p.get("key"), str) or not p["key"]:
                return "metric without a key"
            if not _integer(p.get("step")):
                return f"metric {p['key']!r}: step {p.get('step')!r} is not a 64-bit integer"
            if not _number(p.get("value")):  # SQLite stores NaN as NULL, which the column refuses
                return f"metric {p['key']!r} step {p['step']}: value {p.get('value')!r} is not a number"
            if not _integer(p.get("tokens"), optional=True) or not _number(p.get("wall_s"), optional=True):
                return f"metric {p['key']!r} step {p['step']}: tokens/wall_s are not numbers"
        case EventKind.PROGRESS:
            if not (_number(p.get("done")) and _number(p.get("total")) and _number(p.get("eta_s"), True)):
                return "progress needs numbers done, total (and eta_s or None)"
        case EventKind.CHECKPOINT:
            if not isinstance(p.get("path"), str) or not _integer(p.get("step")):
                return "checkpoint needs a path and an integer step"
        case EventKind.RESUMED:
            if not _integer(p.get("step")):
                return "resumed needs an integer step"
        case EventKind.LOG:
            if "message" not in p:
                return "log without a message"
        case EventKind.RESULT:
            if not isinstance(p.get("table"), str) or not isinstance(p.get("row"), dict):
                return "result needs a table name and a row dict"
        case EventKind.STARTED:
            if not isinstance(p.get("worker"), str) or not isinstance(p.get("gpu_ids"), str | None):
                return "started needs a worker name (and gpu_ids text or None)"
        case EventKind.HEARTBEAT:
            pass
        case None:
            return f"unknown event kind {event.kind!r}; accepted: {', '.join(EventKind)}"
    return None


def _result_problem(table_name: str, row: dict[str, Any]) -> str | None:
    model = RESULT_TABLES.get(table_name)
    if model is None:
        return f"unknown result table {table_name!r}; accepted: {', '.join(RESULT_TABLES)}"
    table = model.__table__
    unknown = sorted(set(row) - set(table.c.keys()))
    if unknown:
        return f"unknown columns {unknown}"
    missing = sorted(
        c.name for c in table.c
        if not c.nullable and c.default is None and c.autoincrement is not True and row.get(c.name) is None
        and not (c.primary_key and c.name == "id")
    )  # fmt: skip
    if missing:
        return f"missing columns {missing}"
    odd = sorted(k for k, v in row.items() if v is not None and not isinstance(v, str | Real))
    nan = sorted(k for k, v in row.items() if isinstance(v, float) and math.isnan(v))
    if odd:
        return f"columns {odd} hold values that are neither numbers nor text"
    if [k for k in nan if not table.c[k].nullable]:
        return f"columns {nan} are NaN"
    return None


def _log_dropped(conn: Connection, job_id: int, attempt_n: int, event: Event, reason: str) -> None:
    conn.execute(
        LOGS.insert().values(
            job_id=job_id,
            attempt=attempt_n,
            ts=event.ts,
            level="WARNING",
            message=f"{event.kind} event dropped ({reason}): {event.payload}",
        )
    )


# ---------------------------------------------------------------- writing


def _write_job(eng: Engine, conn: Connection, job_id: int, attempt_n: int, events: list[Event]) -> None:
    if not jobqueue.hold(conn, job_id, attempt_n):
        log.warning("job %s: %d event(s) of attempt %s dropped: the attempt no longer owns the job",
                    job_id, len(events), attempt_n)  # fmt: skip
        return
    metrics: list[dict[str, Any]] = []
    live: dict[str, Any] = {}  # the job's live columns, the last value of the batch winning
    for event in events:
        kind = _kind(event)
        bad = _problem(event, kind)
        if bad is None and kind == EventKind.RESULT:
            bad = _result_problem(event.payload["table"], dict(event.payload["row"], job_id=job_id))
        if bad is not None:
            _log_dropped(conn, job_id, attempt_n, event, bad)
            continue
        p = event.payload
        match kind:
            case EventKind.METRIC:
                metrics.append({"job_id": job_id, "key": p["key"], "step": p["step"], "value": p["value"],
                                "tokens": p.get("tokens"), "wall_s": p.get("wall_s")})  # fmt: skip
            case EventKind.PROGRESS:
                live.update(progress_done=p["done"], progress_total=p["total"], eta_s=p.get("eta_s"))
            case EventKind.HEARTBEAT:  # the writer's clock: recovery compares with the drivers' clocks,
                live["heartbeat_at"] = time.time()  # not with a remote node's (one clock)
            case EventKind.CHECKPOINT:
                live.update(checkpoint_path=p["path"], checkpoint_step=p["step"])
            case EventKind.STARTED:
                jobqueue.record_started(conn, job_id, attempt_n, p["worker"], p.get("gpu_ids"))
            case EventKind.LOG:
                conn.execute(
                    LOGS.insert().values(job_id=job_id, attempt=attempt_n, ts=event.ts,
                                         level=str(p.get("level", "INFO")), message=str(p["message"]))
                )  # fmt: skip
            case EventKind.RESUMED:
                _upsert_metrics(eng, conn, metrics)
                metrics = []
                jobqueue.record_resumed(conn, job_id, attempt_n, p["step"])
                conn.execute(METRICS.delete().where(METRICS.c.job_id == job_id, METRICS.c.step > p["step"]))
                conn.execute(LATEST.delete().where(LATEST.c.job_id == job_id, LATEST.c.step > p["step"]))
            case EventKind.RESULT:
                _write_result(eng, conn, job_id, p["table"], p["row"])
    _upsert_metrics(eng, conn, metrics)
    jobqueue.record_live(conn, job_id, attempt_n, live)


def _insert(eng: Engine, table: sa.Table):
    """INSERT of the engine's dialect (sqlite/postgresql both have ON CONFLICT ... DO UPDATE)."""
    if eng.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(table)


def _upsert_metrics(eng: Engine, conn: Connection, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    # one point per (job, key, step) in the batch, the last one winning (as in the database)
    rows = list({(r["job_id"], r["key"], r["step"]): r for r in rows}.values())
    ins = _insert(eng, METRICS)
    conn.execute(
        ins.on_conflict_do_update(
            index_elements=["job_id", "key", "step"],
            set_={"value": ins.excluded.value, "tokens": ins.excluded.tokens, "wall_s": ins.excluded.wall_s},
        ),
        rows,
    )
    latest: dict[tuple[int, str], dict[str, Any]] = {}
    for r in rows:
        k = (r["job_id"], r["key"])
        if k not in latest or r["step"] >= latest[k]["step"]:
            latest[k] = r
    latest_insert = _insert(eng, LATEST)
    conn.execute(
        latest_insert.on_conflict_do_update(
            index_elements=["job_id", "key"],
            set_={c: getattr(latest_insert.excluded, c) for c in ("step", "tokens", "wall_s", "value")},
        ),
        list(latest.values()),
    )


def _write_result(eng: Engine, conn: Connection, job_id: int, table_name: str, row: dict[str, Any]) -> None:
    """One result row (checked by _result_problem), upserted on the table's primary key: a
    re-reported row replaces the old one."""
    table = RESULT_TABLES[table_name].__table__
    row = dict(row, job_id=job_id)
    pk = [c.name for c in table.primary_key.columns]
    ins = _insert(eng, table).values(**row)
    if "id" not in pk:
        ins = ins.on_conflict_do_update(index_elements=pk, set_={k: v for k, v in row.items() if k not in pk})
    conn.execute(ins)


# Result tables whose rows are timings: they record the contention they were measured under.
TIMING_TABLES = ("train_results", "decode_benches", "adaptive_decodes")


def record_concurrency(eng: Engine, job_id: int, attempt_n: int, others: int) -> None:
    """Set `concurrent_jobs` = `others` (the number of other jobs that ran on the node at any time
    while the job ran) on every timing row of the job, if attempt `attempt_n` still owns it."""
    with eng.begin() as conn:
        if not jobqueue.hold(conn, job_id, attempt_n):
            return
        for name in TIMING_TABLES:
            table = RESULT_TABLES[name].__table__
            conn.execute(table.update().where(table.c.job_id == job_id).values(concurrent_jobs=int(others)))
