"""The one database writer of worker events: persists batches of them (see workers/reporter.py) in
one transaction per batch.

Workers never open the database; their events reach the scheduler process, which calls
`write_events` every half second or so with everything that arrived. Batching is what makes the
queue cheap: one transaction for hundreds of metric points instead of one per point.

Per `EventKind` (workers/reporter.py); the `jobs` and `attempts` columns are written through
orchestrator/jobqueue.py (the one module that writes those rows), in this writer's transaction:
- metric     -> metrics upsert on (job_id, key, step) + latest_metrics upsert (dialect's ON CONFLICT),
                with each new point's `curve_level` and the curve's point count (see "curves" below)
- progress   -> jobs.progress_done/progress_total/eta_s
- heartbeat  -> jobs.heartbeat_at (time of writing by the database server's clock: one clock, whatever
                the worker node's or the driver's says)
- checkpoint -> jobs.checkpoint_path/checkpoint_step
                (these three: `record_live`, one UPDATE per batch, the last value of the batch winning)
- result     -> a row of RESULT_TABLES[table] with job_id added
- log        -> job_logs
- resumed    -> attempts.resumed_from_step (`record_resumed`), and the job's metric points after that
                step are deleted: the resumed attempt reports them again, so every point is stored once
                (latest_metrics then holds the last point kept)
- rewound    -> a `rewinds` row, and the job's points after the step it went back to move to
                `superseded_points` (`_record_rewind`): kept to be seen, never a curve
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

An outage (the server gone, the disk full, the file locked: `orchestrator.db.outage`) is no bad row:
`write_events` raises it having written nothing, or, part-way through a job-by-job retry, `Unwritten`
with what is left; the driver keeps those events and writes them when the database is back.
"""

from __future__ import annotations

import json
import logging
import math
from numbers import Real
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, InterfaceError, ProgrammingError

from looplab.analysis.curves import CURVE_LEVEL_TOP, curve_level
from looplab.orchestrator import jobqueue
from looplab.orchestrator.db import outage, server_epoch
from looplab.orchestrator.health import Finding, HealthWatch
from looplab.orchestrator.schema import RESULT_TABLES, JobLog, LatestMetric, Metric, Rewind, SupersededPoint
from looplab.workers.reporter import Event, EventKind

log = logging.getLogger("looplab.writer")
METRICS = Metric.__table__
LATEST = LatestMetric.__table__
LOGS = JobLog.__table__
REWINDS = Rewind.__table__
SUPERSEDED = SupersededPoint.__table__
# what the database raises for a row it will not take; a locked or lost database is not a bad row
BAD_ROW_ERRORS = (IntegrityError, DataError, ProgrammingError, InterfaceError)


class Unwritten(Exception):
    """The database became unavailable (an outage, see orchestrator.db.outage: the `__cause__`) while
    `write_events` wrote a refused batch job by job, after part of it was committed: `batches` holds, in
    order, what is not written yet, to be given to `write_events` again once the database is back."""

    def __init__(self, batches: list[tuple[int, int, list[Event]]]) -> None:
        super().__init__(f"{sum(len(e) for *_, e in batches)} event(s) not written")
        self.batches = batches


def write_events(
    eng: Engine, batches: list[tuple[int, int, list[Event]]], health: HealthWatch | None = None
) -> int:
    """Persist `(job_id, attempt_n, events)` batches in one transaction; returns the event count
    (of those given: the batches of an attempt that does not own its job are dropped).

    An outage (the server gone, the disk full: orchestrator.db.outage) raises and writes nothing: give
    the same batches again later (points are upserts, so a commit whose answer was lost stores nothing
    twice). Only while a refused batch is written job by job can an outage leave part of it written;
    then `Unwritten` carries the rest. With `health`, the metric points go through the health rules
    (orchestrator/health.py) and their findings are stored in the same transaction."""
    # job rows are taken in id order (as recovery takes them), so two writers never wait on each other
    # in a cycle; the sort is stable: each job's batches keep their order
    batches = sorted(batches, key=lambda batch: batch[0])
    try:
        with eng.begin() as conn:
            for job_id, attempt_n, events in batches:
                _write_job(eng, conn, job_id, attempt_n, events, health)
    except BAD_ROW_ERRORS as e:
        if outage(e):
            raise
        log.warning("the database refused a batch of events: writing it again job by job", exc_info=True)
        for i, (job_id, attempt_n, events) in enumerate(batches):
            _write_job_alone(eng, job_id, attempt_n, events, later=batches[i + 1 :], health=health)
    return sum(len(events) for _, _, events in batches)


def _write_job_alone(
    eng: Engine,
    job_id: int,
    attempt_n: int,
    events: list[Event],
    later: list[tuple[int, int, list[Event]]],
    health: HealthWatch | None = None,
) -> None:
    """One job's events in their own transaction; if refused, one event per transaction (in order). An
    outage raises `Unwritten` with what is left of them and the `later` batches."""
    try:
        with eng.begin() as conn:
            _write_job(eng, conn, job_id, attempt_n, events, health)
        return
    except DBAPIError as e:
        if outage(e):
            raise Unwritten([(job_id, attempt_n, events), *later]) from e
        if not isinstance(e, BAD_ROW_ERRORS):
            raise
    for k, event in enumerate(events):
        try:
            with eng.begin() as conn:
                _write_job(eng, conn, job_id, attempt_n, [event], health)
            continue
        except DBAPIError as e:
            if outage(e):
                raise Unwritten([(job_id, attempt_n, events[k:]), *later]) from e
            if not isinstance(e, BAD_ROW_ERRORS):
                raise
            reason = f"the database refused it: {type(e).__name__}: {getattr(e, 'orig', e)}"
        log.warning("job %s: %s event dropped (%s)", job_id, event.kind, reason)
        try:
            with eng.begin() as conn:
                if jobqueue.hold(conn, job_id, attempt_n):
                    _log_dropped(conn, job_id, attempt_n, event, reason)
        except DBAPIError as e:
            if outage(e):
                raise Unwritten([(job_id, attempt_n, events[k + 1 :]), *later]) from e
            if not isinstance(e, BAD_ROW_ERRORS):
                raise
            log.warning("job %s: could not record the dropped event in job_logs", job_id)  # no such job


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
        case EventKind.REWOUND:
            ints = [p.get(k) for k in ("step", "spiked_step", "n")]
            if not all(_integer(v) for v in ints) or not isinstance(p.get("rows"), list):
                return "rewound needs integers step, spiked_step, n and a list of rows"
            if not all(_integer(r) for r in p["rows"]):
                return "rewound: rows must be integer row indices"
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
        c.name
        for c in table.c
        if not c.nullable
        and c.default is None
        and c.autoincrement is not True
        and row.get(c.name) is None
        and not (c.primary_key and c.name == "id")
    )
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


def _write_job(
    eng: Engine,
    conn: Connection,
    job_id: int,
    attempt_n: int,
    events: list[Event],
    health: HealthWatch | None = None,
) -> None:
    if not jobqueue.hold(conn, job_id, attempt_n):
        log.warning(
            "job %s: %d event(s) of attempt %s dropped: the attempt no longer owns the job",
            job_id,
            len(events),
            attempt_n,
        )
        return
    metrics: list[dict[str, Any]] = []
    live: dict[str, Any] = {}  # the job's live columns, the last value of the batch winning
    if health is not None:  # before the checks: a NaN point is refused below, but it is a finding
        health.observe(conn, job_id, attempt_n, events)
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
                metrics.append(
                    {
                        "job_id": job_id,
                        "key": p["key"],
                        "step": p["step"],
                        "value": p["value"],
                        "tokens": p.get("tokens"),
                        "wall_s": p.get("wall_s"),
                    }
                )
            case EventKind.PROGRESS:
                live.update(progress_done=p["done"], progress_total=p["total"], eta_s=p.get("eta_s"))
            case EventKind.HEARTBEAT:
                live["heartbeat_at"] = server_epoch()  # the server's clock, not a node's (one clock)
            case EventKind.CHECKPOINT:
                live.update(checkpoint_path=p["path"], checkpoint_step=p["step"])
            case EventKind.STARTED:
                jobqueue.record_started(conn, job_id, attempt_n, p["worker"], p.get("gpu_ids"))
            case EventKind.LOG:
                conn.execute(
                    LOGS.insert().values(
                        job_id=job_id,
                        attempt=attempt_n,
                        ts=event.ts,
                        level=str(p.get("level", "INFO")),
                        message=str(p["message"]),
                    )
                )
            case EventKind.RESUMED:
                _upsert_metrics(eng, conn, job_id, metrics)
                metrics = []
                jobqueue.record_resumed(conn, job_id, attempt_n, p["step"])
                _truncate_curves(conn, job_id, p["step"])
            case EventKind.REWOUND:
                _upsert_metrics(eng, conn, job_id, metrics)
                metrics = []
                _record_rewind(eng, conn, job_id, attempt_n, event.ts, p)
            case EventKind.RESULT:
                _write_result(eng, conn, job_id, p["table"], p["row"])
    _upsert_metrics(eng, conn, job_id, metrics)
    jobqueue.record_live(conn, job_id, attempt_n, live)


def _insert(eng: Engine, table: sa.Table):
    """INSERT of the engine's dialect (sqlite/postgresql both have ON CONFLICT ... DO UPDATE)."""
    if eng.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(table)


# ---------------------------------------------------------------- curves
#
# A curve is the metrics rows of one (job, key). Besides its points the writer keeps what lets a reader
# draw it from as many rows as it shows (orchestrator.frames.curves): each point's `curve_level`, from
# its position in step order (analysis.curves.curve_level), and the curve's point count in
# `latest_metrics.points`, whose row is the curve's last point. Training appends points in step order,
# so the positions of new points follow from the count; a point stored before the curve's last one
# (out of order: rare) shifts the positions after it, and the curve's levels are then recomputed from
# the table (`_reindex`). A resumed attempt cuts curves at its checkpoint step: the points kept are a
# prefix and keep their positions.


def _upsert_metrics(eng: Engine, conn: Connection, job_id: int, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    # one point per (key, step) in the batch, the last one winning (as in the database)
    by_key: dict[str, dict[int, dict[str, Any]]] = {}
    for r in rows:
        by_key.setdefault(r["key"], {})[r["step"]] = r
    stored = {
        key: (step, points)
        for key, step, points in conn.execute(
            sa.select(LATEST.c.key, LATEST.c.step, LATEST.c.points).where(
                LATEST.c.job_id == job_id, LATEST.c.key.in_(list(by_key))
            )
        )
    }
    points: list[dict[str, Any]] = []
    latest: list[dict[str, Any]] = []
    shifted: list[str] = []
    for key, steps in by_key.items():
        curve = [steps[s] for s in sorted(steps)]
        last_step, n = stored.get(key, (None, 0))
        new = curve if last_step is None else [r for r in curve if r["step"] > last_step]
        old = curve[: len(curve) - len(new)]
        if old and _any_new(conn, job_id, key, [r["step"] for r in old]):
            shifted.append(key)
        # an old step keeps its stored level (the upsert leaves it); one inserted before the end gets
        # its level from _reindex below
        points += [dict(r, curve_level=0) for r in old]
        points += [dict(r, curve_level=curve_level(n + i)) for i, r in enumerate(new)]
        if last_step is None or curve[-1]["step"] >= last_step:
            latest.append(dict(curve[-1], points=n + len(new)))
    ins = _insert(eng, METRICS)
    conn.execute(
        ins.on_conflict_do_update(
            index_elements=["job_id", "key", "step"],
            set_={"value": ins.excluded.value, "tokens": ins.excluded.tokens, "wall_s": ins.excluded.wall_s},
        ),
        points,
    )
    if latest:
        latest_insert = _insert(eng, LATEST)
        conn.execute(
            latest_insert.on_conflict_do_update(
                index_elements=["job_id", "key"],
                set_={
                    c: getattr(latest_insert.excluded, c)
                    for c in ("step", "tokens", "wall_s", "value", "points")
                },
            ),
            latest,
        )
    if shifted:
        _reindex(conn, job_id, shifted)


# stored steps looked up per query (bound parameters stay well below either backend's limit)
_CHUNK = 5000


def _any_new(conn: Connection, job_id: int, key: str, steps: list[int]) -> bool:
    """Whether any of `steps` (each at most the curve's last step) is not stored yet."""
    for i in range(0, len(steps), _CHUNK):
        chunk = steps[i : i + _CHUNK]
        found = conn.execute(
            sa.select(sa.func.count()).where(
                METRICS.c.job_id == job_id, METRICS.c.key == key, METRICS.c.step.in_(chunk)
            )
        ).scalar_one()
        if found < len(chunk):
            return True
    return False


def level_sql(position: str) -> str:
    """SQL for analysis.curves.curve_level of the 0-based position expression `position`."""
    whens = " ".join(f"WHEN {position} % {2 << b} = {1 << b} THEN {b}" for b in range(CURVE_LEVEL_TOP))
    return f"CASE WHEN {position} = 0 THEN {CURVE_LEVEL_TOP} {whens} ELSE {CURVE_LEVEL_TOP} END"


def _curves_where(job_id: int | None, keys: list[str] | None, alias: str = "") -> tuple[str, dict[str, Any]]:
    """A WHERE condition (and its parameters) selecting the curves of `job_id` (None: every job) and
    `keys` (None: every key) in `metrics` (or its alias)."""
    a = f"{alias}." if alias else ""
    terms, params = ["1 = 1"], {}
    if job_id is not None:
        terms.append(f"{a}job_id = :job_id")
        params["job_id"] = int(job_id)
    if keys is not None:
        terms.append(f"{a}key IN ({', '.join(f':key{i}' for i in range(len(keys)))})")
        params.update({f"key{i}": k for i, k in enumerate(keys)})
    return " AND ".join(terms), params


def _reindex(conn: Connection, job_id: int | None = None, keys: list[str] | None = None) -> None:
    """Recompute the curves' levels from their points in step order, and their `latest_metrics` rows
    (the last point and the count; a curve without a row gets one) -- of `job_id`'s `keys` (None:
    all). UPDATE ... FROM: SQLite 3.33 or later, as revision 0015."""
    where, params = _curves_where(job_id, keys)
    conn.execute(
        sa.text(f"""
        UPDATE metrics SET curve_level = r.lvl
        FROM (SELECT id, {level_sql("rn")} AS lvl FROM (
                SELECT id, ROW_NUMBER() OVER (PARTITION BY job_id, key ORDER BY step) - 1 AS rn
                FROM metrics WHERE {where}) t) r
        WHERE metrics.id = r.id AND metrics.curve_level <> r.lvl
        """),
        params,
    )
    _latest_from_points(conn, job_id, keys)


def _latest_from_points(conn: Connection, job_id: int | None, keys: list[str] | None) -> None:
    """Set the `latest_metrics` rows of the selected curves to their last stored point and count (a
    curve without a row gets one)."""
    where, params = _curves_where(job_id, keys)
    conn.execute(
        sa.text(f"""
        INSERT INTO latest_metrics (job_id, key, step, tokens, wall_s, value, points)
        SELECT m.job_id, m.key, m.step, m.tokens, m.wall_s, m.value, c.n
        FROM (SELECT job_id, key, MAX(step) AS last, COUNT(*) AS n FROM metrics WHERE {where}
              GROUP BY job_id, key) c
        JOIN metrics m ON m.job_id = c.job_id AND m.key = c.key AND m.step = c.last
        WHERE 1 = 1
        ON CONFLICT (job_id, key) DO UPDATE SET step = excluded.step, tokens = excluded.tokens,
            wall_s = excluded.wall_s, value = excluded.value, points = excluded.points
        """),
        params,
    )


def _truncate_curves(conn: Connection, job_id: int, step: int) -> None:
    """A resumed attempt: delete job `job_id`'s points after `step` (it reports them again) and point
    the `latest_metrics` rows of the cut curves at what is left (none for a curve with nothing left)."""
    cut = list(
        conn.execute(sa.select(LATEST.c.key).where(LATEST.c.job_id == job_id, LATEST.c.step > step)).scalars()
    )
    conn.execute(METRICS.delete().where(METRICS.c.job_id == job_id, METRICS.c.step > step))
    if cut:  # their rows go, and come back for the curves that keep points
        conn.execute(LATEST.delete().where(LATEST.c.job_id == job_id, LATEST.c.key.in_(cut)))
        _latest_from_points(conn, job_id, cut)


def _record_rewind(eng: Engine, conn: Connection, job_id: int, attempt_n: int, ts: float, p: dict) -> None:
    """A rewound spike: the rewind's row, and the job's points after the checkpoint it went back to moved
    from `metrics` to `superseded_points` (kept, never a curve), so no step has two live points. Written
    again with the same values when a rerun or a resume meets the same spike (the same n)."""
    n, step = p["n"], p["step"]
    row = dict(job_id=job_id, n=n, attempt=attempt_n, ts=ts, step=step, spiked_step=p["spiked_step"])
    row["rows"] = json.dumps(p["rows"])
    ins = _insert(eng, REWINDS).values(**row)
    again = {c: ins.excluded[c] for c in ("attempt", "ts", "step", "spiked_step", "rows")}
    conn.execute(ins.on_conflict_do_update(index_elements=["job_id", "n"], set_=again))
    cols = [METRICS.c.key, METRICS.c.step, METRICS.c.tokens, METRICS.c.wall_s, METRICS.c.value]
    moved = sa.select(sa.literal(job_id), sa.literal(n), *cols).where(
        METRICS.c.job_id == job_id, METRICS.c.step > step
    )
    names = ["job_id", "rewind", "key", "step", "tokens", "wall_s", "value"]
    conn.execute(SUPERSEDED.delete().where(SUPERSEDED.c.job_id == job_id, SUPERSEDED.c.rewind == n))
    conn.execute(SUPERSEDED.insert().from_select(names, moved))
    _truncate_curves(conn, job_id, step)


def reindex_curves(eng: Engine, job_ids: list[int] | None = None) -> None:
    """Recompute every curve's levels and `latest_metrics` row (of `job_ids`, default all) from the
    points stored: for points that reached `metrics` without this writer (a bulk import, a test's
    fixture); the writer keeps them right for what it writes."""
    with eng.begin() as conn:
        for job_id in [None] if job_ids is None else job_ids:
            _reindex(conn, job_id)


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


def record_findings(eng: Engine, health: HealthWatch, findings: list[tuple[int, int, Finding]]) -> None:
    """Store the driver's own findings (a stall, the non-finite figure that ended an attempt), each
    only while its attempt `n` still owns the job (as every event: fenced by `jobqueue.hold`)."""
    with eng.begin() as conn:
        for job_id, n, finding in findings:
            if jobqueue.hold(conn, job_id, n):
                health.record(conn, job_id, n, finding)
