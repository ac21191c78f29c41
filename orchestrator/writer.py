"""The one database writer: persists batches of worker events (see workers/reporter.py) in one
transaction per batch.

Workers never open the database; their events reach the scheduler process, which calls
`write_events` every half second or so with everything that arrived. Batching is what makes the
queue cheap: one transaction for hundreds of metric points instead of one per point.

- metric     -> metrics upsert on (job_id, key, step) + latest_metrics upsert (dialect's ON CONFLICT)
- progress   -> jobs.progress_done/progress_total/eta_s (last one of the batch wins)
- heartbeat  -> jobs.heartbeat_at (time of writing: one clock, whatever the worker node's clock says)
- checkpoint -> jobs.checkpoint_path/checkpoint_step
- result     -> a row of RESULT_TABLES[table] with job_id added
- log        -> job_logs
- resumed    -> attempts.resumed_from_step, and the job's metric points after that step are deleted:
                the resumed attempt reports them again, so every point is stored exactly once
- started    -> jobs.worker/gpu_ids (sent by the task wrapper, not by jobs)
Events are applied in order per job, so a `resumed` deletes only points reported before it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Engine

from orchestrator.schema import RESULT_TABLES, Attempt, JobLog, LatestMetric, Metric
from orchestrator.schema import Job as JobRow

log = logging.getLogger("looplab.writer")
J = JobRow.__table__
M = Metric.__table__
LM = LatestMetric.__table__


def _insert(eng: Engine, table: sa.Table):
    """INSERT of the engine's dialect (sqlite/postgresql both have ON CONFLICT ... DO UPDATE)."""
    if eng.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(table)


def _upsert_metrics(eng: Engine, conn, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    # one point per (job, key, step) in the batch, the last one winning (as in the database)
    rows = list({(r["job_id"], r["key"], r["step"]): r for r in rows}.values())
    ins = _insert(eng, M)
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
    lins = _insert(eng, LM)
    conn.execute(
        lins.on_conflict_do_update(
            index_elements=["job_id", "key"],
            set_={c: getattr(lins.excluded, c) for c in ("step", "tokens", "wall_s", "value")},
        ),
        list(latest.values()),
    )


def write_events(eng: Engine, batches: list[tuple[int, int, list[Any]]]) -> int:
    """Persist `(job_id, attempt_n, events)` batches in one transaction; returns the event count."""
    count = 0
    with eng.begin() as conn:
        for job_id, attempt_n, events in batches:
            count += len(events)
            _write_job(eng, conn, job_id, attempt_n, events)
    return count


def _write_job(eng: Engine, conn, job_id: int, attempt_n: int, events: list[Any]) -> None:
    metrics: list[dict[str, Any]] = []
    job_values: dict[str, Any] = {}
    for ev in events:
        p = ev.payload
        if ev.kind == "metric":
            metrics.append({"job_id": job_id, "key": p["key"], "step": p["step"], "value": p["value"],
                            "tokens": p.get("tokens"), "wall_s": p.get("wall_s")})  # fmt: skip
        elif ev.kind == "progress":
            job_values.update(progress_done=p["done"], progress_total=p["total"], eta_s=p.get("eta_s"))
        elif ev.kind == "heartbeat":  # the writer's clock: recovery compares with the drivers' clocks,
            job_values["heartbeat_at"] = time.time()  # not with a remote node's (one clock)
        elif ev.kind == "checkpoint":
            job_values.update(checkpoint_path=p["path"], checkpoint_step=p["step"])
        elif ev.kind == "started":
            job_values.update(worker=p.get("worker"), gpu_ids=p.get("gpu_ids"))
            conn.execute(
                Attempt.__table__.update()
                .where(Attempt.job_id == job_id, Attempt.n == attempt_n)
                .values(worker=p.get("worker"))
            )
        elif ev.kind == "log":
            conn.execute(JobLog.__table__.insert().values(job_id=job_id, attempt=attempt_n, ts=ev.ts,
                                                          level=p.get("level", "INFO"), message=p["message"]))  # fmt: skip
        elif ev.kind == "resumed":
            _upsert_metrics(eng, conn, metrics)
            metrics = []
            conn.execute(
                Attempt.__table__.update()
                .where(Attempt.job_id == job_id, Attempt.n == attempt_n)
                .values(resumed_from_step=p["step"])
            )
            conn.execute(M.delete().where(M.c.job_id == job_id, M.c.step > p["step"]))
            conn.execute(LM.delete().where(LM.c.job_id == job_id, LM.c.step > p["step"]))
        elif ev.kind == "result":
            _write_result(eng, conn, job_id, attempt_n, p, ev.ts)
        else:
            log.warning("job %s: unknown event kind %r dropped", job_id, ev.kind)
    _upsert_metrics(eng, conn, metrics)
    if job_values:
        conn.execute(J.update().where(J.c.id == job_id).values(**job_values))


def _write_result(eng: Engine, conn, job_id: int, attempt_n: int, p: dict[str, Any], ts: float) -> None:
    """One result row, upserted on the table's primary key (a re-reported row replaces the old one).
    A row that does not fit its table is logged to job_logs, never fatal: one bad row must not stop
    the writer that every other job depends on."""
    model = RESULT_TABLES.get(p["table"])
    row = dict(p["row"], job_id=job_id)
    if model is None:
        bad = f"unknown result table {p['table']!r}; accepted: {', '.join(RESULT_TABLES)}"
    else:
        table = model.__table__
        unknown = sorted(set(row) - set(table.c.keys()))
        missing = sorted(
            c.name for c in table.c
            if not c.nullable and c.default is None and c.autoincrement is not True and c.name not in row
            and not (c.primary_key and c.name == "id")
        )  # fmt: skip
        bad = f"unknown columns {unknown}" if unknown else (f"missing columns {missing}" if missing else None)
    if bad is None:
        pk = [c.name for c in table.primary_key.columns]
        ins = _insert(eng, table).values(**row)
        if "id" not in pk:
            ins = ins.on_conflict_do_update(
                index_elements=pk, set_={k: v for k, v in row.items() if k not in pk}
            )
        conn.execute(ins)
        return
    conn.execute(JobLog.__table__.insert().values(job_id=job_id, attempt=attempt_n, ts=ts, level="WARNING",
                                                  message=f"result row dropped ({bad}): {p['row']}"))  # fmt: skip
